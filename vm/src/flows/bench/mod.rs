//! `cargo xtask bench-vm`: boots the kernel with `spectre_v2=retpoline` and `spectre_v2=off`
//! in ABBA order (`model::schedule`), several times each (boots are the unit of replication),
//! runs the guest benchmark binary (`tests/src/bin/bench.rs`) in each, and writes
//! `target/bench-vm/<kernel>/{report.json,report.md,*.svg}` (`--smoke`: `<kernel>-smoke/`).
//!
//! This module runs the boots and writes the files; what a report holds and the figures,
//! statistics, comparisons and renderings made from it are `results::bench`.
pub mod ab;
mod script;
mod upstream_script;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::domain::arch::{Arch, X86Only};
use crate::domain::options::VmOptions;
use crate::flows::run::{self, Prepared};
use crate::kernel::choice::KernelChoice;
use crate::kernel::expect;
use crate::machine::build;
use crate::machine::guest;
use crate::machine::vng::{Ending, RunOutcome};
use crate::results::bench::{compare, markdown, model, plot, upstream};
use crate::results::report::{read_fact, AccelInfo};
use crate::support::output::{Events, Output};
use crate::support::paths::target_dir;
use crate::support::status::Status;
pub use bpfvm_common::bench::Group;
use bpfvm_common::bench_results::Results;
pub use model::{BenchReport, Clock, HostLoad, Mode, Params, Run, Size};

#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Kernel B of an A/B, the only kernel otherwise.
    pub kernel: KernelChoice,
    pub vm: VmOptions,
    pub size: Size,
    /// Benchmark groups; empty: all.
    pub only: Vec<Group>,
    /// Producer threads in the guest (`-p`), one per guest CPU at most.
    pub producers: u32,
    /// Boots per mode; None: the size's default.
    pub boots: Option<u32>,
    /// A null (A/A) run: both modes boot with `spectre_v2=off` (see `Params::null`).
    pub null: bool,
    /// Also run the kernel's own `bench` in every boot (`upstream`; `--upstream`). Asked for,
    /// not by default: each of its calls costs at least 3 * 10^9 guest instructions (see
    /// `upstream`), which made `--quick` about three times as long (docs/benchmarks.md).
    pub upstream: bool,
}

impl BenchOptions {
    /// Every group, one producer, the size's boots.
    pub fn new(kernel: KernelChoice, vm: VmOptions, size: Size) -> Self {
        Self {
            kernel,
            vm,
            size,
            only: vec![],
            producers: 1,
            boots: None,
            null: false,
            upstream: false,
        }
    }

    fn boots_per_mode(&self, clock: Clock) -> u32 {
        self.boots.unwrap_or(self.size.default_boots(clock))
    }

    /// The options' own errors, before anything is installed or booted.
    pub fn check(&self) -> Result<()> {
        match self.boots {
            Some(0) => bail!(
                "--boots 0: each mode needs at least one boot (two for an interval); e.g. \
                 --boots 5"
            ),
            Some(n) if n > MAX_BOOTS => bail!(
                "--boots {n} is more than {MAX_BOOTS} boots per mode (a boot takes about a \
                 minute under TCG: {MAX_BOOTS} per mode is over 3 hours); e.g. --boots 5"
            ),
            _ => {}
        }
        if self.upstream {
            self.kernel.arch().refuse(X86Only::KernelBench)?;
        }
        if self.producers == 0 || self.producers > self.vm.cpus {
            bail!(
                "-p {}: the guest runs one producer per CPU; pass 1 to --cpus ({}) producers, \
                 or raise --cpus",
                self.producers,
                self.vm.cpus
            );
        }
        Ok(())
    }
}

/// The most boots per mode `--boots` accepts.
pub const MAX_BOOTS: u32 = 100;

/// Where the guest runner writes its results in the shared directory.
const RESULTS: &str = "bench.json";
/// The guest runner's exit status.
const RC: &str = "bench.rc";
/// The prefix of the guest runner's progress lines (tests/src/bench/mod.rs).
const PROGRESS: &str = "bpfvm-bench-progress ";
/// A boot during which other processes used more than this many CPUs ran on a busy host: it is
/// repeated (once per boot of the schedule at most) and left out of the statistics. Half a
/// CPU of a 2-CPU host: qemu's TCG threads then share their cores.
const BUSY_CPUS: f64 = 0.5;

pub fn bench_vm(opts: &BenchOptions, events: &Events) -> Result<(BenchReport, PathBuf)> {
    opts.check()?;
    let mut p = run::prepare_any_arch(&opts.kernel, &opts.vm, events)?;
    let kernel_bench = kernel_bench(opts, (&opts.kernel, &p), None, events)?;
    let (opts, clock) = &measured_by(opts, &p.accel, events)?;
    let bin = build_bench(&p, events)?;
    // A guest with a root of its own reads the runner where it was built.
    p.guest_reads = bin.parent().map(Path::to_path_buf).into_iter().collect();
    let out_dir = out_dir(&p, opts);
    let boots = Boots {
        opts,
        clock: *clock,
        bin: &bin,
        upstream: &kernel_bench,
    };
    let mut reports = run_boots(&[(&p, out_dir.clone())], &boots, events)?;
    Ok((reports.remove(0), out_dir))
}

/// An A/B of two kernels (`bench-vm --against A`): `opts.kernel` is B, `against` is A.
/// Both are prepared (and built, for trees) before the first boot; their boots alternate, A
/// then B for each mode of the schedule, so that the host's drift falls on both alike (under
/// the instruction clock, where counts do not drift, the pair boots at once). Returns A's and
/// B's reports, each in its own directory, and the comparison's directory.
pub fn bench_ab(
    opts: &BenchOptions,
    against: &KernelChoice,
    events: &Events,
) -> Result<(BenchReport, BenchReport, PathBuf)> {
    opts.check()?;
    events.step("preparing kernel A (--against)");
    let a = run::prepare(against, &opts.vm, events).map_err(base_not_ready)?;
    events.step("preparing kernel B");
    let b = run::prepare(&opts.kernel, &opts.vm, events)?;
    if a.accel.kind.name() != b.accel.kind.name() {
        bail!(
            "kernel A runs under {} and kernel B under {}: their figures do not compare; pass \
             --accel tcg (or kvm) for both",
            a.accel.kind.name(),
            b.accel.kind.name()
        );
    }
    // One build of the kernel's bench runs on both: B's, else A's.
    let kernel_bench = kernel_bench(opts, (&opts.kernel, &b), Some((against, &a)), events)?;
    let (opts, clock) = &measured_by(opts, &b.accel, events)?;
    let bin = build_bench(&b, events)?;
    let dir = target_dir()
        .join("bench-vm")
        .join(format!("ab-{}-vs-{}", a.kernel.label, b.kernel.label));
    let kernels = [(&a, dir.join("A")), (&b, dir.join("B"))];
    let boots = Boots {
        opts,
        clock: *clock,
        bin: &bin,
        upstream: &kernel_bench,
    };
    let mut reports = run_boots(&kernels, &boots, events)?;
    let rb = reports.pop().expect("two reports");
    let ra = reports.pop().expect("two reports");
    Ok((ra, rb, dir))
}

/// The error of an A/B whose base (kernel A) could not be made ready: whatever the reason,
/// one that judges nothing (255). A base that does not build is no reason to skip the tested
/// commit (125), as a bisect would.
pub(crate) fn base_not_ready(e: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "kernel A (--against) is not ready, so nothing is judged (the base of an A/B must \
         build and boot): {e:#}"
    )
}

/// The kernel's own `bench` a run asked for (`BenchOptions::upstream`), and what it runs.
#[derive(Debug, Default)]
struct KernelBench {
    run: Option<(PathBuf, upstream::Plan)>,
    /// Why it was asked for and does not run.
    skipped: Option<String>,
}

/// Builds (or reuses) the kernel's `bench` from the selftests of the run's own kernel, else of
/// the A/B's base (`selftests::bench_binary`); with neither, the rows are skipped with the
/// reason. Before the instruction clock is set: the build's one BTF boot, the first time, is a
/// plain boot.
fn kernel_bench(
    opts: &BenchOptions,
    own: (&KernelChoice, &Prepared),
    base: Option<(&KernelChoice, &Prepared)>,
    events: &Events,
) -> Result<KernelBench> {
    let Some(plan) = upstream::plan(opts.size, &opts.only).filter(|_| opts.upstream) else {
        return Ok(KernelBench::default());
    };
    let mut why = Vec::new();
    let kernels = std::iter::once((own, false)).chain(base.map(|b| (b, true)));
    for ((choice, p), is_base) in kernels {
        events.step(format!(
            "the kernel's own bench (tools/testing/selftests/bpf) for kernel {}",
            p.kernel.label
        ));
        let built = crate::flows::selftests::bench_binary(choice, p, &opts.vm, events);
        // The base's selftests that do not build judge nothing, as its kernel would not.
        let built = if is_base {
            built.map_err(base_not_ready)
        } else {
            built
        };
        match built? {
            Ok(bench) => {
                return Ok(KernelBench {
                    run: Some((bench, plan)),
                    skipped: None,
                })
            }
            Err(e) => why.push(e),
        }
    }
    let why = format!(
        "the kernel's bench rows (--upstream) are skipped: {}",
        why.join("; ")
    );
    events.warn(&why);
    Ok(KernelBench {
        run: None,
        skipped: Some(why),
    })
}

/// What every boot of a run shares.
struct Boots<'a> {
    opts: &'a BenchOptions,
    clock: Clock,
    /// The suite's guest runner.
    bin: &'a Path,
    upstream: &'a KernelBench,
}

fn build_bench(p: &Prepared, events: &Events) -> Result<PathBuf> {
    let ebpf_dir = build::build_ebpf(&p.tools.ebpf, events)?;
    build::build_guest_bin(
        &ebpf_dir,
        "bench",
        "release",
        p.kernel.arch,
        &p.tools.ebpf,
        events,
    )
}

fn out_dir(p: &Prepared, opts: &BenchOptions) -> PathBuf {
    // A smoke run (CI) must not overwrite the report of a real run.
    match opts.size {
        Size::Smoke => target_dir()
            .join("bench-vm")
            .join(format!("{}-smoke", p.kernel.label)),
        _ => target_dir().join("bench-vm").join(&p.kernel.label),
    }
}

/// Boots the schedule on each kernel, the kernels' boots of one mode next to each other, and
/// writes each kernel's report into its directory.
fn run_boots(
    kernels: &[(&Prepared, PathBuf)],
    boots: &Boots,
    events: &Events,
) -> Result<Vec<BenchReport>> {
    let (opts, clock) = (boots.opts, boots.clock);
    let start = std::time::Instant::now();
    let modes = model::schedule(opts.boots_per_mode(clock));
    let n = kernels.len();
    // One architecture (`bench_ab` refuses two): it names the modes.
    let arch = kernels[0].0.kernel.arch;
    let mut repeats_left = modes.len() / 2 * n;
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); n];
    // Each boot of the schedule: which kernel, the mode, and whether it repeats one left out.
    let mut queue: std::collections::VecDeque<(usize, Mode, bool)> = modes
        .iter()
        .flat_map(|&m| (0..n).map(move |k| (k, m, false)))
        .collect();
    while !queue.is_empty() {
        if crate::support::proc::interrupted() {
            return Err(interrupted(kernels, boots, runs, start, queue.len()));
        }
        // Under the instruction clock the host's load does not move the figures, and a boot
        // is one host thread (single-threaded TCG under -icount): two boots at once.
        let width = match clock {
            Clock::Icount => ICOUNT_BOOTS_AT_ONCE,
            Clock::Wall => 1,
        };
        let batch: Vec<(usize, Mode, bool)> = (0..width).map_while(|_| queue.pop_front()).collect();
        let first: usize = runs.iter().map(Vec::len).sum();
        let total = first + batch.len() + queue.len();
        let labels = boot_labels(&batch, first, total, n, opts.null, arch);
        let dirs = guest_dirs(first, &batch, arch);
        let done = boot_at_once(kernels, boots, &batch, &labels, &dirs, events);
        // A boot Ctrl-C cut short is neither invalid nor busy: nothing is repeated after it,
        // and the check at the loop's head (or after it) ends the run.
        if crate::support::proc::interrupted() {
            for ((k, _, _), run) in batch.into_iter().zip(done) {
                runs[k].push(run?);
            }
            continue;
        }
        let mut repeats = Vec::new();
        for (((k, mode, repeat), label), run) in batch.into_iter().zip(&labels).zip(done) {
            let mut run = run?;
            let why = repeat_reason(&run, clock, repeat).filter(|_| repeats_left > 0);
            if let Some(why) = why {
                repeats_left -= 1;
                events.warn(format!("{label}: {why}; repeating it"));
                run.excluded = Some(format!("{why}: repeated"));
                repeats.push((k, mode, true));
            }
            runs[k].push(run);
        }
        for r in repeats.into_iter().rev() {
            queue.push_front(r);
        }
    }
    if crate::support::proc::interrupted() {
        return Err(interrupted(kernels, boots, runs, start, 0));
    }
    let wall = start.elapsed().as_secs_f64();
    let mut reports = Vec::new();
    for ((p, dir), runs) in kernels.iter().zip(runs) {
        let report = build_report(p, boots, runs, wall);
        write(&report, dir)?;
        reports.push(report);
    }
    Ok(reports)
}

/// Each boot's name in the progress: its number, the kernel of an A/B, and the mode.
fn boot_labels(
    batch: &[(usize, Mode, bool)],
    first: usize,
    total: usize,
    kernels: usize,
    null: bool,
    arch: Arch,
) -> Vec<String> {
    let kernel_name = |k: usize| match kernels {
        1 => String::new(),
        _ => format!("kernel {}, ", ["A", "B"].get(k).copied().unwrap_or("?")),
    };
    batch
        .iter()
        .enumerate()
        .map(|(i, (k, mode, _))| {
            format!(
                "boot {}/{total} ({}{}{})",
                first + i + 1,
                kernel_name(*k),
                if null { "null run, arm " } else { "" },
                match null {
                    true => mode.label(true, arch).to_string(),
                    false => mode.cmdline_arg(arch),
                }
            )
        })
        .collect()
}

/// Boots the batch's boots at once, each in its thread, and waits for all of them.
fn boot_at_once(
    kernels: &[(&Prepared, PathBuf)],
    boots: &Boots,
    batch: &[(usize, Mode, bool)],
    labels: &[String],
    dirs: &[String],
    events: &Events,
) -> Vec<Result<Run>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = batch
            .iter()
            .zip(labels.iter().zip(dirs))
            .map(|(&(k, mode, _), (label, dir))| {
                events.step(format!("{label}: {} benchmarks", boots.opts.size.name()));
                let (p, out_dir) = (kernels[k].0, &kernels[k].1);
                s.spawn(move || one_run(p, boots, mode, label, out_dir, dir, events))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// Why a boot is left out of the statistics and repeated, if it is. Under the wall clock, a
/// valid boot that ran on a busy host (instruction counts do not depend on the host's load).
/// And once per scheduled boot, one the kernel spoiled in its own start-up, before anything of
/// ours ran (once the boot-time crypto self-tests' warning, `crypto_wait_for_test`; boots now
/// skip them, see `vng_args`). Any other invalid boot is evidence against the kernel (a splat
/// once ours ran, lost records, another release): it stays and fails the run.
fn repeat_reason(run: &Run, clock: Clock, repeat: bool) -> Option<String> {
    if clock == Clock::Wall && run.valid && run.host.other_cpus > BUSY_CPUS {
        Some(format!(
            "busy host ({:.2} CPUs used by others)",
            run.host.other_cpus
        ))
    } else if !run.valid && run.spoiled_at_boot && !repeat {
        Some("invalid: the kernel splatted while it booted, before the benchmarks ran".into())
    } else {
        None
    }
}

/// The directory each boot of a batch keeps its guest files in, under its kernel's output:
/// named by the boot's number in the whole schedule (its label's; `first` boots came before
/// the batch, repeated ones included), so neither two boots of one batch nor a repeat share
/// one.
fn guest_dirs(first: usize, batch: &[(usize, Mode, bool)], arch: Arch) -> Vec<String> {
    batch
        .iter()
        .enumerate()
        .map(|(i, (_, mode, _))| format!("guest-{}-{}", first + i + 1, mode.name(arch)))
        .collect()
}

/// The committed instruction-clock smoke report of `kernel` that `cargo xtask ci` compares its
/// own smoke run with (docs/ci.md, "Refreshing the reference").
pub fn reference_path(kernel: &str) -> PathBuf {
    crate::support::paths::workspace_root()
        .join("vm/tests/data")
        .join(format!("bench-reference-{kernel}-smoke.json"))
}

/// The extra instructions that fail `ci`'s comparison with the committed reference. The
/// smoke run's rows repeat across boots to 0.05 % except the get_next_key dump, which read up
/// to 1.2 % apart when each boot timed one (now the least of two; docs/benchmarks.md).
pub const REFERENCE_THRESHOLD_PCT: f64 = 3.0;

/// Boots run at once under the instruction clock: each is one host thread, and their counts
/// do not depend on the host's load, so two fill the two cores the project's machines have.
const ICOUNT_BOOTS_AT_ONCE: usize = 2;

/// `cargo xtask ci`'s check of a smoke run: under the instruction clock, no row-mode may
/// count more than [`REFERENCE_THRESHOLD_PCT`] above or below the committed reference of its
/// kernel (below: it measures other work now, e.g. a helper the verifier inlined).
/// A wall-clock run (KVM) or a kernel without a committed reference is not compared (said
/// in a note); a reference of another kernel release is an error saying how to refresh it.
pub fn check_against_reference(report: &BenchReport, events: &Events) -> Result<()> {
    if report.clock != Clock::Icount {
        events.note(
            "bench: wall-clock figures (KVM) are not compared with the committed instruction \
             counts",
        );
        return Ok(());
    }
    let path = reference_path(&report.kernel);
    if !path.exists() {
        events.note(format!(
            "bench: no committed reference for kernel {} ({}): not compared",
            report.kernel,
            path.display()
        ));
        return Ok(());
    }
    let reference = compare::load(&path)?;
    let refresh = format!(
        "if the change is meant, refresh it: cargo xtask bench-vm --smoke --kernel {k} && cp \
         target/bench-vm/{k}-smoke/report.json {}",
        path.display(),
        k = report.kernel
    );
    if reference.release != report.release {
        bail!(
            "{} was measured on kernel {}, this run on {}: {refresh}",
            path.display(),
            reference.release,
            report.release
        );
    }
    let c = compare::compare(&reference, report, REFERENCE_THRESHOLD_PCT)?;
    if !c.passed() {
        let why = c.failures();
        bail!(
            "the smoke run counts differ from {} beyond {REFERENCE_THRESHOLD_PCT} %: {}\n{}\n{refresh}",
            path.display(),
            why.join("; "),
            compare::markdown(&path.display().to_string(), "this run", &c)
        );
    }
    events.note(format!(
        "bench: instruction counts within {REFERENCE_THRESHOLD_PCT} % of {}",
        path.display()
    ));
    Ok(())
}

/// Where an interrupted run leaves its boots, inside the output directory.
const INTERRUPTED: &str = "interrupted";

/// Ctrl-C or SIGTERM: the boots done so far go to `<out_dir>/interrupted/` of each kernel,
/// never over the last complete report, and the error says where.
fn interrupted(
    kernels: &[(&Prepared, PathBuf)],
    boots: &Boots,
    runs: Vec<Vec<Run>>,
    start: std::time::Instant,
    not_run: usize,
) -> anyhow::Error {
    let done: usize = runs.iter().map(Vec::len).sum();
    let total = done + not_run;
    let mut kept = Vec::new();
    let mut untouched = Vec::new();
    for ((p, out_dir), runs) in kernels.iter().zip(runs) {
        let partial = out_dir.join(INTERRUPTED);
        let n = runs.len();
        let report = build_report(p, boots, runs, start.elapsed().as_secs_f64());
        kept.push(match write(&report, &partial) {
            Ok(()) => format!("its {n} boots are in {}", partial.display()),
            Err(e) => format!("its {n} boots were not written ({e:#})"),
        });
        untouched.push(out_dir.display().to_string());
    }
    anyhow::anyhow!(
        "interrupted with {not_run} of {total} boots not run; the report of the last complete \
         run in {} is untouched, {}",
        untouched.join(" and "),
        kept.join("; ")
    )
}

/// Under TCG the guest's clock counts instructions (`-icount` on one vCPU); under KVM it
/// keeps real time. Returns the options the boots run with.
///
/// Why: under TCG a wall-clock figure is the emulator's speed of the moment, which drifts by
/// up to 2x within one boot on a quiet host (see docs/benchmarks.md), while TCG models no
/// speculation, so instructions are all that retpoline costs there. A shell loop timed by
/// the 6.1 guest under `-icount shift=0,sleep=off` with one vCPU read the same figure to
/// 0.01 % across boots; with two vCPUs (round-robin in one host thread) the kernel's own
/// bench did not finish in 600 s.
fn measured_by(
    opts: &BenchOptions,
    accel: &crate::machine::accel::Accel,
    events: &Events,
) -> Result<(BenchOptions, Clock)> {
    if accel.is_kvm() {
        return Ok((opts.clone(), Clock::Wall));
    }
    if opts.producers > 1 {
        bail!(
            "-p {}: under TCG bench-vm counts instructions (qemu's -icount), which runs one \
             vCPU, so producers would take turns on it; use -p 1 (parallel producers need KVM)",
            opts.producers
        );
    }
    let mut opts = opts.clone();
    if opts.vm.cpus != 1 {
        events.note(format!(
            "TCG: the guest gets 1 vCPU (not --cpus {}) so that its clock counts instructions \
             (qemu -icount)",
            opts.vm.cpus
        ));
        opts.vm.cpus = 1;
    }
    opts.vm.qemu_opts = model::ICOUNT_QEMU_OPTS.map(String::from).to_vec();
    Ok((opts, Clock::Icount))
}

fn build_report(p: &Prepared, boots: &Boots, runs: Vec<Run>, wall_time_s: f64) -> BenchReport {
    let (opts, clock) = (boots.opts, boots.clock);
    let accel_note = if p.accel.is_kvm() {
        "KVM: guest code runs on the host CPU, so the figures are hardware figures of a virtual \
         machine (with its exits and a shared host)."
            .to_string()
    } else {
        format!(
            "TCG: software emulation. Absolute numbers are not hardware numbers, and TCG models \
             no speculation: the on/off ratio shows only the instructions {} adds.",
            match p.kernel.arch {
                Arch::X86_64 => "the retpoline thunks",
                Arch::Arm64 => "the kernel's default mitigations",
            }
        )
    };
    BenchReport {
        format: model::FORMAT,
        clock,
        kernel: p.kernel.label.clone(),
        release: p.kernel.bootable.release.clone(),
        tree: p.kernel.built_from.clone(),
        accel: AccelInfo::from(&p.accel),
        accel_note,
        host_cpu: host_cpu(),
        params: Params {
            size: opts.size,
            only: opts.only.iter().map(|g| g.name().to_string()).collect(),
            producers: opts.producers,
            cpus: opts.vm.cpus,
            memory: opts.vm.memory.clone(),
            boots_per_mode: opts.boots_per_mode(clock),
            null: opts.null,
            arch: p.kernel.arch,
            upstream: boots.upstream.run.is_some() || boots.upstream.skipped.is_some(),
        },
        wall_time_s,
        upstream_skipped: boots.upstream.skipped.clone(),
        runs,
    }
}

/// Writes report.json, report.md and the plots into `dir`.
pub fn write(r: &BenchReport, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(r)?;
    // Atomic: two runs at once never leave a torn report.
    crate::support::fs::write_atomic(&dir.join("report.json"), (json + "\n").as_bytes())?;
    crate::support::fs::write_atomic(&dir.join("report.md"), markdown::render(r).as_bytes())?;
    plot::write_all(r, dir)
}

/// The guest runner's arguments after the plan name.
fn runner_args(opts: &BenchOptions, clock: Clock) -> Vec<String> {
    let mut args = Vec::new();
    if clock == Clock::Icount {
        args.push("--instruction-clock".to_string());
    }
    if !opts.only.is_empty() {
        let names: Vec<&str> = opts.only.iter().map(|g| g.name()).collect();
        args.extend(["--only".to_string(), names.join(",")]);
    }
    args.extend(["-p".to_string(), opts.producers.to_string()]);
    args
}

/// CPU time (seconds) of this process and its reaped children (vng, qemu, virtiofsd).
fn own_cpu_s() -> f64 {
    let mut total = 0.0;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: getrusage fills the struct it is given.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut u) } == 0 {
            for t in [u.ru_utime, u.ru_stime] {
                total += t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            }
        }
    }
    total
}

/// The host's busy CPU time so far (seconds), from the first line of /proc/stat.
fn host_busy_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let v: Vec<f64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy: f64 = v.iter().take(8).sum::<f64>() - v.get(3)? - v.get(4)?;
    // SAFETY: sysconf has no memory arguments.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(busy / hz)
}

fn loadavg_1m() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

fn one_run(
    p: &Prepared,
    boots: &Boots,
    mode: Mode,
    label: &str,
    out_dir: &Path,
    guest_dir: &str,
    events: &Events,
) -> Result<Run> {
    let opts = boots.opts;
    let files = run::RunDir::new(out_dir)?;
    let (shared, script_path) = (files.shared.as_path(), files.script.as_path());
    let out = shared.join(RESULTS);
    let upstream = boots.upstream.run.as_ref();
    write_script(boots, shared, script_path)?;
    let mut vm = opts.vm.clone();
    let arch = p.kernel.arch;
    // The mode is forced: a user's own spectre_v2= or mitigations= would make the runs
    // meaningless.
    vm.append
        .retain(|a| !a.starts_with("spectre_v2=") && !a.starts_with("mitigations="));
    let booted = mode.booted(opts.null);
    vm.append.push(booted.cmdline_arg(arch));
    let (busy0, own0, t0) = (host_busy_s(), own_cpu_s(), std::time::Instant::now());
    let outcome = run::boot(
        p,
        &vm,
        shared,
        script_path,
        &with_bench_progress(events.clone(), label),
    )?;
    let host = host_load(busy0, own0, t0.elapsed().as_secs_f64());
    let spectre_v2 = read_fact(shared, guest::files::SPECTRE_V2);
    let cmdline = read_fact(shared, guest::files::CMDLINE);
    let release = read_fact(shared, guest::files::RELEASE);
    let results: Option<Results> = crate::support::guest_files::read(&out)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok());
    let mut problems: Vec<String> =
        mode_problem(booted, arch, spectre_v2.as_deref(), cmdline.as_deref())
            .into_iter()
            .collect();
    // A boot is judged as a vm-test boot is: a kernel that splatted, a log that lost
    // records or stops early, another release than asked for: nothing to measure.
    let mut health = run::boot_health(shared, &outcome, p)?;
    let spoiled_at_boot = health.spoiled_at_boot();
    let log = run::boot_problems(&mut health, outcome.ending == Ending::Exited(0));
    problems.extend(ending_problem(&outcome, log.blamed, label, events)?);
    problems.extend(runner_problem(
        results.is_some(),
        read_fact(shared, RC).as_deref(),
    ));
    judged_something(label, &log, &problems)?;
    // Spoiled only by the kernel's own start-up: nothing else went wrong.
    let spoiled_at_boot = spoiled_at_boot && problems.is_empty();
    problems.extend(log.problems);
    let mut results = results.unwrap_or_default();
    // The kernel's bench: a run of it that failed or measured too little is a benchmark error.
    let (upstream_bench, bench_problems) = match upstream {
        Some((_, plan)) => upstream::collect(shared, plan),
        None => Default::default(),
    };
    results.errors.extend(bench_problems);
    judge_skips(p, label, &mut results, events);
    for e in &results.errors {
        events.warn(format!("{label}: {e}"));
    }
    // An interrupted boot's files go with the partial report, not over the last complete run's.
    let keep_in = if crate::support::proc::interrupted() {
        out_dir.join(INTERRUPTED)
    } else {
        out_dir.to_path_buf()
    };
    files.keep(&keep_in.join(guest_dir), events);
    Ok(Run {
        mode,
        release,
        spectre_v2,
        cmdline,
        valid: problems.is_empty(),
        invalid_reason: (!problems.is_empty()).then(|| problems.join("; ")),
        host,
        spoiled_at_boot,
        excluded: None,
        wall_time_s: outcome.elapsed.as_secs_f64(),
        results,
        upstream_bench,
    })
}

/// Writes the boot's guest script: the suite's runner, then the kernel's bench if asked for.
fn write_script(boots: &Boots, shared: &Path, script_path: &Path) -> Result<()> {
    let upstream = boots.upstream.run.as_ref();
    guest::write(
        script_path,
        &script::script(
            shared,
            &script::Boot {
                runner: boots.bin,
                size: boots.opts.size.name(),
                args: &runner_args(boots.opts, boots.clock),
                results: &shared.join(RESULTS),
                rc: &shared.join(RC),
                upstream: upstream.map(|(bench, plan)| (bench.as_path(), plan)),
            },
        ),
    )
}

/// The host's load over a boot of `wall` seconds, from the busy and own CPU seconds before it.
fn host_load(busy0: Option<f64>, own0: f64, wall: f64) -> HostLoad {
    HostLoad {
        other_cpus: match (busy0, host_busy_s()) {
            (Some(a), Some(b)) => ((b - a - (own_cpu_s() - own0)) / wall).max(0.0),
            _ => f64::NAN,
        },
        loadavg_1m: loadavg_1m(),
    }
}

/// Why the guest did not run in the mode it was booted with, if it did not.
fn mode_problem(
    booted: Mode,
    arch: Arch,
    spectre_v2: Option<&str>,
    cmdline: Option<&str>,
) -> Option<String> {
    match booted.expected(arch) {
        Some(want) if !spectre_v2.is_some_and(|s| s.contains(want)) => Some(format!(
            "spectre_v2 reads {:?}, not {want} as {} asks",
            spectre_v2.unwrap_or("nothing"),
            booted.cmdline_arg(arch)
        )),
        // Where spectre_v2 does not tell the modes apart, the command line does.
        None if !cmdline
            .is_some_and(|c| c.split_whitespace().any(|w| w == booted.cmdline_arg(arch))) =>
        {
            Some(format!(
                "the guest's command line {:?} lacks {}",
                cmdline.unwrap_or("nothing"),
                booted.cmdline_arg(arch)
            ))
        }
        _ => None,
    }
}

/// A boot whose only problems are in its kernel `log` and judge nothing (a stall report under
/// TCG: `Health::under_tcg`) judged nothing, as a test run whose only failures judge nothing
/// (`run::test_run_status`): the run's error (255), not an invalid boot (1). Any `other`
/// problem of the boot (its mode, its ending, its runner) stands.
fn judged_something(label: &str, log: &run::BootLog, other: &[String]) -> Result<()> {
    if log.judged_nothing && other.is_empty() {
        bail!("{label}: {}", log.problems.join("; "));
    }
    Ok(())
}

/// How the VM ended, when not with the script's exit 0: a problem of the boot, or the run's
/// error when the host or qemu failed.
fn ending_problem(
    outcome: &RunOutcome,
    kernel_blamed: bool,
    label: &str,
    events: &Events,
) -> Result<Option<String>> {
    if outcome.ending == Ending::Exited(0) {
        return Ok(None);
    }
    events.warn(outcome.diagnosis());
    // qemu crashed, the VM failed, timed out or hung booting, and the kernel log blames
    // nothing: the run measured nothing of the kernel, and judges nothing either.
    let judged = run::run_status(&outcome.ending, true, kernel_blamed);
    if judged == Status::Stopped && outcome.ending != Ending::Interrupted {
        bail!(
            "{label}: {}; the host or qemu failed, not the kernel: nothing is judged",
            outcome.diagnosis().lines().next().unwrap_or("")
        );
    }
    Ok(Some(
        outcome.diagnosis().lines().next().unwrap_or("").to_string(),
    ))
}

/// What is wrong with the guest runner's ending: no results, or a status other than 0.
fn runner_problem(wrote_results: bool, rc: Option<&str>) -> Option<String> {
    match (wrote_results, rc) {
        (false, rc) => Some(format!(
            "the guest runner wrote no results (exit status {})",
            rc.unwrap_or("unknown")
        )),
        (true, Some("0")) => None,
        (true, rc) => Some(format!(
            "the guest runner exited with status {}",
            rc.unwrap_or("unknown")
        )),
    }
}

/// A group skipped for a feature the kernel must have measured nothing it should have: a
/// benchmark failure, as such a skip fails a test in `vm-test`.
fn judge_skips(p: &Prepared, label: &str, results: &mut Results, events: &Events) {
    for skip in &results.skipped {
        match expect::judge_skip(
            &p.kernel.expected,
            &Default::default(),
            &skip.feature,
            &skip.reason,
        ) {
            Ok(why) => events.note(format!("{label}: skipped {}: {why}", skip.group)),
            Err(why) => results.errors.push(format!("{}: {why}", skip.group)),
        }
    }
}

/// Turns the guest runner's progress lines into a progress bar; other output passes through.
fn with_bench_progress(events: Events, boot: &str) -> Events {
    let boot = boot.to_string();
    Events::new(move |o| match o {
        Output::GuestStdout(line) => match progress(&line) {
            Some((done, total, what)) => events.emit(Output::Progress {
                label: format!("{boot}: {what}"),
                done,
                total,
            }),
            None => events.emit(Output::GuestStdout(line)),
        },
        other => events.emit(other),
    })
}

/// Parses `bpfvm-bench-progress <done> <total> <label>`.
fn progress(line: &str) -> Option<(u64, u64, String)> {
    let rest = line.strip_prefix(PROGRESS)?;
    let mut parts = rest.splitn(3, ' ');
    let done = parts.next()?.parse().ok()?;
    let total = parts.next()?.parse().ok()?;
    Some((done, total, parts.next().unwrap_or("").to_string()))
}

/// The host CPU's model name, for the report.
pub fn host_cpu() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .context("no model name in /proc/cpuinfo")
        .unwrap_or_else(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::accel::{Accel, Kind};

    /// A boot invalid for a WARN once the benchmarks ran (or any other evidence) is never
    /// repeated, and fails the run though a clean repeat of another boot ran; one the kernel
    /// spoiled while it booted is repeated once and left out; a valid boot on a busy host is
    /// repeated under the wall clock only.
    #[test]
    fn only_a_boot_the_kernel_spoiled_while_it_booted_is_repeated_away() {
        let mut report: BenchReport =
            serde_json::from_str(include_str!("../../../tests/data/bench-6.1-quick.json")).unwrap();
        assert!(report.ok());
        let valid = report.runs[0].clone();
        let mut warned = valid.clone();
        warned.valid = false;
        warned.invalid_reason = Some("kernel:warning: kernel warning during bench".into());
        assert_eq!(repeat_reason(&warned, Clock::Icount, false), None);
        report.runs[0] = warned.clone();
        report.runs.push(valid.clone());
        assert!(!report.ok(), "a WARN in half the boots passed");
        report.runs[0].excluded = Some("invalid: repeated".into());
        assert!(!report.ok(), "a WARN repeated away");

        let mut spoiled = warned.clone();
        spoiled.spoiled_at_boot = true;
        let why = repeat_reason(&spoiled, Clock::Icount, false).expect("repeated");
        assert!(why.contains("while it booted"), "{why}");
        assert_eq!(repeat_reason(&spoiled, Clock::Icount, true), None, "twice");
        report.runs[0] = spoiled;
        assert!(!report.ok(), "not left out: no repeat ran");
        report.runs[0].excluded = Some(format!("{why}: repeated"));
        assert!(report.ok());

        let mut busy = valid;
        busy.host.other_cpus = BUSY_CPUS + 1.0;
        assert!(repeat_reason(&busy, Clock::Wall, false).is_some());
        assert_eq!(repeat_reason(&busy, Clock::Icount, false), None);
        busy.excluded = Some("busy host: repeated".into());
        busy.results
            .errors
            .push("bloom: the verifier rejected `p`".into());
        report.runs.push(busy);
        assert!(!report.ok(), "a benchmark error left out");
    }

    /// A soft lockup during the benchmarks, and the `L` it sets, judge nothing under TCG: the
    /// run stops (255) and says why; under KVM, or beside a failure of the runner, the boot is
    /// invalid (1).
    #[test]
    fn a_stall_under_tcg_stops_the_run() {
        let log = format!(
            "12,0,0,-;bpfvm: tainted 0\n12,1,1,-;bpfvm: phase bench\n\
             0,2,2,-;watchdog: BUG: soft lockup - CPU#0 stuck for 23s! [bench:90]\n\
             12,3,3,-;bpfvm: tainted {}\n12,4,4,-;bpfvm: phase end\n",
            crate::results::health::taint::SOFTLOCKUP
        );
        let judged = |kind| {
            let accel = Accel {
                kind,
                reason: "the test's".into(),
                tcg_thread: None,
            };
            let mut h = run::judge_kernel_log(&log, &Default::default(), "6.1", &accel, &None);
            run::boot_problems(&mut h, true)
        };
        let tcg = judged(Kind::Tcg);
        let e = judged_something("6.1 boot 1", &tcg, &[]).unwrap_err();
        assert_eq!(Status::of_error(&e), Status::Stopped);
        assert!(e.to_string().contains("--accel kvm"), "{e}");
        let runner = ["the guest runner exited with status 1".to_string()];
        assert!(judged_something("6.1 boot 1", &tcg, &runner).is_ok());
        let kvm = judged(Kind::Kvm);
        assert!(kvm.blamed && !kvm.problems.is_empty());
        assert!(judged_something("6.1 boot 1", &kvm, &[]).is_ok());
    }

    /// A base that does not build stops the A/B (255) instead of skipping the commit (125).
    #[test]
    fn a_base_that_does_not_build_judges_nothing() {
        use crate::support::status::Untestable;
        let e = anyhow::Error::new(Untestable("`make bzImage` failed".into()));
        assert_eq!(Status::of_error(&e), Status::Untestable);
        let e = base_not_ready(e);
        assert_eq!(Status::of_error(&e), Status::Stopped);
        assert!(e.to_string().contains("`make bzImage` failed"), "{e}");
    }

    /// Two boots of one kernel and mode in a batch (the instruction clock's), then the repeat
    /// of one: every boot keeps its own directory.
    #[test]
    fn every_boot_of_a_schedule_keeps_its_own_guest_directory() {
        let two = [(0, Mode::Off, false), (0, Mode::Off, false)];
        let mut names = guest_dirs(0, &two, Arch::X86_64);
        names.extend(guest_dirs(2, &[(0, Mode::Off, true)], Arch::X86_64));
        names.extend(guest_dirs(3, &[(0, Mode::Retpoline, false)], Arch::X86_64));
        assert_eq!(
            names,
            [
                "guest-1-off",
                "guest-2-off",
                "guest-3-off",
                "guest-4-retpoline"
            ]
        );
    }

    #[test]
    fn progress_lines_parse_and_others_do_not() {
        assert_eq!(
            progress("bpfvm-bench-progress 3 16 bloom k=1 entries=50000 value=8B"),
            Some((3, 16, "bloom k=1 entries=50000 value=8B".to_string()))
        );
        assert_eq!(progress("bench: something"), None);
        assert_eq!(progress("bpfvm-bench-progress x 16 y"), None);
    }

    #[test]
    fn the_committed_reference_passes_against_itself_and_fails_with_5_percent_more_or_fewer() {
        let reference = compare::load(&reference_path("6.1")).unwrap();
        assert_eq!(reference.clock, Clock::Icount);
        check_against_reference(&reference, &Events::silent()).unwrap();
        let mut slower = reference.clone();
        for run in &mut slower.runs {
            for l in &mut run.results.bpf_loop {
                l.throughput.samples.iter_mut().for_each(|x| *x /= 1.05);
            }
        }
        let e = check_against_reference(&slower, &Events::silent()).unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("bpf_loop nr_loops=100 (spectre_v2=off)"), "{e}");
        assert!(
            e.contains("refresh it: cargo xtask bench-vm --smoke --kernel 6.1"),
            "{e}"
        );
        let mut cheaper = reference.clone();
        for run in &mut cheaper.runs {
            for l in &mut run.results.bpf_loop {
                l.throughput.samples.iter_mut().for_each(|x| *x *= 1.05);
            }
        }
        let e = format!(
            "{:#}",
            check_against_reference(&cheaper, &Events::silent()).unwrap_err()
        );
        assert!(
            e.contains("bpf_loop nr_loops=100 (spectre_v2=off): fewer instructions beyond -3 %"),
            "{e}"
        );
        let mut other = reference.clone();
        other.release = "6.1.0-99-cloud-amd64".into();
        let e = format!(
            "{:#}",
            check_against_reference(&other, &Events::silent()).unwrap_err()
        );
        assert!(
            e.contains("was measured on kernel 6.1.0-57-cloud-amd64"),
            "{e}"
        );
    }

    #[test]
    fn host_counters_read() {
        assert!(host_busy_s().is_some_and(|s| s > 0.0));
        assert!(own_cpu_s() > 0.0);
    }
}
