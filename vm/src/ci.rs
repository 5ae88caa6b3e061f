//! `cargo xtask ci`: the project's whole check, as CI runs it (`.ci/run`). Every step runs even
//! when an earlier one failed, so one run shows everything that is wrong.
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::accel::Choice;
use crate::output::Events;
use crate::paths::workspace_root;
use crate::run::{self, TestOptions, VmOptions};
use crate::{build, provision};

/// The outcome of one step, for the closing summary.
pub struct StepResult {
    pub name: &'static str,
    pub result: Result<()>,
    pub elapsed: Duration,
}

/// Runs every check; returns each step's result (the caller fails if any failed).
pub fn run(kernel: &str, events: &Events) -> Vec<StepResult> {
    let mut results = Vec::new();
    let mut step = |name: &'static str, f: &mut dyn FnMut() -> Result<()>| {
        events.step(format!("ci: {name}"));
        let start = Instant::now();
        let result = f();
        if let Err(e) = &result {
            events.warn(format!("ci: {name} failed: {e:#}"));
        }
        results.push(StepResult {
            name,
            result,
            elapsed: start.elapsed(),
        });
    };
    step("rustfmt", &mut || {
        cargo(&["fmt", "--all", "--", "--check"], None)?;
        cargo(
            &["fmt", "--manifest-path", "ebpf/Cargo.toml", "--", "--check"],
            None,
        )
    });
    let mut ebpf_dir = None;
    step("setup and BPF objects", &mut || {
        let tools = provision::ensure(events)?;
        ebpf_dir = Some(build::build_ebpf(&tools.ebpf, events)?);
        Ok(())
    });
    step("clippy", &mut || {
        let dir = ebpf_dir
            .as_deref()
            .context("no BPF objects (setup failed)")?;
        cargo(
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
            Some(dir),
        )
    });
    step("actionlint (.github/workflows)", &mut || {
        crate::lint::actionlint(events)
    });
    step("host tests", &mut || {
        cargo(&["test", "--workspace", "--exclude", "bpfvm-tests"], None)
    });
    step(
        "VM lifecycle: exit status, panic, timeout, Ctrl-C",
        &mut || {
            cargo(
                &[
                    "test",
                    "-p",
                    "xtask",
                    "--test",
                    "vm_lifecycle",
                    "--",
                    "--ignored",
                ],
                None,
            )
        },
    );
    step("vm-test", &mut || {
        let opts = TestOptions {
            vm: vm_options(kernel, Duration::from_secs(2400)),
            filter: None,
        };
        let (report, dir) = run::vm_test(&opts, events)?;
        events.note(crate::report::summary_table(&report));
        if !report.ok() {
            bail!("vm-test failed; see {}", dir.join("report.json").display());
        }
        Ok(())
    });
    step("bench-vm --smoke", &mut || {
        let opts = crate::bench::BenchOptions::new(
            vm_options(kernel, Duration::from_secs(1800)),
            crate::bench::Size::Smoke,
        );
        let (report, dir) = crate::bench::bench_vm(&opts, events)?;
        if !report.ok() {
            bail!(
                "the benchmark smoke run failed; see {}",
                dir.join("report.md").display()
            );
        }
        Ok(())
    });
    results
}

fn vm_options(kernel: &str, timeout: Duration) -> VmOptions {
    VmOptions {
        kernel: kernel.to_string(),
        modules: None,
        accel: Choice::Auto,
        append: vec![],
        timeout,
        cpus: 2,
        memory: "2G".into(),
    }
}

/// Runs cargo in the workspace with the output shown; fails on a non-zero exit.
fn cargo(args: &[&str], ebpf_dir: Option<&Path>) -> Result<()> {
    let mut cmd = Command::new("cargo");
    cmd.args(args).current_dir(workspace_root());
    if let Some(dir) = ebpf_dir {
        cmd.env("BPFVM_EBPF_DIR", dir);
    }
    let status = cmd
        .status()
        .with_context(|| format!("starting cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// The closing lines: each step with its time and verdict.
pub fn summary(results: &[StepResult]) -> String {
    results
        .iter()
        .map(|r| {
            let verdict = if r.result.is_ok() { "ok  " } else { "FAIL" };
            format!(
                "{verdict} {:<52} {:>6.0} s",
                r.name,
                r.elapsed.as_secs_f64()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
