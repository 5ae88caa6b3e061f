//! Two veristat CSVs side by side, as `veristat -C A B` shows them (A, B, the difference,
//! MATCH or MISMATCH), and the judgement `cargo xtask ci` and `verifier-compare` make: a
//! program that verified in A and fails in B, or whose processed instructions or states moved
//! by more than the threshold, fails the comparison, named with its before and after. A
//! program in one file only fails too: the baseline no longer describes the objects.
use std::collections::BTreeMap;

use super::csv::Row;

/// What moved, for one program present in both files or in one.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Every program, A's and B's, sorted by file and program.
    pub lines: Vec<Line>,
    /// The programs that fail the comparison, each said in one sentence.
    pub failures: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub file: String,
    pub prog: String,
    pub a: Option<Row>,
    pub b: Option<Row>,
}

/// Compares `b` (the new run) against `a` (the baseline); a count moving by more than
/// `threshold_pct` percent of A's fails (0: any change fails).
pub fn compare(a: &[Row], b: &[Row], threshold_pct: f64) -> Comparison {
    let mut by_prog: BTreeMap<(String, String), (Option<Row>, Option<Row>)> = BTreeMap::new();
    for r in a {
        by_prog.entry(key(r)).or_default().0 = Some(r.clone());
    }
    for r in b {
        by_prog.entry(key(r)).or_default().1 = Some(r.clone());
    }
    let mut failures = Vec::new();
    let lines = by_prog
        .into_iter()
        .map(|((file, prog), (a, b))| {
            let name = format!("{file}/{prog}");
            match (&a, &b) {
                (Some(a), Some(b)) => failures.extend(judge(&name, a, b, threshold_pct)),
                (Some(_), None) => failures.push(format!("{name}: in A, missing from B")),
                (None, Some(_)) => failures.push(format!("{name}: new in B, not in A")),
                (None, None) => unreachable!("every entry has a row"),
            }
            Line { file, prog, a, b }
        })
        .collect();
    Comparison { lines, failures }
}

fn key(r: &Row) -> (String, String) {
    (r.file.clone(), r.prog.clone())
}

/// The failures of one program present in both files.
fn judge(name: &str, a: &Row, b: &Row, threshold_pct: f64) -> Vec<String> {
    if a.success && !b.success {
        return vec![format!("{name}: success -> failure")];
    }
    let mut out = Vec::new();
    for (what, x, y) in [
        ("processed insns", a.insns, b.insns),
        ("total states", a.states, b.states),
        ("peak states", a.peak_states, b.peak_states),
    ] {
        if let (Some(x), Some(y)) = (x, y) {
            if moved_beyond(x, y, threshold_pct) {
                out.push(format!("{name}: {what} {x} -> {y} ({})", diff(x, y)));
            }
        }
    }
    out
}

fn moved_beyond(a: u64, b: u64, threshold_pct: f64) -> bool {
    if a == b {
        return false;
    }
    a == 0 || (b.abs_diff(a) as f64) * 100.0 / (a as f64) > threshold_pct
}

/// `+5 (+1.23%)`, veristat's DIFF cell.
pub fn diff(a: u64, b: u64) -> String {
    let d = b as i128 - a as i128;
    if a == 0 {
        return format!("{d:+}");
    }
    format!("{d:+} ({:+.2}%)", d as f64 * 100.0 / a as f64)
}

impl Comparison {
    /// The veristat-style table: file, program, then for verdict, instructions and states
    /// A, B and DIFF (MATCH or MISMATCH for the verdict).
    pub fn table(&self) -> String {
        let mut t = comfy_table::Table::new();
        t.load_preset(comfy_table::presets::UTF8_BORDERS_ONLY);
        t.set_header([
            "File",
            "Program",
            "Verdict (A)",
            "Verdict (B)",
            "Verdict (DIFF)",
            "Insns (A)",
            "Insns (B)",
            "Insns (DIFF)",
            "States (A)",
            "States (B)",
            "States (DIFF)",
        ]);
        for l in &self.lines {
            let verdict = |r: &Option<Row>| match r {
                Some(r) if r.success => "success",
                Some(_) => "failure",
                None => "N/A",
            };
            let same = match (&l.a, &l.b) {
                (Some(a), Some(b)) if a.success == b.success => "MATCH",
                _ => "MISMATCH",
            };
            let count = |r: &Option<Row>, f: fn(&Row) -> Option<u64>| {
                r.as_ref()
                    .and_then(f)
                    .map_or("N/A".into(), |v| v.to_string())
            };
            let delta = |f: fn(&Row) -> Option<u64>| match (
                l.a.as_ref().and_then(f),
                l.b.as_ref().and_then(f),
            ) {
                (Some(a), Some(b)) => diff(a, b),
                _ => "N/A".into(),
            };
            let insns = |r: &Row| r.insns;
            let states = |r: &Row| r.states;
            t.add_row([
                l.file.clone(),
                l.prog.clone(),
                verdict(&l.a).into(),
                verdict(&l.b).into(),
                same.into(),
                count(&l.a, insns),
                count(&l.b, insns),
                delta(insns),
                count(&l.a, states),
                count(&l.b, states),
                delta(states),
            ]);
        }
        t.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(prog: &str, success: bool, insns: u64, states: u64) -> Row {
        Row {
            file: "bpf_loop".into(),
            prog: prog.into(),
            success,
            insns: Some(insns),
            states: Some(states),
            peak_states: Some(states),
            jited: None,
        }
    }

    #[test]
    fn identical_runs_match() {
        let a = [
            row("loop_inlined", true, 40, 3),
            row("loop_bad", false, 9, 1),
        ];
        let c = compare(&a, &a, 0.0);
        assert!(c.failures.is_empty(), "{:?}", c.failures);
        assert!(c.table().contains("MATCH"));
        assert!(!c.table().contains("MISMATCH"));
    }

    #[test]
    fn one_more_instruction_fails_at_0_percent_and_names_program_and_change() {
        let a = [row("loop_inlined", true, 40, 3)];
        let b = [row("loop_inlined", true, 41, 3)];
        assert_eq!(
            compare(&a, &b, 0.0).failures,
            ["bpf_loop/loop_inlined: processed insns 40 -> 41 (+1 (+2.50%))"]
        );
        assert!(compare(&a, &b, 5.0).failures.is_empty(), "within 5 %");
        assert!(compare(&a, &b, 0.0).table().contains("+1 (+2.50%)"));
    }

    #[test]
    fn a_rejection_that_verified_before_is_success_to_failure() {
        let a = [row("loop_inlined", true, 40, 3)];
        let b = [row("loop_inlined", false, 12, 1)];
        let c = compare(&a, &b, 50.0);
        assert_eq!(c.failures, ["bpf_loop/loop_inlined: success -> failure"]);
        assert!(c.table().contains("MISMATCH"));
        // The other way is a change of counts, not a regression of the verdict.
        let back = compare(&b, &a, 1000.0);
        assert!(back.failures.is_empty(), "{:?}", back.failures);
    }

    #[test]
    fn a_program_in_one_file_only_fails() {
        let a = [row("old", true, 1, 1)];
        let b = [row("new", true, 1, 1)];
        assert_eq!(
            compare(&a, &b, 0.0).failures,
            [
                "bpf_loop/new: new in B, not in A",
                "bpf_loop/old: in A, missing from B"
            ]
        );
    }

    #[test]
    fn diffs_read_like_veristats() {
        assert_eq!(diff(200, 150), "-50 (-25.00%)");
        assert_eq!(diff(0, 3), "+3");
        assert!(moved_beyond(0, 1, 100.0));
        assert!(!moved_beyond(100, 110, 10.0));
        assert!(moved_beyond(100, 111, 10.0));
    }
}
