//! The verifier statistics' own load (`verifier::load`, hand-written where aya 0.14 keeps its
//! load private) verifies what aya's load verifies: the same verdict, the same instruction
//! count, the same translated program, and a rejection's same last error line. And the
//! statistics lines are there for a program that verified, which aya's load never returns.
use anyhow::{Context, Result};
use aya::programs::ProgramError;
use bpfvm_common::bpf_loop::{PROG_HELPER, PROG_INLINED};
use bpfvm_common::verifier::{last_error_line, Verdict};

use crate::features::{self, Feature, Probe};
use crate::{object, verifier};

/// A test case per object of `loads` in `object::with_objects` (their programs all verify).
macro_rules! same_as_aya_tests {
    (
        loads { $($(#[$doc:meta])* $load:ident: $LOAD:ident,)* }
        by_hand { $($by_hand:tt)* }
    ) => {
        mod statistics_load_verifies_what_aya_verifies {
            $(
                #[test]
                fn $load() -> anyhow::Result<()> {
                    super::same_as_aya(stringify!($load))
                }
            )*
        }
    };
}
object::with_objects!(same_as_aya_tests);

fn same_as_aya(name: &str) -> Result<()> {
    let obj = object::named(name);
    crate::require_object!(obj.bytes);
    let ours = verifier::of_bytes(name, obj.bytes)?;
    let mut ebpf = object::load(obj.bytes).with_context(|| format!("object `{name}`"))?;
    assert!(!ours.is_empty(), "object `{name}` has no program");
    for s in &ours {
        let prog = ebpf.program_mut(&s.prog_name).context("aya's program")?;
        object::load_any(&s.prog_name, prog)?;
        assert_eq!(
            s.verdict,
            Verdict::Success,
            "{name}/{}: {}",
            s.prog_name,
            s.describe()
        );
        let info = prog.info()?;
        // `verified_insns` is `insn_processed`, what the log prints (`bpf_check`,
        // kernel/bpf/verifier.c); aya reads it from `bpf_prog_info` since 5.16.
        if let Some(n) = info.verified_instruction_count() {
            assert_eq!(s.verified_insns, Some(u64::from(n)), "{}", s.prog_name);
        }
        assert_eq!(s.verified_insns, s.log.processed_insns, "{}", s.prog_name);
        assert_eq!(
            s.xlated_insns,
            info.size_translated().map(|b| u64::from(b) / 8),
            "{}: the translated programs differ",
            s.prog_name
        );
        // BPF_LOG_STATS's lines (`print_verification_stats`).
        assert!(
            s.log.duration_us.is_some(),
            "{}: no verification time",
            s.prog_name
        );
        assert!(
            s.log.stack_depth.is_some(),
            "{}: no stack depth",
            s.prog_name
        );
        assert!(s.log.total_states.is_some(), "{}: no states", s.prog_name);
    }
    Ok(())
}

/// `bpf_loop_reject`'s programs: each is refused by both loads with the same last error line
/// (a program that verifies on this kernel, such as `loop_frames_16` where `MAX_CALL_FRAMES`
/// is 16, verifies in both).
#[test]
fn a_rejection_names_the_same_error_line_as_aya() -> Result<()> {
    let bytes = object::BPF_LOOP_REJECT;
    let ours = verifier::of_bytes("bpf_loop_reject", bytes)?;
    let mut ebpf = object::load(bytes)?;
    for s in &ours {
        let prog = ebpf.program_mut(&s.prog_name).context("aya's program")?;
        match object::load_any(&s.prog_name, prog) {
            Ok(()) => assert_eq!(s.verdict, Verdict::Success, "{}", s.describe()),
            Err(e) => {
                let log = match e.downcast_ref::<ProgramError>() {
                    Some(ProgramError::LoadError { verifier_log, .. }) => verifier_log.to_string(),
                    _ => format!("{e:#}"),
                };
                assert_eq!(s.verdict, Verdict::Rejected, "{}: aya: {e:#}", s.prog_name);
                let aya_last = last_error_line(&log)
                    .or_else(|| log.lines().last().map(str::to_string))
                    .unwrap_or_default();
                // The verifier's line, without the probes' note on a feature the kernel lacks.
                let reason = s.reason.clone().unwrap_or_default();
                let ours = reason
                    .split(" (feature absent: ")
                    .next()
                    .unwrap_or_default();
                assert!(
                    aya_last.ends_with(ours),
                    "{}: ours {ours:?}, aya's {aya_last:?}",
                    s.prog_name
                );
            }
        }
    }
    Ok(())
}

/// Where the verifier inlines `bpf_loop` (`optimize_bpf_loop`, kernel/bpf/verifier.c: flags
/// 0 and one callback), `loop_inlined`'s call is gone from the translated program and
/// `loop_helper`'s (flags from a map) is left.
#[test]
fn bpf_loop_calls_left_are_0_inlined_and_1_through_the_helper() -> Result<()> {
    crate::require!(Feature::BpfLoopInlining);
    let stats = verifier::of_bytes("bpf_loop", object::BPF_LOOP)?;
    let calls = |prog: &str| {
        let s = stats
            .iter()
            .find(|s| s.prog_name == prog)
            .expect("the program");
        (s.bpf_loop_calls_loaded, s.bpf_loop_calls)
    };
    assert_eq!(calls(PROG_INLINED), (1, Some(0)));
    assert_eq!(calls(PROG_HELPER), (1, Some(1)));
    Ok(())
}

/// Without the map types an object needs, its programs are "not loaded: feature absent",
/// never a tool error; where the kernel has them, the same programs verify. The smoke object
/// needs a bloom filter map (kernel/bpf/bloom_filter.c, since 5.16): 5.10 lacks it, so there
/// the first branch runs, on the other pins the second.
#[test]
fn an_object_whose_maps_the_kernel_lacks_is_not_loaded_for_a_named_feature() -> Result<()> {
    let stats = verifier::of_bytes("smoke", object::SMOKE)?;
    assert!(!stats.is_empty(), "the smoke object has programs");
    let has_bloom = matches!(features::probe(Feature::BloomFilter), Probe::Present);
    for s in &stats {
        if has_bloom {
            assert_eq!(s.verdict, Verdict::Success, "{}", s.describe());
        } else {
            assert_eq!(s.verdict, Verdict::NotLoaded);
            assert!(
                s.describe()
                    .starts_with("not loaded: feature absent: bloom filter map"),
                "{}",
                s.describe()
            );
        }
    }
    Ok(())
}
