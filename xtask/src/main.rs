//! `cargo xtask`: arguments in, one call into the `vm` library, its result out as an exit code.
//! The developer tasks (`ci`, `lint`, `bench-suite`) live here, not in the library a run needs.
#![warn(unreachable_pub)]
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use bpfvm::{SetupArgs, VmArgs};
use bpfvm_host::bench::{BenchOptions, Group, Size};
use bpfvm_host::options::defaults;
use bpfvm_host::run::TestOptions;
use clap::{Parser, Subcommand};

/// `println!` for what may hold guest text, and that must not panic on a closed stdout.
macro_rules! outln {
    ($($t:tt)*) => { bpfvm_host::ui::print_stdout(&format!($($t)*)) };
}

/// `eprintln!` likewise.
macro_rules! errln {
    ($($t:tt)*) => { bpfvm_host::ui::print_stderr(&format!($($t)*)) };
}

mod bench_suite;
mod ci;
mod lint;
mod mutants;
mod soak;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "bpfvm: BPF integration tests in pinned kernels"
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
    /// Kernel pins (`kernels/*.toml`) and the download cache.
    Kernels {
        #[command(subcommand)]
        cmd: KernelsCmd,
    },
    /// Build the BPF programs in `ebpf/`.
    BuildEbpf,
    /// Run a command as root in the guest; exits with its status.
    VmRun {
        #[command(flatten)]
        vm: VmArgs,
        /// Seconds before the VM is killed.
        #[arg(long, default_value_t = defaults::RUN_TIMEOUT_S)]
        timeout: u64,
        /// A kernel splat while the command runs is printed but does not make the exit
        /// status non-zero.
        #[arg(long)]
        allow_splats: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// The project's whole check as CI runs it: rustfmt, clippy, host tests, the guest suite.
    Ci {
        /// The kernel the guest steps boot.
        #[arg(long, default_value = defaults::KERNEL)]
        kernel: String,
    },
    /// Build and run the test suite in the guest; exits non-zero on any failure.
    VmTest {
        #[command(flatten)]
        vm: VmArgs,
        /// Seconds before the VM is killed.
        #[arg(long, default_value_t = defaults::TEST_TIMEOUT_S)]
        timeout: u64,
        /// Run only tests whose name contains this (not empty: leave the option out to run all).
        #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
        filter: Option<String>,
    },
    /// Benchmark retpoline against spectre_v2=off in the guest (bloom, bpf_loop, batch);
    /// writes target/bench-vm/<kernel>/report.{json,md} and plots.
    BenchVm {
        #[command(flatten)]
        vm: VmArgs,
        /// Seconds before each VM is killed.
        #[arg(long, default_value_t = defaults::BENCH_TIMEOUT_S)]
        timeout: u64,
        /// A subset that fits in 10 minutes under TCG (the default).
        #[arg(long, conflicts_with_all = ["full", "smoke"])]
        quick: bool,
        /// The threads' whole tables (hours under TCG).
        #[arg(long, conflicts_with = "smoke")]
        full: bool,
        /// One size per benchmark and one boot per mode (CI).
        #[arg(long)]
        smoke: bool,
        /// Only these benchmarks: bloom, bpf_loop, batch (comma-separated).
        #[arg(long, value_delimiter = ',', value_parser = group_names())]
        only: Vec<String>,
        /// Producer threads in the guest, one per guest CPU (the kernel bench's -p).
        #[arg(short = 'p', long, default_value_t = 1)]
        producers: u32,
        /// Boots per mode (default: smoke 1, quick 5, full 3).
        #[arg(long)]
        boots: Option<u32>,
    },
    /// Compare two bench-vm reports row by row; exits non-zero when a row's whole interval
    /// (simultaneous 95 % over all rows) lies beyond the threshold, or when a row is missing,
    /// has no interval, or a boot is invalid. Markdown on stdout.
    BenchCompare {
        /// The baseline report.json.
        a: PathBuf,
        /// The report.json to judge against it.
        b: PathBuf,
        /// Slowdown in percent that counts as a regression.
        #[arg(long, default_value_t = 5.0)]
        threshold: f64,
    },
    /// Time a warm `vm-test` phase by phase against a bare virtme-ng boot, alternated.
    BenchSuite {
        #[arg(long, default_value = defaults::KERNEL)]
        kernel: String,
        /// Runs of each (after one untimed warm-up).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, default_value_t = defaults::CPUS)]
        cpus: u32,
        #[arg(long, default_value = defaults::MEMORY)]
        memory: String,
    },
    /// Plant each batch wrapper defect of issue 25 in a throw-away worktree of HEAD and run
    /// `vm-test --filter batch` on it; prints which test caught each. Non-zero exit when a
    /// mutant survives.
    Mutants {
        #[arg(long, default_value = "6.1")]
        kernel: String,
    },
    /// Boot each kernel many times under `vm-run -- true` with the host kept busy; counts
    /// failed runs, retried boots and processes left behind. Non-zero exit on any failure.
    Soak {
        #[command(flatten)]
        vm: VmArgs,
        /// Boots per kernel.
        #[arg(long, default_value_t = 30)]
        boots: usize,
        /// Host threads that spin during the soak.
        #[arg(long, default_value_t = 2)]
        hogs: usize,
        /// Seconds before each VM is killed.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
    },
}

#[derive(Subcommand)]
enum KernelsCmd {
    /// Show the pins and what is cached.
    List,
    /// Download, verify and extract a pinned kernel.
    Fetch { version: String },
    /// Re-pin to the newest package in the pin's suites.
    Bump { version: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = bpfvm::install_signal_handlers() {
        errln!("error: cannot install the signal handler that stops the VM: {e}");
        return ExitCode::FAILURE;
    }
    let events = bpfvm_host::ui::terminal(cli.verbose);
    let result = run(cli.cmd, &events);
    if let Err(e) = &result {
        bpfvm_host::ui::print_stderr(&format!("error: {e:#}"));
    }
    // Interrupted, the run ends as the shell would report the signal, whatever it returned.
    if let Some(status) = bpfvm_host::proc::interrupt_status() {
        return ExitCode::from(status);
    }
    result.unwrap_or(ExitCode::FAILURE)
}

fn run(cmd: Cmd, events: &bpfvm_host::output::Events) -> Result<ExitCode> {
    bpfvm_host::paths::check_env()?;
    match cmd {
        Cmd::Setup(args) => bpfvm::setup(&args, events),
        Cmd::Kernels { cmd } => kernels(cmd, events),
        Cmd::Mutants { kernel } => {
            let outcomes = mutants::run(&kernel, events)?;
            outln!("{}", mutants::table(&outcomes));
            Ok(exit_if(mutants::all_caught(&outcomes)))
        }
        Cmd::Ci { kernel } => {
            let results = ci::run(&kernel, events);
            outln!("{}", ci::summary(&results));
            Ok(exit_if(results.iter().all(|r| r.result.is_ok())))
        }
        Cmd::BuildEbpf => {
            let tools = bpfvm_host::provision::ensure(events)?;
            let dir = bpfvm_host::build::build_ebpf(&tools.ebpf, events)?;
            outln!("{}", dir.display());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::VmRun {
            vm,
            timeout,
            allow_splats,
            command,
        } => {
            let (outcome, health) =
                bpfvm_host::run::vm_run(&vm.options(timeout), &command, events)?;
            bpfvm::command_status(&outcome, &health, allow_splats, events)
        }
        Cmd::VmTest {
            vm,
            timeout,
            filter,
        } => {
            let opts = TestOptions {
                vm: vm.options(timeout),
                filter,
            };
            if opts.vm.kernel == bpfvm_host::kernels::ALL {
                let reports = bpfvm_host::run::vm_test_all(&opts, events)?;
                outln!("{}", bpfvm_host::report::matrix_table(&reports));
                for r in &reports {
                    if let Some(why) = r.why_failed() {
                        outln!("kernel {} FAILED: {why}", r.kernel.version);
                    }
                }
                return Ok(exit_if(reports.iter().all(|r| r.ok())));
            }
            let (report, dir) = bpfvm_host::run::vm_test(&opts, events)?;
            outln!("{}", bpfvm_host::report::summary_table(&report));
            outln!("report: {}", dir.join("report.json").display());
            Ok(exit_if(report.ok()))
        }
        Cmd::BenchSuite {
            kernel,
            runs,
            cpus,
            memory,
        } => {
            let opts = bench_suite::Options {
                kernel,
                runs,
                cpus,
                memory,
            };
            bench_suite::run(&opts, events)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Soak {
            vm,
            boots,
            hogs,
            timeout,
        } => {
            let opts = soak::Options {
                kernel: vm.kernel.clone(),
                boots,
                hogs,
                vm: vm.options(timeout),
            };
            let tallies = soak::run(&opts, events)?;
            outln!("{}", soak::summary(&tallies, hogs));
            Ok(exit_if(tallies.iter().all(|t| t.ok())))
        }
        Cmd::BenchVm {
            vm,
            timeout,
            quick: _,
            full,
            smoke,
            only,
            producers,
            boots,
        } => {
            let size = match (full, smoke) {
                (true, _) => Size::Full,
                (_, true) => Size::Smoke,
                _ => Size::Quick,
            };
            let opts = BenchOptions {
                only: only.iter().filter_map(|g| Group::parse(g)).collect(),
                producers,
                boots,
                ..BenchOptions::new(vm.options(timeout), size)
            };
            let (report, dir) = bpfvm_host::bench::bench_vm(&opts, events)?;
            outln!("report: {}", dir.join("report.md").display());
            Ok(exit_if(report.ok()))
        }
        Cmd::BenchCompare { a, b, threshold } => {
            use bpfvm_host::bench::compare;
            compare::check_threshold(threshold)?;
            let c = compare::compare(&compare::load(&a)?, &compare::load(&b)?, threshold)?;
            let (a, b) = (a.display().to_string(), b.display().to_string());
            outln!("{}", compare::markdown(&a, &b, &c));
            let bad = c.regressed();
            if !bad.is_empty() {
                errln!(
                    "error: regressed, the whole simultaneous interval beyond {threshold} %: {}",
                    bad.join("; ")
                );
            }
            for p in &c.problems {
                errln!("error: {p}");
            }
            Ok(exit_if(c.passed()))
        }
    }
}

fn kernels(cmd: KernelsCmd, events: &bpfvm_host::output::Events) -> Result<ExitCode> {
    match cmd {
        KernelsCmd::List => {
            for pin in bpfvm_host::kernels::pins()? {
                let cached = bpfvm_host::kernels::cached(&pin)
                    .map_or("not cached".to_string(), |t| {
                        format!("cached at {}", t.root.display())
                    });
                outln!(
                    "{:<6} {:<28} {}  ({cached})",
                    pin.version,
                    pin.release,
                    pin.description
                );
            }
        }
        KernelsCmd::Fetch { version } => {
            let tree =
                bpfvm_host::kernels::fetch(&bpfvm_host::kernels::resolve(&version)?, events)?;
            outln!("{}", tree.vmlinuz.display());
        }
        KernelsCmd::Bump { version } => {
            let b = bpfvm_host::kernels::bump(&version, events)?;
            if b.already_newest() {
                outln!("{version}: already the newest ({})", b.old_release);
            }
            for c in &b.changes {
                outln!(
                    "{version}: {} {} -> {} {} (sha256 {})",
                    c.old_name,
                    c.old_version,
                    c.new_name,
                    c.new_version,
                    c.new_sha256
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The benchmark groups `--only` accepts (one list: `bpfvm_host::bench::Group`).
fn group_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(Group::ALL.map(|g| g.name()))
}

fn exit_if(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_filter_is_refused() {
        let e = Cli::try_parse_from(["xtask", "vm-test", "--filter", ""])
            .err()
            .expect("--filter '' parses")
            .to_string();
        assert!(e.contains("--filter"), "{e}");
        assert!(Cli::try_parse_from(["xtask", "vm-test", "--filter", "maps"]).is_ok());
    }
}
