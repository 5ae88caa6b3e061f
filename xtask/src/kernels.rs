//! `cargo xtask kernels`: the kernel pins (`kernels/*.toml`) and the download cache.
use std::process::ExitCode;

use anyhow::Result;
use bpfvm_host::support::output::Events;
use clap::{Args, Subcommand};

/// Kernel pins (`kernels/*.toml`) and the download cache.
#[derive(Args)]
pub(crate) struct Options {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show the pins and what is cached, and the cached kernel tree builds.
    List,
    /// Download, verify and extract a pinned kernel.
    Fetch { version: String },
    /// Re-pin to the newest package in the pin's suites.
    Bump { version: String },
}

pub(crate) fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    match opts.cmd {
        Cmd::List => return bpfvm::kernels::list(),
        Cmd::Fetch { version } => {
            let tree = bpfvm_host::kernel::pins::fetch(
                &bpfvm_host::kernel::pins::resolve(&version)?,
                events,
            )?;
            outln!("{}", tree.vmlinuz.display());
        }
        Cmd::Bump { version } => {
            let b = bpfvm_host::kernel::pins::bump(&version, events)?;
            if b.already_newest() {
                outln!("{version}: already the newest ({})", b.old_release);
            }
            for c in &b.changes {
                outln!(
                    "{version}: {} {} -> {} {} (sha256 {})",
                    c.old_name,
                    c.old_version,
                    c.new_name,
                    c.new_version,
                    c.new_sha256
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
