//! `setup`, the same for `bpfvm` and `cargo xtask`.
use std::process::ExitCode;

use bpfvm_host::support::output::Events;
use clap::Args;

use crate::exit_if;

/// `setup`'s options, the same for `bpfvm` and `cargo xtask`.
#[derive(Args, Debug, Clone)]
pub struct SetupArgs {
    /// Only report what is present and what is missing.
    #[arg(long)]
    pub check: bool,
}

/// `setup`: installs what is missing, or with `--check` lists what is present and missing
/// (non-zero exit when something is missing).
pub fn run(args: &SetupArgs, events: &Events) -> anyhow::Result<ExitCode> {
    if !args.check {
        bpfvm_host::machine::provision::ensure(events)?;
        return Ok(ExitCode::SUCCESS);
    }
    let items = bpfvm_host::machine::provision::check();
    for i in &items {
        let mark = if i.present { "ok     " } else { "MISSING" };
        bpfvm_host::ui::print_stdout(&format!("{mark} {:<28} {}", i.name, i.detail));
    }
    Ok(exit_if(items.iter().all(|i| i.present)))
}
