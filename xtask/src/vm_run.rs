//! `cargo xtask vm-run`: a command as root in the guest, its exit status as ours.
use std::process::ExitCode;

use anyhow::Result;
use bpfvm::VmArgs;
use bpfvm_host::domain::options::defaults;
use bpfvm_host::support::output::Events;
use clap::Args;

/// Run a command as root in the guest; exits with its status.
#[derive(Args)]
pub(crate) struct Options {
    #[command(flatten)]
    vm: VmArgs,
    /// Seconds before the VM is killed.
    #[arg(long, default_value_t = defaults::RUN_TIMEOUT_S)]
    timeout: u64,
    /// A kernel splat (or a kernel log that lost records or stops early) is printed but
    /// does not make the exit status non-zero.
    #[arg(long)]
    allow_splats: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

pub(crate) fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    let kernel = opts.vm.kernel()?;
    let (outcome, health) = bpfvm_host::flows::run::vm_run(
        &kernel,
        &opts.vm.options(opts.timeout),
        &opts.command,
        events,
    )?;
    bpfvm::command_status(&outcome, &health, opts.allow_splats, events)
}
