//! `cargo xtask bench-suite`: where a warm `vm-test` spends its time, phase by phase, against a
//! bare virtme-ng boot of the same kernel. The two alternate so that host noise falls on both
//! alike; each is repeated and reported as min / median / max. A measurement, never a test:
//! nothing here asserts a duration. `--fresh` times a first run instead ([`fresh`]);
//! `--write` puts the table on the measured figures' page ([`page`]).
mod fresh;
mod page;

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bpfvm_host::domain::options::TcgThread;
use bpfvm_host::domain::options::{defaults, Choice};
use bpfvm_host::results::bench::stats;
use bpfvm_host::results::report::{Report, Timings};
use bpfvm_host::support::output::Events;
use clap::Args;
use xshell::{cmd, Shell};

/// Time a warm `vm-test` phase by phase against a bare virtme-ng boot, alternated.
#[derive(Args)]
pub(crate) struct Options {
    #[arg(long, default_value = defaults::KERNEL)]
    kernel: String,
    /// Runs of each (after one untimed warm-up); with `--fresh`, first runs (default 1: each
    /// takes minutes and downloads everything again).
    #[arg(long)]
    runs: Option<usize>,
    /// Time a first run instead: a throw-away cargo home, bpfvm cache and target directory,
    /// then `cargo build -p xtask` and `cargo xtask vm-test`, with when each step began.
    #[arg(long)]
    fresh: bool,
    #[arg(long, default_value_t = defaults::CPUS)]
    cpus: u32,
    #[arg(long, default_value = defaults::MEMORY)]
    memory: String,
    /// Also write the table, with the date, the machine, the accelerator and this command,
    /// as this mode's section of docs/measured.md.
    #[arg(long)]
    write: bool,
}

/// One alternation: the warm `vm-test`'s report timings and wall time, then the bare boot's
/// wall time.
struct Sample {
    timings: Timings,
    wall: f64,
    bare: f64,
}

pub(crate) fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    let runs = opts.runs.unwrap_or(if opts.fresh { 1 } else { 3 });
    if runs == 0 {
        bail!("--runs 0 measures nothing: give at least 1 (3 or more for a spread)");
    }
    let pin = bpfvm_host::kernel::pins::resolve(&opts.kernel)?;
    // The `vm-test` both modes time, with the VM shape asked for.
    let vm_test_args = [
        "--kernel".to_string(),
        opts.kernel.clone(),
        "--cpus".into(),
        opts.cpus.to_string(),
        "--memory".into(),
        opts.memory.clone(),
    ];
    let command = command_line(&opts, runs);
    if opts.fresh {
        let (table, accel) = fresh::run(&opts.kernel, &vm_test_args, runs, events)?;
        if opts.write {
            page::write("fresh", &command, &accel, &table, events)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let tools = bpfvm_host::machine::provision::ensure(events)?;
    let tree = bpfvm_host::kernel::pins::fetch(&pin, events)?;
    let accel = bpfvm_host::machine::accel::decide(
        Choice::Auto,
        TcgThread::Auto,
        &tree.vmlinuz,
        bpfvm_host::domain::arch::Arch::X86_64,
    )?;
    let sh = Shell::new()?;
    let (kernel, cpus, memory) = (&opts.kernel, opts.cpus.to_string(), &opts.memory);
    let args = &vm_test_args;
    let vm_test = || {
        cmd!(sh, "cargo xtask vm-test {args...}")
            .quiet()
            .ignore_stdout()
            .ignore_stderr()
            .run()
            .context("`cargo xtask vm-test` failed: run it by hand to see why")
    };
    events.step(format!(
        "warm-up: cargo xtask vm-test --kernel {kernel} (untimed)"
    ));
    vm_test()?;

    let path = std::env::join_paths(tools.path_prefix.iter().cloned().chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))?;
    let vng = &tools.vng;
    let vmlinuz = &tree.vmlinuz;
    let no_kvm = (!accel.is_kvm()).then_some("--disable-kvm");
    // The bare boot threads TCG as vm-test does (`tcg_thread`).
    let accel_opts: &Vec<String> = &accel
        .qemu_opts()
        .iter()
        .map(|o| format!("--qemu-opts={o}"))
        .collect();
    let report = bpfvm_host::support::paths::target_dir()
        .join("vm-test")
        .join(kernel)
        .join("report.json");
    let mut samples = Vec::new();
    for i in 1..=runs {
        events.step(format!("run {i} of {runs}: vm-test, then a bare boot"));
        let start = Instant::now();
        vm_test()?;
        let wall = start.elapsed().as_secs_f64();
        let timings = read_report(&report)?.timings;
        // vng's output is piped (qemu truncates a file it is given as stdout).
        let start = Instant::now();
        cmd!(sh, "{vng} --user root --cpus {cpus} --memory {memory} {no_kvm...} {accel_opts...} --run {vmlinuz} --exec true")
            .env("PATH", &path)
            .quiet()
            .ignore_stderr()
            .read()
            .context("the bare vng boot failed")?;
        let bare = start.elapsed().as_secs_f64();
        samples.push(Sample {
            timings,
            wall,
            bare,
        });
    }
    let table = table(&samples, kernel);
    println!("{table}");
    if opts.write {
        page::write("warm", &command, &accel.describe(), &table, events)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The command that reproduces this run, for the page.
fn command_line(opts: &Options, runs: usize) -> String {
    let mut c = format!(
        "cargo xtask bench-suite --kernel {} --runs {runs}",
        opts.kernel
    );
    if opts.fresh {
        c += " --fresh";
    }
    if opts.cpus != defaults::CPUS || opts.memory != defaults::MEMORY {
        c += &format!(" --cpus {} --memory {}", opts.cpus, opts.memory);
    }
    c + " --write"
}

fn read_report(path: &Path) -> Result<Report> {
    let s = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_str(&s).with_context(|| format!("parse {}", path.display()))
}

/// (min, median, max) of `xs`.
pub(crate) fn spread(xs: &[f64]) -> Option<(f64, f64, f64)> {
    let median = stats::median(xs)?;
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((min, median, max))
}

/// The markdown table: one row per phase of the report (the guest's phases by its kernel's
/// clock under `tests`), what passed outside the run's own clock (cargo and the xtask's
/// start), then the wall times and the ratios to the bare boot.
fn table(samples: &[Sample], kernel: &str) -> String {
    let bare: Vec<f64> = samples.iter().map(|s| s.bare).collect();
    let bare_median = spread(&bare).map_or(f64::NAN, |(_, m, _)| m);
    let mut out = format!(
        "warm `cargo xtask vm-test --kernel {kernel}` against a bare `vng --exec true` of the \
         same kernel, {} runs each, alternated\n\n\
         | phase | min s | median s | max s | median / bare boot |\n| --- | --- | --- | --- | --- |\n",
        samples.len()
    );
    let mut row = |name: &str, xs: Vec<f64>| {
        if let Some((lo, mid, hi)) = spread(&xs) {
            out.push_str(&format!(
                "| {name} | {lo:.1} | {mid:.1} | {hi:.1} | {:.2} |\n",
                mid / bare_median
            ));
        }
    };
    let col = |f: &dyn Fn(&Sample) -> Option<f64>| samples.iter().filter_map(f).collect();
    row("prepare", col(&|s| s.timings.prepare_s));
    row("build", col(&|s| s.timings.build_s));
    row("boot", col(&|s| s.timings.boot_s));
    row("tests (the guest script)", col(&|s| s.timings.tests_s));
    let mut guest: Vec<&str> = vec![];
    for s in samples {
        for p in &s.timings.guest_phases {
            if !guest.contains(&p.name.as_str()) {
                guest.push(&p.name);
            }
        }
    }
    for name in guest {
        let phase = |s: &Sample| {
            let p = s.timings.guest_phases.iter().find(|p| p.name == name);
            p.map(|p| p.s)
        };
        row(&format!("guest: {name}"), col(&phase));
    }
    row("shutdown", col(&|s| s.timings.shutdown_s));
    row("report", col(&|s| s.timings.report_s));
    row(
        "outside the run (cargo, the xtask's start)",
        col(&|s| s.timings.wall_s.map(|w| s.wall - w)),
    );
    row("vm-test wall", col(&|s| Some(s.wall)));
    row("bare vng boot", bare);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_the_middle_of_odd_and_even_counts() {
        assert_eq!(spread(&[3.0, 1.0, 2.0]), Some((1.0, 2.0, 3.0)));
        assert_eq!(spread(&[4.0, 1.0, 2.0, 3.0]), Some((1.0, 2.5, 4.0)));
        assert_eq!(spread(&[]), None);
    }

    #[test]
    fn table_gives_each_phase_its_ratio_to_the_bare_boot() {
        use bpfvm_host::results::report::Span;
        let s = |boot: f64, bare: f64, probe: bool| {
            let mut guest_phases = vec![Span {
                name: "kernel boot".into(),
                s: boot - 1.0,
            }];
            if probe {
                guest_phases.push(Span {
                    name: "probe".into(),
                    s: 1.0,
                });
            }
            Sample {
                timings: Timings {
                    prepare_s: Some(0.1),
                    build_s: Some(0.4),
                    boot_s: Some(boot),
                    tests_s: Some(9.0),
                    guest_phases,
                    wall_s: Some(boot + 9.5),
                    ..Timings::default()
                },
                wall: boot + 10.0,
                bare,
            }
        };
        let t = table(
            &[s(7.0, 7.0, true), s(8.0, 7.5, false), s(7.5, 8.0, true)],
            "6.1",
        );
        assert!(t.contains("| boot | 7.0 | 7.5 | 8.0 | 1.00 |"), "{t}");
        assert!(
            t.contains("| bare vng boot | 7.0 | 7.5 | 8.0 | 1.00 |"),
            "{t}"
        );
        assert!(
            t.contains("| guest: kernel boot | 6.0 | 6.5 | 7.0 | 0.87 |"),
            "{t}"
        );
        assert!(
            t.contains("| guest: probe | 1.0 | 1.0 | 1.0 | 0.13 |"),
            "a phase of some runs only: {t}"
        );
        assert!(
            t.contains("| outside the run (cargo, the xtask's start) | 0.5 | 0.5 | 0.5 | 0.07 |"),
            "{t}"
        );
        assert!(
            !t.contains("| shutdown"),
            "a phase never timed has no row: {t}"
        );
    }
}
