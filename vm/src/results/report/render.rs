//! Renders a report: `report.json` and `junit.xml` on disk, the tables on the terminal.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use super::model::{Outcome, Report, TestResult, VmEnding};

/// Writes `report.json` and `junit.xml` into `dir`, each atomically (two runs at once never
/// leave a torn file: the last one wins whole).
pub fn write(report: &Report, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(report)? + "\n";
    crate::support::fs::write_atomic(&dir.join("report.json"), json.as_bytes())?;
    crate::support::fs::write_atomic(&dir.join("junit.xml"), junit(report)?.as_bytes())
}

/// JUnit XML for CI: one suite per kernel, skips with their reason.
pub fn junit(report: &Report) -> Result<String> {
    use quick_junit::{NonSuccessKind, Report as JReport, TestCase, TestCaseStatus, TestSuite};
    let mut suite = TestSuite::new(format!("bpfvm kernel {}", report.kernel.version));
    for t in &report.tests {
        let mut status = match t.outcome {
            Outcome::Pass => TestCaseStatus::success(),
            Outcome::Fail => TestCaseStatus::non_success(NonSuccessKind::Failure),
            Outcome::Skip => TestCaseStatus::skipped(),
        };
        if let Some(reason) = &t.reason {
            status.set_message(reason.clone());
        }
        let mut case = TestCase::new(t.name.clone(), status);
        if !t.kernel_splats.is_empty() {
            case.set_system_err(t.kernel_splats.join("\n"));
        }
        case.set_time(std::time::Duration::from_millis(t.duration_ms));
        case.set_classname(format!("kernel-{}", report.kernel.version));
        suite.add_test_case(case);
    }
    // The command whose rows these are: the kernel's own selftests, or the suite or a crate.
    let name = match report.selftests {
        Some(_) => "bpfvm selftests",
        None => "bpfvm vm-test",
    };
    let mut r = JReport::new(name);
    r.add_test_suite(suite);
    Ok(r.to_string()?)
}

/// The terminal summary: one row per test, then the totals.
pub fn summary_table(report: &Report) -> String {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_BORDERS_ONLY);
    t.set_header(["test", "outcome", "ms", "reason"]);
    for r in &report.tests {
        let outcome = match r.outcome {
            Outcome::Pass => "pass",
            Outcome::Fail => "FAIL",
            Outcome::Skip => "skip",
        };
        let reason = r.reason.as_deref().unwrap_or("");
        let first = reason.lines().next().unwrap_or("");
        t.add_row([r.name.as_str(), outcome, &r.duration_ms.to_string(), first]);
    }
    let s = &report.summary;
    let mut features = String::new();
    if let Some(e) = &report.expected_features {
        let _ = writeln!(
            features,
            "expected features ({}): {}",
            e.source,
            e.features.join(", ")
        );
    }
    for m in &report.feature_mismatches {
        let _ = writeln!(features, "FEATURE MISMATCH: {}", m.message);
    }
    for s in &report.kernel_splats {
        let _ = match &s.allowed {
            Some(why) => writeln!(
                features,
                "allowed {} (kernels/splats/allowed.toml: {why})",
                s.describe()
            ),
            None => writeln!(features, "KERNEL SPLAT: {}", s.describe()),
        };
    }
    if let Some(tree) = &report.kernel.tree {
        let _ = writeln!(features, "{}", built_from(tree));
    }
    format!(
        "{t}\n{features}kernel {} ({}), {}: {} passed, {} failed, {} skipped\ntime: {}\nslowest: {}",
        report.kernel.version,
        report
            .kernel
            .release
            .as_deref()
            .unwrap_or("release unknown"),
        report.accel.name.to_uppercase(),
        s.passed,
        s.failed,
        s.skipped,
        report.timings.describe(),
        slowest(&report.tests, 5)
    )
}

/// "a 1.2 s, b 0.9 s, ..." for the `n` tests that took longest.
fn slowest(tests: &[TestResult], n: usize) -> String {
    let mut by_time: Vec<&TestResult> = tests.iter().collect();
    by_time.sort_by_key(|t| std::cmp::Reverse(t.duration_ms));
    by_time
        .iter()
        .take(n)
        .map(|t| format!("{} {:.1} s", t.name, t.duration_ms as f64 / 1000.0))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `--kernel all` matrix: one row per test, one column per kernel, then each kernel's
/// totals and wall time.
pub fn matrix_table(reports: &[Report]) -> String {
    let names = super::model::test_names(reports);
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_BORDERS_ONLY);
    let mut header = vec!["test".to_string()];
    header.extend(reports.iter().map(|r| r.kernel.version.clone()));
    t.set_header(header);
    for name in names {
        let mut row = vec![name.to_string()];
        for r in reports {
            let cell = match r.tests.iter().find(|t| t.name == name).map(|t| t.outcome) {
                Some(Outcome::Pass) => "pass",
                Some(Outcome::Fail) => "FAIL",
                Some(Outcome::Skip) => "skip",
                None => "-",
            };
            row.push(cell.to_string());
        }
        t.add_row(row);
    }
    let mut verdicts = vec!["verdict".to_string()];
    for r in reports {
        verdicts.push(match r.why_failed() {
            None => "ok".into(),
            Some(why) => format!("FAIL: {}", why.chars().take(40).collect::<String>()),
        });
    }
    t.add_row(verdicts);
    let mut totals = vec!["pass/fail/skip".to_string()];
    let mut walls = vec!["VM wall time".to_string()];
    for r in reports {
        let s = &r.summary;
        totals.push(format!("{}/{}/{}", s.passed, s.failed, s.skipped));
        walls.push(match &r.vm.ending {
            VmEnding::Exited => format!("{:.0} s", r.vm.wall_time_s),
            VmEnding::Failed(why) => why.chars().take(40).collect(),
        });
    }
    t.add_row(totals);
    t.add_row(walls);
    t.to_string()
}

/// "built from /src/linux at 1a2b3c4d5e6f (dirty), config 9f8e7d6c5b4a (cached build)".
pub fn built_from(tree: &crate::kernel::source_tree::TreeInfo) -> String {
    let at = tree
        .at_commit()
        .unwrap_or_else(|| " (not a git tree)".into());
    format!(
        "built from {}{at}, config {}, {}",
        tree.dir,
        &tree.config_hash[..tree.config_hash.len().min(12)],
        if tree.built {
            "built by this run"
        } else {
            "the cached build"
        }
    )
}
