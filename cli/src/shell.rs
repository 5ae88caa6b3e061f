//! `bpfvm shell`: an interactive root shell in the guest.
use std::process::ExitCode;

use anyhow::Result;
use bpfvm_host::machine::vng::ShellEnding;
use bpfvm_host::support::output::Events;
use clap::Args;

use crate::VmArgs;

/// An interactive root shell in the guest, in the current directory (shared, writable),
/// for debugging by hand; `exit` or Ctrl-D powers the VM off.
#[derive(Args)]
pub struct Options {
    #[command(flatten)]
    vm: VmArgs,
    /// Seconds before the VM is killed. Default: none.
    #[arg(long)]
    timeout: Option<u64>,
}

pub fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    // The shell's deadline is `timeout` alone (vm_shell passes it on); a zero one is
    // refused as for every run.
    let kernel = opts.vm.kernel()?;
    let timeout = opts.timeout;
    let vm = opts.vm.options(timeout.unwrap_or(u64::MAX / 4));
    let ending = bpfvm_host::flows::interactive::vm_shell(
        &kernel,
        &vm,
        timeout.map(std::time::Duration::from_secs),
        events,
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
