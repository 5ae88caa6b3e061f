//! `cargo xtask verifier-stats`: the last `vm-test` runs against the committed baselines,
//! `--bless` to take them as the new ones (`verifier-compare A B`, any two veristat CSVs, is
//! `bpfvm::verifier_compare`). What is measured: docs/verifier-stats.md.
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use bpfvm_host::kernel::pins;
use bpfvm_host::results::verifier;
use clap::Args;

use bpfvm::exit_if;

/// Compare the last `vm-test` run of each kernel (target/vm-test/<kernel>/verifier.csv)
/// against its baseline (kernels/verifier/<kernel>.csv, and <kernel>.verdicts for what the CSV's
/// `failure` folds together: rejected with which error, or not loaded and why); exits non-zero
/// when a program's verdict changed or its processed insns or states did. `--bless` takes the
/// runs as the new baselines.
#[derive(Args)]
pub(crate) struct StatsOptions {
    /// The pinned kernel, or `all`.
    #[arg(long, default_value = bpfvm_host::domain::options::defaults::KERNEL)]
    kernel: String,
    /// Copy the runs' verifier.csv over the baselines (after showing what changed).
    #[arg(long)]
    bless: bool,
}

pub(crate) fn stats(opts: StatsOptions) -> Result<ExitCode> {
    let versions: Vec<String> = if opts.kernel == bpfvm_host::kernel::choice::ALL {
        pins::pins()?.into_iter().map(|p| p.version).collect()
    } else {
        vec![pins::resolve(&opts.kernel)?.version]
    };
    let mut ok = true;
    for v in &versions {
        let run = verifier::run_csv(v);
        if !run.is_file() {
            bail!(
                "{} does not exist: run `cargo xtask vm-test --kernel {v}` first",
                run.display()
            );
        }
        if opts.bless {
            let base = verifier::baseline(v);
            std::fs::create_dir_all(base.parent().expect("kernels/verifier"))?;
            std::fs::copy(&run, &base)
                .with_context(|| format!("copy {} to {}", run.display(), base.display()))?;
            let verdicts = verifier::bless_verdicts(v)?;
            outln!(
                "kernel {v}: blessed {} as {} and its verdicts as {}",
                run.display(),
                base.display(),
                verdicts.display()
            );
            continue;
        }
        ok &= check(v)?;
    }
    Ok(exit_if(ok))
}

/// Compares kernel `version`'s last run against its baseline at 0 %: prints the table and
/// each failure; `Ok(false)` when any.
pub(crate) fn check(version: &str) -> Result<bool> {
    let c = verifier::check_against_baseline(version, 0.0)?;
    outln!("verifier statistics on {version} against kernels/verifier/{version}.csv:");
    outln!("{}", c.table());
    for f in &c.failures {
        errln!("error: kernel {version}: {f}");
    }
    if !c.failures.is_empty() {
        errln!(
            "the verifier's statistics changed on {version}; if that is intended, bless them: \
             `cargo xtask verifier-stats --kernel {version} --bless` (after its vm-test)"
        );
    }
    Ok(c.failures.is_empty())
}
