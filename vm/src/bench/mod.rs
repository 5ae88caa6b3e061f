//! `cargo xtask bench-vm`: boots the kernel alternately with `spectre_v2=retpoline` and
//! `spectre_v2=off` (each mode at least twice: two boots of one mode differ by up to 20 %),
//! runs the guest benchmark binary (`tests/src/bin/bench.rs`) in each, and writes
//! `target/bench-vm/<kernel>/{report.json,report.md,*.svg}` (`--smoke`: `<kernel>-smoke/`).
pub mod plot;
pub mod reference;
pub mod report;

pub mod theory;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::build;
use crate::guest;
use crate::output::{Events, Output};
use crate::paths::target_dir;
use crate::report::read_fact;
use crate::run::{self, Prepared, VmOptions};
use crate::vng::Ending;
use bpfvm_common::bench_results::Results;
use report::{BenchReport, Run};

/// How much to measure (the guest runner's plan of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    /// One size per benchmark, one boot per mode (CI: the code cannot rot).
    Smoke,
    /// A subset that fits in 10 minutes under TCG.
    Quick,
    /// The threads' whole tables.
    Full,
}

impl Size {
    pub fn name(self) -> &'static str {
        match self {
            Size::Smoke => "smoke",
            Size::Quick => "quick",
            Size::Full => "full",
        }
    }

    /// The boots in order: modes alternate, so drift over time hits both alike.
    pub fn schedule(self) -> Vec<Mode> {
        let rounds = if self == Size::Smoke { 1 } else { 2 };
        (0..rounds)
            .flat_map(|_| [Mode::Retpoline, Mode::Off])
            .collect()
    }
}

/// The spectre_v2 mitigation a boot asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Retpoline,
    Off,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Retpoline => "retpoline",
            Mode::Off => "off",
        }
    }

    /// The kernel command line argument.
    pub fn cmdline_arg(self) -> String {
        format!("spectre_v2={}", self.name())
    }

    /// What `/sys/devices/system/cpu/vulnerabilities/spectre_v2` shows in this mode.
    pub fn expected(self) -> &'static str {
        match self {
            Mode::Retpoline => "Retpolines",
            Mode::Off => "Vulnerable",
        }
    }
}

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub vm: VmOptions,
    pub size: Size,
    /// Benchmark groups (`bloom`, `bpf_loop`, `batch`); empty: all.
    pub only: Vec<String>,
}

/// Where the guest runner writes its results in the shared directory.
const RESULTS: &str = "bench.json";
/// The guest runner's exit status.
const RC: &str = "bench.rc";
/// The prefix of the guest runner's progress lines (tests/src/bench/mod.rs).
const PROGRESS: &str = "bpfvm-bench-progress ";

pub fn bench_vm(opts: &BenchOptions, events: &Events) -> Result<(BenchReport, PathBuf)> {
    let p = run::prepare(&opts.vm, events)?;
    let ebpf_dir = build::build_ebpf(&p.tools.ebpf, events)?;
    let bin = build::build_guest_bin(&ebpf_dir, "bench", "release", events)?;
    // A smoke run (CI) must not overwrite the report of a real run.
    let out_dir = match opts.size {
        Size::Smoke => target_dir()
            .join("bench-vm")
            .join(format!("{}-smoke", p.label)),
        _ => target_dir().join("bench-vm").join(&p.label),
    };
    let start = std::time::Instant::now();
    let modes = opts.size.schedule();
    let mut runs = Vec::new();
    for (i, &mode) in modes.iter().enumerate() {
        let label = format!("boot {}/{} ({})", i + 1, modes.len(), mode.cmdline_arg());
        events.step(format!("{label}: {} benchmarks", opts.size.name()));
        runs.push(one_run(&p, opts, mode, &label, &bin, &out_dir, i, events)?);
    }
    let report = report::build(&p, opts, runs, start.elapsed().as_secs_f64());
    report::write(&report, &out_dir)?;
    Ok((report, out_dir))
}

#[allow(clippy::too_many_arguments)]
fn one_run(
    p: &Prepared,
    opts: &BenchOptions,
    mode: Mode,
    label: &str,
    bin: &Path,
    out_dir: &Path,
    index: usize,
    events: &Events,
) -> Result<Run> {
    let files = run::RunDir::new(out_dir)?;
    let (shared, script) = (files.shared.as_path(), files.script.as_path());
    let out = shared.join(RESULTS);
    guest::write(
        script,
        &guest::bench_script(
            shared,
            bin,
            opts.size.name(),
            &opts.only,
            &out,
            &shared.join(RC),
        ),
    )?;
    let mut vm = opts.vm.clone();
    // The mode is forced: a user's own spectre_v2= would make the runs meaningless.
    vm.append.retain(|a| !a.starts_with("spectre_v2="));
    vm.append.push(mode.cmdline_arg());
    let outcome = run::boot(
        p,
        &vm,
        shared,
        script,
        &with_bench_progress(events.clone(), label),
    )?;

    let spectre_v2 = read_fact(shared, guest::files::SPECTRE_V2);
    let cmdline = read_fact(shared, guest::files::CMDLINE);
    let results: Option<Results> = std::fs::read_to_string(&out)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok());
    let mut problems = Vec::new();
    if !spectre_v2
        .as_deref()
        .is_some_and(|s| s.contains(mode.expected()))
    {
        problems.push(format!(
            "spectre_v2 reads {:?}, not {} as {} asks",
            spectre_v2.as_deref().unwrap_or("nothing"),
            mode.expected(),
            mode.cmdline_arg()
        ));
    }
    if outcome.ending != Ending::Exited(0) {
        problems.push(outcome.diagnosis().lines().next().unwrap_or("").to_string());
        events.warn(outcome.diagnosis());
    }
    match (&results, read_fact(shared, RC).as_deref()) {
        (None, rc) => problems.push(format!(
            "the guest runner wrote no results (exit status {})",
            rc.unwrap_or("unknown")
        )),
        (Some(_), Some("0")) => {}
        (Some(_), rc) => problems.push(format!(
            "the guest runner exited with status {}",
            rc.unwrap_or("unknown")
        )),
    }
    let results = results.unwrap_or_default();
    for e in &results.errors {
        events.warn(format!("{label}: {e}"));
    }
    for skip in &results.skipped {
        events.note(format!("{label}: skipped {skip}"));
    }
    files.keep(
        &out_dir.join(format!("guest-{}-{}", index + 1, mode.name())),
        events,
    );
    Ok(Run {
        mode,
        spectre_v2,
        cmdline,
        valid: problems.is_empty(),
        invalid_reason: (!problems.is_empty()).then(|| problems.join("; ")),
        wall_time_s: outcome.elapsed.as_secs_f64(),
        results,
    })
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

    #[test]
    fn modes_alternate_and_each_runs_twice_except_in_smoke() {
        use Mode::*;
        assert_eq!(Size::Quick.schedule(), vec![Retpoline, Off, Retpoline, Off]);
        assert_eq!(Size::Full.schedule(), vec![Retpoline, Off, Retpoline, Off]);
        assert_eq!(Size::Smoke.schedule(), vec![Retpoline, Off]);
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
}
