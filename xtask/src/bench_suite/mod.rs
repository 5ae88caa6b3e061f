//! `cargo xtask bench-suite`: where a warm `vm-test` spends its time, phase by phase, against a
//! bare virtme-ng boot of the same kernel. The two alternate so that host noise falls on both
//! alike; each is repeated and reported as min / median / max. A measurement, never a test:
//! nothing here asserts a duration. `--fresh` times a first run instead ([`fresh`]).
mod fresh;

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bpfvm_host::domain::options::TcgThread;
use bpfvm_host::domain::options::{defaults, Choice};
use bpfvm_host::flows::bench::stats;
use bpfvm_host::results::report::Report;
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
}

/// One alternation: the warm `vm-test`'s phases and wall time, then the bare boot's wall time.
struct Sample {
    phases: [Option<f64>; 5],
    wall: f64,
    bare: f64,
}

const PHASES: [&str; 5] = ["prepare", "build", "boot", "tests", "shutdown"];

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
    if opts.fresh {
        fresh::run(&opts.kernel, &vm_test_args, runs, events)?;
        return Ok(ExitCode::SUCCESS);
    }
    let tools = bpfvm_host::machine::provision::ensure(events)?;
    let tree = bpfvm_host::kernel::pins::fetch(&pin, events)?;
    let accel = bpfvm_host::machine::accel::decide(Choice::Auto, TcgThread::Auto, &tree.vmlinuz)?;
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
        let t = read_report(&report)?.timings;
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
            phases: [t.prepare_s, t.build_s, t.boot_s, t.tests_s, t.shutdown_s],
            wall,
            bare,
        });
    }
    println!(
        "{}",
        table(&samples, &format!("{kernel}, {}", accel.describe()))
    );
    Ok(ExitCode::SUCCESS)
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

/// The markdown table: one row per phase, then the wall times and the ratios to the bare boot.
fn table(samples: &[Sample], what: &str) -> String {
    let bare: Vec<f64> = samples.iter().map(|s| s.bare).collect();
    let bare_median = spread(&bare).map_or(f64::NAN, |(_, m, _)| m);
    let mut out = format!(
        "warm `cargo xtask vm-test` vs bare `vng --exec true`, {} runs each, alternated ({what})\n\n\
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
    for (i, name) in PHASES.iter().enumerate() {
        row(name, samples.iter().filter_map(|s| s.phases[i]).collect());
    }
    row("vm-test wall", samples.iter().map(|s| s.wall).collect());
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
        let s = |boot: f64, bare: f64| Sample {
            phases: [Some(0.1), Some(0.4), Some(boot), Some(9.0), None],
            wall: boot + 10.0,
            bare,
        };
        let t = table(&[s(7.0, 7.0), s(8.0, 7.5), s(7.5, 8.0)], "6.1, TCG");
        assert!(t.contains("| boot | 7.0 | 7.5 | 8.0 | 1.00 |"), "{t}");
        assert!(
            t.contains("| bare vng boot | 7.0 | 7.5 | 8.0 | 1.00 |"),
            "{t}"
        );
        assert!(
            !t.contains("| shutdown"),
            "a phase never timed has no row: {t}"
        );
    }
}
