//! `cargo xtask vm-test`: the guest test suite on one kernel or all, a table of the results.
use std::process::ExitCode;

use anyhow::Result;
use bpfvm::VmArgs;
use bpfvm_host::options::defaults;
use bpfvm_host::output::Events;
use bpfvm_host::run::TestOptions;
use clap::Args;

use crate::exit_if;

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
}

pub(crate) fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    let opts = TestOptions {
        vm: opts.vm.options(opts.timeout),
        filter: opts.filter,
    };
    if opts.vm.kernel == bpfvm_host::kernels::ALL {
        let reports = bpfvm_host::run::vm_test_all(&opts, events)?;
        outln!("{}", bpfvm_host::report::matrix_table(&reports));
        let verifier = bpfvm_host::verifier::matrix::of_reports(&reports);
        if !verifier.is_empty() {
            outln!("{}", bpfvm_host::verifier::matrix::table(&verifier));
        }
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
