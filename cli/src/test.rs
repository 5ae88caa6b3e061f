//! `bpfvm test`: a crate's tests in one boot per kernel.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use bpfvm_host::domain::options::defaults;
use bpfvm_host::flows::change;
use bpfvm_host::flows::crate_test::{self, CrateTestOptions};
use bpfvm_host::support::output::Events;
use clap::Args;

use crate::VmArgs;

/// Build the crate's tests (`cargo test --no-run`) and run them all in one boot per kernel
/// (`--kernel 6.1,6.12`, or `all`); writes <target>/bpfvm-test/<kernel>/{report.json,
/// junit.xml} and matrix.json. Arguments after `--` are cargo test's (`-- --release -- FILTER`).
#[derive(Args)]
pub struct Options {
    #[command(flatten)]
    vm: VmArgs,
    #[command(flatten)]
    against: crate::against::AgainstArgs,
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
}

pub fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    let (cargo_args, test_args) = crate_test::split_args(&opts.args);
    let against = opts.against.parse(&opts.vm, false)?;
    let vm = opts.vm;
    let opts = CrateTestOptions {
        kernels: vm.kernel_args().many()?,
        vm: vm.options(opts.timeout),
        cargo_args,
        test_args,
        env: bpfvm_host::flows::exec::passed_env(std::env::vars_os(), &opts.env)?,
        verifier_stats: opts.verifier_stats,
        piece: opts.piece.map(|id| (id, opts.plan)),
    };
    if let Some(against) = against {
        let bpfvm = std::env::current_exe().context("this bpfvm's path, to run the base")?;
        let (change, dir, heads) =
            change::crate_test::crate_test_against(&opts, &against, &bpfvm, events)?;
        for r in &heads {
            bpfvm_host::ui::print_stdout(&bpfvm_host::results::report::summary_table(r));
        }
        return Ok(crate::against::show(&change, &dir));
    }
    let (reports, dir) = crate_test::crate_test(&opts, events)?;
    for r in &reports {
        bpfvm_host::ui::print_stdout(&bpfvm_host::results::report::summary_table(r));
    }
    crate::print_kernels(&reports);
    bpfvm_host::ui::print_stdout(&format!("reports: {}", dir.display()));
    // No report: interrupted before the first kernel, nothing judged.
    Ok(match reports.is_empty() {
        true => ExitCode::from(bpfvm_host::support::status::STOP),
        false => crate::judged_status(&reports),
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        test: Options,
    }

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Cli::try_parse_from([&["bpfvm-test"], args].concat()).map(|c| c.test)
    }

    #[test]
    fn against_takes_a_ref_of_the_crates_repository_and_reruns_beside_cargo_tests_arguments() {
        let o = parse(&[
            "--kernel",
            "6.1",
            "--against",
            "main",
            "--reruns",
            "3",
            "--",
            "--release",
            "--",
            "x",
        ])
        .unwrap();
        let a = o.against.parse(&o.vm, false).unwrap().unwrap();
        assert_eq!((a.base.as_str(), a.reruns), ("main", 3));
        assert_eq!(o.args, ["--release", "--", "x"]);
        let plain = parse(&["--kernel", "6.1"]).unwrap();
        assert!(plain.against.parse(&plain.vm, false).unwrap().is_none());
        // --reruns means nothing without a base.
        assert!(parse(&["--reruns", "3"]).is_err());
        let tree = parse(&["--against", "main", "--kernel-tree", "/src/linux"]).unwrap();
        let e = tree.against.parse(&tree.vm, false).unwrap_err().to_string();
        assert!(e.contains("--kernel-tree"), "{e}");
    }

    /// The base's `bpfvm test` is this bpfvm: the arguments the flow gives it parse here, to
    /// the same options as head's, the rerun's name one more test argument.
    #[test]
    fn the_base_runs_with_arguments_this_bpfvm_test_takes() {
        let head = parse(&[
            "--kernel",
            "6.1",
            "--accel",
            "tcg",
            "--no-retry",
            "--memory",
            "3G",
            "--env",
            "HOME",
            "--",
            "--release",
            "--",
            "--test-threads",
            "1",
        ])
        .unwrap();
        let kernels = head.vm.kernel_args().many().unwrap();
        let (cargo_args, test_args) = crate_test::split_args(&head.args);
        let opts = CrateTestOptions {
            kernels: kernels.clone(),
            vm: head.vm.options(head.timeout),
            cargo_args,
            test_args,
            env: vec![("HOME".into(), "/root".into())],
            verifier_stats: None,
            piece: None,
        };
        let args = change::crate_test::base_args(&opts, &kernels[0], Some("maps::x")).unwrap();
        assert_eq!(args[0], "test");
        let base = parse(&args[1..].iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
        assert_eq!(base.vm.kernel_args().many().unwrap(), kernels);
        let (b, h) = (base.vm.options(base.timeout), &opts.vm);
        assert_eq!((b.accel, b.retry, &b.memory), (h.accel, h.retry, &h.memory));
        assert_eq!(b.timeout, h.timeout);
        assert_eq!(base.env, ["HOME"]);
        assert_eq!(base.args, ["--release", "--", "--test-threads", "1", "x"]);
    }
}
