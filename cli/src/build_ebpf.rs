//! `bpfvm build-ebpf`: a BPF crate of the user's built with the provisioned toolchain.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use bpfvm_host::support::output::Events;
use clap::Args;

/// Build a BPF crate of yours (aya-ebpf, `#![no_std]`, a `[[bin]]` per object) for
/// bpfel-unknown-none with the toolchain `bpfvm setup` provisions (-Z build-std=core,
/// bpf-linker); prints the directory holding the objects. For a build script:
/// docs/own-crate.md, "Your own BPF programs".
#[derive(Args)]
pub struct Options {
    /// The BPF crate's directory.
    dir: PathBuf,
    /// Where to build. Default: <dir>/target.
    #[arg(long)]
    target_dir: Option<PathBuf>,
}

pub fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    // Absolute: cargo runs in `dir`, where a relative target would mean another place.
    let dir = std::path::absolute(&opts.dir).with_context(|| format!("{}", opts.dir.display()))?;
    if !dir.join("Cargo.toml").is_file() {
        anyhow::bail!(
            "{} has no Cargo.toml: pass the directory of your BPF crate (e.g. ebpf)",
            dir.display()
        );
    }
    let target = match opts.target_dir {
        Some(t) => std::path::absolute(&t).with_context(|| format!("{}", t.display()))?,
        None => dir.join("target"),
    };
    let tools = bpfvm_host::machine::provision::ensure(events)?;
    let objects = bpfvm_host::machine::build::build_ebpf_crate(&tools.ebpf, &dir, &target, events)?;
    bpfvm_host::ui::print_stdout(&objects.display().to_string());
    Ok(ExitCode::SUCCESS)
}
