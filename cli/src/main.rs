//! `bpfvm`: your own crate's tests as root in pinned kernels. `exec` is the cargo runner,
//! `test` runs a whole crate in one boot per kernel. The kernels, cache, checks and reports
//! are those of `cargo xtask` (the `bpfvm-host` library).
#![warn(unreachable_pub)]
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use bpfvm::{github, SelftestsArgs, SetupArgs, VmArgs};
use bpfvm_host::domain::options::defaults;
use bpfvm_host::flows::crate_test::{self, CrateTestOptions};
use bpfvm_host::machine::vng::ShellEnding;
use bpfvm_host::support::output::{Events, Output};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "bpfvm",
    about = "Run your crate's tests as root in pinned kernels",
    version
)]
struct Cli {
    /// Also show the commands run and the kernel console.
    #[arg(long, short, global = true)]
    verbose: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what is missing (Debian packages, virtme-ng, virtiofsd, the eBPF toolchain).
    Setup(SetupArgs),
    /// Show the pinned kernels and what is cached, and the cached kernel tree builds.
    Kernels,
    /// Build the kernel's own BPF selftests (test_progs, test_maps, bench) from its source and
    /// run them in one boot, each upstream test judged like your crate's tests.
    Selftests(SelftestsArgs),
    /// Cut a run into pieces by measured cost: the matrix a workflow runs, as JSON.
    Plan(bpfvm::pieces::PlanArgs),
    /// Merge the pieces' reports into one verdict: every piece once, every test once.
    Merge(bpfvm::pieces::MergeArgs),
    /// Keep reports' measured test times in kernels/costs/, the plan's costs.
    Costs(bpfvm::pieces::CostsArgs),
    /// Run a command as root in the guest from the current directory: its exit status, stdout
    /// and stderr come back unchanged. The cargo runner:
    /// `runner = ["bpfvm", "exec", "--kernel", "6.1", "--"]`.
    Exec {
        #[command(flatten)]
        vm: VmArgs,
        /// Seconds before the VM is killed.
        #[arg(long, default_value_t = defaults::RUN_TIMEOUT_S)]
        timeout: u64,
        /// Also pass this host variable (repeatable); RUST_BACKTRACE, RUST_LOG, RUST_TEST_*
        /// and CARGO_* always pass.
        #[arg(long = "env", value_name = "NAME")]
        env: Vec<String>,
        /// A kernel splat (or a kernel log that lost records or stops early) is printed but
        /// does not make the exit status non-zero.
        #[arg(long)]
        allow_splats: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Build the crate's tests (`cargo test --no-run`) and run them all in one boot per kernel
    /// (`--kernel 6.1,6.12`, or `all`); writes <target>/bpfvm-test/<kernel>/{report.json,
    /// junit.xml} and matrix.json. Arguments after `--` are cargo test's (`-- --release -- FILTER`).
    Test {
        #[command(flatten)]
        vm: VmArgs,
        /// Seconds before each VM is killed.
        #[arg(long, default_value_t = defaults::TEST_TIMEOUT_S)]
        timeout: u64,
        /// Also pass this host variable (repeatable), as for `exec`.
        #[arg(long = "env", value_name = "NAME")]
        env: Vec<String>,
        /// Also load every program of these BPF objects once for the verifier's statistics
        /// (none named: every object in the crate's build output,
        /// <target>/**/bpfel-unknown-none/release); writes verifier.json and a veristat CSV,
        /// verifier.csv, beside each kernel's report.
        #[arg(long, value_name = "OBJ", num_args = 0..)]
        verifier_stats: Option<Vec<PathBuf>>,
        /// Run only piece I of the crate's plan in N pieces (`bpfvm plan --for crate`, cut from
        /// bpfvm-inventory.txt; docs/pieces.md); the report says which plan and piece.
        #[arg(long, value_name = "I/N", env = "BPFVM_PIECE")]
        piece: Option<bpfvm_host::results::plan::PieceId>,
        /// The plan's hash the matrix gave this piece: a plan cut otherwise here is an error.
        #[arg(long, value_name = "HASH", env = "BPFVM_PLAN", requires = "piece")]
        plan: Option<String>,
        /// cargo test's arguments: cargo's, then `--` and the test binaries'.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Compare two veristat CSVs (`bpfvm test --verifier-stats`'s verifier.csv, or
    /// `veristat -o csv`'s), as `veristat -C` shows them; exits 1 when a program went from
    /// success to failure, its processed insns or states moved beyond the threshold, or it is
    /// in one file only.
    VerifierCompare {
        /// The baseline CSV.
        a: PathBuf,
        /// The CSV to judge against it.
        b: PathBuf,
        /// Change in percent of A's count that fails (0: any change).
        #[arg(long, default_value_t = 0.0)]
        threshold: f64,
    },
    /// Check bpfvm-inventory.txt in the workspace's root (the tests `bpfvm test` must run; the
    /// check is on when the file exists) against the crate's tests; --bless writes it.
    /// Arguments after `--` are cargo test's, as for `test`.
    Inventory {
        /// Write the tests the build holds into bpfvm-inventory.txt.
        #[arg(long)]
        bless: bool,
        /// cargo's arguments (`--release`, `-p NAME`, `--features X`...).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// An interactive root shell in the guest, in the current directory (shared, writable),
    /// for debugging by hand; `exit` or Ctrl-D powers the VM off.
    Shell {
        #[command(flatten)]
        vm: VmArgs,
        /// Seconds before the VM is killed. Default: none.
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Build a BPF crate of yours (aya-ebpf, `#![no_std]`, a `[[bin]]` per object) for
    /// bpfel-unknown-none with the toolchain `bpfvm setup` provisions (-Z build-std=core,
    /// bpf-linker); prints the directory holding the objects. For a build script:
    /// docs/own-crate.md, "Your own BPF programs".
    BuildEbpf {
        /// The BPF crate's directory.
        dir: PathBuf,
        /// Where to build. Default: <dir>/target.
        #[arg(long)]
        target_dir: Option<PathBuf>,
    },
    /// For GitHub Actions: append a markdown summary of the reports (each kernel's verdict,
    /// the failures, the matrix) to $GITHUB_STEP_SUMMARY, and print an `::error` annotation at
    /// the file:line of each failing test's panic. Exits 0 when the reports say tests failed.
    GithubSummary {
        /// Directories of reports: `bpfvm test`'s (with matrix.json) or one kernel's (with
        /// report.json). Default: `bpfvm test`'s for the crate in the current directory.
        dirs: Vec<PathBuf>,
        /// The checkout's root, which annotation paths are relative to. Default:
        /// $GITHUB_WORKSPACE, else the current directory.
        #[arg(long)]
        repo: Option<PathBuf>,
        /// Where the crate's workspace root is in the checkout (panic paths are relative to
        /// it). Default: from `cargo metadata` in the current directory.
        #[arg(long)]
        prefix: Option<PathBuf>,
        /// The file the summary is appended to. Default: $GITHUB_STEP_SUMMARY, else stdout.
        #[arg(long)]
        summary: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli: Cli = bpfvm::parse_or_exit();
    bpfvm::main_status(|| {
        bpfvm::install_signal_handlers()?;
        run(cli.cmd, cli.verbose)
    })
}

fn run(cmd: Cmd, verbose: bool) -> Result<ExitCode> {
    bpfvm_host::support::paths::check_env()?;
    check_checkout()?;
    let events = bpfvm_host::ui::terminal(verbose);
    match cmd {
        Cmd::Setup(args) => bpfvm::setup(&args, &events),
        Cmd::Selftests(args) => bpfvm::selftests(args, &events),
        Cmd::Plan(args) => bpfvm::pieces::plan(&args, &events),
        Cmd::Merge(args) => bpfvm::pieces::merge(&args, &events),
        Cmd::Costs(args) => bpfvm::pieces::costs(&args, &events),
        Cmd::Kernels => {
            for line in bpfvm::kernels_list()? {
                bpfvm_host::ui::print_stdout(&line);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Exec {
            vm,
            timeout,
            env,
            allow_splats,
            command,
        } => {
            let env = bpfvm_host::flows::exec::passed_env(std::env::vars_os(), &env)?;
            // The command's own output is all that goes to stdout and stderr: bpfvm's steps
            // only with --verbose, its warnings always.
            let events = if verbose {
                events
            } else {
                warnings_only(events)
            };
            let kernel = vm.kernel()?;
            let exec = bpfvm_host::flows::exec::vm_exec(
                &kernel,
                &vm.options(timeout),
                &command,
                &env,
                &events,
            )?;
            // A closed stdout or stderr drops the output, as for any command.
            let _ = std::io::stdout().lock().write_all(&exec.stdout);
            let _ = std::io::stderr().lock().write_all(&exec.stderr);
            bpfvm::command_status(&exec.outcome, &exec.health, allow_splats, &events)
        }
        Cmd::Test {
            vm,
            timeout,
            env,
            verifier_stats,
            piece,
            plan,
            args,
        } => {
            let (cargo_args, test_args) = crate_test::split_args(&args);
            let opts = CrateTestOptions {
                kernels: vm.kernel_args().many()?,
                vm: vm.options(timeout),
                cargo_args,
                test_args,
                env: bpfvm_host::flows::exec::passed_env(std::env::vars_os(), &env)?,
                verifier_stats,
                piece: piece.map(|id| (id, plan)),
            };
            let (reports, dir) = crate_test::crate_test(&opts, &events)?;
            for r in &reports {
                bpfvm_host::ui::print_stdout(&bpfvm_host::results::report::summary_table(r));
            }
            if reports.len() > 1 {
                bpfvm_host::ui::print_stdout(&bpfvm_host::results::report::matrix_table(&reports));
            }
            let verifier = bpfvm_host::results::verifier::matrix::of_reports(&reports);
            if !verifier.is_empty() {
                bpfvm_host::ui::print_stdout(&bpfvm_host::results::verifier::matrix::table(
                    &verifier,
                ));
            }
            for r in &reports {
                if let Some(why) = r.why_failed() {
                    bpfvm_host::ui::print_stdout(&format!(
                        "kernel {} FAILED: {why}",
                        r.kernel.version
                    ));
                }
            }
            bpfvm_host::ui::print_stdout(&format!("reports: {}", dir.display()));
            // No report: interrupted before the first kernel, nothing judged.
            Ok(match reports.is_empty() {
                true => ExitCode::from(bpfvm_host::support::status::STOP),
                false => bpfvm::judged_status(&reports),
            })
        }
        Cmd::VerifierCompare { a, b, threshold } => {
            let c = bpfvm_host::results::verifier::compare_files(&a, &b, threshold)?;
            bpfvm_host::ui::print_stdout(&c.table());
            for f in &c.failures {
                bpfvm_host::ui::print_stderr(&format!("error: {f}"));
            }
            Ok(exit_if(c.failures.is_empty()))
        }
        Cmd::Inventory { bless, args } => inventory(bless, &args, &events),
        Cmd::Shell { vm, timeout } => {
            // The shell's deadline is `timeout` alone (vm_shell passes it on); a zero one is
            // refused as for every run.
            let kernel = vm.kernel()?;
            let opts = vm.options(timeout.unwrap_or(u64::MAX / 4));
            let ending = bpfvm_host::flows::interactive::vm_shell(
                &kernel,
                &opts,
                timeout.map(std::time::Duration::from_secs),
                &events,
            )?;
            match ending {
                ShellEnding::Exited(status) if status.success() => Ok(ExitCode::SUCCESS),
                ShellEnding::Exited(status) => {
                    anyhow::bail!("the VM ended with {status}")
                }
                ShellEnding::Timeout(t) => anyhow::bail!(
                    "the shell was still running after {} s (--timeout); the VM was killed",
                    t.as_secs()
                ),
                ShellEnding::Interrupted => Ok(ExitCode::FAILURE),
            }
        }
        Cmd::BuildEbpf { dir, target_dir } => {
            // Absolute: cargo runs in `dir`, where a relative target would mean another place.
            let dir = std::path::absolute(&dir).with_context(|| format!("{}", dir.display()))?;
            if !dir.join("Cargo.toml").is_file() {
                anyhow::bail!(
                    "{} has no Cargo.toml: pass the directory of your BPF crate (e.g. ebpf)",
                    dir.display()
                );
            }
            let target = match target_dir {
                Some(t) => std::path::absolute(&t).with_context(|| format!("{}", t.display()))?,
                None => dir.join("target"),
            };
            let tools = bpfvm_host::machine::provision::ensure(&events)?;
            let objects =
                bpfvm_host::machine::build::build_ebpf_crate(&tools.ebpf, &dir, &target, &events)?;
            bpfvm_host::ui::print_stdout(&objects.display().to_string());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::GithubSummary {
            dirs,
            repo,
            prefix,
            summary,
        } => {
            github_summary(dirs, repo, prefix, summary, &events)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `bpfvm inventory [--bless]`.
fn inventory(bless: bool, cargo_args: &[String], events: &Events) -> Result<ExitCode> {
    use bpfvm_host::results::inventory::{bless_or_check, CRATE_BLESS, CRATE_FILE};
    let (built, path) = crate_test::crate_inventory(cargo_args, events)?;
    let (ok, say) = bless_or_check(
        &built,
        &path,
        (CRATE_FILE, CRATE_BLESS, "bpfvm test"),
        bless,
    )?;
    if ok {
        bpfvm_host::ui::print_stdout(&say);
    } else {
        bpfvm_host::ui::print_stderr(&say);
    }
    Ok(exit_if(ok))
}

fn github_summary(
    dirs: Vec<PathBuf>,
    repo: Option<PathBuf>,
    prefix: Option<PathBuf>,
    summary: Option<PathBuf>,
    events: &Events,
) -> Result<()> {
    let cwd = std::env::current_dir().context("the current directory")?;
    let repo = repo
        .or_else(|| std::env::var_os("GITHUB_WORKSPACE").map(PathBuf::from))
        .unwrap_or_else(|| cwd.clone());
    let repo = std::path::absolute(&repo).with_context(|| format!("{}", repo.display()))?;
    let needs_cargo = dirs.is_empty() || prefix.is_none();
    let cargo = if needs_cargo {
        Some(crate_test::cargo_dirs(events)?)
    } else {
        None
    };
    let dirs = match (dirs.is_empty(), &cargo) {
        (true, Some(c)) => vec![c.target.join(crate_test::REPORTS)],
        _ => dirs,
    };
    let prefix = match (prefix, &cargo) {
        (Some(p), _) => p,
        (None, Some(c)) => c
            .workspace_root
            .strip_prefix(&repo)
            .map(PathBuf::from)
            .unwrap_or_default(),
        (None, None) => PathBuf::new(),
    };
    let mut reports = Vec::new();
    for d in &dirs {
        reports.extend(github::load(d)?);
    }
    let paths = github::Paths {
        prefix,
        repo: Some(repo),
    };
    let md = github::step_summary(&reports, &paths);
    match summary.or_else(|| std::env::var_os("GITHUB_STEP_SUMMARY").map(PathBuf::from)) {
        Some(file) => {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&file)
                .with_context(|| format!("opening {}", file.display()))?;
            f.write_all(md.as_bytes())
                .with_context(|| format!("writing {}", file.display()))?;
        }
        None => bpfvm_host::ui::print_stdout(&md),
    }
    // Written as they are (print_stdout would defuse them): each is one line whose guest
    // text `github::escape_data` made inert.
    let mut out = std::io::stdout().lock();
    for line in github::annotations(&reports, &paths) {
        writeln!(out, "{line}").context("writing the annotations")?;
    }
    Ok(())
}

/// The pins and tools are read from the checkout `bpfvm` was installed from (so that a
/// `git pull` or `kernels bump` there is seen without reinstalling); a checkout moved or
/// deleted since is named, with the fix.
fn check_checkout() -> Result<()> {
    let pins = bpfvm_host::kernel::pins::pins_dir();
    if !pins.is_dir() {
        anyhow::bail!(
            "bpfvm reads its kernel pins from the checkout it was installed from, and {} is \
             gone; reinstall from a checkout: `cargo install --path <checkout>/cli`",
            pins.display()
        );
    }
    Ok(())
}

/// `events` reduced to the warnings.
fn warnings_only(events: Events) -> Events {
    Events::new(move |o| {
        if matches!(o, Output::Warn(_)) {
            events.emit(o)
        }
    })
}

fn exit_if(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
