//! `--bench`: after a kernel change's verdict, the A/B `bench-vm --kernel-tree DIR --against
//! REF` runs (`flows::bench::ab`), on the same two kernels: head's tree and REF's checkout, each
//! in the slot the verdict built (their cached builds: the tree's content is the key, so no
//! make runs again). Its comparison joins the change as `cost` (`results::change::cost`).
use super::Suite;
use crate::domain::options::{defaults, VmOptions};
use crate::flows::bench::{ab, BenchOptions, Size};
use crate::kernel::choice::KernelChoice;
use crate::results::change::cost::Cost;
use crate::results::change::Change;
use crate::support::output::Events;
use crate::support::status::Status;

/// What `--bench` asks: bench-vm's size and `--against`'s threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bench {
    pub size: Size,
    /// The change in percent, either way, a row's whole interval must exceed to count.
    pub threshold_pct: f64,
}

/// A kernel change's two kernels and the VM options its runs used.
pub struct Kernels {
    pub head: KernelChoice,
    pub base: KernelChoice,
    pub vm: VmOptions,
}

/// The A/B of the change's kernels, once the verdict judged both (a kernel change has one
/// kernel entry: the tree's). Not run when the verdict could not judge them (head not built,
/// the base not judged): its status is then the kernel's, which the verdict already holds.
pub(super) fn measure(
    suite: &dyn Suite,
    change: &Change,
    bench: Bench,
    events: &Events,
) -> Vec<Cost> {
    let (Some(k), Some(kernel)) = (suite.kernels(&change.base.commit), change.kernels.first())
    else {
        return vec![];
    };
    let not_judged = |status, why| {
        Cost::not_judged(&kernel.kernel, bench.size, bench.threshold_pct, status, why)
    };
    if crate::support::proc::interrupted() {
        return vec![];
    }
    if !matches!(kernel.status, Status::Good | Status::Bad) {
        let why = "not run: the verdict did not judge both kernels".to_string();
        return vec![not_judged(kernel.status, why)];
    }
    events.step(format!(
        "=== the cost: bench-vm --against {} ({}) ===",
        change.base.name,
        bench.size.name()
    ));
    // The boots' own timeout: `--timeout` is the suite's.
    let vm = VmOptions {
        timeout: std::time::Duration::from_secs(defaults::BENCH_TIMEOUT_S),
        ..k.vm
    };
    let opts = BenchOptions::new(k.head, vm, bench.size);
    match ab::ab(
        &opts,
        &k.base,
        &change.base.name,
        bench.threshold_pct,
        events,
    ) {
        Ok(r) => {
            let cost = Cost::of(
                &kernel.kernel,
                bench.size,
                (&r.a, &r.b),
                r.comparison,
                &r.path,
            );
            vec![cost]
        }
        Err(e) => {
            let why = format!("the A/B did not end: {e:#}");
            events.warn(&why);
            vec![not_judged(Status::of_error(&e), why)]
        }
    }
}
