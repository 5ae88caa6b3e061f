//! `cargo xtask inventory`: checks `tests/inventory.txt` against the tests the guest suite
//! builds, or rewrites it with `--bless` (`bpfvm_host::results::inventory`).
use std::process::ExitCode;

use anyhow::Result;
use bpfvm_host::results::inventory::{self, SUITE_BLESS, SUITE_FILE};
use bpfvm_host::support::output::Events;
use bpfvm_host::support::paths::workspace_root;
use clap::Args;

/// Check tests/inventory.txt (the tests vm-test must run) against the guest suite's build;
/// --bless rewrites it.
#[derive(Args)]
pub(crate) struct Options {
    /// Write the tests the build holds into tests/inventory.txt.
    #[arg(long)]
    bless: bool,
}

pub(crate) fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    let tools = bpfvm_host::machine::provision::ensure(events)?;
    let ebpf = bpfvm_host::machine::build::build_ebpf(&tools.ebpf, events)?;
    let guest = bpfvm_host::machine::build::build_guest(
        &ebpf,
        bpfvm_host::domain::arch::Arch::X86_64,
        &tools.ebpf,
        events,
    )?;
    let built = inventory::of_binaries(
        guest
            .tests
            .iter()
            .map(|b| (b.name.as_str(), b.path.as_path())),
    )?;
    let path = workspace_root().join(SUITE_FILE);
    let names = (SUITE_FILE, SUITE_BLESS, "cargo xtask vm-test");
    bpfvm::inventory::check(&built, &path, names, opts.bless)
}
