//! A run's verdict: the kernel log judged, the report made and written, the exit status.
use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::machine::accel::Accel;
use crate::machine::guest;
use crate::machine::vng::{Ending, RunOutcome};
use crate::results::health::{self, allow::Allowlist, Health, Judged};
use crate::results::report::{
    self, AccelInfo, KernelInfo, Outcome, Report, Span, TestResult, Timings, VmEnding, VmInfo,
};
use crate::support::output::{Events, StepClock};
use crate::support::status::Status;

use super::boot::Booted;
use super::prepare::Prepared;

/// What differs between the test runs [`conclude`] judges.
pub(crate) struct TestRun<'a> {
    /// A test's name in the report from the one the guest marked in the kernel log.
    pub(crate) report_name: fn(&str) -> String,
    /// Whether the guest ran the verifier statistics step.
    pub(crate) verifier: bool,
    /// The filter that selected the tests, if any.
    pub(crate) filter: Option<&'a str>,
    /// Preparing and building, before the boot.
    pub(crate) timings: (Duration, Duration),
    /// The run's clock: its start and the host's steps.
    pub(crate) clock: &'a StepClock,
}

/// The one place a test run's verdict is made, for vm-test and `bpfvm test` alike, from the
/// entries the flow read from its guest files (`tests`): the kernel log (records lost, cut
/// short or unreadable; splats and taints blamed on the tests running), the release booted,
/// the verifier's statistics, the exit status; `fill` adds the flow's own fields before the
/// status is decided. Writes `report.json` and `junit.xml` into `out_dir` and keeps the guest's
/// files there.
pub(crate) fn conclude(
    p: &Prepared,
    booted: Booted,
    mut tests: Vec<TestResult>,
    run: &TestRun,
    allow: &Allowlist,
    events: &Events,
    fill: impl FnOnce(&mut Report),
) -> Result<Report> {
    let Booted {
        files,
        outcome,
        out_dir,
        started,
        ended,
    } = booted;
    let shared = files.shared.as_path();
    let vm_ok = outcome.ending == Ending::Exited(0);
    let release = report::read_fact(shared, guest::files::RELEASE);
    let mut health = kernel_health(shared, &out_dir, &outcome, allow, p, &release)?;
    let kernel_blamed = health.blames_the_kernel();
    report::apply_kernel_health(&mut tests, &mut health, vm_ok, run.report_name);
    let mut verifier_stats = vec![];
    if run.verifier {
        let (stats, failed) = crate::results::verifier::keep(shared, &out_dir);
        tests.extend(failed);
        verifier_stats = stats;
    }
    let (prepared, built) = run.timings;
    let mut timings = Timings::of(prepared, built, &outcome);
    timings.host_steps = run
        .clock
        .spans(started)
        .into_iter()
        .map(|(name, s)| Span { name, s })
        .collect();
    timings.guest_phases = Timings::guest_phases(&health.phases);
    let mut report = report_of(p, shared, release, &outcome, tests, health.splats, timings);
    report.verifier = verifier_stats;
    fill(&mut report);
    report.status = Some(test_run_status(
        &report,
        &outcome.ending,
        kernel_blamed,
        run.filter.is_some(),
    ));
    report.timings.report_s = Some(ended.elapsed().as_secs_f64());
    report.timings.wall_s = Some(run.clock.started().elapsed().as_secs_f64());
    report::write(&report, &out_dir)?;
    files.keep(&out_dir.join("guest"), events);
    if !vm_ok {
        events.warn(outcome.diagnosis());
    }
    // Failures of the run itself (no test ran, no probe answers) are easy to miss in the table.
    for t in report
        .tests
        .iter()
        .filter(|t| t.outcome == Outcome::Fail && t.name.starts_with("guest:"))
    {
        let why = t.reason.as_deref().unwrap_or("");
        events.warn(format!("{why} ({}; the run fails)", t.name));
    }
    Ok(report)
}

/// A test run's status from its `report` (every verdict in), how its VM ended, whether the
/// kernel log blames the kernel and whether a filter chose its tests.
pub(crate) fn test_run_status(
    report: &Report,
    ending: &Ending,
    kernel_blamed: bool,
    filtered: bool,
) -> Status {
    // A filter no test name contains judged nothing (a typo in a bisect's command must not
    // mark every commit bad).
    let nothing_matched = filtered && report.tests.iter().any(|t| t.name == "guest:tests");
    // So did a run whose only failures are tests that could not judge the kernel.
    match nothing_matched || report.only_not_judged() {
        true => Status::Stopped,
        false => run_status(ending, report.ok(), kernel_blamed),
    }
}

/// The status of a selftests boot whose last unit the watchdog stopped at the cap to run it
/// again first in the next boot (`flows::selftests::boots`): the stopped unit's verdict is
/// its retry's, so the boot is judged by its other verdicts as though its VM had ended there.
/// A splat no allow entry excuses, lost log records and every other failure stand.
pub(crate) fn status_before_a_retry(report: &Report, filtered: bool) -> Status {
    let mut rest = report.clone();
    rest.vm.ending = VmEnding::Exited;
    let blamed = report
        .kernel_splats
        .iter()
        .any(|s| s.allowed.is_none() && s.host_clock.is_none());
    test_run_status(&rest, &Ending::Exited(0), blamed, filtered)
}

/// What a boot that ended as `ending` established about its kernel, given whether every
/// verdict passed (`ok`) and whether the kernel log holds a splat no allow entry excuses
/// (`kernel_blamed`: evidence against the kernel, whatever else went wrong). A VM that ended
/// without the guest script's end and without the kernel saying why (qemu crashed or failed,
/// the timeout struck, the boot hung after its retry) judged nothing: the run stops a bisect
/// rather than blame the commit for the host.
pub fn run_status(ending: &Ending, ok: bool, kernel_blamed: bool) -> Status {
    match ending {
        // The guest script ended, the kernel panicked, the guest flooded its output or a test
        // outran its watchdog (it fails by name): the verdicts stand.
        Ending::Exited(_) | Ending::Panic | Ending::TooMuchOutput(_) | Ending::TestHung { .. } => {
            match ok {
                true => Status::Good,
                false => Status::Bad,
            }
        }
        _ if kernel_blamed => Status::Bad,
        _ => Status::Stopped,
    }
}

/// The guest's kernel log (`guest::files::KERNEL_LOG`), kept as `<dest>/kernel.log` whatever
/// the outcome (the console's tail when the guest's cannot be read, which fails a run whose
/// guest script ran: `health::guest_log`), judged ([`judge_kernel_log`]); and the release the
/// guest booted (`uname -r` as it recorded it) against `p`'s, for every flow.
pub(crate) fn kernel_health(
    shared: &Path,
    dest: &Path,
    outcome: &RunOutcome,
    allow: &Allowlist,
    p: &Prepared,
    release: &Option<String>,
) -> Result<Health> {
    let log = health::guest_log(
        read_kernel_log(shared),
        &outcome.console_tail,
        outcome.boot.is_some(),
    );
    std::fs::create_dir_all(dest)?;
    crate::support::fs::write_atomic(&dest.join(guest::files::KERNEL_LOG), log.text.as_bytes())?;
    let mut health = judge_kernel_log(&log.text, allow, &p.kernel.label, &p.accel, release);
    health.unread = log.unread;
    health.wrong_release = release
        .as_ref()
        .filter(|r| **r != p.kernel.bootable.release)
        .map(|r| {
            format!(
                "the guest booted {r}, not {} ({})",
                p.kernel.bootable.release, p.kernel.label
            )
        });
    Ok(health)
}

/// `kernel_log` of a boot of kernel `label` (its release as the guest recorded it) under
/// `accel`, judged by `vm::health` against `allow`: the one place every flow's log is judged,
/// under TCG by its rule for stall reports (`Health::under_tcg`: they judge nothing there).
pub fn judge_kernel_log(
    kernel_log: &str,
    allow: &Allowlist,
    label: &str,
    accel: &Accel,
    release: &Option<String>,
) -> Health {
    let mut health = health::judge(kernel_log, allow, label, release.as_deref());
    if !accel.is_kvm() {
        health.under_tcg();
    }
    health
}

/// The kernel log the guest copied (read as every guest file is: `guest_files`).
fn read_kernel_log(shared: &Path) -> std::io::Result<String> {
    crate::support::guest_files::read(&shared.join(guest::files::KERNEL_LOG))
}

/// The judgement of a boot that runs no test (a `bench-vm` boot), by the rules `vm-test`'s
/// boots are judged by (`kernel_health`, `report::apply_kernel_health`): the kernel log read
/// whole (no record lost, not cut short, readable), no splat that no allow entry excuses, and
/// the release asked for.
pub(crate) fn judge_boot(shared: &Path, outcome: &RunOutcome, p: &Prepared) -> Result<BootLog> {
    let mut health = boot_health(shared, outcome, p)?;
    Ok(boot_problems(
        &mut health,
        outcome.ending == Ending::Exited(0),
    ))
}

/// The kernel log of a boot that runs no test, with its allow entries and release: what
/// [`judge_boot`] judges.
pub(crate) fn boot_health(shared: &Path, outcome: &RunOutcome, p: &Prepared) -> Result<Health> {
    let allow = health::allow::load(&health::allow::path())?;
    let release = report::read_fact(shared, guest::files::RELEASE);
    kernel_health(shared, shared, outcome, &allow, p, &release)
}

/// What the kernel log of a boot that runs no test says ([`boot_problems`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BootLog {
    /// Each failing entry as `name: why`.
    pub(crate) problems: Vec<String>,
    /// A splat blames the kernel: evidence against it whatever else went wrong.
    pub(crate) blamed: bool,
    /// Every problem is one that judges nothing (a stall report under TCG:
    /// `report::only_not_judged`, as for a test run).
    pub(crate) judged_nothing: bool,
}

/// [`judge_boot`]'s verdict on a boot's kernel `health`.
pub(crate) fn boot_problems(health: &mut Health, vm_ok: bool) -> BootLog {
    let blamed = health.blames_the_kernel();
    let mut entries = Vec::new();
    report::apply_kernel_health(&mut entries, health, vm_ok, report::display_name);
    let problems = entries
        .iter()
        .filter(|e| e.outcome == Outcome::Fail)
        .map(|e| {
            let mut why = format!("{}: {}", e.name, e.reason.as_deref().unwrap_or(""));
            for text in &e.kernel_splats {
                why += &format!("\n{text}");
            }
            why
        })
        .collect();
    BootLog {
        problems,
        blamed,
        judged_nothing: report::only_not_judged(&entries),
    }
}

/// The report of one boot's `tests` on `p`'s kernel, with the facts the guest recorded in
/// `shared`; the probe fields are left empty (vm-test fills them from its verdict).
pub(crate) fn report_of(
    p: &Prepared,
    shared: &Path,
    release: Option<String>,
    outcome: &RunOutcome,
    tests: Vec<TestResult>,
    kernel_splats: Vec<Judged>,
    timings: Timings,
) -> Report {
    Report {
        kernel: KernelInfo {
            version: p.kernel.label.clone(),
            arch: p.kernel.arch,
            pinned_release: p.kernel.pinned_release.clone(),
            tree: p.kernel.built_from.clone(),
            release,
        },
        accel: AccelInfo::from(&p.accel),
        cmdline: report::read_fact(shared, guest::files::CMDLINE),
        spectre_v2: report::read_fact(shared, guest::files::SPECTRE_V2),
        features: Default::default(),
        probes: Default::default(),
        expected_features: None,
        feature_mismatches: vec![],
        kernel_splats,
        vm: VmInfo::of(outcome),
        timings,
        summary: report::summarize(&tests),
        tests,
        verifier: vec![],
        selftests: None,
        status: None,
        reused: vec![],
        piece: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bench boot is judged as a vm-test boot: records lost, a log cut short, another
    /// release, a splat each make it invalid, named; a clean log passes.
    #[test]
    fn a_bench_boot_with_a_gap_a_cut_log_or_another_release_is_invalid() {
        let allow = health::allow::parse("").unwrap();
        let judge = |log: &str, wrong: Option<&str>| {
            let mut h = health::judge(log, &allow, "6.1", None);
            h.wrong_release = wrong.map(str::to_string);
            let b = boot_problems(&mut h, true);
            (b.problems, b.blamed)
        };
        let clean = "12,0,0,-;bpfvm: phase bench\n12,1,1,-;x\n12,2,2,-;bpfvm: phase end\n";
        assert_eq!(judge(clean, None), (vec![], false));
        let gap = "12,0,0,-;bpfvm: phase bench\n12,9,9,-;x\n12,10,10,-;bpfvm: phase end\n";
        let (why, blamed) = judge(gap, None);
        assert!(why[0].starts_with("guest:kernel.log:"), "{why:?}");
        assert!(!blamed);
        let cut = "12,0,0,-;bpfvm: phase bench\n12,1,1,-;x\n";
        assert!(judge(cut, None).0[0].starts_with("guest:kernel.log:"));
        let other = judge(clean, Some("the guest booted 6.1.0-9, not 6.1.0-57 (6.1)"));
        assert_eq!(
            other.0,
            ["guest:release: the guest booted 6.1.0-9, not 6.1.0-57 (6.1)"]
        );
        let warn = "12,0,0,-;bpfvm: phase bench\n4,1,1,-;------------[ cut here ]------------\n\
                    4,2,2,-;WARNING: CPU: 0 PID: 9 at kernel/bpf/syscall.c:512 f+0x1/0x2\n\
                    4,3,3,-;---[ end trace 0000000000000000 ]---\n12,4,4,-;bpfvm: phase end\n";
        let (why, blamed) = judge(warn, None);
        assert!(blamed && why[0].starts_with("kernel:"), "{why:?}");
    }

    /// `git bisect run` reads 1 as "bad": only a run that judged the kernel says so.
    #[test]
    fn only_a_judged_kernel_is_bad_and_a_host_failure_stops() {
        let crashed = Ending::QemuCrashed("SIGABRT".into());
        assert_eq!(run_status(&crashed, false, false), Status::Stopped);
        assert_eq!(
            run_status(&crashed, false, true),
            Status::Bad,
            "a splat first"
        );
        let timeout = Ending::Timeout(Duration::from_secs(9));
        assert_eq!(run_status(&timeout, false, false), Status::Stopped);
        let hang = Ending::BootHang(Duration::from_secs(9));
        assert_eq!(run_status(&hang, false, false), Status::Stopped);
        assert_eq!(
            run_status(&Ending::VmFailed("x".into()), false, false),
            Status::Stopped
        );
        assert_eq!(run_status(&Ending::Panic, false, false), Status::Bad);
        assert_eq!(run_status(&Ending::Exited(0), true, false), Status::Good);
        assert_eq!(run_status(&Ending::Exited(0), false, false), Status::Bad);
        assert_eq!(Status::Stopped.code(), 255);
    }
}
