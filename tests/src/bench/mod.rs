//! The guest side of `cargo xtask bench-vm`: the benchmarks of the bloom filter, bpf_loop and
//! batch threads, measured the way the kernel's `bench` tool measures
//! (tools/testing/selftests/bpf/benchs/), and their results as JSON for the host's report.
//!
//! The BPF programs are in `ebpf/src/bench.rs`; `src/bin/bench.rs` runs a [`Plan`].
pub mod batch;
pub mod bloom;
pub mod bpf_loop;
pub mod plan;
pub mod prog;
pub mod sample;

use std::io::Write as _;

pub use bpfvm_common::bench_results::{
    BatchRow, BloomRow, HashRow, LoopRow, Results, Skipped, Stat,
};
pub use plan::{parse_group, Group, Plan};

/// The prefix of the progress lines the host turns into a progress bar.
pub const PROGRESS: &str = "bpfvm-bench-progress";

/// Counts measured units and prints `PROGRESS done total label` lines on stdout.
pub struct Progress {
    done: u64,
    total: u64,
}

impl Progress {
    pub fn new(total: u64) -> Self {
        Self { done: 0, total }
    }

    /// Announces the unit about to run.
    pub fn start(&self, label: &str) {
        println!("{PROGRESS} {} {} {label}", self.done, self.total);
        let _ = std::io::stdout().flush();
    }

    pub fn finish(&mut self) {
        self.done += 1;
        if self.done == self.total {
            println!("{PROGRESS} {0} {0} done", self.total);
        }
    }
}

/// Runs every group of `plan` the kernel supports ([`Group::needs`]) (the others are recorded in `skipped`, with the
/// feature the kernel lacks); a
/// group that fails is recorded in `errors` and the others run.
pub fn run(plan: &Plan) -> Results {
    let mut results = Results {
        vulnerabilities: vulnerabilities(),
        ..Results::default()
    };
    let mut plan = plan.clone();
    plan.groups.retain(|group| {
        let missing = plan::needs(*group)
            .iter()
            .find_map(|f| Some((f.name(), crate::features::require(*f).err()?)));
        if let Some((feature, reason)) = &missing {
            results.skipped.push(Skipped {
                group: group.name().to_string(),
                feature: feature.clone(),
                reason: reason.clone(),
            });
        }
        missing.is_none()
    });
    let plan = &plan;
    let mut progress = Progress::new(plan.units());
    for group in &plan.groups {
        let r = match group {
            Group::Bloom => bloom::run(plan, &mut progress, &mut results),
            Group::BpfLoop => bpf_loop::run(plan, &mut progress, &mut results.bpf_loop),
            Group::Batch => batch::run(plan, &mut progress, &mut results.batch),
        };
        if let Err(e) = r {
            results.errors.push(format!("{}: {e:#}", group.name()));
        }
    }
    results
}

/// Every file of /sys/devices/system/cpu/vulnerabilities/ as `name: line`, sorted; a file that
/// cannot be read says why in its line.
fn vulnerabilities() -> Vec<String> {
    const DIR: &str = "/sys/devices/system/cpu/vulnerabilities";
    let mut names: Vec<String> = match std::fs::read_dir(DIR) {
        Ok(d) => d
            .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
            .collect(),
        Err(e) => return vec![format!("{DIR}: {e}")],
    };
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let line = std::fs::read_to_string(format!("{DIR}/{n}"))
                .map(|l| l.trim().to_string())
                .unwrap_or_else(|e| format!("unreadable ({e})"));
            format!("{n}: {line}")
        })
        .collect()
}
