//! `cargo xtask bench-suite --fresh`: the first run as a new user meets it, phase by phase.
//!
//! Each run gets a throw-away cargo home (the crates are downloaded again), bpfvm cache
//! (virtme-ng, virtiofsd, bpf-linker, the kernel) and target directory, all under one temporary
//! directory that is removed afterwards. It builds the xtask, then runs `cargo xtask vm-test`
//! and notes when each of its steps (`==> ` lines) began. Debian packages are system-wide and
//! stay installed: their install time is not part of the figure.
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bpfvm_host::results::report::Timings;
use bpfvm_host::support::output::Events;
use bpfvm_host::support::paths::{target_dir, workspace_root};
use bpfvm_host::support::proc::{LineReader, MAX_LINE};

use super::{read_report, spread};

/// Output lines kept to explain a failure.
const TAIL_LINES: usize = 40;
/// Step lines kept per run: a run prints a few dozen; the cap bounds a runaway.
const MAX_STEPS: usize = 500;

/// One first run: when each step began (seconds from the start) and the vm-test report's phases.
struct FreshRun {
    /// The accelerator the run chose, as its report names it.
    accel: String,
    xtask_s: f64,
    wall_s: f64,
    timings: Timings,
    steps: Vec<(f64, String)>,
}

/// Runs `runs` first runs of `vm-test {vm_test_args}` (for `kernel`), prints each timeline
/// and the table, and returns the table and the accelerator the last run chose.
pub(super) fn run(
    kernel: &str,
    vm_test_args: &[String],
    runs: usize,
    events: &Events,
) -> Result<(String, String)> {
    let mut done = Vec::new();
    for i in 1..=runs {
        events.step(format!(
            "fresh run {i} of {runs}: throw-away cargo home, cache and target; \
             cargo build -p xtask, then cargo xtask vm-test --kernel {kernel}"
        ));
        let r = one(kernel, vm_test_args, events)?;
        println!("{}", timeline(&r, i));
        done.push(r);
    }
    let table = table(&done, kernel);
    println!("{table}");
    let accel = done.last().map(|r| r.accel.clone()).unwrap_or_default();
    Ok((table, accel))
}

fn one(kernel: &str, vm_test_args: &[String], events: &Events) -> Result<FreshRun> {
    let root = tempfile::Builder::new()
        .prefix("bpfvm-fresh-")
        .tempdir_in(target_dir())
        .context("make the throw-away directory under the target directory")?;
    let target = root.path().join("target");
    let env = [
        ("CARGO_HOME", root.path().join("cargo-home")),
        ("XDG_CACHE_HOME", root.path().join("cache")),
        ("CARGO_TARGET_DIR", target.clone()),
    ];
    let start = Instant::now();
    let mut steps = Vec::new();
    watch(
        duct::cmd!("cargo", "build", "-p", "xtask"),
        &env,
        start,
        &mut steps,
    )
    .context("building the xtask in the fresh cargo home")?;
    let xtask_s = start.elapsed().as_secs_f64();
    steps.push((xtask_s, "xtask built".to_string()));
    watch(
        duct::cmd(
            "cargo",
            ["xtask", "vm-test"]
                .into_iter()
                .map(String::from)
                .chain(vm_test_args.iter().cloned()),
        ),
        &env,
        start,
        &mut steps,
    )
    .context("the fresh vm-test")?;
    let wall_s = start.elapsed().as_secs_f64();
    let report = target.join("vm-test").join(kernel).join("report.json");
    let report = read_report(&report)?;
    let (timings, accel) = (report.timings, report.accel.why());
    let accel = format!("{} ({accel})", report.accel.name.to_uppercase());
    events.note(format!(
        "fresh run: {wall_s:.0} s; removing {}",
        root.path().display()
    ));
    Ok(FreshRun {
        accel,
        xtask_s,
        wall_s,
        timings,
        steps,
    })
}

/// Runs `cmd` in the workspace with `env`, its output merged, and records each step line
/// (`==> `) with its time since `start`; fails with the output's last lines on a non-zero exit.
fn watch(
    cmd: duct::Expression,
    env: &[(&str, PathBuf); 3],
    start: Instant,
    steps: &mut Vec<(f64, String)>,
) -> Result<()> {
    let cmd = env
        .iter()
        .fold(cmd, |c, (k, v)| c.env(k, v))
        .dir(workspace_root())
        .stderr_to_stdout()
        .unchecked();
    let reader = cmd.reader()?;
    let mut lines = LineReader::new(&reader, MAX_LINE);
    let mut tail = std::collections::VecDeque::new();
    while let Some(line) = lines.next_line()? {
        if let Some(step) = line.strip_prefix("==> ") {
            if steps.len() < MAX_STEPS {
                steps.push((start.elapsed().as_secs_f64(), step.to_string()));
            }
        }
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
    let status = reader
        .try_wait()?
        .context("the command's output ended but it has not exited")?
        .status;
    if !status.success() {
        bail!(
            "exited with {status}; its last lines:\n{}",
            Vec::from(tail).join("\n")
        );
    }
    Ok(())
}

/// One run's steps, each with the time it began.
fn timeline(r: &FreshRun, i: usize) -> String {
    let mut out =
        format!("fresh run {i}: when each step began\n\n| at s | step |\n| ---: | --- |\n");
    for (t, step) in &r.steps {
        out.push_str(&format!("| {t:.0} | {} |\n", step.replace('|', "\\|")));
    }
    out
}

/// The phases over all runs: min / median / max.
fn table(runs: &[FreshRun], kernel: &str) -> String {
    let mut out = format!(
        "first run of `cargo xtask vm-test --kernel {kernel}`, {} fresh run(s) (Debian packages \
         already installed)\n\n| phase | min s | median s | max s |\n| --- | --- | --- | --- |\n",
        runs.len()
    );
    let col = |phase: fn(&FreshRun) -> Option<f64>| runs.iter().filter_map(phase).collect();
    let rows: [(&str, Vec<f64>); 7] = [
        ("cargo build -p xtask", col(|r| Some(r.xtask_s))),
        ("prepare (tools, kernel)", col(|r| r.timings.prepare_s)),
        ("build (BPF, guest)", col(|r| r.timings.build_s)),
        ("boot", col(|r| r.timings.boot_s)),
        ("tests", col(|r| r.timings.tests_s)),
        ("shutdown", col(|r| r.timings.shutdown_s)),
        ("total", col(|r| Some(r.wall_s))),
    ];
    for (name, xs) in rows {
        if let Some((lo, mid, hi)) = spread(&xs) {
            out.push_str(&format!("| {name} | {lo:.0} | {mid:.0} | {hi:.0} |\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(xtask_s: f64, build_s: f64, wall_s: f64) -> FreshRun {
        FreshRun {
            accel: "TCG".into(),
            xtask_s,
            wall_s,
            timings: Timings {
                prepare_s: Some(100.0),
                build_s: Some(build_s),
                boot_s: Some(15.0),
                tests_s: Some(9.0),
                shutdown_s: None,
                ..Timings::default()
            },
            steps: vec![(0.5, "fetching kernel | 6.1".into())],
        }
    }

    #[test]
    fn table_gives_each_phase_min_median_max_and_leaves_out_untimed_ones() {
        let t = table(
            &[
                run(50.0, 200.0, 400.0),
                run(70.0, 180.0, 390.0),
                run(60.0, 190.0, 420.0),
            ],
            "6.1",
        );
        assert!(t.contains("| cargo build -p xtask | 50 | 60 | 70 |"), "{t}");
        assert!(
            t.contains("| build (BPF, guest) | 180 | 190 | 200 |"),
            "{t}"
        );
        assert!(t.contains("| total | 390 | 400 | 420 |"), "{t}");
        assert!(!t.contains("| shutdown"), "never timed, so no row: {t}");
    }

    #[test]
    fn timeline_escapes_a_pipe_in_a_step() {
        let t = timeline(&run(1.0, 1.0, 1.0), 1);
        assert!(t.contains("| 0 | fetching kernel \\| 6.1 |"), "{t}");
    }
}
