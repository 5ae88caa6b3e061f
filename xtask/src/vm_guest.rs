//! `cargo xtask vm-guest`: keeps a guest up for this checkout's `vm-test` runs.
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use bpfvm::VmArgs;
use bpfvm_host::domain::options::defaults;
use bpfvm_host::support::output::Events;
use clap::Args;

/// Keep a guest of one kernel up (in the foreground) for this checkout's `vm-test` runs with
/// the same VM options: a run that finds it as its boot left it runs there without booting;
/// any other boots afresh and says why (docs/warm-guest.md). Stops on Ctrl-C or when idle.
#[derive(Args)]
pub(crate) struct Options {
    #[command(flatten)]
    vm: VmArgs,
    /// Minutes without a run before the guest stops.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..))]
    idle: u64,
}

pub(crate) fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    let kernel = opts.vm.kernel()?;
    bpfvm_host::flows::vm_guest::vm_guest(
        &kernel,
        &opts.vm.options(defaults::TEST_TIMEOUT_S),
        Duration::from_secs(opts.idle * 60),
        events,
    )?;
    Ok(ExitCode::SUCCESS)
}
