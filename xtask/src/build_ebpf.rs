//! `cargo xtask build-ebpf`: build the BPF objects and print the directory they are in.
use std::process::ExitCode;

use anyhow::Result;
use bpfvm_host::output::Events;

pub(crate) fn run(events: &Events) -> Result<ExitCode> {
    let tools = bpfvm_host::provision::ensure(events)?;
    let dir = bpfvm_host::build::build_ebpf(&tools.ebpf, events)?;
    outln!("{}", dir.display());
    Ok(ExitCode::SUCCESS)
}
