//! `--bench`: what a kernel change costs, joined to its verdict. The A/B is `bench-vm
//! --against`'s (A the base, B head): its comparison and status (`results::bench::ab`) kept
//! as they are, so a change judges a row as the A/B does: changed beyond the threshold either
//! way fails it (exit 1), the base failing its own boots judges nothing (255).
use serde::{Deserialize, Serialize};

use crate::results::bench::ab;
use crate::results::bench::compare::{Comparison, Row};
use crate::results::bench::model::{BenchReport, Clock, Size};
use crate::support::status::Status;

/// One kernel's A/B (`change.json`'s `cost`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// The change's kernel it measured (`kernels[].kernel`).
    pub kernel: String,
    /// bench-vm's size (`--bench smoke|quick|full`).
    pub size: Size,
    /// The change in percent, either way, a row's whole interval must exceed to count.
    pub threshold_pct: f64,
    /// The A/B's status: bad when a row changed or head's own boots failed, stopped when the
    /// base failed its own boots or the A/B could not run.
    pub status: Status,
    /// Why it judged nothing, or what keeps it from vouching for head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The A/B that ran; absent when none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compared: Option<Compared>,
}

/// The A/B that ran: what it compared and where its own report is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compared {
    /// What timed the boots: instructions (`icount`, TCG) or the wall clock (KVM).
    pub clock: Clock,
    /// Kernel A, the base: its label and release as the A/B names it.
    pub base: String,
    /// Kernel B, head.
    pub head: String,
    /// `bench-compare`'s rows, each mode a row (`a` the base's median, `b` head's).
    pub comparison: Comparison,
    /// `ab.md`, with A's and B's own reports beside it.
    pub report: String,
}

impl Cost {
    /// The A/B of `a` (the base) and `b` (head) as `bench-vm --against` judged it.
    pub fn of(
        kernel: &str,
        size: Size,
        (a, b): (&BenchReport, &BenchReport),
        comparison: Comparison,
        report: &std::path::Path,
    ) -> Cost {
        let status = ab::status(a, b, &comparison);
        let problem = if status == Status::Stopped {
            Some(format!(
                "the base's own bench boots failed, so nothing is judged against it: {}",
                comparison.problems.join("; ")
            ))
        } else if !comparison.problems.is_empty() {
            Some(format!(
                "the A/B cannot vouch for head: {}",
                comparison.problems.join("; ")
            ))
        } else {
            None
        };
        Cost {
            kernel: kernel.to_string(),
            size,
            threshold_pct: comparison.threshold_pct,
            status,
            problem,
            compared: Some(Compared {
                clock: a.clock,
                base: format!("{} ({})", a.kernel, a.release),
                head: format!("{} ({})", b.kernel, b.release),
                comparison,
                report: report.display().to_string(),
            }),
        }
    }

    /// An A/B that did not run or did not end (`status` says how that weighs).
    pub fn not_judged(
        kernel: &str,
        size: Size,
        threshold_pct: f64,
        status: Status,
        why: String,
    ) -> Cost {
        Cost {
            kernel: kernel.to_string(),
            size,
            threshold_pct,
            status,
            problem: Some(why),
            compared: None,
        }
    }

    /// The rows that changed beyond the threshold, either way (the A/B's rule).
    pub fn changed(&self) -> Vec<&Row> {
        let rows = self.compared.iter().flat_map(|c| &c.comparison.rows);
        rows.filter(|r| ab::is_changed(r)).collect()
    }
}
