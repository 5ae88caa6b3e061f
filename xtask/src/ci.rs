//! `cargo xtask ci`: the project's whole check, as CI runs it (`.ci/run`). Every step runs even
//! when an earlier one failed, so one run shows everything that is wrong.
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use xshell::{cmd, Shell};

use bpfvm_host::domain::options::{defaults, VmOptions};
use bpfvm_host::flows::run::{self, TestOptions};
use bpfvm_host::kernel::choice::KernelChoice;
use bpfvm_host::machine::{build, provision};
use bpfvm_host::support::output::Events;
use bpfvm_host::support::paths::workspace_root;

/// The project's whole check as CI runs it: rustfmt, clippy, host tests, the guest suite.
#[derive(Args)]
pub(crate) struct Options {
    /// The kernel the guest steps boot.
    #[arg(long, default_value = defaults::KERNEL)]
    kernel: String,
    /// The separate kernel-build check instead of the others (not part of CI: a cold build
    /// takes many minutes): the kernel_tree host tests, then the whole guest suite on the
    /// kernel built from DIR (docs/kernel-tree.md).
    #[arg(long, value_name = "DIR")]
    kernel_tree: Option<std::path::PathBuf>,
}

/// Runs every step, prints the summary; fails if any step failed.
pub(crate) fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    let results = match &opts.kernel_tree {
        Some(dir) => kernel_tree_steps(dir, events),
        None => steps(&opts.kernel, events),
    };
    outln!("{}", summary(&results));
    Ok(bpfvm::exit_if(results.iter().all(|r| r.result.is_ok())))
}

/// The outcome of one step, for the closing summary.
struct StepResult {
    pub name: &'static str,
    pub result: Result<()>,
    pub elapsed: Duration,
}

/// Runs every check; returns each step's result (the caller fails if any failed).
fn steps(kernel: &str, events: &Events) -> Vec<StepResult> {
    let mut results = Vec::new();
    let sh = match Shell::new() {
        Ok(sh) => sh,
        Err(e) => {
            results.push(StepResult {
                name: "start",
                result: Err(e.into()),
                elapsed: Duration::ZERO,
            });
            return results;
        }
    };
    sh.change_dir(workspace_root());
    host_steps(&sh, &mut results, events);
    guest_steps(&sh, kernel, &mut results, events);
    results
}

/// The checks that boot nothing: formatting, the BPF objects, clippy, the linters, the host
/// tests and the cache's faults.
fn host_steps(sh: &Shell, results: &mut Vec<StepResult>, events: &Events) {
    let cargo = |args: &[&str], ebpf_dir: Option<&Path>| cargo(sh, args, ebpf_dir);
    let mut step =
        |name: &'static str, f: &mut dyn FnMut() -> Result<()>| record(results, events, name, f);
    step("rustfmt", &mut || {
        cargo(&["fmt", "--all", "--", "--check"], None)?;
        cargo(
            &["fmt", "--manifest-path", "ebpf/Cargo.toml", "--", "--check"],
            None,
        )?;
        for manifest in [EXAMPLE_MANIFEST, EXAMPLE_EBPF_MANIFEST] {
            cargo(&["fmt", "--manifest-path", manifest, "--", "--check"], None)?;
        }
        Ok(())
    });
    let mut ebpf_dir = None;
    step("setup and BPF objects", &mut || {
        let tools = provision::ensure(events)?;
        // The host tests run the selftests' tree copy, whose rsync the selftests step
        // would install only later.
        provision::ensure_packages(&["rsync"], events)?;
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
    step(
        "lint: pins, actionlint, zizmor (workflows, action.yml, docs' examples), shellcheck (ci/)",
        &mut || crate::lint::check(sh, events),
    );
    step("host tests", &mut || {
        cargo(&["test", "--workspace", "--exclude", "bpfvm-tests"], None)
    });
    step(
        "cache faults: full disk, SIGKILL, two fetches at once",
        &mut || {
            cargo(
                &[
                    "test",
                    "-p",
                    "xtask",
                    "--test",
                    "cache_faults",
                    "--",
                    "--ignored",
                ],
                None,
            )?;
            cargo(
                // The workspace's features, as the host tests built them: `-p bpfvm-host`
                // alone unifies fewer features and rebuilt the crate and four dependencies.
                &[
                    "test",
                    "--workspace",
                    "--exclude",
                    "bpfvm-tests",
                    "--lib",
                    "--",
                    "--ignored",
                    "--exact",
                    "kernel::pins::tests::two_concurrent_fetches_share_one_cache",
                ],
                None,
            )
        },
    );
}

/// The checks that boot `kernel`: the VM's lifecycle, the suite, the verifier's statistics, the
/// kernel's selftests, the example crate and the benchmarks' smoke run.
fn guest_steps(sh: &Shell, kernel: &str, results: &mut Vec<StepResult>, events: &Events) {
    // The host crates' VM tests, which boot their own guests (`#[ignore]` outside `ci`).
    let vm_tests = |name: &str| {
        cargo(
            sh,
            &["test", "-p", "xtask", "--test", name, "--", "--ignored"],
            None,
        )
    };
    let mut step =
        |name: &'static str, f: &mut dyn FnMut() -> Result<()>| record(results, events, name, f);
    step(
        "VM lifecycle: exit status, panic, retry, timeout, signals, bad input",
        &mut || vm_tests("vm_lifecycle"),
    );
    step(
        "a kept guest: reused, refused after a pin, a stopped run's log kept, gone with its keeper",
        &mut || vm_tests("warm_guest"),
    );
    step("vm-test", &mut || suite(kernel, events));
    step(
        "bpfvm mcp, driven by the MCP Python SDK: a run, a cancel, a killed client, two clients at once",
        &mut || {
            let args = ["test", "-p", "bpfvm", "--test", "mcp", "--", "--ignored"];
            cargo(sh, &args, None)
        },
    );
    step(
        "verifier statistics against kernels/verifier/ (0 %)",
        &mut || {
            if !crate::verifier::check(kernel)? {
                bail!("the verifier's statistics changed on {kernel} (see above)");
            }
            Ok(())
        },
    );
    step(
        "selftests: the kernel's test_progs -t bloom_filter_map,bpf_loop",
        &mut || selftests_slice(kernel, events),
    );
    step(
        "examples/map-test: cargo test through bpfvm exec, bpfvm test on 6.1 and 6.12",
        &mut || own_crate(sh),
    );
    step(
        "bpfvm test --against: a regression planted in a scratch repository, named (exit 1)",
        &mut || change_plant(sh, kernel),
    );
    step(
        "bench-vm --smoke, against the committed instruction counts",
        &mut || bench_smoke(kernel, events),
    );
}

/// The whole suite on `kernel`, in a fresh boot.
fn suite(kernel: &str, events: &Events) -> Result<()> {
    let opts = TestOptions {
        kernel: pin(kernel)?,
        vm: VmOptions::new(Duration::from_secs(defaults::TEST_TIMEOUT_S)),
        filter: None,
        piece: None,
        fresh: true,
    };
    let (report, dir) = run::vm_test(&opts, events)?;
    events.note(bpfvm_host::results::report::summary_table(&report));
    if !report.ok() {
        bail!("vm-test failed; see {}", dir.join("report.json").display());
    }
    Ok(())
}

/// The slice of the kernel's own selftests CI runs ([`CI_SELFTESTS`]).
fn selftests_slice(kernel: &str, events: &Events) -> Result<()> {
    let opts = bpfvm_host::flows::selftests::Options {
        kernel: pin(kernel)?,
        vm: VmOptions::new(Duration::from_secs(defaults::RUN_TIMEOUT_S)),
        pattern: Some(CI_SELFTESTS.into()),
        maps: false,
        clang: None,
        bless: false,
        piece: None,
        denylists: vec![],
        veristat: false,
        unit: None,
    };
    let (report, dir) = bpfvm_host::flows::selftests::selftests(&opts, events)?;
    events.note(bpfvm_host::results::report::summary_table(&report));
    if !report.ok() {
        bail!(
            "selftests failed; see {}",
            dir.join("report.json").display()
        );
    }
    Ok(())
}

/// bench-vm's smoke run, its instruction counts against the committed reference.
fn bench_smoke(kernel: &str, events: &Events) -> Result<()> {
    let opts = bpfvm_host::flows::bench::BenchOptions::new(
        pin(kernel)?,
        VmOptions::new(Duration::from_secs(1800)),
        bpfvm_host::flows::bench::Size::Smoke,
    );
    let (report, dir) = bpfvm_host::flows::bench::bench_vm(&opts, events)?;
    if !report.ok() {
        bail!(
            "the benchmark smoke run failed; see {}",
            dir.join("report.md").display()
        );
    }
    // Under TCG: a change that adds instructions to a measured path fails here.
    bpfvm_host::flows::bench::check_against_reference(&report, events)
}

/// The kernel's own selftests CI runs: the two the seed threads' programs are tested by (the
/// whole run is the separate check `cargo xtask selftests --kernel 6.1 --maps`,
/// docs/selftests.md).
const CI_SELFTESTS: &str = "bloom_filter_map,bpf_loop";

/// The pin `version`.
fn pin(version: &str) -> Result<KernelChoice> {
    Ok(KernelChoice::Pin(bpfvm_host::kernel::pins::resolve(
        version,
    )?))
}

/// `ci --kernel-tree DIR`: the config, cache and build logic's host tests, then the guest
/// suite on DIR's kernel, which must pass with no skip where the tree's release has the
/// feature (the same verdicts as for a pin).
fn kernel_tree_steps(dir: &Path, events: &Events) -> Vec<StepResult> {
    let mut results = Vec::new();
    let mut step = |name: &'static str, f: &mut dyn FnMut() -> Result<()>| {
        record(&mut results, events, name, f)
    };
    step("source_tree host tests", &mut || {
        let sh = Shell::new()?;
        sh.change_dir(workspace_root());
        cargo(
            &sh,
            &["test", "-p", "bpfvm-host", "--lib", "source_tree"],
            None,
        )
    });
    step("vm-test --kernel-tree (builds the kernel)", &mut || {
        let opts = TestOptions {
            kernel: KernelChoice::Tree {
                dir: dir.to_path_buf(),
                kconfig: vec![],
            },
            vm: VmOptions::new(Duration::from_secs(defaults::TEST_TIMEOUT_S)),
            filter: None,
            piece: None,
            fresh: true,
        };
        let (report, out) = run::vm_test(&opts, events)?;
        events.note(bpfvm_host::results::report::summary_table(&report));
        if !report.ok() {
            bail!("vm-test failed; see {}", out.join("report.json").display());
        }
        Ok(())
    });
    results
}

/// Runs one step, warning when it fails, and records its result and time.
fn record(
    results: &mut Vec<StepResult>,
    events: &Events,
    name: &'static str,
    f: &mut dyn FnMut() -> Result<()>,
) {
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
}

/// The example crate a user would write, outside the workspace (docs/own-crate.md).
const EXAMPLE_MANIFEST: &str = "examples/map-test/Cargo.toml";
/// Its BPF program, a workspace of its own.
const EXAMPLE_EBPF_MANIFEST: &str = "examples/map-test/ebpf/Cargo.toml";

/// Tests the example crate as docs/own-crate.md tells a user: `bpfvm` on PATH, plain `cargo test`
/// through the runner its `.cargo/config.toml` names (6.1), then `bpfvm test` on two pins.
fn own_crate(sh: &Shell) -> Result<()> {
    let path = bpfvm_on_path(sh)?;
    let _dir = sh.push_dir("examples/map-test");
    cmd!(sh, "cargo test")
        .env("PATH", &path)
        .run()
        .context("cargo test through the runner (bpfvm exec --kernel 6.1)")?;
    cmd!(sh, "bpfvm test --kernel 6.1,6.12")
        .env("PATH", &path)
        .run()
        .context("bpfvm test --kernel 6.1,6.12")?;
    Ok(())
}

/// Builds `bpfvm`; the PATH that finds it first.
fn bpfvm_on_path(sh: &Shell) -> Result<std::ffi::OsString> {
    cmd!(sh, "cargo build -p bpfvm")
        .run()
        .context("building bpfvm")?;
    let bin = bpfvm_host::support::paths::target_dir().join("debug");
    Ok(std::env::join_paths(std::iter::once(bin).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))?)
}

/// A crate with no dependency, made a git repository of two commits: the base, whose test
/// `plant::planted` passes, and head, where it fails (`plant::kept` passes in both). Under
/// the target directory at one path, so its base's worktree and target directory in the
/// cache (a slot per repository path) are the same on every run and built incrementally.
fn plant_repository(sh: &Shell) -> Result<std::path::PathBuf> {
    let repo = bpfvm_host::support::paths::target_dir().join("ci-change");
    let _ = std::fs::remove_dir_all(&repo);
    std::fs::create_dir_all(repo.join("tests"))?;
    std::fs::write(
        repo.join("Cargo.toml"),
        "[package]\nname = \"plant\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         # Not a member of the workspace it is under.\n[workspace]\n",
    )?;
    std::fs::write(repo.join(".gitignore"), "/target\n")?;
    let test = |planted: &str| {
        format!(
            "#[test]\nfn kept() {{\n    assert!(std::path::Path::new(\"/proc/self\").exists());\n}}\n\n\
             #[test]\nfn planted() {{\n    {planted}\n}}\n"
        )
    };
    let _dir = sh.push_dir(&repo);
    let git = |args: &[&str]| {
        cmd!(
            sh,
            "git -c user.name=bpfvm-ci -c user.email=ci@bpfvm.invalid {args...}"
        )
        .quiet()
        .run()
    };
    git(&["init", "--quiet"])?;
    for (planted, message) in [
        (
            "assert!(std::path::Path::new(\"/proc/self\").exists());",
            "base",
        ),
        ("panic!(\"the planted regression\");", "head: a test fails"),
    ] {
        std::fs::write(repo.join("tests/plant.rs"), test(planted))?;
        git(&["add", "-A"])?;
        git(&["commit", "--quiet", "-m", message])?;
    }
    Ok(repo)
}

/// `bpfvm test --against HEAD~1` on [`plant_repository`], `--reruns 0` (one boot a side): the
/// planted failure must be named a regression in change.json, and the run exit 1.
fn change_plant(sh: &Shell, kernel: &str) -> Result<()> {
    use bpfvm_host::results::change::{Category, Change};
    let path = bpfvm_on_path(sh)?;
    let repo = plant_repository(sh)?;
    let change_json = repo.join("target/bpfvm-test/change/change.json");
    // Its output shown as it runs; the status read, not failed on.
    let status = std::process::Command::new("bpfvm")
        .args(["test", "--kernel", kernel])
        .args(["--against", "HEAD~1", "--reruns", "0"])
        .current_dir(&repo)
        .env("PATH", &path)
        .status()
        .context("starting bpfvm test")?
        .code();
    let text = std::fs::read_to_string(&change_json)
        .with_context(|| format!("bpfvm test --against wrote no {}", change_json.display()))?;
    let change: Change = serde_json::from_str(&text)?;
    let planted = change.tests.iter().find(|t| t.test == "plant::planted");
    let got = planted.map(|t| t.category);
    if status != Some(1) || got != Some(Category::Regression) || change.exit_status != 1 {
        bail!(
            "bpfvm test --against HEAD~1: exit {status:?} and plant::planted {got:?}, expected \
             exit 1 and a regression ({})",
            change_json.display()
        );
    }
    Ok(())
}

/// Runs cargo in the workspace with the output shown; fails on a non-zero exit.
fn cargo(sh: &Shell, args: &[&str], ebpf_dir: Option<&Path>) -> Result<()> {
    let mut c = cmd!(sh, "cargo {args...}");
    if let Some(dir) = ebpf_dir {
        c = c.env("BPFVM_EBPF_DIR", dir);
    }
    c.run()
        .with_context(|| format!("`cargo {}` failed", args.join(" ")))
}

/// The closing lines: each step with its time and verdict.
fn summary(results: &[StepResult]) -> String {
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
