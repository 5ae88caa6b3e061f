//! What veristat's CSV cannot hold: each program's verdict with its reason (`success`,
//! `rejected: <the verifier's last error line>`, `not loaded: <why>`), which the CSV folds into
//! one `failure`. Kept beside each CSV baseline as `kernels/verifier/<pin>.verdicts`, one
//! `<file>/<program>: <verdict>` line per program, so that a program that goes from rejected to
//! not loaded (a loader regression), or is rejected for another reason, fails the comparison.
use std::collections::BTreeMap;

use anyhow::{bail, Result};
use bpfvm_common::verifier::ProgStats;

/// The file's text for `stats`, sorted by object and program.
pub fn text(stats: &[ProgStats]) -> String {
    let lines: BTreeMap<String, String> = stats.iter().map(|p| (key(p), p.describe())).collect();
    lines
        .iter()
        .map(|(k, v)| format!("{k}: {}\n", one_line(v)))
        .collect()
}

fn key(p: &ProgStats) -> String {
    format!("{}/{}", p.file_name, p.prog_name)
}

/// A reason may span lines (a log excerpt): the file keeps one line per program.
fn one_line(v: &str) -> String {
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Reads a `.verdicts` file: `<file>/<program>: <verdict>` per line; `name` names it in errors.
pub fn parse(text: &str, name: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let Some((k, v)) = line.split_once(": ") else {
            bail!(
                "{name}:{}: `{line}` is not `<file>/<program>: <verdict>`",
                n + 1
            );
        };
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// Each program whose verdict differs between the baseline and this run, or that one of them
/// lacks, said in one sentence.
pub fn changed(base: &BTreeMap<String, String>, run: &[ProgStats]) -> Vec<String> {
    let run: BTreeMap<String, String> = run
        .iter()
        .map(|p| (key(p), one_line(&p.describe())))
        .collect();
    let mut out = Vec::new();
    for (k, was) in base {
        match run.get(k) {
            Some(now) if now == was => {}
            Some(now) => out.push(format!("{k}: the baseline says `{was}`, this run `{now}`")),
            None => out.push(format!("{k}: in the baseline (`{was}`), not in this run")),
        }
    }
    for (k, now) in &run {
        if !base.contains_key(k) {
            out.push(format!("{k}: in this run (`{now}`), not in the baseline"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bpfvm_common::verifier::Verdict;

    fn prog(name: &str, verdict: Verdict, reason: Option<&str>) -> ProgStats {
        let mut p = ProgStats::not_loaded("bench", name, String::new());
        p.verdict = verdict;
        p.reason = reason.map(str::to_string);
        p
    }

    /// Rejected and not loaded are both veristat's `failure`: here they differ.
    #[test]
    fn a_rejection_that_becomes_not_loaded_is_named() {
        let base = vec![
            prog(
                "bpf_loop_bench",
                Verdict::Rejected,
                Some("unknown func bpf_loop#181"),
            ),
            prog("bloom_lookup", Verdict::Success, None),
        ];
        let text = text(&base);
        assert_eq!(
            text,
            "bench/bloom_lookup: success\nbench/bpf_loop_bench: rejected: unknown func bpf_loop#181\n"
        );
        let parsed = parse(&text, "5.10.verdicts").unwrap();
        assert!(changed(&parsed, &base).is_empty());
        let run = vec![
            prog(
                "bpf_loop_bench",
                Verdict::NotLoaded,
                Some("feature absent: map type"),
            ),
            prog("bloom_lookup", Verdict::Success, None),
        ];
        assert_eq!(
            changed(&parsed, &run),
            [
                "bench/bpf_loop_bench: the baseline says `rejected: unknown func bpf_loop#181`, \
              this run `not loaded: feature absent: map type`"
            ]
        );
        assert_eq!(
            changed(&parsed, &run[1..]),
            ["bench/bpf_loop_bench: in the baseline (`rejected: unknown func bpf_loop#181`), not in this run"]
        );
        assert!(parse("no separator\n", "x.verdicts")
            .unwrap_err()
            .to_string()
            .contains("x.verdicts:1"));
    }
}
