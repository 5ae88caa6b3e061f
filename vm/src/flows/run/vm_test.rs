//! `vm-test`: the suite on one kernel (or a list, one after the other), its probe's answers
//! and verifier statistics reused from a passing run on the same binaries and kernel.
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::domain::options::{self, VmOptions};
use crate::kernel::choice::KernelChoice;
use crate::kernel::expect::Probe;
use crate::machine::build;
use crate::machine::guest;
use crate::results::health::{self};
use crate::results::inventory;
use crate::results::plan::{self, Assigned, PieceId};
use crate::results::report::{self, Report, TestResult};
use crate::results::reuse::{self, Step};
use crate::support::output::{Events, StepClock};
use crate::support::paths::target_dir;
use crate::support::status::Status;

use super::boot::Booted;
use super::conclude::{conclude, TestRun};
use super::dir::RunDir;
use super::kept_guest;
use super::prepare::{prepare_any_arch, Prepared};

/// The guest `vm-test` boots: twice the vCPUs, of which only `cpus` are brought online
/// (`maxcpus=`, `setup_max_cpus` in kernel/smp.c), so the guest has more possible than online
/// CPUs and a per-CPU value laid out by the online count fails the batch tests.
/// qemu's `-smp N,maxcpus=M` is not enough: 6.12 and 7.2 count no hotplug CPU from it
/// ("Allowing 2 present CPUs plus 0 hotplug CPUs"), nor does `possible_cpus=` raise it there.
/// The CPUs never brought up cost nothing under TCG.
pub(crate) fn with_offline_cpus(opts: &VmOptions) -> VmOptions {
    let mut vm = opts.clone();
    vm.append.push(format!("maxcpus={}", opts.cpus));
    vm.cpus = opts.cpus * 2;
    vm
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
    /// Boot even when the checkout keeps a guest that could take the run (`--fresh`).
    pub fresh: bool,
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
    let out_dir = target_dir().join("vm-test").join(match &piece {
        Some(a) => a.dir_name(&p.kernel.label),
        None => p.kernel.label.clone(),
    });
    // A kept guest (`cargo xtask vm-guest`) may take the run: its files then go where that
    // guest sees them, and it checks its guest while the run builds (`kept_guest`).
    let kept = kept_guest::share(opts.fresh);
    let files = RunDir::new(kept.as_deref().unwrap_or(&out_dir))?;
    let vm = with_offline_cpus(&opts.vm);
    let asked = kept_guest::ask(&kept, &p, &vm, &files)?;
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

    let args = |binary: &str| match &piece {
        Some(a) => a.piece.libtest_args(binary),
        None => opts.filter.iter().cloned().collect(),
    };
    let (probe, verifier, binaries) =
        kept_guest::stage(&kept, &files, &mut p, probe, verifier, binaries)?;
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
    guest::list_on_host(&files.shared, p.kernel.arch, &binaries, &args)?;
    let built = start.elapsed() - prepared;

    let (booted, guest_use, _hold) =
        kept_guest::boot_tests(&p, &vm, opts.fresh, asked, files, &out_dir, events)?;
    let names: Vec<String> = binaries.iter().map(|b| b.name.clone()).collect();
    let (tests, verdict) = judge_boot(&booted, &p, opts, piece.as_ref(), &names);
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
        if guest_use.how == kept_guest::REUSED {
            // The guest's kernel started long before this run: its boot is not this run's.
            report
                .timings
                .guest_phases
                .retain(|s| s.name != "kernel boot");
        }
        report.vm.guest = Some(guest_use);
    })?;
    if report.status == Some(Status::Good) {
        facts.keep(&out_dir.join("guest").join("shared"), events);
    }
    Ok((report, out_dir))
}

/// A boot's rows: each test binary's, judged from its output (or the boot's failure when the
/// VM never started them), and the inventory's check of what was selected.
fn judge_boot(
    booted: &Booted,
    p: &Prepared,
    opts: &TestOptions,
    piece: Option<&Assigned>,
    names: &[String],
) -> (Vec<TestResult>, report::Verdict) {
    let shared = &booted.files.shared;
    let ending = booted.ending();
    let mut verdict = report::judge(
        shared,
        names,
        &p.kernel.expected,
        (!booted.vm_ok()).then_some(ending.as_str()),
        opts.filter.as_deref(),
    );
    let mut tests = match booted.outcome.boot {
        None if !booted.vm_ok() => vec![report::never_started(&ending)],
        _ => std::mem::take(&mut verdict.tests),
    };
    let selected = |binary: &str, test: &str| match piece {
        Some(a) => a.piece.holds(binary, test),
        None => opts.filter.as_deref().is_none_or(|f| test.contains(f)),
    };
    inventory::check_suite(&mut tests, shared, names, &selected);
    (tests, verdict)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn vm_test_boots_twice_the_cpus_with_only_the_asked_ones_online() {
        let mut opts = VmOptions::new(Duration::from_secs(60));
        opts.append = vec!["quiet".into()];
        let vm = with_offline_cpus(&opts);
        assert_eq!(vm.cpus, 4);
        assert_eq!(vm.append, ["quiet", "maxcpus=2"]);
    }
}
