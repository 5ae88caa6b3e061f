//! The bpf_loop thread's benchmark (003): throughput and ns per loop iteration.
use anyhow::{Context, Result};
use aya::Btf;
use bpfvm_common::bench::{self as names, HITS, MAX_OUTER};

use super::prog::{self, Globals};
use super::sample;
use super::LoopRow;
use super::{Plan, Progress};

/// Loop iterations per trigger at most: the kernel's 1000 calls per trigger, fewer for long
/// loops so one program run stays short under emulation.
const ITERATIONS_PER_TRIGGER: u32 = 1_000_000;

/// `bpf_loop` calls per trigger for `nr_loops`.
pub fn outer(nr_loops: u32) -> u32 {
    (ITERATIONS_PER_TRIGGER / nr_loops.max(1)).clamp(1, MAX_OUTER)
}

pub fn run(plan: &Plan, progress: &mut Progress, out: &mut Vec<LoopRow>) -> Result<()> {
    let btf = Btf::from_sys_fs().context("read the kernel's BTF")?;
    for &nr in &plan.nr_loops {
        progress.start(&format!("bpf_loop nr_loops={nr}"));
        let g = Globals {
            nr_loops: nr,
            outer: outer(nr),
            ..Globals::default()
        };
        let mut ebpf = prog::load(&g, prog::Replace::default(), None)?;
        let throughput = prog::with_attached(&mut ebpf, names::BPF_LOOP, &btf, |e| {
            sample::measure(&plan.sampling, plan.producers, |cpu| {
                Ok(prog::slot(e, cpu)?[HITS])
            })
        })?;
        out.push(LoopRow {
            nr_loops: nr,
            calls_per_trigger: g.outer,
            ns_per_op: 1000.0 / throughput.mean,
            throughput,
        });
        progress.finish();
    }
    Ok(())
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn short_loops_get_the_kernels_1000_calls_and_long_ones_fewer() {
        assert_eq!(outer(1), 1000);
        assert_eq!(outer(1000), 1000);
        assert_eq!(outer(10_000), 100);
        assert_eq!(outer(1_000_000), 1);
    }
}
