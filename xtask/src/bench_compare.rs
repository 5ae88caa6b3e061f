//! `cargo xtask bench-compare`: two bench-vm reports row by row, markdown on stdout.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use bpfvm_host::results::bench::compare;
use clap::Args;

use bpfvm::exit_if;

/// Compare two bench-vm reports row by row; exits non-zero when a row's whole interval
/// (simultaneous 95 % over all rows) lies above the threshold, under the instruction clock
/// also when it lies as far below (the row measures other work), or when a row is missing,
/// has no interval, or a boot is invalid. Markdown on stdout.
#[derive(Args)]
pub(crate) struct Options {
    /// The baseline report.json.
    a: PathBuf,
    /// The report.json to judge against it.
    b: PathBuf,
    /// Change in percent that counts: a slowdown beyond it is a regression (and, counting
    /// instructions, a speed-up beyond it too).
    #[arg(long, default_value_t = 5.0)]
    threshold: f64,
}

pub(crate) fn run(opts: Options) -> Result<ExitCode> {
    let Options { a, b, threshold } = opts;
    compare::check_threshold(threshold)?;
    let c = compare::compare(&compare::load(&a)?, &compare::load(&b)?, threshold)?;
    let (a, b) = (a.display().to_string(), b.display().to_string());
    outln!("{}", compare::markdown(&a, &b, &c));
    if !c.passed() {
        for why in c.failures() {
            errln!("error: {why}");
        }
    }
    Ok(exit_if(c.passed()))
}
