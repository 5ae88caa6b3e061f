//! Reads what the guest wrote into the shared directory and turns it into `report.json`,
//! `junit.xml` and the terminal summary. The serial console is never parsed for results.
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::accel::Accel;
use crate::guest::files;
use crate::vng::FailedBoot;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Pass,
    Fail,
    Skip,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestResult {
    pub name: String,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KernelInfo {
    /// The pin's version (`6.1`) or the path of a custom image.
    pub version: String,
    /// What the pin promises, if it is a pin.
    pub pinned_release: Option<String>,
    /// `uname -r` as the guest reported it.
    pub release: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccelInfo {
    pub name: String,
    pub reason: String,
}

impl From<&Accel> for AccelInfo {
    fn from(a: &Accel) -> Self {
        Self {
            name: a.name.to_string(),
            reason: a.reason.clone(),
        }
    }
}

/// `target/vm-test/<kernel>/report.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub kernel: KernelInfo,
    pub accel: AccelInfo,
    pub cmdline: Option<String>,
    pub spectre_v2: Option<String>,
    /// Probe results: feature name -> supported by this kernel.
    pub features: BTreeMap<String, bool>,
    /// How the VM ended ("exited" or why not), and its wall time.
    pub vm: VmInfo,
    /// Where the run's wall time went.
    pub timings: Timings,
    pub tests: Vec<TestResult>,
    pub summary: Summary,
}

/// Seconds per phase of a run; a phase the run did not reach is absent.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timings {
    /// Provisioning check, kernel fetch, accelerator probe.
    pub prepare_s: Option<f64>,
    /// BPF objects and guest test binaries.
    pub build_s: Option<f64>,
    /// vng start to the guest script's first line.
    pub boot_s: Option<f64>,
    /// The guest script: feature probes and every test binary.
    pub tests_s: Option<f64>,
    /// The guest script's end to vng's exit.
    pub shutdown_s: Option<f64>,
}

impl Timings {
    /// "build 12.0 s, boot 6.1 s, ..." for the phases that ran.
    pub fn describe(&self) -> String {
        [
            ("prepare", self.prepare_s),
            ("build", self.build_s),
            ("boot", self.boot_s),
            ("tests", self.tests_s),
            ("shutdown", self.shutdown_s),
        ]
        .iter()
        .filter_map(|(name, t)| t.map(|t| format!("{name} {t:.1} s")))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VmInfo {
    pub ending: String,
    pub wall_time_s: f64,
    /// Set when the VM died: the console's last lines.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub console_tail: Vec<String>,
    /// Boots that failed before the guest script started and were retried (TCG only).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub retries: Vec<FailedBoot>,
}

impl Report {
    /// The report of a kernel whose run could not start (fetch or build failed).
    pub fn not_run(version: &str, why: &str) -> Self {
        Self {
            kernel: KernelInfo {
                version: version.to_string(),
                pinned_release: None,
                release: None,
            },
            accel: AccelInfo {
                name: "none".into(),
                reason: "not booted".into(),
            },
            cmdline: None,
            spectre_v2: None,
            features: BTreeMap::new(),
            vm: VmInfo {
                ending: format!("not run: {why}"),
                wall_time_s: 0.0,
                console_tail: vec![],
                retries: vec![],
            },
            timings: Timings::default(),
            tests: vec![],
            summary: Summary::default(),
        }
    }

    /// Failed tests, or a VM that did not end normally, make the run fail.
    pub fn ok(&self) -> bool {
        self.why_failed().is_none()
    }

    /// Why this run failed, in one line; `None` when it passed.
    pub fn why_failed(&self) -> Option<String> {
        if self.vm.ending != "exited" {
            let retried = match self.vm.retries.len() {
                0 => String::new(),
                n => format!(
                    " (after {n} failed boot{} retried)",
                    if n == 1 { "" } else { "s" }
                ),
            };
            return Some(format!("{}{retried}", self.vm.ending));
        }
        if self.summary.failed > 0 {
            let failed: Vec<&str> = self
                .tests
                .iter()
                .filter(|t| t.outcome == Outcome::Fail)
                .map(|t| t.name.as_str())
                .collect();
            let more = failed.len().saturating_sub(3);
            return Some(format!(
                "{} test{} failed: {}{}",
                failed.len(),
                if failed.len() == 1 { "" } else { "s" },
                failed[..failed.len().min(3)].join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        self.tests.is_empty().then(|| "no test ran".to_string())
    }
}

/// A line of libtest's `--format json` output that this module cares about.
#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    event: String,
    name: Option<String>,
    exec_time: Option<f64>,
    stdout: Option<String>,
}

#[derive(Deserialize)]
struct SkipRecord {
    test: String,
    reason: String,
}

/// Test names as users see them: without the crate's `tests::` module prefix.
fn display_name(libtest_name: &str) -> String {
    libtest_name
        .strip_prefix("tests::")
        .unwrap_or(libtest_name)
        .to_string()
}

/// Reads one binary's JSON events (plus its exit status) into results. A test that started
/// but never finished was running when the binary crashed.
pub fn parse_binary(jsonl: &str, rc: Option<i32>, stderr_tail: &str) -> Vec<TestResult> {
    let mut started: Vec<String> = Vec::new();
    let mut results = Vec::new();
    for line in jsonl.lines() {
        let Ok(ev) = serde_json::from_str::<Event>(line) else {
            continue;
        };
        let (true, Some(name)) = (ev.kind == "test", ev.name) else {
            continue;
        };
        let duration_ms = (ev.exec_time.unwrap_or(0.0) * 1000.0).round() as u64;
        let (outcome, reason) = match ev.event.as_str() {
            "started" => {
                started.push(name);
                continue;
            }
            "ok" => (Outcome::Pass, None),
            "failed" => (Outcome::Fail, Some(failure_reason(ev.stdout.as_deref()))),
            "ignored" => (Outcome::Skip, Some("#[ignore]d".to_string())),
            _ => continue,
        };
        started.retain(|s| *s != name);
        results.push(TestResult {
            name: display_name(&name),
            outcome,
            reason,
            duration_ms,
        });
    }
    for name in started {
        results.push(TestResult {
            name: display_name(&name),
            outcome: Outcome::Fail,
            reason: Some(format!(
                "the test binary died (exit status {}) while this test ran: {stderr_tail}",
                rc.map_or("unknown".into(), |c| c.to_string())
            )),
            duration_ms: 0,
        });
    }
    results
}

/// The panic message of a failed test: from "panicked at" to the backtrace.
fn failure_reason(stdout: Option<&str>) -> String {
    let out = stdout.unwrap_or("");
    let from = out
        .find("panicked at")
        .map_or(0, |i| out[..i].rfind('\n').map_or(0, |nl| nl + 1));
    let msg: Vec<&str> = out[from..]
        .lines()
        .take_while(|l| !l.starts_with("stack backtrace:") && !l.starts_with("note: "))
        .collect();
    let msg = msg.join("\n").trim().to_string();
    if msg.is_empty() {
        "failed without a panic message".into()
    } else {
        msg
    }
}

/// Turns passes that recorded a skip into skips with their reason.
pub fn apply_skips(results: &mut [TestResult], skips_jsonl: &str) {
    let skips: HashMap<String, String> = skips_jsonl
        .lines()
        .filter_map(|l| serde_json::from_str::<SkipRecord>(l).ok())
        .map(|s| (display_name(&s.test), s.reason))
        .collect();
    for r in results.iter_mut() {
        if let (Outcome::Pass, Some(reason)) = (r.outcome, skips.get(&r.name)) {
            r.outcome = Outcome::Skip;
            r.reason = Some(reason.clone());
        }
    }
}

pub fn summarize(tests: &[TestResult]) -> Summary {
    let count = |o| tests.iter().filter(|t| t.outcome == o).count();
    Summary {
        passed: count(Outcome::Pass),
        failed: count(Outcome::Fail),
        skipped: count(Outcome::Skip),
    }
}

/// Reads a small text file the guest wrote, trimmed; `None` if it is missing or empty.
pub fn read_fact(dir: &Path, name: &str) -> Option<String> {
    let s = std::fs::read_to_string(dir.join(name)).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// Collects every binary's results from the shared directory.
pub fn collect_tests(dir: &Path, binaries: &[String]) -> Vec<TestResult> {
    let mut tests = Vec::new();
    for b in binaries {
        let jsonl = std::fs::read_to_string(dir.join(format!("{b}.jsonl"))).unwrap_or_default();
        let rc = read_fact(dir, &format!("{b}.rc")).and_then(|s| s.parse().ok());
        let stderr = read_fact(dir, &format!("{b}.stderr")).unwrap_or_default();
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        let tail = tail.into_iter().rev().collect::<Vec<_>>().join(" | ");
        tests.extend(parse_binary(&jsonl, rc, &tail));
    }
    let skips = std::fs::read_to_string(dir.join(files::SKIPS)).unwrap_or_default();
    apply_skips(&mut tests, &skips);
    tests.sort_by(|a, b| a.name.cmp(&b.name));
    tests
}

/// Reads `features.json` as the probe binary wrote it.
pub fn read_features(dir: &Path) -> BTreeMap<String, bool> {
    std::fs::read_to_string(dir.join(files::FEATURES))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

/// Writes `report.json` and `junit.xml` into `dir`, each atomically (two runs at once never
/// leave a torn file: the last one wins whole).
pub fn write(report: &Report, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(report)? + "\n";
    write_atomic(&dir.join("report.json"), json.as_bytes())?;
    write_atomic(&dir.join("junit.xml"), junit(report)?.as_bytes())
}

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("create a temporary file in {}", dir.display()))?;
    tmp.write_all(bytes)?;
    tmp.persist(path)
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
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
        case.set_time(std::time::Duration::from_millis(t.duration_ms));
        case.set_classname(format!("kernel-{}", report.kernel.version));
        suite.add_test_case(case);
    }
    let mut r = JReport::new("bpfvm vm-test");
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
    format!(
        "{t}\nkernel {} ({}), {}: {} passed, {} failed, {} skipped\ntime: {}",
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
        report.timings.describe()
    )
}

/// The `--kernel all` matrix: one row per test, one column per kernel, then each kernel's
/// totals and wall time.
pub fn matrix_table(reports: &[Report]) -> String {
    let mut names: Vec<&str> = reports
        .iter()
        .flat_map(|r| r.tests.iter().map(|t| t.name.as_str()))
        .collect();
    names.sort();
    names.dedup();
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
        walls.push(if r.vm.ending == "exited" {
            format!("{:.0} s", r.vm.wall_time_s)
        } else {
            r.vm.ending.chars().take(40).collect()
        });
    }
    t.add_row(totals);
    t.add_row(walls);
    t.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = r#"{ "type": "suite", "event": "started", "test_count": 4 }
{ "type": "test", "event": "started", "name": "tests::bloom::a" }
{ "type": "test", "name": "tests::bloom::a", "event": "ok", "exec_time": 0.0125 }
{ "type": "test", "event": "started", "name": "tests::bloom::b" }
{ "type": "test", "name": "tests::bloom::b", "event": "failed", "exec_time": 0.5, "stdout": "some output\n\nthread 'tests::bloom::b' (12) panicked at tests/src/x.rs:3:5:\nassertion failed: 1 == 2\nstack backtrace:\n   0: foo\n" }
{ "type": "test", "event": "started", "name": "tests::bloom::c" }
{ "type": "test", "name": "tests::bloom::c", "event": "ok", "exec_time": 0.001 }
{ "type": "test", "event": "started", "name": "tests::bloom::d" }
"#;

    #[test]
    fn parses_passes_failures_and_a_crash() {
        let r = parse_binary(RUN, Some(134), "Aborted");
        let by: HashMap<_, _> = r.iter().map(|t| (t.name.as_str(), t)).collect();
        assert_eq!(by["bloom::a"].outcome, Outcome::Pass);
        assert_eq!(by["bloom::a"].duration_ms, 13);
        assert_eq!(by["bloom::b"].outcome, Outcome::Fail);
        assert_eq!(
            by["bloom::b"].reason.as_deref().unwrap(),
            "thread 'tests::bloom::b' (12) panicked at tests/src/x.rs:3:5:\nassertion failed: 1 == 2"
        );
        assert_eq!(by["bloom::d"].outcome, Outcome::Fail);
        assert!(by["bloom::d"]
            .reason
            .as_deref()
            .unwrap()
            .contains("exit status 134"));
    }

    #[test]
    fn recorded_skips_turn_passes_into_skips_but_never_hide_failures() {
        let mut r = parse_binary(RUN, Some(101), "");
        apply_skips(
            &mut r,
            "{\"test\":\"tests::bloom::c\",\"reason\":\"bloom filter map not supported by this kernel\"}\n\
             {\"test\":\"tests::bloom::b\",\"reason\":\"x\"}\n",
        );
        let s = summarize(&r);
        assert_eq!((s.passed, s.failed, s.skipped), (1, 2, 1));
        let c = r.iter().find(|t| t.name == "bloom::c").unwrap();
        assert_eq!(
            c.reason.as_deref(),
            Some("bloom filter map not supported by this kernel")
        );
    }

    #[test]
    fn junit_marks_skips_and_failures() {
        let tests = parse_binary(RUN, Some(101), "");
        let report = Report {
            kernel: KernelInfo {
                version: "6.1".into(),
                pinned_release: None,
                release: None,
            },
            accel: AccelInfo {
                name: "tcg".into(),
                reason: "test".into(),
            },
            cmdline: None,
            spectre_v2: None,
            features: BTreeMap::new(),
            vm: VmInfo {
                ending: "exited".into(),
                wall_time_s: 1.0,
                console_tail: vec![],
                retries: vec![],
            },
            timings: Timings {
                build_s: Some(12.04),
                boot_s: Some(6.0),
                ..Timings::default()
            },
            summary: summarize(&tests),
            tests,
        };
        let table = summary_table(&report);
        assert!(table.ends_with("time: build 12.0 s, boot 6.0 s"), "{table}");
        let matrix = matrix_table(&[report.clone(), Report::not_run("5.10", "offline")]);
        assert!(matrix.contains("bloom::b"), "{matrix}");
        assert!(matrix.contains("2/2/0"), "{matrix}");
        assert!(
            matrix.contains("FAIL: 2 tests failed: bloom::b, bloom::d"),
            "{matrix}"
        );
        assert!(matrix.contains("FAIL: not run: offline"), "{matrix}");
        let xml = junit(&report).unwrap();
        assert!(xml.contains("<failure"), "{xml}");
        assert!(!report.ok());
        assert!(summary_table(&report).contains("2 passed, 2 failed, 0 skipped"));
    }

    #[test]
    fn a_failed_run_says_why() {
        let mut r = Report::not_run("6.12", "x");
        r.vm.ending = "the guest kernel panicked".into();
        r.vm.retries.push(FailedBoot {
            ending: "the guest kernel panicked".into(),
            console_tail: vec![],
        });
        assert_eq!(
            r.why_failed().unwrap(),
            "the guest kernel panicked (after 1 failed boot retried)"
        );
        r.vm.ending = "exited".into();
        assert_eq!(r.why_failed().unwrap(), "no test ran");
        r.tests = parse_binary(RUN, Some(0), "");
        r.summary = summarize(&r.tests);
        assert_eq!(
            r.why_failed().unwrap(),
            "2 tests failed: bloom::b, bloom::d"
        );
        r.tests.retain(|t| t.outcome == Outcome::Pass);
        r.summary = summarize(&r.tests);
        assert_eq!(r.why_failed(), None);
        assert!(r.ok());
    }
}
