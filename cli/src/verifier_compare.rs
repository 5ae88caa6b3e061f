//! `verifier-compare A B`, the same for `bpfvm` and `cargo xtask`: any two veristat CSVs
//! (docs/verifier-stats.md).
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use crate::exit_if;

/// Compare two veristat CSVs (`bpfvm test --verifier-stats`'s verifier.csv, or
/// `veristat -o csv`'s), as `veristat -C` shows them; exits 1 when a program went from success
/// to failure, its processed insns or states moved beyond the threshold, or it is in one file
/// only.
#[derive(Args, Debug, Clone)]
pub struct Options {
    /// The baseline CSV.
    a: PathBuf,
    /// The CSV to judge against it.
    b: PathBuf,
    /// Change in percent of A's count that fails (0: any change).
    #[arg(long, default_value_t = 0.0)]
    threshold: f64,
}

pub fn run(opts: Options) -> Result<ExitCode> {
    let c = bpfvm_host::results::verifier::compare_files(&opts.a, &opts.b, opts.threshold)?;
    bpfvm_host::ui::print_stdout(&c.table());
    for f in &c.failures {
        bpfvm_host::ui::print_stderr(&format!("error: {f}"));
    }
    Ok(exit_if(c.failures.is_empty()))
}
