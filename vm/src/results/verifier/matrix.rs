//! Programs x kernels: each program's processed instructions on each kernel, rejections and
//! programs not loaded marked (the reasons listed under the table), and the `bpf_loop` calls
//! the verifier left of those the program makes (0 where it inlined them).
use std::collections::{BTreeMap, BTreeSet};

use super::{ProgStats, Verdict};

/// One kernel's statistics: its label (`6.1`) and its programs.
pub type Kernel<'a> = (&'a str, &'a [ProgStats]);

/// The kernels of `reports` that have statistics, in the reports' order.
pub fn of_reports(reports: &[crate::results::report::Report]) -> Vec<Kernel<'_>> {
    reports
        .iter()
        .filter(|r| !r.verifier.is_empty())
        .map(|r| (r.kernel.version.as_str(), r.verifier.as_slice()))
        .collect()
}

/// Every program of every kernel, by `file/prog`, then by kernel label.
fn by_program<'a>(kernels: &[Kernel<'a>]) -> BTreeMap<String, BTreeMap<&'a str, &'a ProgStats>> {
    let mut m: BTreeMap<String, BTreeMap<&str, &ProgStats>> = BTreeMap::new();
    for (k, stats) in kernels {
        for s in stats.iter() {
            m.entry(format!("{}/{}", s.file_name, s.prog_name))
                .or_default()
                .insert(k, s);
        }
    }
    m
}

/// The matrix's cell: the processed instructions; `✗ N` for a rejection after N
/// instructions; `not loaded`; `-` where the kernel has no such program.
fn cell(s: Option<&&ProgStats>) -> String {
    match s {
        None => "-".into(),
        Some(s) => {
            let n = s
                .log
                .processed_insns
                .map_or("?".to_string(), |n| n.to_string());
            match s.verdict {
                Verdict::Success => n,
                Verdict::Rejected => format!("✗ {n}"),
                Verdict::NotLoaded => "not loaded".into(),
            }
        }
    }
}

/// The rows of the matrix: `file/prog`, then one cell per kernel.
pub fn rows(kernels: &[Kernel<'_>]) -> Vec<Vec<String>> {
    by_program(kernels)
        .into_iter()
        .map(|(name, per)| {
            let mut row = vec![name];
            row.extend(kernels.iter().map(|(k, _)| cell(per.get(k))));
            row
        })
        .collect()
}

/// Why each program that did not verify did not, grouped: `5.10: rejected: unknown func
/// bpf_loop#181: bpf_loop/loop_const, bpf_loop/loop_helper`.
pub fn reasons(kernels: &[Kernel<'_>]) -> Vec<String> {
    let mut groups: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (k, stats) in kernels {
        for s in stats.iter().filter(|s| s.verdict != Verdict::Success) {
            groups
                .entry((k.to_string(), s.describe()))
                .or_default()
                .insert(format!("{}/{}", s.file_name, s.prog_name));
        }
    }
    groups
        .into_iter()
        .map(|((k, why), progs)| {
            format!(
                "{k}: {why}: {}",
                progs.into_iter().collect::<Vec<_>>().join(", ")
            )
        })
        .collect()
}

/// For each program that calls `bpf_loop` and verified somewhere: per kernel, the calls left
/// after verification against those loaded (`1 -> 0`: inlined).
pub fn bpf_loop_rows(kernels: &[Kernel<'_>]) -> Vec<Vec<String>> {
    by_program(kernels)
        .into_iter()
        .filter(|(_, per)| {
            per.values()
                .any(|s| s.bpf_loop_calls_loaded > 0 && s.verdict == Verdict::Success)
        })
        .map(|(name, per)| {
            let mut row = vec![name];
            row.extend(kernels.iter().map(|(k, _)| match per.get(k) {
                Some(s) if s.verdict == Verdict::Success => match s.bpf_loop_calls {
                    Some(left) => format!("{} -> {left}", s.bpf_loop_calls_loaded),
                    None => format!("{} -> ?", s.bpf_loop_calls_loaded),
                },
                Some(_) => "✗".into(),
                None => "-".into(),
            }));
            row
        })
        .collect()
}

/// The matrix, the reasons and the `bpf_loop` table for a terminal.
pub fn table(kernels: &[Kernel<'_>]) -> String {
    let render = |title: &str, rows: Vec<Vec<String>>| {
        let mut t = comfy_table::Table::new();
        t.load_preset(comfy_table::presets::UTF8_BORDERS_ONLY);
        let mut header = vec![title.to_string()];
        header.extend(kernels.iter().map(|(k, _)| k.to_string()));
        t.set_header(header);
        for r in rows {
            t.add_row(r);
        }
        t.to_string()
    };
    let mut out = render("verifier: processed insns", rows(kernels));
    for r in reasons(kernels) {
        out.push_str("\n  ");
        out.push_str(&r);
    }
    let loops = bpf_loop_rows(kernels);
    if !loops.is_empty() {
        out.push('\n');
        out.push_str(&render("bpf_loop calls: loaded -> left", loops));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prog(name: &str, verdict: Verdict, insns: u64, loaded: u64, left: Option<u64>) -> ProgStats {
        let mut s = ProgStats::not_loaded("bpf_loop", name, "unknown func bpf_loop#181".into());
        s.verdict = verdict;
        s.log.processed_insns = Some(insns);
        s.bpf_loop_calls_loaded = loaded;
        s.bpf_loop_calls = left;
        if verdict == Verdict::Success {
            s.reason = None;
        }
        s
    }

    #[test]
    fn the_matrix_marks_rejections_and_lists_why() {
        let old = [
            prog("loop_helper", Verdict::Rejected, 12, 1, None),
            prog("loop_inlined", Verdict::Rejected, 12, 1, None),
        ];
        let new = [
            prog("loop_helper", Verdict::Success, 60, 1, Some(1)),
            prog("loop_inlined", Verdict::Success, 40, 1, Some(0)),
        ];
        let kernels: [Kernel; 2] = [("5.10", &old), ("6.1", &new)];
        assert_eq!(
            rows(&kernels),
            [
                ["bpf_loop/loop_helper", "✗ 12", "60"],
                ["bpf_loop/loop_inlined", "✗ 12", "40"]
            ]
        );
        assert_eq!(
            reasons(&kernels),
            ["5.10: rejected: unknown func bpf_loop#181: bpf_loop/loop_helper, bpf_loop/loop_inlined"]
        );
        assert_eq!(
            bpf_loop_rows(&kernels),
            [
                ["bpf_loop/loop_helper", "✗", "1 -> 1"],
                ["bpf_loop/loop_inlined", "✗", "1 -> 0"]
            ]
        );
        assert!(table(&kernels).contains("bpf_loop calls: loaded -> left"));
    }
}
