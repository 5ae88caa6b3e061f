//! Turns what the guest wrote into verdicts: each test's outcome, skips judged against what the
//! kernel must have (`expect`), missing or crashed binaries, and the kernel's health.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use bpfvm_common::protocol::{SkipRecord, NOT_JUDGED};

use super::collect::{
    display_name, failed, parse_binary, read_binary, read_fact, read_probes, skip_records,
    status_words, tail_of,
};
use super::model::{Outcome, TestResult};
use crate::kernel::expect::{self, Expectation, Mismatch, Probe};
use crate::machine::guest::files;
use crate::results::health::{Health, Judged};
use crate::support::guest_files;

/// Turns passes that recorded a skip into skips with their reason, or into failures when the
/// feature they skipped for is one the kernel must have (`expect::judge_skip`).
pub fn apply_skips(
    results: &mut Vec<TestResult>,
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
    let unmatched: Vec<String> = skips
        .iter()
        .filter(|(name, _)| !results.iter().any(|r| &r.name == *name))
        .map(|(name, s)| format!("`{name}` ({})", s.reason))
        .collect();
    if !unmatched.is_empty() {
        unmatched_skips(results, unmatched);
    }
}

/// Skip records that name no test: the test that skipped passes unnoticed, so the run
/// fails. A skip recorded from a thread the test spawned is named after that thread
/// (`<unknown test>` for an unnamed one), not the test.
fn unmatched_skips(results: &mut Vec<TestResult>, mut names: Vec<String>) {
    names.sort();
    results.push(failed(
        format!("guest:{}", files::SKIPS),
        format!(
            "skips recorded for no test that ran: {}; record a skip from the test's own \
             thread (its name is the test's)",
            names.join(", ")
        ),
    ));
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

/// A skip stays a skip unless it is for a feature the kernel must have (`expect::judge_skip`).
pub(super) fn judge_skip_record(
    skip: &SkipRecord,
    exp: &Expectation,
    probes: &BTreeMap<String, Probe>,
) -> (Outcome, String) {
    match &skip.feature {
        Some(f) => match expect::judge_skip(exp, probes, f, &skip.reason) {
            Ok(reason) => (Outcome::Skip, reason),
            Err(reason) => (Outcome::Fail, reason),
        },
        None => (Outcome::Skip, skip.reason.clone()),
    }
}

/// Collects every binary's results from the shared directory, judged against `exp`, plus the
/// probes' own entries (`expect::check`); `vm_ending` says why the VM stopped, if it died.
pub(super) fn collect_tests(
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
pub(super) const ENTRY_KINDS: [&str; 4] = ["feature:", "binary:", "guest:", "kernel:"];

/// Whether a report entry is a test (not a probe, binary or guest entry).
pub(crate) fn is_test(name: &str) -> bool {
    !ENTRY_KINDS.iter().any(|k| name.starts_with(k))
}

/// The failing entry of a run in which no test ran.
pub(crate) fn no_test_ran(filter: Option<&str>) -> TestResult {
    failed(
        "guest:tests".into(),
        match filter {
            Some(f) => format!("no test name contains `{f}`: nothing ran"),
            None => "the guest ran no test".into(),
        },
    )
}

/// The one failing entry of a run whose VM died before the guest script started (a qemu
/// crash, a panic at boot): nothing of the guest ran, so the probe's and each binary's missing
/// files would only repeat it.
pub fn never_started(vm_ending: &str) -> TestResult {
    failed(
        "guest:boot".into(),
        format!("{vm_ending}; the guest script never started, so no probe or test ran"),
    )
}

/// The kernel's health in the verdict: each splat that no allow entry excuses fails the tests
/// running when it was logged (its text attached) and a `kernel:<kind>` entry that names them
/// or the phase. Names in `health` (as the guest marked them) become the report's through
/// `report_name` (`display_name` for `vm-test`).
/// A kernel log that could not be read, lost records on the way, or stops before the guest
/// script's last marker (the VM ended normally), is a failing `guest:kernel.log` entry: splats
/// may be missing (`log_losses`). A guest that booted another release than asked for fails `guest:release`.
pub fn apply_kernel_health(
    tests: &mut Vec<TestResult>,
    health: &mut Health,
    vm_ok: bool,
    report_name: fn(&str) -> String,
) {
    log_losses(tests, health, vm_ok, report_name);
    if let Some(why) = &health.wrong_release {
        tests.push(failed("guest:release".into(), why.clone()));
    }
    let splats = &mut health.splats;
    for s in splats.iter_mut() {
        s.running = s.running.iter().map(|n| report_name(n)).collect();
    }
    // The splats that blame the kernel first: a test's first reason is the one it keeps.
    let mut unexcused: Vec<&Judged> = splats.iter().filter(|s| s.allowed.is_none()).collect();
    unexcused.sort_by_key(|s| s.host_clock.is_some());
    let mut kinds: BTreeMap<String, Vec<&Judged>> = BTreeMap::new();
    for s in unexcused {
        let (key, not_judged) = match &s.host_clock {
            None => (s.kind.name().to_string(), String::new()),
            Some(why) => (
                format!("{}:host-clock", s.kind.name()),
                format!("{NOT_JUDGED} {why}; "),
            ),
        };
        kinds.entry(key).or_default().push(s);
        for t in tests.iter_mut().filter(|t| s.running.contains(&t.name)) {
            fail(
                t,
                format!(
                    "{not_judged}the kernel logged a {} while this test ran: {}",
                    s.kind.name(),
                    s.headline()
                ),
            );
            t.kernel_splats.push(s.text.clone());
        }
    }
    for (kind, all) in kinds {
        let more = match all.len() {
            1 => String::new(),
            n => format!(" (and {} more {} splats)", n - 1, all[0].kind.name()),
        };
        let not_judged = match &all[0].host_clock {
            Some(why) => format!("{NOT_JUDGED} {why}; "),
            None => String::new(),
        };
        let mut entry = failed(
            format!("kernel:{kind}"),
            format!("{not_judged}{}{more}", all[0].describe()),
        );
        entry.kernel_splats = all.iter().map(|s| s.text.clone()).collect();
        tests.push(entry);
    }
    tests.sort_by(|a, b| a.name.cmp(&b.name));
}

/// Fails `t` with `reason` unless it failed already (its first reason stays).
fn fail(t: &mut TestResult, reason: String) {
    if t.outcome != Outcome::Fail {
        t.outcome = Outcome::Fail;
        t.reason = Some(reason);
    }
}

/// The kernel log's losses in the verdict: one `guest:kernel.log` entry naming each gap (and
/// the log's early end), and each test that ran across a gap failed, as are the tests with no
/// marker when a gap may hold tests' markers (they may have run inside it), even a gap that
/// began before the tests phase and swallowed its marker.
fn log_losses(
    tests: &mut Vec<TestResult>,
    health: &Health,
    vm_ok: bool,
    report_name: fn(&str) -> String,
) {
    let mut why: Vec<String> = health.unread.iter().cloned().collect();
    why.extend(health.lost.iter().map(|l| l.describe()));
    if vm_ok && !health.complete {
        why.push(format!(
            "the kernel log stops before the guest script's end (not written, or cut at its \
             bound of {} MiB)",
            guest_files::MAX_FILE >> 20
        ));
    }
    if why.is_empty() {
        return;
    }
    let marked: Vec<String> = health.marked.iter().map(|n| report_name(n)).collect();
    let in_tests: Vec<String> = health
        .lost
        .iter()
        .filter(|l| l.may_hold_tests)
        .map(|l| l.gap.describe())
        .collect();
    for l in &health.lost {
        let running: Vec<String> = l.running.iter().map(|n| report_name(n)).collect();
        for t in tests.iter_mut().filter(|t| running.contains(&t.name)) {
            fail(
                t,
                format!(
                    "the kernel log lost records while this test ran ({}): a splat may be \
                     missing",
                    l.gap.describe()
                ),
            );
        }
    }
    if !in_tests.is_empty() {
        for t in tests
            .iter_mut()
            .filter(|t| is_test(&t.name) && !marked.contains(&t.name))
        {
            fail(
                t,
                format!(
                    "the kernel log lost records that may hold the tests' markers ({}) and \
                     holds no marker of this test: it may have run inside the gap, a splat \
                     may be missing",
                    in_tests.join("; ")
                ),
            );
        }
    }
    tests.push(failed(
        format!("guest:{}", files::KERNEL_LOG),
        format!("{}: splats may be missing", why.join("; ")),
    ));
}

/// The feature verdict of a run: probes, their entries and mismatches. A missing or unreadable
/// `features.json`, or a probe binary that failed, is a failing entry itself.
pub(super) fn judge_features(
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
    entries.extend(more.into_iter().map(|f| failed(f.entry, f.reason)));
    (probes, mismatches, entries)
}
