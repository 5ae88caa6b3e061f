//! `bpfvm inventory`, and the check both inventories share (`cargo xtask inventory` checks
//! the suite's).
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use bpfvm_host::flows::crate_test;
use bpfvm_host::results::inventory::{bless_or_check, Inventory, CRATE_BLESS, CRATE_FILE};
use bpfvm_host::support::output::Events;
use clap::Args;

use crate::exit_if;

/// Check bpfvm-inventory.txt in the workspace's root (the tests `bpfvm test` must run; the
/// check is on when the file exists) against the crate's tests; --bless writes it.
/// Arguments after `--` are cargo test's, as for `test`.
#[derive(Args, Debug, Clone)]
pub struct Options {
    /// Write the tests the build holds into bpfvm-inventory.txt.
    #[arg(long)]
    bless: bool,
    /// cargo's arguments (`--release`, `-p NAME`, `--features X`...).
    #[arg(last = true)]
    args: Vec<String>,
}

pub fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    let (built, path) = crate_test::crate_inventory(&opts.args, events)?;
    check(
        &built,
        &path,
        (CRATE_FILE, CRATE_BLESS, "bpfvm test"),
        opts.bless,
    )
}

/// The inventory at `path` checked against the tests `built` holds, or written from them with
/// `bless`; what it found is printed (to stderr when it fails the check).
pub fn check(
    built: &Inventory,
    path: &Path,
    names: (&str, &str, &str),
    bless: bool,
) -> Result<ExitCode> {
    let (ok, say) = bless_or_check(built, path, names, bless)?;
    if ok {
        bpfvm_host::ui::print_stdout(&say);
    } else {
        bpfvm_host::ui::print_stderr(&say);
    }
    Ok(exit_if(ok))
}
