//! Reads what the guest wrote into the shared directory and turns it into `report.json`,
//! `junit.xml` and the terminal summary. The serial console is never parsed for results.
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::accel::Accel;
use crate::expect::{self, Expectation, Mismatch, Probe};
use crate::guest::files;
use crate::guest_files;
use crate::health::{Health, Judged};
use crate::vng::{Ending, FailedBoot, RunOutcome};

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
    /// The kernel splats logged while this test ran (JUnit `system-err`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_splats: Vec<String>,
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
    /// Probe results: feature name -> present in this kernel.
    pub features: BTreeMap<String, bool>,
    /// Each probe's whole answer (present, absent or error, with the kernel's reason).
    #[serde(default)]
    pub probes: BTreeMap<String, Probe>,
    /// The features this kernel must have (see `vm::expect`); none when the run never booted.
    #[serde(default)]
    pub expected_features: Option<Expectation>,
    /// Expected features the probes did not find: each also fails the run.
    #[serde(default)]
    pub feature_mismatches: Vec<Mismatch>,
    /// The splats in the kernel log (`vm::health`), allowed or not; the log itself is
    /// `kernel.log` beside this report.
    #[serde(default)]
    pub kernel_splats: Vec<Judged>,
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
    /// The phases of a run: `prepare` and `build` timed by the caller, the rest by the VM.
    pub fn of(prepare: std::time::Duration, build: std::time::Duration, vm: &RunOutcome) -> Self {
        Self {
            prepare_s: Some(prepare.as_secs_f64()),
            build_s: Some(build.as_secs_f64()),
            boot_s: vm.boot.map(|d| d.as_secs_f64()),
            tests_s: vm.guest.map(|d| d.as_secs_f64()),
            shutdown_s: vm.shutdown().map(|d| d.as_secs_f64()),
        }
    }

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

impl VmInfo {
    /// How the VM of `vm` ended: `exited` when the guest script exited 0, else the diagnosis'
    /// first line with the console tail.
    pub fn of(vm: &RunOutcome) -> Self {
        let ok = vm.ending == Ending::Exited(0);
        Self {
            ending: if ok {
                "exited".into()
            } else {
                vm.diagnosis().lines().next().unwrap_or("").to_string()
            },
            wall_time_s: vm.elapsed.as_secs_f64(),
            console_tail: if ok { vec![] } else { vm.console_tail.clone() },
            retries: vm.retries.clone(),
        }
    }
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
            probes: BTreeMap::new(),
            expected_features: None,
            feature_mismatches: vec![],
            kernel_splats: vec![],
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

    /// Failed entries (tests, probes, binaries), or a VM that did not end normally, make the
    /// run fail; so does a run where no test ran.
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
        (self.summary.passed + self.summary.skipped == 0).then(|| "no test ran".to_string())
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

/// A line of `skips.jsonl`: a test that skipped itself, and the feature it lacked (if the
/// skip came from `require!`).
#[derive(Deserialize)]
struct SkipRecord {
    test: String,
    reason: String,
    #[serde(default)]
    feature: Option<String>,
}

/// Test names as users see them: without the crate's `tests::` module prefix.
pub(crate) fn display_name(libtest_name: &str) -> String {
    libtest_name
        .strip_prefix("tests::")
        .unwrap_or(libtest_name)
        .to_string()
}

/// What one test binary left in the shared directory.
#[derive(Debug, Clone, Default)]
pub struct BinaryOutput {
    /// The test target's name (`bpfvm_tests`).
    pub name: String,
    /// `--list --format terse` output: every test the run should report. `None` if missing.
    pub list: Option<String>,
    /// libtest's JSON events.
    pub jsonl: String,
    /// The exit status as the shell saw it (128 + N for signal N); `None` if never written.
    pub rc: Option<i32>,
    /// The last lines of its stderr, joined with " | ".
    pub stderr_tail: String,
}

/// "exit status 3", "signal 6 (SIGABRT)": a shell exit status in words.
fn status_words(rc: i32) -> String {
    let names = [
        (4, "SIGILL"),
        (6, "SIGABRT"),
        (7, "SIGBUS"),
        (8, "SIGFPE"),
        (9, "SIGKILL"),
        (11, "SIGSEGV"),
        (15, "SIGTERM"),
    ];
    match rc - 128 {
        sig @ 1..=64 => match names.iter().find(|(n, _)| *n == sig) {
            Some((_, name)) => format!("signal {sig} ({name})"),
            None => format!("signal {sig}"),
        },
        _ => format!("exit status {rc}"),
    }
}

/// The test names of libtest's `--list --format terse` output (`name: test` lines).
fn listed(list: &str) -> Vec<String> {
    list.lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_string)
        .collect()
}

fn failed(name: String, reason: String) -> TestResult {
    TestResult {
        name,
        outcome: Outcome::Fail,
        reason: Some(reason),
        duration_ms: 0,
        kernel_splats: vec![],
    }
}

/// Reads one binary's JSON events into results, and accounts for how it ended: a test that
/// started but never finished was running when the process died (or the VM did: `vm_ending`);
/// a listed test with no result was never reached; a non-zero exit with no failing test, or no
/// list, fails an entry named after the binary.
pub fn parse_binary(out: &BinaryOutput, vm_ending: &str) -> Vec<TestResult> {
    let mut started: Vec<String> = Vec::new();
    let mut results = Vec::new();
    for line in out.jsonl.lines() {
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
            kernel_splats: vec![],
        });
    }
    let death = match out.rc {
        Some(rc) => format!("test process died ({})", status_words(rc)),
        None => format!("test process never finished: {vm_ending}"),
    };
    let stderr = if out.stderr_tail.is_empty() {
        String::new()
    } else {
        format!("; stderr: {}", out.stderr_tail)
    };
    for name in &started {
        results.push(failed(
            display_name(name),
            format!("{death} while this test ran{stderr}"),
        ));
    }
    for name in listed(out.list.as_deref().unwrap_or("")) {
        let shown = display_name(&name);
        if !started.contains(&name) && !results.iter().any(|r| r.name == shown) {
            results.push(failed(
                shown,
                format!("not run: the {death} before reaching it"),
            ));
        }
    }
    let binary = format!("binary:{}", out.name);
    if out.list.is_none() {
        let why = match out.rc {
            None => format!("never ran: {vm_ending}"),
            Some(_) => format!("`{} --list` failed{stderr}", out.name),
        };
        results.push(failed(binary.clone(), format!("no test list: {why}")));
    }
    let any_failed = results.iter().any(|r| r.outcome == Outcome::Fail);
    if out.rc != Some(0) && !any_failed {
        results.push(failed(
            binary,
            format!("{death} with no failing test{stderr}"),
        ));
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

/// Turns passes that recorded a skip into skips with their reason, or into failures when the
/// feature they skipped for is one the kernel must have (`expect::judge_skip`).
pub fn apply_skips(
    results: &mut [TestResult],
    skips_jsonl: &str,
    exp: &Expectation,
    probes: &BTreeMap<String, Probe>,
) {
    let skips: HashMap<String, SkipRecord> = skip_records(skips_jsonl)
        .map(|s| (display_name(&s.test), s))
        .collect();
    for r in results.iter_mut() {
        let (Outcome::Pass, Some(skip)) = (r.outcome, skips.get(&r.name)) else {
            continue;
        };
        let (outcome, reason) = judge_skip_record(skip, exp, probes);
        r.outcome = outcome;
        r.reason = Some(reason);
    }
}

/// For the live progress: what the final report will make of a test libtest just reported as
/// passed (`None`: a pass), from the skips the guest has recorded so far. The guest writes the
/// skip record before the test returns, so it is in the shared directory by then.
pub(crate) fn judge_live_pass(
    dir: &Path,
    exp: &Expectation,
    name: &str,
) -> Option<(Outcome, String)> {
    let skips = guest_files::read(&dir.join(files::SKIPS)).ok()?;
    let skip = skip_records(&skips).find(|s| display_name(&s.test) == name)?;
    let probes = read_probes(dir).unwrap_or_default();
    Some(judge_skip_record(&skip, exp, &probes))
}

fn skip_records(skips_jsonl: &str) -> impl Iterator<Item = SkipRecord> + '_ {
    skips_jsonl
        .lines()
        .filter_map(|l| serde_json::from_str::<SkipRecord>(l).ok())
}

/// A skip stays a skip unless it is for a feature the kernel must have (`expect::judge_skip`).
fn judge_skip_record(
    skip: &SkipRecord,
    exp: &Expectation,
    probes: &BTreeMap<String, Probe>,
) -> (Outcome, String) {
    match &skip.feature {
        Some(f) => expect::judge_skip(exp, probes, f, &skip.reason),
        None => (Outcome::Skip, skip.reason.clone()),
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
    let s = guest_files::read(&dir.join(name)).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The last lines of a file the guest wrote, on one line.
fn tail_of(dir: &Path, name: &str) -> String {
    let text = read_fact(dir, name).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(5).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// Reads what binary `name` left in the shared directory.
pub fn read_binary(dir: &Path, name: &str) -> BinaryOutput {
    BinaryOutput {
        name: name.to_string(),
        list: guest_files::read(&dir.join(files::list(name))).ok(),
        jsonl: guest_files::read(&dir.join(format!("{name}.jsonl"))).unwrap_or_default(),
        rc: read_fact(dir, &format!("{name}.rc")).and_then(|s| s.parse().ok()),
        stderr_tail: tail_of(dir, &format!("{name}.stderr")),
    }
}

/// Collects every binary's results from the shared directory, judged against `exp`, plus the
/// probes' own entries (`expect::check`); `vm_ending` says why the VM stopped, if it died.
fn collect_tests(
    dir: &Path,
    binaries: &[String],
    exp: &Expectation,
    probes: &BTreeMap<String, Probe>,
    vm_ending: &str,
) -> Vec<TestResult> {
    let mut tests = Vec::new();
    for b in binaries {
        tests.extend(parse_binary(&read_binary(dir, b), vm_ending));
    }
    let skips = guest_files::read(&dir.join(files::SKIPS)).unwrap_or_default();
    apply_skips(&mut tests, &skips, exp, probes);
    tests
}

/// What the guest left in the shared directory, judged against what the kernel must have.
pub struct Verdict {
    pub probes: BTreeMap<String, Probe>,
    pub mismatches: Vec<Mismatch>,
    /// Tests and the failing probe, binary and guest entries, sorted by name.
    pub tests: Vec<TestResult>,
}

/// Judges a run: the probes (`judge_features`), every binary's tests (`collect_tests`), and a
/// failing entry when the VM ended normally (`vm_ending` is `None`) but no test ran.
pub fn judge(
    dir: &Path,
    binaries: &[String],
    exp: &Expectation,
    vm_ending: Option<&str>,
    filter: Option<&str>,
) -> Verdict {
    let (probes, mismatches, mut tests) = judge_features(dir, exp);
    tests.extend(collect_tests(
        dir,
        binaries,
        exp,
        &probes,
        vm_ending.unwrap_or("the VM exited"),
    ));
    if vm_ending.is_none() && !tests.iter().any(|t| is_test(&t.name)) {
        tests.push(no_test_ran(filter));
    }
    tests.sort_by(|a, b| a.name.cmp(&b.name));
    Verdict {
        probes,
        mismatches,
        tests,
    }
}

/// Entries that are not tests: `feature:<name>` (a probe), `binary:<name>` (a test binary or
/// the probe), `guest:<what>` (a file or step of the guest script),
/// `kernel:<kind>` (a splat in the kernel log).
const ENTRY_KINDS: [&str; 4] = ["feature:", "binary:", "guest:", "kernel:"];

/// Whether a report entry is a test (not a probe, binary or guest entry).
fn is_test(name: &str) -> bool {
    !ENTRY_KINDS.iter().any(|k| name.starts_with(k))
}

/// The failing entry of a run in which no test ran.
fn no_test_ran(filter: Option<&str>) -> TestResult {
    failed(
        "guest:tests".into(),
        match filter {
            Some(f) => format!("no test name contains `{f}`: nothing ran"),
            None => "the guest ran no test".into(),
        },
    )
}

/// The kernel's health in the verdict: each splat that no allow entry excuses fails the tests
/// running when it was logged (its text attached) and a `kernel:<kind>` entry that names them
/// or the phase. Names in `splats` (as the guest marked them) become the report's through
/// `report_name` (`display_name` for `vm-test`).
/// A kernel log that stops before the guest script's last marker (the VM ended normally) is a
/// failing `guest:kernel.log` entry: splats may be missing.
pub fn apply_kernel_health(
    tests: &mut Vec<TestResult>,
    health: &mut Health,
    vm_ok: bool,
    report_name: fn(&str) -> String,
) {
    if vm_ok && !health.complete {
        tests.push(failed(
            format!("guest:{}", files::KERNEL_LOG),
            "the kernel log stops before the guest script's end (not written, or cut at its \
             bound of 8192 records): splats may be missing"
                .into(),
        ));
    }
    let splats = &mut health.splats;
    for s in splats.iter_mut() {
        s.running = s.running.iter().map(|n| report_name(n)).collect();
    }
    let mut kinds: BTreeMap<&str, Vec<&Judged>> = BTreeMap::new();
    for s in splats.iter().filter(|s| s.allowed.is_none()) {
        kinds.entry(s.kind.name()).or_default().push(s);
        for t in tests.iter_mut().filter(|t| s.running.contains(&t.name)) {
            if t.outcome != Outcome::Fail {
                t.outcome = Outcome::Fail;
                t.reason = Some(format!(
                    "the kernel logged a {} while this test ran: {}",
                    s.kind.name(),
                    s.headline()
                ));
            }
            t.kernel_splats.push(s.text.clone());
        }
    }
    for (kind, all) in kinds {
        let more = match all.len() {
            1 => String::new(),
            n => format!(" (and {} more {kind} splats)", n - 1),
        };
        let mut entry = failed(
            format!("kernel:{kind}"),
            format!("{}{more}", all[0].describe()),
        );
        entry.kernel_splats = all.iter().map(|s| s.text.clone()).collect();
        tests.push(entry);
    }
    tests.sort_by(|a, b| a.name.cmp(&b.name));
}

/// Reads `features.json` as the probe binary wrote it; an error names what is wrong with it.
pub fn read_probes(dir: &Path) -> Result<BTreeMap<String, Probe>, String> {
    let path = dir.join(files::FEATURES);
    let text = guest_files::read(&path)
        .map_err(|e| format!("the feature probe wrote no {}: {e}", files::FEATURES))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not valid: {e}", files::FEATURES))
}

/// The feature verdict of a run: probes, their entries and mismatches. A missing or unreadable
/// `features.json`, or a probe binary that failed, is a failing entry itself.
fn judge_features(
    dir: &Path,
    exp: &Expectation,
) -> (BTreeMap<String, Probe>, Vec<Mismatch>, Vec<TestResult>) {
    let mut entries = Vec::new();
    let rc = read_fact(dir, files::PROBE_RC);
    if rc.as_deref() != Some("0") {
        entries.push(failed(
            "guest:feature-probe".into(),
            format!(
                "the feature probe {}; stderr: {}",
                rc.and_then(|s| s.parse().ok())
                    .map_or("never finished".into(), |rc| format!(
                        "ended with {}",
                        status_words(rc)
                    )),
                tail_of(dir, files::PROBE_STDERR)
            ),
        ));
    }
    let probes = match read_probes(dir) {
        Ok(p) => p,
        Err(e) => {
            entries.push(failed(format!("guest:{}", files::FEATURES), e));
            return (BTreeMap::new(), vec![], entries);
        }
    };
    let (mismatches, more) = expect::check(exp, &probes);
    entries.extend(more);
    (probes, mismatches, entries)
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
        if !t.kernel_splats.is_empty() {
            case.set_system_err(t.kernel_splats.join("\n"));
        }
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

    const LIST: &str = "tests::bloom::a: test\ntests::bloom::b: test\ntests::bloom::c: test\n\
                        tests::bloom::d: test\ntests::bloom::e: test\n";

    fn binary(jsonl: &str, rc: Option<i32>, stderr_tail: &str) -> BinaryOutput {
        BinaryOutput {
            name: "bpfvm_tests".into(),
            list: Some(LIST.into()),
            jsonl: jsonl.into(),
            rc,
            stderr_tail: stderr_tail.into(),
        }
    }

    fn by_name(r: &[TestResult]) -> HashMap<&str, &TestResult> {
        r.iter().map(|t| (t.name.as_str(), t)).collect()
    }

    #[test]
    fn parses_passes_failures_and_a_crash() {
        let r = parse_binary(&binary(RUN, Some(134), "Aborted"), "");
        let by = by_name(&r);
        assert_eq!(by["bloom::a"].outcome, Outcome::Pass);
        assert_eq!(by["bloom::a"].duration_ms, 13);
        assert_eq!(by["bloom::b"].outcome, Outcome::Fail);
        assert_eq!(
            by["bloom::b"].reason.as_deref().unwrap(),
            "thread 'tests::bloom::b' (12) panicked at tests/src/x.rs:3:5:\nassertion failed: 1 == 2"
        );
        assert_eq!(by["bloom::d"].outcome, Outcome::Fail);
        assert_eq!(
            by["bloom::d"].reason.as_deref().unwrap(),
            "test process died (signal 6 (SIGABRT)) while this test ran; stderr: Aborted"
        );
        assert_eq!(by["bloom::e"].outcome, Outcome::Fail);
        assert!(
            by["bloom::e"]
                .reason
                .as_deref()
                .unwrap()
                .starts_with("not run: the test process died"),
            "{:?}",
            by["bloom::e"]
        );
        assert!(
            !by.contains_key("binary:bpfvm_tests"),
            "a test failed: no binary entry"
        );
    }

    #[test]
    fn a_non_zero_exit_with_no_failing_test_fails_the_binary() {
        let clean =
            "{ \"type\": \"test\", \"event\": \"started\", \"name\": \"tests::bloom::a\" }\n\
                     { \"type\": \"test\", \"name\": \"tests::bloom::a\", \"event\": \"ok\" }\n";
        let mut out = binary(clean, Some(3), "leaked fd | exiting");
        out.list = Some("tests::bloom::a: test\n".into());
        let r = parse_binary(&out, "");
        let by = by_name(&r);
        assert_eq!(by["bloom::a"].outcome, Outcome::Pass);
        assert_eq!(
            by["binary:bpfvm_tests"].reason.as_deref(),
            Some("test process died (exit status 3) with no failing test; stderr: leaked fd | exiting")
        );
        out.rc = Some(0);
        assert_eq!(
            parse_binary(&out, "").len(),
            1,
            "a clean run is its tests only"
        );
    }

    #[test]
    fn a_binary_that_never_ran_fails_every_listed_test_and_itself_without_a_list() {
        let r = parse_binary(
            &binary("", None, ""),
            "the guest did not finish within 60 s",
        );
        assert_eq!(r.len(), 5);
        assert!(r.iter().all(|t| t.outcome == Outcome::Fail
            && t.reason
                .as_deref()
                .unwrap()
                .contains("did not finish within 60 s")));
        let mut out = binary("", Some(101), "error: unexpected argument");
        out.list = None;
        let r = parse_binary(&out, "");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].name, "binary:bpfvm_tests");
        assert!(r[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("unexpected argument"));
    }

    #[test]
    fn statuses_read_as_signals_or_exit_codes() {
        assert_eq!(status_words(134), "signal 6 (SIGABRT)");
        assert_eq!(status_words(137), "signal 9 (SIGKILL)");
        assert_eq!(status_words(101), "exit status 101");
        assert_eq!(status_words(3), "exit status 3");
    }

    fn exp(release: &str) -> Expectation {
        Expectation::for_release(release).unwrap()
    }

    #[test]
    fn recorded_skips_turn_passes_into_skips_but_never_hide_failures() {
        let mut r = parse_binary(&binary(RUN, Some(101), ""), "");
        apply_skips(
            &mut r,
            "{\"test\":\"tests::bloom::c\",\"reason\":\"no kallsyms\"}\n\
             {\"test\":\"tests::bloom::b\",\"reason\":\"x\"}\n",
            &exp("6.1.0-57-cloud-amd64"),
            &BTreeMap::new(),
        );
        let s = summarize(&r);
        assert_eq!((s.passed, s.failed, s.skipped), (1, 3, 1));
        let c = r.iter().find(|t| t.name == "bloom::c").unwrap();
        assert_eq!(c.reason.as_deref(), Some("no kallsyms"));
    }

    #[test]
    fn live_progress_judges_a_pass_by_its_skip_record_as_the_report_will() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join(files::SKIPS),
            "{\"test\":\"tests::bloom::a\",\"reason\":\"no bloom\",\"feature\":\"bloom_filter_map\"}\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join(files::FEATURES),
            r#"{"bloom_filter_map":{"answer":"absent","detail":"EINVAL from BPF_MAP_CREATE"}}"#,
        )
        .unwrap();
        let old = exp("5.10.0-46-cloud-amd64");
        let new = exp("6.1.0-57-cloud-amd64");
        assert_eq!(judge_live_pass(d.path(), &old, "bloom::b"), None);
        let (o, _) = judge_live_pass(d.path(), &old, "bloom::a").unwrap();
        assert_eq!(o, Outcome::Skip);
        let (o, why) = judge_live_pass(d.path(), &new, "bloom::a").unwrap();
        assert_eq!(o, Outcome::Fail);
        assert!(why.contains("bloom_filter_map"), "{why}");
        assert!(
            why.contains("EINVAL from BPF_MAP_CREATE"),
            "the probe's answer: {why}"
        );
    }

    #[test]
    fn a_skip_for_an_expected_feature_is_a_failure_naming_it() {
        let skips = "{\"test\":\"tests::bloom::a\",\"reason\":\"bloom filter map not supported by this kernel\",\"feature\":\"bloom_filter_map\"}\n\
                     {\"test\":\"tests::bloom::c\",\"reason\":\"bloom filter map not supported by this kernel\",\"feature\":\"bloom_filter_map\"}\n";
        let probes = BTreeMap::from([(
            "bloom_filter_map".to_string(),
            Probe::Absent("EINVAL from BPF_MAP_CREATE".into()),
        )]);
        let mut r = parse_binary(&binary(RUN, Some(101), ""), "");
        apply_skips(&mut r, skips, &exp("6.1.0-57-cloud-amd64"), &probes);
        let a = r.iter().find(|t| t.name == "bloom::a").unwrap();
        assert_eq!(a.outcome, Outcome::Fail);
        assert!(a.reason.as_deref().unwrap().starts_with(
            "6.1 should have bloom_filter_map (since 5.16), but the probe says: absent (EINVAL from BPF_MAP_CREATE)"
        ));
        let mut r = parse_binary(&binary(RUN, Some(101), ""), "");
        apply_skips(&mut r, skips, &exp("5.10.0-46-cloud-amd64"), &probes);
        let a = r.iter().find(|t| t.name == "bloom::a").unwrap();
        assert_eq!(a.outcome, Outcome::Skip);
    }

    #[test]
    fn features_json_missing_or_corrupt_or_a_failed_probe_fail_the_run() {
        let d = tempfile::tempdir().unwrap();
        let e = exp("6.1.0-57-cloud-amd64");
        let (_, _, entries) = judge_features(d.path(), &e);
        let names: Vec<&str> = entries.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["guest:feature-probe", "guest:features.json"]);
        std::fs::write(d.path().join(files::PROBE_RC), "0\n").unwrap();
        std::fs::write(d.path().join(files::FEATURES), "{\"bloom_filter_map\": tr").unwrap();
        let (_, _, entries) = judge_features(d.path(), &e);
        assert_eq!(entries.len(), 1);
        assert!(entries[0].reason.as_deref().unwrap().contains("not valid"));
        // The old format (name -> bool) is not an answer either.
        std::fs::write(
            d.path().join(files::FEATURES),
            "{\"bloom_filter_map\": true}",
        )
        .unwrap();
        assert_eq!(judge_features(d.path(), &e).2.len(), 1);
    }

    /// What `vm-test` made of real guest output, recorded on 6.1 with a defect planted by hand
    /// (vm/testdata/<kernel>-<defect>/; the plants were never committed).
    fn recorded(defect: &str, ending: Option<&str>) -> (Vec<TestResult>, Vec<Mismatch>) {
        let dir = crate::paths::workspace_root()
            .join("vm/testdata")
            .join(format!("6.1-{defect}"));
        assert!(dir.is_dir(), "{}", dir.display());
        let e = Expectation::for_pin(&crate::kernels::resolve("6.1").unwrap()).unwrap();
        let v = judge(&dir, &["bpfvm_tests".into()], &e, ending, None);
        (v.tests, v.mismatches)
    }

    fn failure_of<'a>(tests: &'a [TestResult], name: &str) -> &'a str {
        let t = tests
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no {name} in {tests:#?}"));
        assert_eq!(t.outcome, Outcome::Fail, "{t:?}");
        t.reason.as_deref().unwrap()
    }

    #[test]
    fn recorded_broken_bloom_probe_fails_the_feature_and_the_skipped_test() {
        let (tests, mismatches) = recorded("broken-bloom-probe", None);
        let msg = "6.1 should have bloom_filter_map (since 5.16), but the probe says: absent";
        assert!(failure_of(&tests, "feature:bloom_filter_map").starts_with(msg));
        assert!(failure_of(&tests, "bloom_filter::lookup_miss_is_enoent").starts_with(msg));
        assert_eq!(mismatches.len(), 1);
        assert_eq!(summarize(&tests).failed, 2);
    }

    #[test]
    fn recorded_panic_fails_the_test_with_its_message() {
        let (tests, _) = recorded("panic", None);
        assert!(failure_of(&tests, "smoke::planted_panic").contains("planted panic"));
        assert_eq!(summarize(&tests).failed, 1);
    }

    #[test]
    fn recorded_abort_fails_the_running_test_with_the_signal() {
        let (tests, _) = recorded("abort", None);
        assert!(failure_of(&tests, "smoke::planted_abort")
            .starts_with("test process died (signal 6 (SIGABRT)) while this test ran"));
        assert_eq!(summarize(&tests).failed, 1);
    }

    #[test]
    fn recorded_exit_3_fails_every_test_that_was_running() {
        let (tests, _) = recorded("exit-3", None);
        for name in [
            "smoke::planted_exit_3",
            "smoke::planted_exit_slow_neighbour",
        ] {
            assert!(
                failure_of(&tests, name)
                    .starts_with("test process died (exit status 3) while this test ran"),
                "{name}"
            );
        }
    }

    #[test]
    fn recorded_hang_past_the_timeout_fails_the_test_it_was_in() {
        let ending = "the guest did not finish within 75 s (a hang, or raise --timeout)";
        let (tests, _) = recorded("hang", Some(ending));
        assert_eq!(
            failure_of(&tests, "smoke::planted_hang"),
            format!("test process never finished: {ending} while this test ran")
        );
    }

    fn report(tests: Vec<TestResult>) -> Report {
        Report {
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
            probes: BTreeMap::new(),
            expected_features: Some(exp("6.1.0-57-cloud-amd64")),
            feature_mismatches: vec![Mismatch {
                feature: "bloom_filter_map".into(),
                since: "5.16".into(),
                probe: "absent (EINVAL)".into(),
                message: "6.1 should have bloom_filter_map (since 5.16), but the probe says: absent (EINVAL)".into(),
            }],
            kernel_splats: vec![],
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
        }
    }

    #[test]
    fn junit_marks_skips_and_failures() {
        let report = report(parse_binary(&binary(RUN, Some(101), ""), ""));
        let table = summary_table(&report);
        assert!(
            table.contains(
                "time: build 12.0 s, boot 6.0 s\nslowest: bloom::b 0.5 s, bloom::a 0.0 s"
            ),
            "{table}"
        );
        assert!(
            table.contains("FEATURE MISMATCH: 6.1 should have bloom_filter_map"),
            "{table}"
        );
        assert!(
            table.contains(
                "expected features (release 6.1.0-57-cloud-amd64 (mainline 6.1)): batch_ops_hash,"
            ),
            "{table}"
        );
        let matrix = matrix_table(&[report.clone(), Report::not_run("5.10", "offline")]);
        assert!(matrix.contains("bloom::b"), "{matrix}");
        assert!(matrix.contains("2/3/0"), "{matrix}");
        assert!(matrix.contains("FAIL: 3 tests failed: "), "{matrix}");
        assert!(matrix.contains("FAIL: not run: offline"), "{matrix}");
        let xml = junit(&report).unwrap();
        assert!(xml.contains("<failure"), "{xml}");
        assert!(!report.ok());
        assert!(summary_table(&report).contains("2 passed, 3 failed, 0 skipped"));
    }

    fn passed(name: &str) -> TestResult {
        TestResult {
            name: name.into(),
            outcome: Outcome::Pass,
            reason: None,
            duration_ms: 1,
            kernel_splats: vec![],
        }
    }

    #[test]
    fn a_splat_fails_the_tests_it_ran_during_and_its_kernel_entry_names_them() {
        let log = std::fs::read_to_string(
            crate::paths::workspace_root().join("vm/testdata/health/two-tests.kmsg"),
        )
        .unwrap();
        let mut health = crate::health::judge(&log, &Default::default(), "6.1", None);
        let mut tests = vec![
            passed("bloom_filter::a"),
            passed("batch::hash"),
            passed("smoke::c"),
        ];
        apply_kernel_health(&mut tests, &mut health, true, display_name);
        let by = by_name(&tests);
        assert_eq!(by["smoke::c"].outcome, Outcome::Pass);
        for name in ["bloom_filter::a", "batch::hash"] {
            assert_eq!(by[name].outcome, Outcome::Fail);
            assert!(by[name].reason.as_deref().unwrap().starts_with(
                "the kernel logged a warning while this test ran: WARNING: CPU: 1 PID: 214 at kernel/bpf/syscall.c:512"
            ));
            assert!(by[name].kernel_splats[0].contains("---[ end trace"));
        }
        assert!(by["kernel:warning"].reason.as_deref().unwrap().starts_with(
            "kernel warning while tests ran in parallel: batch::hash, bloom_filter::a: WARNING:"
        ));
        assert_eq!(
            by["kernel:taint"].reason.as_deref(),
            Some("kernel taint while batch::hash ran: new taint flags: W (TAINT_WARN: the kernel issued a warning)")
        );
        assert!(
            by["guest:kernel.log"]
                .reason
                .as_deref()
                .unwrap()
                .contains("splats may be missing"),
            "the fixture has no `phase end`"
        );
        let mut r = report(tests);
        r.kernel_splats = health.splats;
        let xml = junit(&r).unwrap();
        assert!(
            xml.contains("<system-err>------------[ cut here ]------------"),
            "{xml}"
        );
        assert!(
            summary_table(&r).contains("KERNEL SPLAT: kernel warning while tests ran in parallel")
        );
        r.kernel_splats[0].allowed = Some("upstream 0123abcd".into());
        assert!(summary_table(&r).contains(
            "allowed kernel warning while tests ran in parallel: batch::hash, bloom_filter::a: WARNING: CPU: 1 PID: 214 at kernel/bpf/syscall.c:512 map_check_btf+0x1a2/0x1e0 (kernels/splats/allowed.toml: upstream 0123abcd)"
        ));
    }

    #[test]
    fn an_allowed_splat_fails_nothing() {
        let log = std::fs::read_to_string(
            crate::paths::workspace_root().join("vm/testdata/health/two-tests.kmsg"),
        )
        .unwrap()
            + "12,800,9900040,-;bpfvm: phase end\n";
        let allow = crate::health::allow::parse(
            "[[allow]]\nregex = '.'\nkernels = [\"6.1\"]\nreason = \"r\"\n",
        )
        .unwrap();
        let mut health = crate::health::judge(&log, &allow, "6.1", None);
        let mut tests = vec![passed("bloom_filter::a"), passed("batch::hash")];
        apply_kernel_health(&mut tests, &mut health, true, display_name);
        assert_eq!(summarize(&tests).failed, 0, "{tests:#?}");
        assert!(tests.iter().all(|t| t.kernel_splats.is_empty()));
        assert_eq!(health.splats.len(), 2);
    }

    #[test]
    fn a_run_with_no_test_fails() {
        let mut r = report(vec![]);
        assert!(!r.ok());
        r.tests.push(TestResult {
            name: "a".into(),
            outcome: Outcome::Pass,
            reason: None,
            duration_ms: 1,
            kernel_splats: vec![],
        });
        r.summary = summarize(&r.tests);
        assert!(r.ok());
        assert!(!is_test("feature:bloom_filter_map") && is_test("bloom_filter::x"));
        assert_eq!(no_test_ran(None).outcome, Outcome::Fail);
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
        r.tests = parse_binary(&binary(RUN, Some(0), ""), "");
        r.summary = summarize(&r.tests);
        assert!(
            r.why_failed().unwrap().starts_with("3 tests failed: "),
            "{:?}",
            r.why_failed()
        );
        r.tests.retain(|t| t.outcome == Outcome::Pass);
        r.summary = summarize(&r.tests);
        assert_eq!(r.why_failed(), None);
        assert!(r.ok());
    }
}
