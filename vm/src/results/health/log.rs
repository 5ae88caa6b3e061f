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
                text: text.to_string(),
            });
        } else if kmsg && line.starts_with(' ') {
            // A dictionary line (` SUBSYSTEM=...`) of the record before.
        } else {
            out.push(Record {
                seq: i as u64,
                text: console_text(line).to_string(),
            });
        }
    }
    out
}

/// `PRIO,SEQ,USEC,FLAGS[,...];TEXT` -> (SEQ, TEXT).
fn kmsg_record(line: &str) -> Option<(u64, &str)> {
    let (header, text) = line.split_once(';')?;
    let mut fields = header.split(',');
    let prio = fields.next()?;
    let seq = fields.next()?;
    let usec = fields.next()?;
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (numeric(prio) && numeric(usec) && fields.next().is_some())
        .then(|| seq.parse().ok())
        .flatten()
        .map(|seq| (seq, text))
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
