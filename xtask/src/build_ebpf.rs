//! `cargo xtask build-ebpf`: build the BPF objects and print the directory they are in.
use std::process::ExitCode;

use anyhow::Result;
use bpfvm_host::support::output::Events;

pub(crate) fn run(events: &Events) -> Result<ExitCode> {
    let tools = bpfvm_host::machine::provision::ensure(events)?;
    let dir = bpfvm_host::machine::build::build_ebpf(&tools.ebpf, events)?;
    outln!("{}", dir.display());
    Ok(ExitCode::SUCCESS)
}
