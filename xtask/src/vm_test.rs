//! `cargo xtask vm-test`: the guest test suite on one kernel or all, a table of the results.
use std::process::ExitCode;

use anyhow::Result;
use bpfvm::VmArgs;
use bpfvm_host::domain::options::defaults;
use bpfvm_host::flows::run::TestOptions;
use bpfvm_host::results::plan::PieceId;
use bpfvm_host::support::output::Events;
use clap::Args;

/// Build and run the test suite in the guest; exits non-zero on any failure.
#[derive(Args)]
pub(crate) struct Options {
    #[command(flatten)]
    vm: VmArgs,
    /// Seconds before the VM is killed.
    #[arg(long, default_value_t = defaults::TEST_TIMEOUT_S)]
    timeout: u64,
    /// Run only tests whose name contains this (not empty: leave the option out to run all).
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    filter: Option<String>,
    /// Run only piece I of the suite's plan in N pieces (`cargo xtask plan --for suite`,
    /// docs/pieces.md); the report says which plan and piece.
    #[arg(
        long,
        value_name = "I/N",
        env = "BPFVM_PIECE",
        conflicts_with = "filter"
    )]
    piece: Option<PieceId>,
    /// The plan's hash the matrix gave this piece: a plan cut otherwise here is an error.
    #[arg(long, value_name = "HASH", env = "BPFVM_PLAN", requires = "piece")]
    plan: Option<String>,
    /// Cut the suite into N pieces and run them as N VMs at once on this machine, merged
    /// into target/vm-test/<kernel>/ as a matrix's pieces are (docs/pieces.md).
    #[arg(long, value_name = "N", conflicts_with_all = ["filter", "piece"],
          value_parser = clap::value_parser!(u16).range(1..))]
    jobs: Option<u16>,
    /// Boot, even when `cargo xtask vm-guest` keeps a guest this run could use
    /// (docs/warm-guest.md).
    #[arg(long)]
    fresh: bool,
    #[command(flatten)]
    against: bpfvm::against::AgainstArgs,
}

pub(crate) fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    let kernels = opts.vm.kernel_args().many()?;
    if kernels.len() > 1 && (opts.plan.is_some() || opts.jobs.is_some()) {
        anyhow::bail!(
            "--plan and --jobs take one kernel's plan: give one --kernel (each kernel's pieces \
             are cut by its own costs)"
        );
    }
    let jobs = opts.jobs;
    let against = opts.against.parse(&opts.vm, true)?;
    if against.is_some() && jobs.is_some() {
        anyhow::bail!("--against compares whole runs: leave out --jobs");
    }
    let opts = TestOptions {
        kernel: kernels[0].clone(),
        vm: opts.vm.options(opts.timeout),
        filter: opts.filter,
        piece: opts.piece.map(|id| (id, opts.plan)),
        fresh: opts.fresh,
    };
    if let Some(against) = against {
        return bpfvm::against::vm_test(&kernels, &opts, &against, events);
    }
    if kernels.len() > 1 {
        let reports = bpfvm_host::flows::run::vm_test_all(&kernels, &opts, events)?;
        bpfvm::print_kernels(&reports);
        return Ok(bpfvm::judged_status(&reports));
    }
    if let Some(jobs) = jobs {
        let (merged, dir) = bpfvm_host::flows::pieces::vm_test_jobs(&opts, jobs.into(), events)?;
        for r in &merged.reports {
            outln!("{}", bpfvm_host::results::report::summary_table(r));
        }
        outln!("merged report: {}", dir.join("report.json").display());
        return Ok(std::process::ExitCode::from(merged.status().code()));
    }
    let (report, dir) = bpfvm_host::flows::run::vm_test(&opts, events)?;
    outln!("{}", bpfvm_host::results::report::summary_table(&report));
    outln!("report: {}", dir.join("report.json").display());
    Ok(bpfvm::judged_status([&report]))
}
