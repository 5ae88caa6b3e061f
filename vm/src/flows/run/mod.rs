//! The user-facing flows: `vm-run` (any command in the guest) and `vm-test` (the suite).
//! Each is the chain provision -> kernel -> accelerator -> build -> guest script -> vng -> report.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::domain::arch::Arch;
use crate::domain::options::{self, VmOptions};
use crate::kernel::choice::KernelChoice;
use crate::kernel::expect::{Expectation, Probe};
use crate::kernel::ready::{self, Ready};
use crate::machine::accel::{self, Accel};
use crate::machine::build;
use crate::machine::guest;
use crate::machine::own_root::{self, OwnRoot};
use crate::machine::provision::Tools;
use crate::machine::vng::{self, Ending, RunOutcome, VmSpec};
use crate::results::health::{self, allow::Allowlist, Health, Judged};
use crate::results::inventory;
use crate::results::plan::{self, Assigned, PieceId};
use crate::results::report::{
    self, AccelInfo, KernelInfo, Outcome, Report, Span, TestResult, Timings, VmInfo,
};
use crate::results::reuse::{self, Step};
use crate::support::output::{Events, Output, StepClock, TestProgress};
use crate::support::paths::target_dir;
use crate::support::status::Status;

/// The guest `vm-test` boots: twice the vCPUs, of which only `cpus` are brought online
/// (`maxcpus=`, `setup_max_cpus` in kernel/smp.c), so the guest has more possible than online
/// CPUs and a per-CPU value laid out by the online count fails the batch tests.
/// qemu's `-smp N,maxcpus=M` is not enough: 6.12 and 7.2 count no hotplug CPU from it
/// ("Allowing 2 present CPUs plus 0 hotplug CPUs"), nor does `possible_cpus=` raise it there.
/// The CPUs never brought up cost nothing under TCG.
fn with_offline_cpus(opts: &VmOptions) -> VmOptions {
    let mut vm = opts.clone();
    vm.append.push(format!("maxcpus={}", opts.cpus));
    vm.cpus = opts.cpus * 2;
    vm
}

/// A booted-to-be kernel: the tools, the kernel made ready and the accelerator chosen for it.
pub(crate) struct Prepared {
    pub tools: Tools,
    pub kernel: Ready,
    pub accel: Accel,
    /// The host directories a guest with its own root reads (`OwnRoot::reads`).
    pub guest_reads: Vec<PathBuf>,
    /// The per-test watchdog of the next boots (the kernel's selftests set one per boot).
    pub watchdog: Option<vng::Watchdog>,
}

/// [`prepare_any_arch`] for the commands that boot x86_64 kernels only: another
/// architecture's pin is refused before anything is fetched.
pub(crate) fn prepare(
    choice: &KernelChoice,
    opts: &VmOptions,
    events: &Events,
) -> Result<Prepared> {
    if let KernelChoice::Pin(pin) = choice {
        if pin.arch != Arch::X86_64 {
            bail!(
                "--arch {}: this command does not boot {} kernels yet (docs/arm64.md lists \
                 those that do)",
                pin.arch,
                pin.arch
            );
        }
    }
    prepare_any_arch(choice, opts, events)
}

/// Checks the VM options and the places bpfvm writes, makes `choice` ready to boot (checking
/// it before anything is installed) and chooses the accelerator.
pub(crate) fn prepare_any_arch(
    choice: &KernelChoice,
    opts: &VmOptions,
    events: &Events,
) -> Result<Prepared> {
    options::check(opts)?;
    accel::check(opts.accel, choice.arch())?;
    crate::support::fs::writable(&target_dir(), "the build directory", "CARGO_TARGET_DIR")?;
    crate::support::fs::writable(
        &crate::support::paths::cache_dir(),
        "the cache",
        "XDG_CACHE_HOME",
    )?;
    let (tools, kernel) = ready::ready(choice, events)?;
    events.step("choosing the accelerator");
    let accel = accel::decide(
        opts.accel,
        opts.tcg_thread,
        &kernel.bootable.vmlinuz,
        kernel.arch,
    )?;
    events.note(format!("accelerator: {}", accel.describe()));
    Ok(Prepared {
        tools,
        kernel,
        accel,
        guest_reads: vec![],
        watchdog: None,
    })
}

/// How long a boot may take to reach the guest script before it counts as hung. A TCG boot
/// takes 7-10 s here, about 30 s on a host busy with other builds.
pub(crate) const BOOT_TIMEOUT: Duration = Duration::from_secs(180);

/// Boots the VM; under TCG, a boot that panics or hangs before the guest script starts is
/// retried once (see [`retry_boot`]).
pub(crate) fn boot(
    p: &Prepared,
    opts: &VmOptions,
    rwdir: &Path,
    script: &Path,
    events: &Events,
) -> Result<RunOutcome> {
    let first = boot_once(p, opts, rwdir, script, events)?;
    if !retry_boot(&first, &p.accel, opts.retry) {
        return Ok(first);
    }
    events.warn(format!(
        "the boot failed before the guest script started; booting once more (a boot under \
         TCG on a busy host can hit a kernel race that says nothing about the tests; \
         --no-retry turns this off). The first attempt: {}",
        first.diagnosis()
    ));
    let mut second = boot_once(p, opts, rwdir, script, events)?;
    second.retries.push(first.as_failed_boot());
    Ok(second)
}

/// Whether to boot again: only under TCG, only for a panic or hang before the guest script
/// started (nothing of the user's ran), only once, and not with `--no-retry`.
///
/// Why TCG only: a starved vCPU under multi-threaded TCG can meet the int3 that live text
/// patching plants while a static key flips (`text_poke_bp`, arch/x86/kernel/alternative.c);
/// under KVM a boot failure is the kernel's own and is reported at once. What was tried to
/// prevent it instead, with figures: docs/tcg-boot-retry.md.
pub(crate) fn retry_boot(first: &RunOutcome, accel: &Accel, allowed: bool) -> bool {
    allowed && !accel.is_kvm() && first.retries.is_empty() && first.failed_before_start()
}

fn boot_once(
    p: &Prepared,
    opts: &VmOptions,
    rwdir: &Path,
    script: &Path,
    events: &Events,
) -> Result<RunOutcome> {
    let spec = vm_spec(p, opts, rwdir, script, BOOT_TIMEOUT.min(opts.timeout));
    events.step(format!(
        "booting {} under {}",
        p.kernel.bootable.release,
        p.accel.kind.name().to_uppercase()
    ));
    let outcome = vng::run(&spec, &p.tools.vng, &p.tools.path_prefix, events)?;
    let phases = match (outcome.boot, outcome.guest, outcome.shutdown()) {
        (Some(b), Some(g), Some(d)) => format!(
            " (boot {:.1} s, guest script {:.1} s, shutdown {:.1} s)",
            b.as_secs_f64(),
            g.as_secs_f64(),
            d.as_secs_f64()
        ),
        _ => String::new(),
    };
    events.note(format!(
        "VM finished in {:.1} s{phases}",
        outcome.elapsed.as_secs_f64()
    ));
    Ok(outcome)
}

/// The VM of `p`'s kernel with `opts`, sharing `rwdir` and running `script`: every flow's.
pub(crate) fn vm_spec(
    p: &Prepared,
    opts: &VmOptions,
    rwdir: &Path,
    script: &Path,
    boot_timeout: Duration,
) -> VmSpec {
    VmSpec {
        vmlinuz: p.kernel.bootable.vmlinuz.clone(),
        accel: p.accel.clone(),
        cpus: opts.cpus,
        memory: opts.memory.clone(),
        append: opts.append.clone(),
        rwdir: rwdir.to_path_buf(),
        script: script.to_path_buf(),
        timeout: opts.timeout,
        boot_timeout,
        qemu_opts: opts.qemu_opts.clone(),
        own_root: p.kernel.guest_root.as_ref().map(|root| OwnRoot {
            arch: p.kernel.arch,
            root: root.clone(),
            reads: own_root::outermost(&p.guest_reads),
        }),
        watchdog: p.watchdog.clone(),
    }
}

/// One run's files: a fresh directory under `parent` (two runs never share one) holding the
/// guest script and the `shared` directory the guest writes into.
pub(crate) struct RunDir {
    dir: tempfile::TempDir,
    pub shared: PathBuf,
    pub script: PathBuf,
}

impl RunDir {
    /// virtme-run 1.42 starts virtiofsd with `os.system(f"... --shared-dir {path} ...")`
    /// (`virtme/commands/run.py`, `VirtioFS.start`), unquoted: a shared directory whose path
    /// holds a space (a checkout in `my proj/`) splits there and the boot fails, and a symlink
    /// of a plain path to it mounts in the guest but fails every write (EIO, tried here). So
    /// when `parent` is not a plain path the run's files live under /tmp until
    /// [`RunDir::keep`] moves them.
    pub(crate) fn new(parent: &Path) -> Result<Self> {
        let base = if plain_path(parent) {
            parent
        } else {
            Path::new("/tmp")
        };
        std::fs::create_dir_all(base).with_context(|| format!("create {}", base.display()))?;
        let dir = tempfile::Builder::new()
            .prefix("bpfvm-run-")
            .tempdir_in(base)
            .with_context(|| format!("create a run directory in {}", base.display()))?;
        let shared = dir.path().join("shared");
        std::fs::create_dir_all(&shared)?;
        let script = dir.path().join("guest.sh");
        Ok(Self {
            dir,
            shared,
            script,
        })
    }

    /// Keeps the run's raw guest files (JSON events, stderr) at `dest`. When another run
    /// moved its files there at the same moment, this run's stay in their own directory.
    pub(crate) fn keep(self, dest: &Path, events: &Events) {
        let _ = std::fs::remove_dir_all(dest);
        if let Some(parent) = dest.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let kept = self.dir.keep();
        if let Err(e) = std::fs::rename(&kept, dest) {
            events.warn(format!(
                "guest files stay in {} (could not move them to {}: {e})",
                kept.display(),
                dest.display()
            ));
        }
    }
}

/// The run directory of a boot whose guest reads `reads` if it has a root of its own
/// (`vm-run` and `bpfvm exec` the current directory, `bpfvm test` the crate): under `parent`,
/// unless one of `reads` holds it. virtme-run mounts the writable directory before the
/// read-only ones, so a read directory holding `parent` (a checkout's `target/`) would hide
/// the run's shared directory: its files then live in the cache's `runs/`.
pub(crate) fn run_dir_reading(
    p: &mut Prepared,
    reads: Vec<PathBuf>,
    parent: &Path,
) -> Result<RunDir> {
    if p.kernel.guest_root.is_none() {
        return RunDir::new(parent);
    }
    let hidden = reads.iter().any(|r| parent.starts_with(r));
    p.guest_reads = reads;
    if hidden {
        RunDir::new(&crate::support::paths::cache_dir().join("runs"))
    } else {
        RunDir::new(parent)
    }
}

/// A path every layer under vng passes on as it is: letters, digits and `_ + / . -`.
fn plain_path(p: &Path) -> bool {
    p.to_str().is_some_and(|s| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_+/.-".contains(c))
    })
}

/// `vm-run`: runs `argv` as root in the guest from the current directory; returns how the VM
/// ended (the caller exits with the command's status) and the kernel's health, its log kept
/// as `target/vm-run/kernel.log`.
pub fn vm_run(
    kernel: &KernelChoice,
    opts: &VmOptions,
    argv: &[String],
    events: &Events,
) -> Result<(RunOutcome, Health)> {
    let allow = health::allow::load(&health::allow::path())?;
    let cwd = crate::support::paths::guest_cwd()?;
    let mut p = prepare_any_arch(kernel, opts, events)?;
    let parent = target_dir().join("vm-run");
    let files = run_dir_reading(&mut p, vec![cwd.clone()], &parent)?;
    guest::write(
        &files.script,
        &guest::command_script(&files.shared, &cwd, argv),
    )?;
    let outcome = boot(&p, opts, &files.shared, &files.script, events)?;
    let release = report::read_fact(&files.shared, guest::files::RELEASE);
    let health = kernel_health(&files.shared, &parent, &outcome, &allow, &p, &release)?;
    Ok((outcome, health))
}

/// `vm-test` options beyond the VM's.
#[derive(Debug, Clone)]
pub struct TestOptions {
    pub kernel: KernelChoice,
    pub vm: VmOptions,
    /// libtest's name filter (a substring of the test name).
    pub filter: Option<String>,
    /// Run only this piece of the suite's plan (`results::plan`), with the plan's hash the
    /// matrix was made from, if given (another plan cut here is an error).
    pub piece: Option<(PieceId, Option<String>)>,
}

/// The piece of the suite's plan `opts` asks for on its kernel.
fn suite_piece(opts: &TestOptions) -> Result<Option<Assigned>> {
    let Some((id, expected)) = &opts.piece else {
        return Ok(None);
    };
    let root = crate::support::paths::workspace_root();
    let kvm = opts.vm.accel == options::Choice::Kvm;
    let inputs = plan::Inputs::of(plan::Kind::Suite, &root, &opts.kernel, kvm)?;
    Ok(Some(Assigned::of(&inputs, *id, expected.as_deref())?))
}

/// `vm-test`: builds the BPF objects and the guest tests, boots once, runs every test binary,
/// and writes `target/vm-test/<kernel>/{report.json,junit.xml}`.
pub fn vm_test(opts: &TestOptions, events: &Events) -> Result<(Report, PathBuf)> {
    let clock = StepClock::start();
    let events = &clock.watch(events);
    let start = clock.started();
    let allow = health::allow::load(&health::allow::path())?;
    let piece = suite_piece(opts)?;
    let mut p = prepare_any_arch(&opts.kernel, &opts.vm, events)?;
    let prepared = start.elapsed();
    let ebpf_dir = build::build_ebpf(&p.tools.ebpf, events)?;
    let build::GuestBuild {
        tests: binaries,
        probe,
        verifier,
        dir: guest_dir,
    } = build::build_guest(&ebpf_dir, p.kernel.arch, &p.tools.ebpf, events)?;
    p.guest_reads = vec![guest_dir, ebpf_dir.clone()];
    let verifier = guest::VerifierRun {
        bin: verifier,
        objects: build::list_objects(&ebpf_dir)?,
    };

    let out_dir = target_dir().join("vm-test").join(match &piece {
        Some(a) => a.dir_name(&p.kernel.label),
        None => p.kernel.label.clone(),
    });
    let args = |binary: &str| match &piece {
        Some(a) => a.piece.libtest_args(binary),
        None => opts.filter.iter().cloned().collect(),
    };
    let files = RunDir::new(&out_dir)?;
    let vm = with_offline_cpus(&opts.vm);
    let facts = KnownFacts::find(&p, &vm, &probe, &verifier, &files.shared, events)?;
    guest::write(
        &files.script,
        &guest::test_script(
            &files.shared,
            &p.kernel.bootable.release,
            (!facts.reused(Step::Probe)).then_some(probe.as_path()),
            (!facts.reused(Step::Verifier)).then_some(&verifier),
            &binaries,
            &args,
        ),
    )?;
    let built = start.elapsed() - prepared;

    let booted = boot_tests(&p, &vm, files, &out_dir, events)?;
    let shared = booted.files.shared.clone();
    let names: Vec<String> = binaries.iter().map(|b| b.name.clone()).collect();
    let ending = booted.ending();
    let verdict = report::judge(
        &shared,
        &names,
        &p.kernel.expected,
        (!booted.vm_ok()).then_some(ending.as_str()),
        opts.filter.as_deref(),
    );
    let mut tests = match booted.outcome.boot {
        None if !booted.vm_ok() => vec![report::never_started(&ending)],
        _ => verdict.tests,
    };
    let selected = |binary: &str, test: &str| match &piece {
        Some(a) => a.piece.holds(binary, test),
        None => opts.filter.as_deref().is_none_or(|f| test.contains(f)),
    };
    inventory::check_suite(&mut tests, &shared, &names, &selected);
    let rules = TestRun {
        report_name: report::display_name,
        verifier: true,
        filter: opts.filter.as_deref(),
        timings: (prepared, built),
        clock: &clock,
    };
    let report = conclude(&p, booted, tests, &rules, &allow, events, |report| {
        report.features = verdict
            .probes
            .iter()
            .map(|(name, p)| (name.clone(), *p == Probe::Present))
            .collect();
        report.probes = verdict.probes;
        report.expected_features = Some(p.kernel.expected.clone());
        report.feature_mismatches = verdict.mismatches;
        report.reused = facts.reused_names();
        report.piece = piece.as_ref().map(Assigned::info);
    })?;
    if report.status == Some(Status::Good) {
        facts.keep(&out_dir.join("guest").join("shared"), events);
    }
    Ok((report, out_dir))
}

/// The probe's answers and the verifier's statistics a passing run kept for the same
/// binaries, objects and kernel (`results::reuse`): each step found is copied into the run's
/// shared directory and not run again; the others are kept after a run that passes.
struct KnownFacts {
    steps: Vec<(Step, PathBuf, bool)>,
}

impl KnownFacts {
    fn find(
        p: &Prepared,
        vm: &VmOptions,
        probe: &Path,
        verifier: &guest::VerifierRun,
        shared: &Path,
        events: &Events,
    ) -> Result<Self> {
        let kernel = reuse::Kernel::of(&p.kernel.bootable, vm.cpus, &vm.append)?;
        let mut verifier_inputs = vec![verifier.bin.clone()];
        verifier_inputs.extend(verifier.objects.iter().cloned());
        let mut steps = vec![];
        for (step, inputs) in [
            (Step::Probe, vec![probe.to_path_buf()]),
            (Step::Verifier, verifier_inputs),
        ] {
            let entry = reuse::entry(step, &kernel, &inputs)?;
            let reused = reuse::restore(step, &entry, shared)?;
            if reused {
                events.note(format!(
                    "{}: the answers of a passing run with the same binaries on this kernel \
                     ({})",
                    step.describe(),
                    entry.display()
                ));
            }
            steps.push((step, entry, reused));
        }
        Ok(Self { steps })
    }

    fn reused(&self, step: Step) -> bool {
        self.steps.iter().any(|(s, _, r)| *s == step && *r)
    }

    fn reused_names(&self) -> Vec<String> {
        let names = self.steps.iter().filter(|(_, _, r)| *r);
        names.map(|(s, _, _)| s.name().to_string()).collect()
    }

    /// Keeps the steps the guest ran, from the run's kept `shared` directory.
    fn keep(&self, shared: &Path, events: &Events) {
        for (step, entry, _) in self.steps.iter().filter(|(_, _, r)| !r) {
            if let Err(e) = reuse::keep(*step, shared, entry) {
                events.warn(format!(
                    "{} not kept for the next run: {e:#}",
                    step.describe()
                ));
            }
        }
    }
}

/// A test run's boot that ended (vm-test's suite, `bpfvm test`'s crate): its files and how
/// the VM ended.
pub(crate) struct Booted {
    pub(crate) files: RunDir,
    pub(crate) outcome: RunOutcome,
    out_dir: PathBuf,
    /// When the boot began and when vng exited.
    started: Instant,
    ended: Instant,
}

impl Booted {
    /// The guest script ran to its end with status 0.
    pub(crate) fn vm_ok(&self) -> bool {
        self.outcome.ending == Ending::Exited(0)
    }

    /// How the VM ended, in one line.
    pub(crate) fn ending(&self) -> String {
        self.outcome
            .diagnosis()
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    }
}

/// Boots a test run's guest script (written into `files`) with live per-test progress; an
/// interrupted run judged nothing and leaves `out_dir`'s last report as it was.
pub(crate) fn boot_tests(
    p: &Prepared,
    vm: &VmOptions,
    files: RunDir,
    out_dir: &Path,
    events: &Events,
) -> Result<Booted> {
    let live = with_test_progress(
        events.clone(),
        files.shared.clone(),
        p.kernel.expected.clone(),
    );
    let started = Instant::now();
    let outcome = boot(p, vm, &files.shared, &files.script, &live)?;
    let ended = Instant::now();
    if outcome.ending == Ending::Interrupted {
        anyhow::bail!(
            "{} ({} left as it was)",
            outcome.diagnosis().lines().next().unwrap_or_default(),
            out_dir.join("report.json").display()
        );
    }
    Ok(Booted {
        files,
        outcome,
        out_dir: out_dir.to_path_buf(),
        started,
        ended,
    })
}

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
/// guest script ran: `health::guest_log`), judged by `vm::health`; and the release the guest
/// booted (`uname -r` as it recorded it) against `p`'s, for every flow.
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
    let mut health = health::judge(&log.text, allow, &p.kernel.label, release.as_deref());
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

/// The kernel log the guest copied (read as every guest file is: `guest_files`).
fn read_kernel_log(shared: &Path) -> std::io::Result<String> {
    crate::support::guest_files::read(&shared.join(guest::files::KERNEL_LOG))
}

/// The judgement of a boot that runs no test (a `bench-vm` boot), by the rules `vm-test`'s
/// boots are judged by (`kernel_health`, `report::apply_kernel_health`): the kernel log read
/// whole (no record lost, not cut short, readable), no splat that no allow entry excuses, and
/// the release asked for. Returns each failing entry as `name: why`, and whether the kernel log
/// blames the kernel (a splat: evidence against it whatever else went wrong).
pub(crate) fn judge_boot(
    shared: &Path,
    outcome: &RunOutcome,
    p: &Prepared,
) -> Result<(Vec<String>, bool)> {
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

/// [`judge_boot`]'s verdict on a boot's kernel `health`.
pub(crate) fn boot_problems(health: &mut Health, vm_ok: bool) -> (Vec<String>, bool) {
    let blamed = health.blames_the_kernel();
    let mut entries = Vec::new();
    report::apply_kernel_health(&mut entries, health, vm_ok, report::display_name);
    let failed = entries
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
    (failed, blamed)
}

/// `vm-test --kernel all` (or a list): each kernel in turn, then `target/vm-test/matrix.json`. A kernel
/// that fails (its fetch, its boot, a test) is recorded with why and the others still run;
/// Ctrl-C stops the loop.
pub fn vm_test_all(
    kernels: &[KernelChoice],
    opts: &TestOptions,
    events: &Events,
) -> Result<Vec<Report>> {
    options::check(&opts.vm)?;
    let mut reports = Vec::new();
    for kernel in kernels {
        let name = kernel.shown();
        if crate::support::proc::interrupted() {
            events.warn(format!("interrupted: kernel {name} and later not run"));
            break;
        }
        let one = TestOptions {
            kernel: kernel.clone(),
            ..opts.clone()
        };
        events.step(format!("=== kernel {name} ==="));
        match vm_test(&one, events) {
            Ok((r, _)) => reports.push(r),
            Err(e) => {
                events.warn(format!("kernel {name}: {e:#}"));
                reports.push(Report::not_run_because(&name, &e));
            }
        }
    }
    let path = target_dir().join("vm-test").join("matrix.json");
    crate::support::fs::write_atomic(
        &path,
        (serde_json::to_string_pretty(&reports)? + "\n").as_bytes(),
    )?;
    events.note(format!("combined report: {}", path.display()));
    Ok(reports)
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

/// Turns libtest's JSON events on the guest's stdout into per-test progress; other guest
/// output passes through unchanged. A pass that recorded a skip shows as the final report will
/// judge it: `skip` with the reason, or `FAILED` when the kernel should have had the feature.
pub(crate) fn with_test_progress(events: Events, shared: PathBuf, expected: Expectation) -> Events {
    Events::new(move |o| match o {
        Output::GuestStdout(line) => match report::test_finished(&line) {
            Some((name, event)) => {
                let outcome = match event.as_str() {
                    "ok" => match report::judge_live_pass(&shared, &expected, &name) {
                        Some((Outcome::Fail, why)) => TestProgress::Failed(Some(why)),
                        Some(_) => TestProgress::Skip,
                        None => TestProgress::Ok,
                    },
                    "failed" => TestProgress::Failed(None),
                    _ => TestProgress::Ignored,
                };
                events.emit(Output::TestDone { name, outcome })
            }
            None if line.starts_with("{ \"type\"") => {}
            None => events.emit(Output::GuestStdout(line)),
        },
        other => events.emit(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_test_boots_twice_the_cpus_with_only_the_asked_ones_online() {
        let mut opts = VmOptions::new(Duration::from_secs(60));
        opts.append = vec!["quiet".into()];
        let vm = with_offline_cpus(&opts);
        assert_eq!(vm.cpus, 4);
        assert_eq!(vm.append, ["quiet", "maxcpus=2"]);
    }

    fn panicked_before_start() -> RunOutcome {
        RunOutcome {
            ending: Ending::Panic,
            console_tail: vec![],
            elapsed: Duration::from_secs(2),
            boot: None,
            guest: None,
            retries: vec![],
        }
    }

    fn accel(kind: accel::Kind) -> Accel {
        Accel {
            kind,
            reason: String::new(),
            tcg_thread: None,
        }
    }

    /// A bench boot is judged as a vm-test boot: records lost, a log cut short, another
    /// release, a splat each make it invalid, named; a clean log passes.
    #[test]
    fn a_bench_boot_with_a_gap_a_cut_log_or_another_release_is_invalid() {
        let allow = health::allow::parse("").unwrap();
        let judge = |log: &str, wrong: Option<&str>| {
            let mut h = health::judge(log, &allow, "6.1", None);
            h.wrong_release = wrong.map(str::to_string);
            boot_problems(&mut h, true)
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

    #[test]
    fn a_boot_is_retried_once_under_tcg_unless_told_not_to() {
        let first = panicked_before_start();
        assert!(retry_boot(&first, &accel(accel::Kind::Tcg), true));
        assert!(
            !retry_boot(&first, &accel(accel::Kind::Tcg), false),
            "--no-retry"
        );
        assert!(
            !retry_boot(&first, &accel(accel::Kind::Kvm), true),
            "KVM: the kernel's own"
        );
        let mut second = panicked_before_start();
        second.retries.push(first.as_failed_boot());
        assert!(
            !retry_boot(&second, &accel(accel::Kind::Tcg), true),
            "once only"
        );
        let mut late = panicked_before_start();
        late.boot = Some(Duration::from_secs(8));
        assert!(
            !retry_boot(&late, &accel(accel::Kind::Tcg), true),
            "after the start marker"
        );
    }
}
