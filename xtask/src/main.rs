//! `cargo xtask`: arguments in, one call into the subcommand's module, its result out as an exit
//! code. Each module (as in aya's xtask) declares its subcommand's `Options` (a `clap::Args`
//! whose doc comment is the subcommand's help) and a `run(opts, events)`; the run modules are
//! thin calls into the `vm` library. The developer tasks (`ci`, `lint`, `bench-suite`, `soak`,
//! `mutants`) live here, not in the library a run needs.
#![warn(unreachable_pub)]
use std::process::ExitCode;

use anyhow::Result;
use bpfvm::{pieces, selftests, setup, verifier_compare};
use bpfvm_host::support::output::Events;
use clap::{Parser, Subcommand};

/// `println!` for what may hold guest text, and that must not panic on a closed stdout.
macro_rules! outln {
    ($($t:tt)*) => { bpfvm_host::ui::print_stdout(&format!($($t)*)) };
}

/// `eprintln!` likewise.
macro_rules! errln {
    ($($t:tt)*) => { bpfvm_host::ui::print_stderr(&format!($($t)*)) };
}

mod bench_compare;
mod bench_suite;
mod bench_vm;
mod build_ebpf;
mod ci;
mod inventory;
mod kernels;
mod lint;
mod mutants;
mod soak;
mod verifier;
mod vm_guest;
mod vm_run;
mod vm_test;

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

/// Each subcommand's options, help and body live in its module (`build-ebpf` has no options).
#[derive(Subcommand)]
enum Cmd {
    /// Install what is missing (Debian packages, virtme-ng, virtiofsd, the eBPF toolchain).
    Setup(setup::SetupArgs),
    Kernels(kernels::Options),
    /// Build the BPF programs in `ebpf/`.
    BuildEbpf,
    VmRun(vm_run::Options),
    Ci(ci::Options),
    VmTest(vm_test::Options),
    VmGuest(vm_guest::Options),
    Inventory(inventory::Options),
    Lint(lint::Options),
    /// Build the kernel's own BPF selftests (test_progs, test_maps, bench) from its source and
    /// run them to the end in as many boots as it takes, each upstream test judged like the
    /// suite's (docs/selftests.md).
    Selftests(selftests::SelftestsArgs),
    BenchVm(bench_vm::Options),
    BenchCompare(bench_compare::Options),
    BenchSuite(bench_suite::Options),
    Mutants(mutants::Options),
    Soak(soak::Options),
    VerifierStats(verifier::StatsOptions),
    VerifierCompare(verifier_compare::Options),
    /// Cut a run into pieces by measured cost: the matrix a workflow runs, as JSON
    /// (docs/pieces.md).
    Plan(pieces::PlanArgs),
    /// Merge the pieces' reports into one verdict: every piece once, every test once.
    Merge(pieces::MergeArgs),
    /// Keep reports' measured test times in kernels/costs/, the plan's costs.
    Costs(pieces::CostsArgs),
}

fn main() -> ExitCode {
    let cli: Cli = bpfvm::parse_or_exit();
    bpfvm::run_main(cli.verbose, |events| run(cli.cmd, events))
}

fn run(cmd: Cmd, events: &Events) -> Result<ExitCode> {
    match cmd {
        Cmd::Setup(args) => setup::run(&args, events),
        Cmd::Kernels(opts) => kernels::run(opts, events),
        Cmd::BuildEbpf => build_ebpf::run(events),
        Cmd::VmRun(opts) => vm_run::run(opts, events),
        Cmd::Ci(opts) => ci::run(opts, events),
        Cmd::VmTest(opts) => vm_test::run(opts, events),
        Cmd::VmGuest(opts) => vm_guest::run(opts, events),
        Cmd::Inventory(opts) => inventory::run(opts, events),
        Cmd::Lint(opts) => lint::run(opts, events),
        Cmd::Selftests(args) => selftests::run(args, events),
        Cmd::BenchVm(opts) => bench_vm::run(opts, events),
        Cmd::BenchCompare(opts) => bench_compare::run(opts),
        Cmd::BenchSuite(opts) => bench_suite::run(opts, events),
        Cmd::Mutants(opts) => mutants::run(opts, events),
        Cmd::Soak(opts) => soak::run(opts, events),
        Cmd::VerifierStats(opts) => verifier::stats(opts),
        Cmd::VerifierCompare(opts) => verifier_compare::run(opts),
        Cmd::Plan(args) => pieces::plan(&args, events),
        Cmd::Merge(args) => pieces::merge(&args, events),
        Cmd::Costs(args) => pieces::costs(&args, events),
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

    /// A piece is one of a plan's, never beside a filter or --jobs; a plan's hash needs a
    /// piece; a bad piece is named with the form it takes.
    #[test]
    fn a_piece_is_refused_beside_a_filter_and_a_plan_without_a_piece() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from([&["xtask", "vm-test"], args].concat())
                .err()
                .map(|e| e.to_string())
        };
        assert_eq!(
            parse(&["--piece", "1/2", "--plan", "19d50610346cae1a"]),
            None
        );
        assert_eq!(parse(&["--jobs", "2"]), None);
        let e = parse(&["--piece", "1/2", "--filter", "bloom"]).unwrap();
        assert!(e.contains("cannot be used with"), "{e}");
        let e = parse(&["--jobs", "2", "--piece", "1/2"]).unwrap();
        assert!(e.contains("cannot be used with"), "{e}");
        let e = parse(&["--plan", "19d50610346cae1a"]).unwrap();
        assert!(e.contains("--piece"), "{e}");
        let e = parse(&["--piece", "3/2"]).unwrap();
        assert!(e.contains("give I/N with 1 <= I <= N"), "{e}");
        assert!(parse(&["--jobs", "0"]).is_some());
        for cmd in ["plan", "merge"] {
            let e = Cli::try_parse_from(["xtask", cmd, "--for", "tests", "--pieces", "2", "d"])
                .err()
                .unwrap()
                .to_string();
            assert!(
                e.contains("suite (vm-test), crate (bpfvm test) or selftests"),
                "{e}"
            );
        }
    }

    /// `merge --change` merges kernels' verdicts, not a plan's pieces: a plan's inputs are
    /// refused beside it, and needed without it.
    #[test]
    fn merge_change_takes_no_plan_and_a_plan_needs_its_inputs() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["xtask", "merge"], args].concat());
        assert!(parse(&["--change", "--kernel", "6.1,6.12", "d"]).is_ok());
        for plan in [&["--for", "suite"][..], &["--pieces", "2"]] {
            let e = parse(&[&["--change"], plan, &["d"]].concat())
                .err()
                .unwrap();
            assert!(e.to_string().contains("cannot be used with"), "{e}");
        }
        let Ok(Cli {
            cmd: Cmd::Merge(m), ..
        }) = parse(&["--pieces", "2", "d"])
        else {
            panic!("merge --pieces 2 d does not parse");
        };
        let e = m.inputs.plans(&Events::silent()).unwrap_err().to_string();
        assert!(e.contains("give --for WHAT and --pieces N"), "{e}");
    }

    /// `--reruns` and `--verifier-threshold` only mean something beside `--against`.
    #[test]
    fn the_change_options_need_against() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from([&["xtask", "vm-test"], args].concat())
                .err()
                .map(|e| e.to_string())
        };
        assert_eq!(parse(&["--against", "main", "--reruns", "3"]), None);
        assert_eq!(
            parse(&["--against", "main", "--verifier-threshold", "5"]),
            None
        );
        for lone in [&["--reruns", "3"][..], &["--verifier-threshold", "5"]] {
            let e = parse(lone).unwrap();
            assert!(e.contains("--against <BASE>"), "{e}");
        }
    }

    /// CI's smoke run never builds the kernel's selftests, and its reference has no bench rows.
    #[test]
    fn the_kernels_bench_is_refused_in_a_smoke_run() {
        let e = Cli::try_parse_from(["xtask", "bench-vm", "--smoke", "--upstream"])
            .err()
            .expect("--smoke --upstream parses")
            .to_string();
        assert!(
            e.contains("'--smoke' cannot be used with '--upstream'"),
            "{e}"
        );
        assert!(Cli::try_parse_from(["xtask", "bench-vm", "--upstream"]).is_ok());
    }
}
