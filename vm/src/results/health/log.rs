//! The kernel log as records, and the markers the guest script writes into it.
//!
//! The guest copies `/dev/kmsg`, whose records read as `PRIO,SEQ,USEC,FLAGS[,...];TEXT`
//! followed by dictionary lines that start with a space (kernel/printk/printk.c,
//! `devkmsg_read`/`info_print_ext_header`; Documentation/ABI/testing/dev-kmsg). A console
//! capture (`[    1.234567] TEXT`) reads too, one record per line, so that recorded consoles
//! replay in tests.

/// One kernel log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `/dev/kmsg`'s sequence number, or the line's index in a console capture.
    pub seq: u64,
    /// Read from `/dev/kmsg` (its `seq` counts the kernel's records, so a jump is a loss).
    pub kmsg: bool,
    pub text: String,
}

/// A line the guest script writes into the kernel log (through `/dev/kmsg`, so that it is
/// ordered with the kernel's own records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// The script reached a phase: `probe`, `tests`, `shutdown` (before the first: `boot`).
    Phase(String),
    /// libtest announced this test (`started`).
    TestStart(String),
    /// libtest reported this test's result.
    TestEnd(String),
    /// `/proc/sys/kernel/tainted` as read right after the previous marker.
    Tainted(u64),
    /// The copy starts after this `/dev/kmsg` record on purpose: a kept guest's run
    /// (`machine::warm_guest`) copies only its own records, the earlier ones having been
    /// judged by the check before it. The first line of such a copy, written by the guest.
    Continues(u64),
}

/// Every marker starts with this.
pub const MARKER_PREFIX: &str = "bpfvm: ";

impl Marker {
    /// The marker's text, as the guest writes it.
    pub fn line(&self) -> String {
        match self {
            Marker::Phase(p) => format!("{MARKER_PREFIX}phase {p}"),
            Marker::TestStart(t) => format!("{MARKER_PREFIX}test start {t}"),
            Marker::TestEnd(t) => format!("{MARKER_PREFIX}test end {t}"),
            Marker::Tainted(m) => format!("{MARKER_PREFIX}tainted {m}"),
            Marker::Continues(s) => format!("{MARKER_PREFIX}continues after seq {s}"),
        }
    }

    /// Reads a record's text as a marker; `None` for the kernel's own records.
    pub fn parse(text: &str) -> Option<Marker> {
        let rest = text.strip_prefix(MARKER_PREFIX)?;
        if let Some(p) = rest.strip_prefix("phase ") {
            return Some(Marker::Phase(p.to_string()));
        }
        if let Some(t) = rest.strip_prefix("test start ") {
            return Some(Marker::TestStart(t.to_string()));
        }
        if let Some(t) = rest.strip_prefix("test end ") {
            return Some(Marker::TestEnd(t.to_string()));
        }
        if let Some(s) = rest.strip_prefix("continues after seq ") {
            return s.trim().parse().ok().map(Marker::Continues);
        }
        let mask = rest.strip_prefix("tainted ")?;
        mask.trim().parse().ok().map(Marker::Tainted)
    }
}

/// Splits a `/dev/kmsg` copy or a console capture into records. Dictionary lines (a leading
/// space after a kmsg record) are dropped; any other line is a record of its own.
pub fn records(log: &str) -> Vec<Record> {
    let mut out = Vec::new();
    let mut kmsg = false;
    for (i, line) in log.lines().enumerate() {
        if let Some((seq, text)) = kmsg_record(line) {
            kmsg = true;
            out.push(Record {
                seq,
                kmsg: true,
                text: text.to_string(),
            });
        } else if kmsg && line.starts_with(' ') {
            // A dictionary line (` SUBSYSTEM=...`) of the record before.
        } else {
            out.push(Record {
                seq: i as u64,
                kmsg: false,
                text: console_text(line).to_string(),
            });
        }
    }
    out
}

/// Records of `/dev/kmsg` that a copy never read, between the two it read on either side.
/// The kernel numbers every record (`info->seq`, kernel/printk/printk_ringbuffer.c); a reader
/// that falls behind the ring buffer's tail gets `EPIPE` and continues at the oldest record it
/// still holds (`devkmsg_read`, kernel/printk/printk.c), and a record without data is skipped
/// (`_prb_read_valid`), so a jump in `seq` is the count of records lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// The last record read before the gap; `None` when the copy's first record was not the
    /// kernel's first (seq 0).
    pub after: Option<u64>,
    /// The first record read after it.
    pub next: u64,
}

impl Gap {
    /// The number of records lost.
    pub fn count(&self) -> u64 {
        self.next - self.after.map_or(0, |a| a + 1)
    }

    /// "3 records lost between seq 41 and 45".
    pub fn describe(&self) -> String {
        let n = self.count();
        let records = if n == 1 { "record" } else { "records" };
        match self.after {
            Some(a) => format!("{n} {records} lost between seq {a} and {}", self.next),
            None => format!(
                "{n} {records} lost before seq {} (the first read)",
                self.next
            ),
        }
    }
}

/// The gap before `next` (a `/dev/kmsg` record) given the seq of the kmsg record read before
/// it, if any.
pub fn gap(before: Option<u64>, next: &Record) -> Option<Gap> {
    let expected = before.map_or(0, |b| b + 1);
    (next.kmsg && next.seq > expected).then_some(Gap {
        after: before,
        next: next.seq,
    })
}

/// `PRIO,SEQ,USEC,FLAGS[,...];TEXT` -> (SEQ, TEXT).
fn kmsg_record(line: &str) -> Option<(u64, &str)> {
    kmsg_fields(line).map(|(seq, _, text)| (seq, text))
}

/// A `/dev/kmsg` record's sequence number, its time since boot in microseconds, and its text.
fn kmsg_fields(line: &str) -> Option<(u64, u64, &str)> {
    let (header, text) = line.split_once(';')?;
    let mut fields = header.split(',');
    let prio = fields.next()?;
    let seq = fields.next()?;
    let usec = fields.next()?;
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (numeric(prio) && fields.next().is_some())
        .then(|| Some((seq.parse().ok()?, usec.parse().ok()?, text)))
        .flatten()
}

/// The guest script's phases as the kernel timed them: each `phase` marker of a `/dev/kmsg`
/// copy with the kernel's time of it, in microseconds since the kernel started.
pub fn phase_times(log: &str) -> Vec<(String, u64)> {
    log.lines()
        .filter_map(kmsg_fields)
        .filter_map(|(_, usec, text)| match Marker::parse(text)? {
            Marker::Phase(p) => Some((p, usec)),
            _ => None,
        })
        .collect()
}

/// A console line without its printk timestamp (`[    1.234567] `).
fn console_text(line: &str) -> &str {
    let Some(rest) = line.strip_prefix('[') else {
        return line;
    };
    let Some((stamp, text)) = rest.split_once(']') else {
        return line;
    };
    let stamp = stamp.trim_start();
    if stamp.is_empty() || !stamp.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return line;
    }
    text.strip_prefix(' ').unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_timed_by_the_kernels_clock() {
        let log = "6,1,0,-;Linux version 6.1.0\n\
                   12,444,8374297,-;bpfvm: phase probe\n\
                   12,445,8400000,-;bpfvm: test start a\n\
                   12,447,13043117,-;bpfvm: phase tests\n\
                   [   25.1] bpfvm: phase shutdown\n\
                   12,1179,25195435,-;bpfvm: phase end\n";
        assert_eq!(
            phase_times(log),
            [
                ("probe".to_string(), 8_374_297),
                ("tests".to_string(), 13_043_117),
                ("end".to_string(), 25_195_435)
            ],
            "console lines carry no kmsg time and are not read"
        );
    }

    #[test]
    fn kmsg_records_keep_their_sequence_and_drop_dictionaries() {
        let log = "6,1,0,-;Linux version 6.1.0\n\
                   4,812,2345678,-,caller=T93;WARNING: CPU: 1 PID: 93 at kernel/bpf/x.c:3 f+0x1/0x2\n \
                   SUBSYSTEM=cpu\n \
                   DEVICE=+cpu:1\n\
                   4,813,2345679,c;  f+0x1/0x2\n";
        let r = records(log);
        assert_eq!(
            r.iter().map(|r| r.seq).collect::<Vec<_>>(),
            [1, 812, 813],
            "{r:?}"
        );
        assert_eq!(
            r[1].text,
            "WARNING: CPU: 1 PID: 93 at kernel/bpf/x.c:3 f+0x1/0x2"
        );
        assert_eq!(r[2].text, "  f+0x1/0x2", "a stack line keeps its indent");
    }

    #[test]
    fn a_jump_in_seq_is_a_gap_of_that_many_records() {
        let r = records("6,0,0,-;a\n6,1,0,-;b\n6,5,0,-;c\n[    1.0] console\n");
        assert_eq!(gap(None, &r[0]), None);
        assert_eq!(gap(Some(0), &r[1]), None);
        let g = gap(Some(1), &r[2]).unwrap();
        assert_eq!(
            (g.count(), g.describe()),
            (3, "3 records lost between seq 1 and 5".into())
        );
        assert_eq!(
            gap(Some(5), &r[3]),
            None,
            "a console line has no seq of the kernel's"
        );
        let first = gap(None, &r[1]).unwrap();
        assert_eq!(
            first.describe(),
            "1 record lost before seq 1 (the first read)"
        );
    }

    #[test]
    fn console_lines_lose_their_timestamp_only() {
        let r = records("[    1.234567]  dump_stack+0x10/0x20\nvng: booting\n[x] not a stamp\n");
        assert_eq!(r[0].text, " dump_stack+0x10/0x20");
        assert_eq!(r[1].text, "vng: booting");
        assert_eq!(r[2].text, "[x] not a stamp");
        assert_eq!(r[2].seq, 2);
    }

    #[test]
    fn markers_read_back_what_they_write() {
        for m in [
            Marker::Phase("tests".into()),
            Marker::TestStart("bloom_filter::a".into()),
            Marker::TestEnd("bloom_filter::a".into()),
            Marker::Tainted(512),
        ] {
            assert_eq!(Marker::parse(&m.line()), Some(m));
        }
        assert_eq!(Marker::parse("bpfvm: tainted x"), None);
        assert_eq!(Marker::parse("WARNING: CPU: 0"), None);
    }
}
