//! `bench-vm --against BASE` as one call: both kernels benchmarked ([`super::bench_ab`]), their
//! rows compared (`compare`), `ab.md` written and the A/B's status (`ab::status`). Shared by
//! `bench-vm --against` and a change verdict's `--bench`, so both judge alike.
use std::path::PathBuf;

use anyhow::Result;

use super::{BenchOptions, BenchReport};
use crate::kernel::choice::KernelChoice;
use crate::results::bench::{ab, compare};
use crate::support::output::Events;
use crate::support::status::Status;

/// An A/B's reports, comparison, report and status.
pub struct Ab {
    /// Kernel A's report (the base).
    pub a: BenchReport,
    /// Kernel B's report (the run's own kernel).
    pub b: BenchReport,
    pub comparison: compare::Comparison,
    /// `ab.md`'s text.
    pub markdown: String,
    /// Where `ab.md` is; A's and B's own reports are in `A/` and `B/` beside it.
    pub path: PathBuf,
    pub status: Status,
}

/// Benchmarks `opts.kernel` (B) against `against` (A, named `base` as the user gave it) and
/// compares them at `threshold_pct`.
pub fn ab(
    opts: &BenchOptions,
    against: &KernelChoice,
    base: &str,
    threshold_pct: f64,
    events: &Events,
) -> Result<Ab> {
    compare::check_threshold(threshold_pct)?;
    let (a, b, dir) = super::bench_ab(opts, against, events)?;
    let comparison = compare::compare(&a, &b, threshold_pct)?;
    let markdown = ab::render(
        &format!("{} ({}, {base})", a.kernel, a.release),
        &format!("{} ({})", b.kernel, b.release),
        &comparison,
    ) + &ab::boots(&a, &b);
    let path = ab::report_path(&dir);
    crate::support::fs::write_atomic(&path, markdown.as_bytes())?;
    let status = ab::status(&a, &b, &comparison);
    Ok(Ab {
        a,
        b,
        comparison,
        markdown,
        path,
        status,
    })
}
