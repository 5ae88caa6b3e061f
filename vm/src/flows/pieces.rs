//! `vm-test --jobs N`: the suite's plan in N pieces (`results::plan`), each a `vm-test
//! --piece` of its own VM, run at once on this machine, then merged as the pieces of a
//! workflow's matrix are (`results::merge`): for a machine with many cores and no matrix.
use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::flows::run::{self, TestOptions};
use crate::results::merge::{self, Merged};
use crate::results::plan::{self, KernelPlan, PieceId};
use crate::results::report;
use crate::support::output::Events;
use crate::support::paths::{target_dir, workspace_root};

/// Runs the `jobs` pieces of `opts`' kernel at once and merges them into
/// `target/vm-test/<kernel>/`, where a whole run's report goes; returns the merge and that
/// directory. A piece that failed before writing its report is missing from the merge.
pub fn vm_test_jobs(opts: &TestOptions, jobs: usize, events: &Events) -> Result<(Merged, PathBuf)> {
    let kvm = opts.vm.accel == crate::domain::options::Choice::Kvm;
    let inputs = plan::Inputs::of(plan::Kind::Suite, &workspace_root(), &opts.kernel, kvm)?;
    let cut = KernelPlan::of(&inputs, jobs)?;
    // The commit the pieces start from: a tree edited while they run is not the merge's fault.
    let commit = plan::commit(&workspace_root());
    let dirs: Vec<PathBuf> = std::thread::scope(|s| {
        let runs: Vec<_> = (1..=jobs)
            .map(|index| {
                let one = TestOptions {
                    piece: Some((PieceId { index, count: jobs }, Some(cut.hash.clone()))),
                    // Pieces boot at once: one kept guest cannot take them all.
                    fresh: true,
                    ..opts.clone()
                };
                s.spawn(move || run::vm_test(&one, events))
            })
            .collect();
        runs.into_iter()
            .zip(1..)
            .filter_map(|(r, index)| match r.join() {
                Ok(Ok((_, dir))) => Some(dir),
                Ok(Err(e)) => {
                    events.warn(format!("piece {index}/{jobs}: {e:#}"));
                    None
                }
                Err(_) => {
                    events.warn(format!("piece {index}/{jobs} panicked"));
                    None
                }
            })
            .collect()
    });
    let found = merge::find(&dirs)?;
    let merged = merge::merge(std::slice::from_ref(&cut), found, commit.as_deref());
    let Some(r) = merged.reports.first() else {
        bail!(
            "no piece of {} wrote a report: {}",
            cut.kernel,
            merged.problems.join("; ")
        );
    };
    let out = target_dir().join("vm-test").join(&r.kernel.version);
    let _ = std::fs::remove_dir_all(&out);
    report::write(r, &out)?;
    for p in &merged.problems {
        events.warn(p.clone());
    }
    Ok((merged, out))
}
