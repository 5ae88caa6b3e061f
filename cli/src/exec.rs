//! `bpfvm exec`: a command run as root in the guest, the cargo runner.
use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use bpfvm_host::domain::options::defaults;
use bpfvm_host::support::output::{Events, Output};
use clap::Args;

use crate::VmArgs;

/// Run a command as root in the guest from the current directory: its exit status, stdout
/// and stderr come back unchanged. The cargo runner:
/// `runner = ["bpfvm", "exec", "--kernel", "6.1", "--"]`.
#[derive(Args)]
pub struct Options {
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
}

pub fn run(opts: Options, verbose: bool, events: &Events) -> Result<ExitCode> {
    let env = bpfvm_host::flows::exec::passed_env(std::env::vars_os(), &opts.env)?;
    // The command's own output is all that goes to stdout and stderr: bpfvm's steps
    // only with --verbose, its warnings always.
    let events = if verbose {
        events.clone()
    } else {
        warnings_only(events.clone())
    };
    let kernel = opts.vm.kernel()?;
    let exec = bpfvm_host::flows::exec::vm_exec(
        &kernel,
        &opts.vm.options(opts.timeout),
        &opts.command,
        &env,
        &events,
    )?;
    // A closed stdout or stderr drops the output, as for any command.
    let _ = std::io::stdout().lock().write_all(&exec.stdout);
    let _ = std::io::stderr().lock().write_all(&exec.stderr);
    crate::command_status(&exec.outcome, &exec.health, opts.allow_splats, &events)
}

/// `events` reduced to the warnings.
fn warnings_only(events: Events) -> Events {
    Events::new(move |o| {
        if matches!(o, Output::Warn(_)) {
            events.emit(o)
        }
    })
}
