//! The verifier's statistics of every program at base and at head, per kernel: each program
//! whose verdict or counts moved is listed; a verdict success -> rejected (or not loaded) fails
//! the change, and with `--verifier-threshold T` so does a processed-insns or states count that
//! moved by more than T percent, judged by `verifier::compare` as `verifier-compare` judges.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::results::verifier::compare;
use crate::results::verifier::csv::Row;
use crate::results::verifier::{ProgStats, Verdict};

/// A program's figures on one side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub verdict: Verdict,
    pub processed_insns: Option<u64>,
    pub total_states: Option<u64>,
    pub peak_states: Option<u64>,
    pub jited_bytes: Option<u64>,
}

impl From<&ProgStats> for Figures {
    fn from(s: &ProgStats) -> Self {
        Self {
            verdict: s.verdict,
            processed_insns: s.log.processed_insns,
            total_states: s.log.total_states,
            peak_states: s.log.peak_states,
            jited_bytes: s.jited_bytes,
        }
    }
}

/// One program on one kernel whose figures differ between the sides (absent: that side has no
/// such program).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgChange {
    pub kernel: String,
    /// `file/prog`.
    pub program: String,
    pub base: Option<Figures>,
    pub head: Option<Figures>,
    /// Why this fails the change; absent for a change that is only listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regression: Option<String>,
}

/// The programs of `kernel` whose figures differ between `base` and `head`, sorted by program.
pub fn diff(
    kernel: &str,
    base: &[ProgStats],
    head: &[ProgStats],
    threshold_pct: Option<f64>,
) -> Vec<ProgChange> {
    let mut by_prog: BTreeMap<String, (Option<&ProgStats>, Option<&ProgStats>)> = BTreeMap::new();
    let name = |s: &ProgStats| format!("{}/{}", s.file_name, s.prog_name);
    for s in base {
        by_prog.entry(name(s)).or_default().0 = Some(s);
    }
    for s in head {
        by_prog.entry(name(s)).or_default().1 = Some(s);
    }
    let mut out = vec![];
    for (program, (b, h)) in by_prog {
        let (bf, hf) = (b.map(Figures::from), h.map(Figures::from));
        if bf == hf {
            continue;
        }
        let regression = match (b, h) {
            (Some(b), Some(h)) => judge(&program, b, h, threshold_pct),
            _ => None,
        };
        out.push(ProgChange {
            kernel: kernel.to_string(),
            program,
            base: bf,
            head: hf,
            regression,
        });
    }
    out
}

/// A verdict lost, or with a threshold a count moved beyond it (`compare::compare`'s words).
fn judge(
    program: &str,
    b: &ProgStats,
    h: &ProgStats,
    threshold_pct: Option<f64>,
) -> Option<String> {
    if b.verdict == Verdict::Success && h.verdict != Verdict::Success {
        let why = h.reason.as_deref().unwrap_or("no reason given");
        let now = match h.verdict {
            Verdict::Rejected => "rejected",
            _ => "not loaded",
        };
        return Some(format!("{program}: success -> {now} ({why})"));
    }
    let t = threshold_pct?;
    let row = |s: &ProgStats| Row {
        file: s.file_name.clone(),
        prog: s.prog_name.clone(),
        success: s.verdict == Verdict::Success,
        insns: s.log.processed_insns,
        states: s.log.total_states,
        peak_states: s.log.peak_states,
        jited: s.jited_bytes,
    };
    let failures = compare::compare(&[row(b)], &[row(h)], t).failures;
    (!failures.is_empty()).then(|| failures.join("; "))
}

/// `1 -> 2 (+1 (+100.00%))`, `-` on a side without the figure.
pub fn moved(b: Option<u64>, h: Option<u64>) -> String {
    match (b, h) {
        (Some(b), Some(h)) if b == h => b.to_string(),
        (Some(b), Some(h)) => format!("{b} → {h} ({})", compare::diff(b, h)),
        (b, h) => {
            let s = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
            format!("{} → {}", s(b), s(h))
        }
    }
}
