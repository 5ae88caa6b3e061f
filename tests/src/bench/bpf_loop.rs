//! The bpf_loop thread's benchmark (003): throughput and ns per loop iteration, in two
//! variants. With constant zero flags (bpf_loop_bench.c's program) the verifier replaces the
//! helper call with an inline loop that calls the callback directly, so no indirect call is
//! left for retpoline to slow down (kernel/bpf/verifier.c since 6.0, commit 1ade23711971 "bpf:
//! Inline calls to bpf_loop when callback is known": `update_loop_inline_state` keeps
//! `fit_for_inline` only while `loop_flag_is_zero` (R4 a known zero) and the callback is one
//! subprogram; `optimize_bpf_loop` then calls `inline_bpf_loop`). With flags read from a map
//! value the verifier cannot prove them zero, the helper stays and calls the callback through
//! a pointer, as the seed's 13 and 4 ns figures measured. Each row records how many helper
//! calls the verified program kept (`BPF_OBJ_GET_INFO_BY_FD`'s xlated instructions).
use anyhow::{Context, Result};
use aya::Btf;
use bpfvm_common::bench::{self as names, HITS, MAX_OUTER};

use super::prog::{self, Globals};
use super::sample;
use super::LoopRow;
use super::{Plan, Progress};
use crate::features::{Feature, Probe};
use crate::sys;

/// Loop iterations per trigger at most: the kernel's 1000 calls per trigger, fewer for long
/// loops so one program run stays short under emulation.
const ITERATIONS_PER_TRIGGER: u32 = 1_000_000;

/// `bpf_loop` calls per trigger for `nr_loops`.
pub fn outer(nr_loops: u32) -> u32 {
    (ITERATIONS_PER_TRIGGER / nr_loops.max(1)).clamp(1, MAX_OUTER)
}

pub fn run(plan: &Plan, progress: &mut Progress, out: &mut Vec<LoopRow>) -> Result<()> {
    let btf = Btf::from_sys_fs().context("read the kernel's BTF")?;
    // None when kallsyms hides addresses: the row then says "unknown".
    let helper = sys::helper_call_imm("bpf_loop").context("read /proc/kallsyms")?;
    // A probe that erred says nothing about inlining: the variants cannot be checked, and the
    // group fails naming why rather than taking "does not inline" and checking less.
    let inlines = match crate::features::probe(Feature::BpfLoopInlining) {
        Probe::Present => true,
        Probe::Absent(_) => false,
        Probe::Error(e) => anyhow::bail!(
            "the bpf_loop inlining probe failed, so the variants cannot be checked: {e}"
        ),
    };
    for flags_from_map in [false, true] {
        let name = if flags_from_map {
            names::BPF_LOOP_HELPER
        } else {
            names::BPF_LOOP
        };
        for &nr in &plan.nr_loops {
            progress.start(&format!("{name} nr_loops={nr}"));
            let g = Globals {
                nr_loops: nr,
                outer: outer(nr),
                ..Globals::default()
            };
            let mut ebpf = prog::load(&g, prog::Replace::default(), None)?;
            let (throughput, helper_calls) = prog::with_attached(&mut ebpf, name, &btf, |e| {
                let calls = match helper {
                    Some(imm) => Some(prog::helper_calls(e, name, imm)?),
                    None => None,
                };
                check_variant(name, flags_from_map, inlines, calls)?;
                let t = sample::measure(&plan.sampling, plan.producers, |cpu| {
                    Ok(prog::slot(e, cpu)?[HITS])
                })?;
                Ok((t, calls))
            })?;
            out.push(LoopRow {
                nr_loops: nr,
                calls_per_trigger: g.outer,
                ns_per_op: ns_per_op(throughput.mean, plan.producers),
                throughput,
                flags_from_map,
                helper_calls,
            });
            progress.finish();
        }
    }
    Ok(())
}

/// Each variant measures what it is named for, or the row fails: the helper variant keeps at
/// least one `bpf_loop` call (else it would time the inline loop), and on a kernel whose
/// verifier inlines (`Feature::BpfLoopInlining`) the constant-flags variant keeps none. `calls`
/// is `None` when kallsyms hides the helper's address (nothing to check).
fn check_variant(
    name: &str,
    flags_from_map: bool,
    inlines: bool,
    calls: Option<u32>,
) -> Result<()> {
    match (calls, flags_from_map) {
        (Some(0), true) => anyhow::bail!(
            "`{name}` kept no bpf_loop helper call: the verifier inlined it, so the row would \
             time the inline loop, not the helper (`loop_flag_is_zero`, kernel/bpf/verifier.c)"
        ),
        (Some(n), false) if inlines && n > 0 => anyhow::bail!(
            "`{name}` kept {n} bpf_loop helper calls on a kernel that inlines them: the row \
             would time the helper, not the inline loop (`optimize_bpf_loop`, \
             kernel/bpf/verifier.c)"
        ),
        _ => Ok(()),
    }
}

/// The kernel bench's latency (bench.c `ops_report_final`: `1000.0 / hits_mean *
/// env.producer_cnt`): the throughput summed over producers, per producer.
pub fn ns_per_op(mops: f64, producers: u32) -> f64 {
    1000.0 / mops * producers.max(1) as f64
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

    #[test]
    fn each_variant_must_keep_or_lose_the_helper_call_as_named() {
        assert!(check_variant("h", true, true, Some(1)).is_ok());
        let e = check_variant("h", true, true, Some(0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`h` kept no bpf_loop helper call"), "{e}");
        assert!(check_variant("i", false, true, Some(0)).is_ok());
        let e = check_variant("i", false, true, Some(2))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("kept 2 bpf_loop helper calls on a kernel that inlines"),
            "{e}"
        );
        assert!(
            check_variant("i", false, false, Some(1)).is_ok(),
            "5.10 inlines nothing"
        );
        assert!(check_variant("h", true, true, None).is_ok());
    }

    #[test]
    fn latency_is_per_producer() {
        // Two producers at 250 M ops/s each: 500 summed, 4 ns per op each.
        assert_eq!(ns_per_op(500.0, 2), 4.0);
        assert_eq!(ns_per_op(250.0, 1), 4.0);
    }
}
