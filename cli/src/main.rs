//! `bpfvm`: your own crate's tests as root in pinned kernels. `exec` is the cargo runner,
//! `test` runs a whole crate in one boot per kernel. The kernels, cache, checks and reports
//! are those of `cargo xtask` (the `bpfvm-host` library). Arguments in, one call into the
//! command's module of the `bpfvm` library, its exit status out.
#![warn(unreachable_pub)]
use std::process::ExitCode;

use anyhow::Result;
use bpfvm::{
    build_ebpf, exec, github_summary, inventory, kernels, mcp, pieces, selftests, setup, shell,
    test, verifier_compare,
};
use bpfvm_host::support::output::Events;
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

/// Each command's options, help and body live in its module.
#[derive(Subcommand)]
enum Cmd {
    /// Install what is missing (Debian packages, virtme-ng, virtiofsd, the eBPF toolchain).
    Setup(setup::SetupArgs),
    /// Show the pinned kernels and what is cached, and the cached kernel tree builds.
    Kernels,
    /// Build the kernel's own BPF selftests (test_progs, test_maps, bench) from its source and
    /// run them in one boot, each upstream test judged like your crate's tests.
    Selftests(selftests::SelftestsArgs),
    /// Cut a run into pieces by measured cost: the matrix a workflow runs, as JSON.
    Plan(pieces::PlanArgs),
    /// Merge the pieces' reports into one verdict: every piece once, every test once.
    Merge(pieces::MergeArgs),
    /// Keep reports' measured test times in kernels/costs/, the plan's costs.
    Costs(pieces::CostsArgs),
    /// Serve bpfvm to an agent: an MCP server on stdin and stdout whose tools run the suite,
    /// a filter of it, your crate's tests or the kernel's selftests in a VM, explain a test and
    /// judge a bisect step (README: connecting an agent).
    Mcp,
    Exec(exec::Options),
    Test(test::Options),
    VerifierCompare(verifier_compare::Options),
    Inventory(inventory::Options),
    Shell(shell::Options),
    BuildEbpf(build_ebpf::Options),
    GithubSummary(github_summary::Options),
}

fn main() -> ExitCode {
    let cli: Cli = bpfvm::parse_or_exit();
    bpfvm::run_main(cli.verbose, |events| {
        check_checkout()?;
        run(cli.cmd, cli.verbose, events)
    })
}

fn run(cmd: Cmd, verbose: bool, events: &Events) -> Result<ExitCode> {
    match cmd {
        Cmd::Setup(args) => setup::run(&args, events),
        Cmd::Selftests(args) => selftests::run(args, events),
        Cmd::Plan(args) => pieces::plan(&args, events),
        Cmd::Merge(args) => pieces::merge(&args, events),
        Cmd::Costs(args) => pieces::costs(&args, events),
        Cmd::Kernels => kernels::list(),
        Cmd::Mcp => mcp::run(),
        Cmd::Exec(opts) => exec::run(opts, verbose, events),
        Cmd::Test(opts) => test::run(opts, events),
        Cmd::VerifierCompare(opts) => verifier_compare::run(opts),
        Cmd::Inventory(opts) => inventory::run(opts, events),
        Cmd::Shell(opts) => shell::run(opts, events),
        Cmd::BuildEbpf(opts) => build_ebpf::run(opts, events),
        Cmd::GithubSummary(opts) => github_summary::run(opts, events),
    }
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
