//! `bench-vm --against A`: what a kernel change costs, row by row. Kernel B is the run's own
//! (`--kernel`, `--kernel-tree`); A is a pin, a kernel tree, a bzImage, or a git ref of B's
//! tree (checked out with `git archive` and built like any tree). Both boot in the same
//! spectre_v2 modes, alternated (`bench::bench_ab`); the comparison is `compare`'s, and a row
//! has *changed* when its whole interval of B/A lies beyond the threshold, either way.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::compare::{self, Comparison};
use super::model::BenchReport;
use crate::support::status::Status;

/// A row whose B/A interval lies wholly beyond the threshold, either way (`compare::change`),
/// with its change in percent (the ratio's).
#[derive(Debug, Clone, PartialEq)]
pub struct Changed {
    pub row: String,
    pub pct: f64,
}

pub fn changed(c: &Comparison) -> Vec<Changed> {
    c.rows
        .iter()
        .filter(|r| is_changed(r))
        .filter_map(|r| {
            Some(Changed {
                row: r.name(),
                pct: (r.cost?.ratio - 1.0) * 100.0,
            })
        })
        .collect()
}

/// The A/B's rule for one row: its cost moved beyond the threshold, either way.
pub fn is_changed(r: &compare::Row) -> bool {
    r.change != compare::Change::Within
}

/// The A/B report: A and B named, every row with A, B and B/A, then the rows that changed.
pub fn render(a: &str, b: &str, c: &Comparison) -> String {
    let mut s = compare::markdown(a, b, c).replacen("# bench-compare", "# kernel A/B", 1);
    let moved = changed(c);
    if moved.is_empty() {
        let _ = writeln!(
            s,
            "\nNo row changed beyond {} % either way.",
            c.threshold_pct
        );
    } else {
        let _ = writeln!(s, "\nChanged beyond {} % (B against A):\n", c.threshold_pct);
        for m in &moved {
            let _ = writeln!(s, "- {}: {:+.2} %", m.row, m.pct);
        }
    }
    s
}

/// Which kernel each boot ran (`uname -r` in the guest; a boot that ran another release than
/// its kernel's is invalid, `run::judge_boot`), for the A/B report.
pub fn boots(a: &BenchReport, b: &BenchReport) -> String {
    let mut s = String::from("\nBoots (mode, the release the guest ran):\n\n");
    for (name, r) in [("A", a), ("B", b)] {
        let runs: Vec<String> = r
            .runs
            .iter()
            .map(|run| {
                format!(
                    "{} {}{}",
                    run.mode.name(r.params.arch),
                    run.release.as_deref().unwrap_or("unknown"),
                    if run.valid { "" } else { " (invalid)" }
                )
            })
            .collect();
        let _ = writeln!(s, "- {name}: {}", runs.join(", "));
    }
    s
}

/// The A/B's exit status. B's own evidence first (an invalid boot or a benchmark error: 1);
/// then a base that is not good judges nothing (255: B was compared with nothing good, and a
/// bisect must not skip or blame commits for their base); then a row that changed beyond the
/// threshold, either way, or a row the comparison could not make: 1.
pub fn status(a: &BenchReport, b: &BenchReport, c: &Comparison) -> Status {
    if !b.ok() {
        Status::Bad
    } else if !a.ok() {
        Status::Stopped
    } else if c.problems.is_empty() && changed(c).is_empty() {
        Status::Good
    } else {
        Status::Bad
    }
}

/// Where the A/B report is written.
pub fn report_path(dir: &Path) -> PathBuf {
    dir.join("ab.md")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::bench::stats::Ci;
    use compare::Row;

    fn row(key: &str, ratio: f64, lo: f64, hi: f64) -> Row {
        Row {
            key: key.into(),
            mode: crate::results::bench::model::Mode::Off,
            arch: crate::domain::arch::Arch::X86_64,
            unit: "insns/op".into(),
            a: Some(100.0),
            b: Some(100.0 * ratio),
            cost: Some(Ci { ratio, lo, hi }),
            exact: false,
            // The comparison's threshold below.
            change: compare::change(Ci { ratio, lo, hi }, 1.0),
            regressed: hi > 1.0,
        }
    }

    /// A base that failed its own boots judges nothing (255), whatever the rows say; B's own
    /// failure is 1 whatever the base; a row that moved is 1; else 0.
    #[test]
    fn a_base_that_is_not_good_judges_nothing() {
        let good: BenchReport =
            serde_json::from_str(include_str!("../../../tests/data/bench-6.1-quick.json")).unwrap();
        let mut bad = good.clone();
        bad.runs[0].valid = false;
        bad.runs[0].invalid_reason = Some("kernel:warning: kernel warning during bench".into());
        let same = compare::compare(&good, &good, 1.0).unwrap();
        assert_eq!(status(&good, &good, &same), Status::Good);
        let c = compare::compare(&bad, &good, 1.0).unwrap();
        assert_eq!(status(&bad, &good, &c), Status::Stopped);
        let c = compare::compare(&good, &bad, 1.0).unwrap();
        assert_eq!(status(&good, &bad, &c), Status::Bad);
        let c = compare::compare(&bad, &bad, 1.0).unwrap();
        assert_eq!(status(&bad, &bad, &c), Status::Bad);
        let mut moved = same.clone();
        moved.rows.push(row("bloom lookup", 1.10, 1.09, 1.11));
        assert_eq!(status(&good, &good, &moved), Status::Bad);
    }

    #[test]
    fn rows_that_moved_either_way_beyond_the_threshold_are_changed() {
        let c = Comparison {
            threshold_pct: 1.0,
            row_confidence: 0.99,
            rows: vec![
                row("bloom lookup", 1.10, 1.09, 1.11),
                row("bpf_loop inlined", 0.97, 0.965, 0.975),
                row("batch dump", 1.004, 0.99, 1.02),
                row("bloom update", 1.02, 1.005, 1.03),
            ],
            problems: vec![],
            notes: vec![],
            instructions: false,
        };
        let names: Vec<String> = changed(&c).into_iter().map(|m| m.row).collect();
        assert_eq!(
            names,
            [
                "bloom lookup (spectre_v2=off)",
                "bpf_loop inlined (spectre_v2=off)"
            ]
        );
        let md = render("6.12", "tree-6.12.118", &c);
        assert!(md.starts_with("# kernel A/B"), "{md}");
        assert!(
            md.contains("- bloom lookup (spectre_v2=off): +10.00 %"),
            "{md}"
        );
        assert!(
            md.contains("- bpf_loop inlined (spectre_v2=off): -3.00 %"),
            "{md}"
        );
    }
}
