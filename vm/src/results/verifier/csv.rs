//! `verifier.csv` in `veristat -o csv`'s format, so that `veristat -C A.csv B.csv` (and its
//! `-e/-f/-s`) work on our files and ours on veristat's.
//!
//! The columns are veristat's default CSV columns, each under the first of its names
//! (`default_csv_output_spec` and `stat_defs`, tools/testing/selftests/bpf/veristat.c, Linux
//! 6.12; checked against that veristat's `-R` and `-C`, docs/verifier-stats.md). veristat
//! refuses a header it does not know, so nothing else goes in: the other figures are in
//! `verifier.json`. Reading accepts any of veristat's names for a column and any order.
use anyhow::{bail, Context, Result};

use bpfvm_common::verifier::{ProgStats, Verdict};

/// veristat's CSV header, in order.
pub const HEADER: [&str; 9] = [
    "file_name",
    "prog_name",
    "verdict",
    "duration",
    "total_insns",
    "total_states",
    "peak_states",
    "max_states_per_insn",
    "max_mark_read_len",
];

/// The statistics as veristat's CSV, sorted by file and program as veristat sorts them.
/// A program that never reached the verifier has 0 for every count, as veristat writes one.
pub fn write(stats: &[ProgStats]) -> String {
    let mut rows: Vec<&ProgStats> = stats.iter().collect();
    rows.sort_by(|a, b| (&a.file_name, &a.prog_name).cmp(&(&b.file_name, &b.prog_name)));
    let mut out = HEADER.join(",") + "\n";
    for s in rows {
        let n = |v: Option<u64>| v.unwrap_or(0).to_string();
        let l = &s.log;
        let fields = [
            s.file_name.clone(),
            s.prog_name.clone(),
            s.verdict.veristat().to_string(),
            n(l.duration_us),
            n(l.processed_insns),
            n(l.total_states),
            n(l.peak_states),
            n(l.max_states_per_insn),
            n(l.mark_read),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// One row of a veristat CSV: the columns a comparison reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub file: String,
    pub prog: String,
    /// `true` for `success`.
    pub success: bool,
    pub insns: Option<u64>,
    pub states: Option<u64>,
    pub peak_states: Option<u64>,
    /// The JIT's bytes: a newer veristat's `prog_size_jited` (6.12's has no such column).
    pub jited: Option<u64>,
}

impl Row {
    /// The row as a program's statistics, as a report holds them: veristat's `failure` is a
    /// rejection (its CSV says no more: `veristat -v -f FILE/PROG` in the guest shows the log).
    pub fn stats(&self) -> ProgStats {
        let mut s = ProgStats::not_loaded(&self.file, &self.prog, String::new());
        s.verdict = match self.success {
            true => Verdict::Success,
            false => Verdict::Rejected,
        };
        s.reason = (!self.success).then(|| "veristat: failure".to_string());
        s.log.processed_insns = self.insns;
        s.log.total_states = self.states;
        s.log.peak_states = self.peak_states;
        s.jited_bytes = self.jited;
        s
    }
}

/// Which of veristat's names (`stat_defs`) a header cell is.
fn column(name: &str) -> Option<&'static str> {
    Some(match name.trim() {
        "file_name" | "filename" | "file" => "file",
        "prog_name" | "progname" | "prog" => "prog",
        "verdict" => "verdict",
        "total_insns" | "insns" => "insns",
        "total_states" | "states" => "states",
        "peak_states" => "peak_states",
        "prog_size_jited" => "jited",
        _ => return None,
    })
}

/// Parses a veristat CSV (ours or veristat's own). `what` names the file in errors.
pub fn parse(text: &str, what: &str) -> Result<Vec<Row>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<Option<&str>> = lines
        .next()
        .with_context(|| format!("{what} is empty: not a veristat CSV"))?
        .split(',')
        .map(column)
        .collect();
    let at = |c: &str| header.iter().position(|h| *h == Some(c));
    let (Some(file), Some(prog), Some(verdict)) = (at("file"), at("prog"), at("verdict")) else {
        bail!(
            "{what} has no file_name, prog_name and verdict columns: not a veristat CSV \
             (`veristat -o csv` or bpfvm's verifier.csv)"
        );
    };
    let mut rows = Vec::new();
    // A second row of one program would stand for it in a comparison and hide the first.
    let mut seen = std::collections::HashMap::new();
    for (i, line) in lines.enumerate() {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let cell = |c: Option<usize>| c.and_then(|c| cells.get(c).copied());
        let num = |c: &str| -> Result<Option<u64>> {
            cell(at(c))
                .map(|v| v.parse::<u64>())
                .transpose()
                .with_context(|| format!("{what} line {}: {c} is not a count", i + 2))
        };
        let success = match cell(Some(verdict)) {
            Some("success") => true,
            Some("failure") => false,
            v => bail!(
                "{what} line {}: verdict {:?}, not success or failure",
                i + 2,
                v.unwrap_or("")
            ),
        };
        let (file, prog) = (
            cell(Some(file)).unwrap_or_default().to_string(),
            cell(Some(prog)).unwrap_or_default().to_string(),
        );
        if let Some(first) = seen.insert((file.clone(), prog.clone()), i + 2) {
            bail!(
                "{what} line {}: {file}/{prog} again (first on line {first}): one row per program",
                i + 2
            );
        }
        rows.push(Row {
            file,
            prog,
            success,
            insns: num("insns")?,
            states: num("states")?,
            peak_states: num("peak_states")?,
            jited: num("jited")?,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bpfvm_common::verifier::LogStats;

    fn stats(prog: &str, verdict: Verdict, insns: u64) -> ProgStats {
        let mut s = ProgStats::not_loaded("bpf_loop", prog, String::new());
        s.verdict = verdict;
        s.log = LogStats {
            processed_insns: Some(insns),
            total_states: Some(3),
            peak_states: Some(2),
            max_states_per_insn: Some(1),
            mark_read: Some(1),
            duration_us: Some(70),
            ..Default::default()
        };
        s
    }

    #[test]
    fn writes_veristats_columns_sorted_and_reads_them_back() {
        let text = write(&[
            stats("loop_inlined", Verdict::Success, 40),
            stats("loop_helper", Verdict::Rejected, 12),
            ProgStats::not_loaded("bench", "bloom_fp", "feature absent".into()),
        ]);
        assert_eq!(
            text,
            "file_name,prog_name,verdict,duration,total_insns,total_states,peak_states,\
             max_states_per_insn,max_mark_read_len\n\
             bench,bloom_fp,failure,0,0,0,0,0,0\n\
             bpf_loop,loop_helper,failure,70,12,3,2,1,1\n\
             bpf_loop,loop_inlined,success,70,40,3,2,1,1\n"
        );
        let rows = parse(&text, "t.csv").unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows[2],
            Row {
                file: "bpf_loop".into(),
                prog: "loop_inlined".into(),
                success: true,
                insns: Some(40),
                states: Some(3),
                peak_states: Some(2),
                jited: None,
            }
        );
    }

    /// `veristat -o csv -e file,prog,verdict,states` (what libbpf/ci saves) has other
    /// columns, in another order, under other names.
    #[test]
    fn reads_veristats_own_csv_with_other_columns_and_names() {
        let rows = parse(
            "file,prog,verdict,states\npyperf.bpf.o,on_event,success,1234\n",
            "v.csv",
        )
        .unwrap();
        assert_eq!(rows[0].prog, "on_event");
        assert_eq!(rows[0].states, Some(1234));
        assert_eq!(rows[0].insns, None);
    }

    /// A veristat newer than 6.12's prints the JIT's bytes (`prog_size_jited`, its
    /// `JITED_SIZE`), which a comparison then reads as the program's JIT bytes.
    #[test]
    fn reads_the_jit_bytes_of_a_veristat_that_prints_them() {
        let rows = parse(
            "file_name,prog_name,verdict,total_insns,prog_size,prog_size_jited
             bpf_loop.bpf.o,stack_check,success,52,40,236
",
            "v.csv",
        )
        .unwrap();
        assert_eq!(rows[0].jited, Some(236));
        assert_eq!(rows[0].stats().jited_bytes, Some(236));
    }

    #[test]
    fn a_program_twice_is_an_error_naming_it() {
        let e = parse(
            "file_name,prog_name,verdict\nbpf_loop,a,success\nbpf_loop,b,success\n\
             bpf_loop,a,failure\n",
            "d.csv",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "d.csv line 4: bpf_loop/a again (first on line 2): one row per program"
        );
    }

    #[test]
    fn a_file_that_is_not_a_veristat_csv_is_named_in_the_error() {
        let e = parse("a,b\n1,2\n", "x.csv").unwrap_err().to_string();
        assert!(e.contains("x.csv has no file_name"), "{e}");
        let e = parse("file_name,prog_name,verdict\no,p,maybe\n", "y.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("y.csv line 2: verdict \"maybe\""), "{e}");
        assert!(parse("", "z.csv")
            .unwrap_err()
            .to_string()
            .contains("z.csv is empty"));
    }
}
