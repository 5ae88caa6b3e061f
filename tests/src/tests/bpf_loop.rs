//! The `bpf_loop` helper (5.17) run through `BPF_PROG_TEST_RUN`: bounds, early stop, nesting,
//! the verifier's check of the callback's return value, and both ways the kernel runs it.
//! References: docs/kernel-behaviour.md (`bpf_loop`), the kernel's `prog_tests/bpf_loop.c` and
//! `verifier/bpf_loop_inline.c`.
//!
//! Paths: since 6.0 the verifier inlines a `bpf_loop` call whose callback is constant and whose
//! flags are provably 0 (`inline_bpf_loop`), checking the bound in BPF instructions; otherwise
//! the helper in `kernel/bpf/bpf_iter.c` runs. `loop_inlined`, `loop_const*`, `loop_null_ctx`,
//! `loop_nested` and `loop_deepest` pass the constant 0 (inlined path); `loop_helper`,
//! `loop_null_ctx_helper` and `loop_nested_helper` read their flags from a map (helper path).
//! `constant_zero_flags_are_inlined` checks this split. The programs pass `nr_loops` as the
//! whole 64-bit register, so the two paths' treatment of its upper half is visible.
//!
//! Every test requires what the object needs (read from it) before loading anything, and the
//! inlining feature where it asserts inlining: without `bpf_loop` the object
//! fails to load.
use std::os::fd::{AsFd, AsRawFd};

use anyhow::{bail, Context, Result};
use aya::maps::{Array, HashMap};
use aya::programs::SocketFilter;
use aya::Ebpf;
use bpfvm_common::bpf_loop::*;
use test_case::test_case;

use crate::features::Feature;
use crate::object;
use crate::sys;

const E2BIG: i64 = -(libc::E2BIG as i64);
const EINVAL: i64 = -(libc::EINVAL as i64);
/// `ARG_STOP_AT` that no u32 index equals: the callback always returns 0.
const NO_STOP: u64 = u64::MAX;

/// The program that runs `bpf_loop` with `nr_loops` from the map.
#[derive(Debug, Clone, Copy)]
enum Path {
    /// `loop_helper`: flags from the map, so the helper is called.
    Helper,
    /// `loop_inlined`: flags the constant 0, so the verifier inlines the loop (6.0+).
    Inlined,
}

impl Path {
    fn prog(self) -> &'static str {
        match self {
            Path::Helper => PROG_HELPER,
            Path::Inlined => PROG_INLINED,
        }
    }
}

/// What one run left in `OUT`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    ret: i64,
    calls: u64,
    sum: u64,
}

impl Outcome {
    /// With the return value cut to its low 32 bits, sign-extended back.
    fn ret32(self) -> Outcome {
        Outcome {
            ret: i64::from(self.ret as i32),
            ..self
        }
    }
}

/// The outcome of `calls` callback calls with indexes `0..calls` and return value `ret`.
fn called(ret: i64, calls: u64) -> Outcome {
    Outcome {
        ret,
        calls,
        sum: calls * calls.saturating_sub(1) / 2,
    }
}

/// What `OUT` holds before a run: a slot the program did not write keeps it, so an outcome
/// of zeros cannot come from a program that never ran.
const UNWRITTEN: u64 = 0x5eed_0000_5eed_0000;

/// Loads the object, writes `args`, runs `prog` once and returns the `OUT` array.
fn run_raw(prog: &str, args: [u64; ARGS_LEN]) -> Result<[u64; OUT_LEN]> {
    let mut ebpf = object::load(object::BPF_LOOP)?;
    fill(&mut ebpf, ARGS, &args)?;
    fill(&mut ebpf, OUT, &[UNWRITTEN; OUT_LEN])?;
    test_run(&mut ebpf, prog)?;
    let out: Array<_, u64> = Array::try_from(ebpf.map(OUT).context("no OUT map")?)?;
    let mut res = [0u64; OUT_LEN];
    for (i, r) in (0u32..).zip(res.iter_mut()) {
        *r = out.get(&i, 0)?;
    }
    Ok(res)
}

fn fill(ebpf: &mut Ebpf, map: &str, values: &[u64]) -> Result<()> {
    let mut a: Array<_, u64> =
        Array::try_from(ebpf.map_mut(map).with_context(|| format!("no map {map}"))?)?;
    for (i, v) in (0u32..).zip(values) {
        a.set(i, v, 0)?;
    }
    Ok(())
}

fn test_run(ebpf: &mut Ebpf, prog: &str) -> Result<()> {
    let p: &mut SocketFilter = object::load_program(ebpf, prog)?;
    object::test_run_packet(p)?;
    Ok(())
}

fn run(prog: &str, nr_loops: u32, flags: u64, stop_at: u64) -> Result<Outcome> {
    let out = run_raw(prog, [u64::from(nr_loops), flags, stop_at])?;
    Ok(Outcome {
        ret: out[OUT_RET as usize] as i64,
        calls: out[OUT_CALLS as usize],
        sum: out[OUT_SUM as usize],
    })
}

#[test_case(Path::Helper; "helper")]
#[test_case(Path::Inlined; "inlined")]
fn zero_loops_return_0_without_calling_back(path: Path) -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    assert_eq!(run(path.prog(), 0, 0, NO_STOP)?, called(0, 0));
    Ok(())
}

#[test_case(Path::Helper, 1; "helper 1")]
#[test_case(Path::Helper, 500; "helper 500")]
#[test_case(Path::Inlined, 1; "inlined 1")]
#[test_case(Path::Inlined, 500; "inlined 500")]
fn n_loops_call_back_with_each_index_and_return_n(path: Path, n: u32) -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    assert_eq!(
        run(path.prog(), n, 0, NO_STOP)?,
        called(i64::from(n), u64::from(n))
    );
    Ok(())
}

/// 2^23 callback calls per path, the bound itself: about a second each under TCG.
#[test_case(Path::Helper; "helper")]
#[test_case(Path::Inlined; "inlined")]
fn max_loops_run_every_iteration(path: Path) -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    assert_eq!(
        run(path.prog(), BPF_MAX_LOOPS, 0, NO_STOP)?,
        called(i64::from(BPF_MAX_LOOPS), u64::from(BPF_MAX_LOOPS))
    );
    Ok(())
}

/// Compares the low 32 bits of the return value: see
/// `e2big_is_sign_extended_by_the_helper_and_zero_extended_when_inlined`.
#[test_case(Path::Helper, BPF_MAX_LOOPS + 1; "helper max plus 1")]
#[test_case(Path::Helper, u32::MAX; "helper u32 max")]
#[test_case(Path::Inlined, BPF_MAX_LOOPS + 1; "inlined max plus 1")]
#[test_case(Path::Inlined, u32::MAX; "inlined u32 max")]
fn more_than_max_loops_return_e2big_without_calling_back(path: Path, n: u32) -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    assert_eq!(run(path.prog(), n, 0, NO_STOP)?.ret32(), called(E2BIG, 0));
    Ok(())
}

/// The helper returns `long` -E2BIG; the inlined code sets it with `BPF_MOV32_IMM(BPF_REG_0,
/// -E2BIG)` (`inline_bpf_loop` in kernel/bpf/verifier.c), which zero-extends: a program that
/// reads the 64-bit return sees 0xfffffff9 instead. Seen on 6.1 and 6.18.
#[test]
fn e2big_is_sign_extended_by_the_helper_and_zero_extended_when_inlined() -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    crate::require!(Feature::BpfLoopInlining);
    let n = BPF_MAX_LOOPS + 1;
    assert_eq!(run(PROG_HELPER, n, 0, NO_STOP)?.ret, E2BIG);
    let inlined = E2BIG as i32 as u32 as i64;
    assert_eq!(run(PROG_INLINED, n, 0, NO_STOP)?.ret, inlined);
    assert_eq!(run(PROG_CONST_TOO_MANY, n, 0, NO_STOP)?.ret, inlined);
    Ok(())
}

/// Helper path only: nonzero flags are never inlined.
#[test_case(1, 500; "flags 1")]
#[test_case(1 << 63, 500; "flags top bit")]
#[test_case(1, BPF_MAX_LOOPS + 1; "flags 1 over the bound")]
#[test_case(1, u32::MAX; "flags 1 with u32 max")]
fn nonzero_flags_return_einval_before_the_bound_check(flags: u64, n: u32) -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    assert_eq!(run(PROG_HELPER, n, flags, NO_STOP)?, called(EINVAL, 0));
    Ok(())
}

#[test_case(Path::Helper, 0; "helper at 0")]
#[test_case(Path::Helper, 7; "helper at 7")]
#[test_case(Path::Helper, 499; "helper at last")]
#[test_case(Path::Inlined, 0; "inlined at 0")]
#[test_case(Path::Inlined, 7; "inlined at 7")]
#[test_case(Path::Inlined, 499; "inlined at last")]
fn callback_returning_1_at_i_stops_the_loop_and_returns_i_plus_1(path: Path, i: u32) -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    let stopped = called(i64::from(i) + 1, u64::from(i) + 1);
    assert_eq!(run(path.prog(), 500, 0, u64::from(i))?, stopped);
    Ok(())
}

/// `nr_loops` with bits above the low 32 set. The helper drops them: `BPF_CALL_4(bpf_loop,
/// u32, nr_loops, ...)` in kernel/bpf/bpf_iter.c casts the 64-bit R1 to `u32`, so it runs the
/// low half's count. The inlined loop keeps them: `inline_bpf_loop` in kernel/bpf/verifier.c
/// checks the bound with the 64-bit `BPF_JMP_IMM(BPF_JLE, BPF_REG_1, BPF_MAX_LOOPS, 2)` and
/// sets the zero-extended `BPF_MOV32_IMM(BPF_REG_0, -E2BIG)`. The same call thus loops on one
/// path and fails on the other (same source in v6.1, v6.12 and mainline; the programs pass
/// the whole register through `bpfvm_ebpf::bpf_loop_wide`). Flags are 0 on both paths.
#[test_case(1 << 32 | 5, 5; "2 pow 32 plus 5")]
#[test_case(1 << 32, 0; "2 pow 32")]
#[test_case(u64::MAX, u32::MAX; "u64 max")]
fn nr_loops_upper_half_is_dropped_by_the_helper_but_e2big_when_inlined(
    nr_loops: u64,
    low: u32,
) -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    crate::require!(Feature::BpfLoopInlining);
    let outcome = |prog| -> Result<Outcome> {
        let out = run_raw(prog, [nr_loops, 0, NO_STOP])?;
        Ok(Outcome {
            ret: out[OUT_RET as usize] as i64,
            calls: out[OUT_CALLS as usize],
            sum: out[OUT_SUM as usize],
        })
    };
    // The low half alone, as the helper sees it (u32::MAX is past BPF_MAX_LOOPS: E2BIG).
    let helper = if low > BPF_MAX_LOOPS {
        called(E2BIG, 0)
    } else {
        called(i64::from(low), u64::from(low))
    };
    assert_eq!(outcome(PROG_HELPER)?, helper, "helper path");
    let inlined = called(E2BIG as i32 as u32 as i64, 0);
    assert_eq!(outcome(PROG_INLINED)?, inlined, "inlined path");
    Ok(())
}

/// Every level passes the constant flags 0 (inlined path) or flags from the map (helper
/// path: `bpf_loop` in kernel/bpf/bpf_iter.c calls each callback, which calls the helper).
#[test_case(PROG_NESTED; "inlined")]
#[test_case(PROG_NESTED_HELPER; "helper")]
fn nested_loops_run_every_inner_iteration(prog: &str) -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    let out = run_raw(prog, [0, 0, NO_STOP])?;
    let [outer, mid, inner] = NESTED.map(u64::from);
    assert_eq!(out[OUT_RET as usize], outer, "outer bpf_loop's return");
    assert_eq!(out[OUT_OUTER_CALLS as usize], outer);
    assert_eq!(out[OUT_MID_CALLS as usize], outer * mid);
    assert_eq!(out[OUT_CALLS as usize], outer * mid * inner);
    assert_eq!(
        out[OUT_NESTED_RET_SUM as usize],
        outer * mid + outer * mid * inner,
        "each middle bpf_loop returns {mid}, each inner one {inner}"
    );
    Ok(())
}

/// `ARG_PTR_TO_STACK_OR_NULL` (`bpf_loop_proto` in kernel/bpf/bpf_iter.c) admits NULL, and
/// the callback gets it as its `ctx` (R2 = the caller's R3: `set_loop_callback_state` in
/// kernel/bpf/verifier.c, `callback(i, callback_ctx, ...)` in the helper). The callback counts
/// in the map since it has no context, and records the `ctx` it got; with no loops it never
/// runs, so the slot keeps its marker.
#[test_case(PROG_NULL_CTX, 0; "inlined 0 loops")]
#[test_case(PROG_NULL_CTX, 500; "inlined 500 loops")]
#[test_case(PROG_NULL_CTX_HELPER, 0; "helper 0 loops")]
#[test_case(PROG_NULL_CTX_HELPER, 500; "helper 500 loops")]
fn null_context_is_accepted_and_passed_to_the_callback(prog: &str, n: u32) -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    let out = run_raw(prog, [u64::from(n), 0, NO_STOP])?;
    assert_eq!(out[OUT_RET as usize], u64::from(n));
    assert_eq!(out[OUT_CALLS as usize], u64::from(n));
    let ctx = if n == 0 { UNWRITTEN } else { 0 };
    assert_eq!(out[OUT_CTX as usize], ctx, "the ctx the callback got");
    Ok(())
}

/// The program and seven nested callbacks, eight frames: `MAX_CALL_FRAMES` on the 6.1 and 6.12
/// pins (include/linux/bpf_verifier.h), and the innermost callback runs.
/// `nested_callbacks_past_max_call_frames_are_rejected` has the chains one frame deeper.
#[test]
fn max_call_frames_of_nested_callbacks_load_and_run() -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    let out = run_raw(PROG_DEEPEST, [0, 0, NO_STOP])?;
    assert_eq!(out[OUT_RET as usize], 1, "the outer bpf_loop(1, ...)");
    assert_eq!(out[OUT_CALLS as usize], 1, "the innermost callback ran");
    Ok(())
}

/// Programs the verifier must refuse (kernel/bpf/verifier.c), each with the log line that names
/// the reason:
/// - `ctx` a map value: `check_func_arg` checks `ARG_PTR_TO_STACK_OR_NULL` against
///   `stack_ptr_types` ("R3 type=map_value expected=fp");
/// - the callback a scalar: `ARG_PTR_TO_FUNC` against `func_ptr_types` ("R2 type=scalar
///   expected=func");
/// - a callback that reads R3: `set_loop_callback_state` marks R3-R5 `NOT_INIT`, so
///   `check_reg_arg` says "R3 !read_ok".
#[test_case(PROG_REJECT_CTX_NOT_STACK, &["R3 type=map_value expected=fp"]; "ctx not stack")]
#[test_case(PROG_REJECT_CALLBACK_NOT_SUBPROG, &["R2 type=scalar expected=func"]; "callback not a subprogram")]
#[test_case(PROG_REJECT_CALLBACK_READS_R3, &["R3 !read_ok"]; "callback reads r3")]
fn verifier_rejects(prog: &str, lines: &[&str]) -> Result<()> {
    crate::require_object!(object::BPF_LOOP_REJECT);
    let log = rejection_log(prog)?;
    for want in lines {
        assert!(
            log.lines().any(|l| l.contains(want)),
            "{prog}: no {want:?} in\n{log}"
        );
    }
    Ok(())
}

/// `MAX_CALL_FRAMES` per pinned kernel (`major.minor`): 8 in include/linux/bpf_verifier.h of
/// v6.1 and v6.12; the 7.2 pin accepts 16 frames and rejects 17 ("the call stack of 17 frames
/// is too deep"), so its limit is 16 (measured: `cargo xtask vm-test --kernel 7.2`, chains of
/// 10, 11 and 13 frames load).
const MAX_CALL_FRAMES: [(&str, u32); 3] = [("6.1", 8), ("6.12", 8), ("7.2", 16)];

/// Each `bpf_loop` callback is a call frame: entering one from frame `curframe` when
/// `curframe + 1 >= MAX_CALL_FRAMES` fails with "the call stack of {curframe + 2} frames is
/// too deep" (`__check_func_call` in 6.1, `setup_func_entry` in 6.12 and later, both in
/// kernel/bpf/verifier.c). Chains of 9, 16 and 17 frames load exactly where they fit the
/// kernel's limit, and the others fail naming the first frame too many. A kernel outside the
/// table gets the limit its 9-frame chain shows (8 if rejected, else 16).
#[test]
fn nested_callbacks_past_max_call_frames_are_rejected() -> Result<()> {
    crate::require_object!(object::BPF_LOOP_REJECT);
    let kernel = sys::kernel_major_minor()?;
    let load = |prog: &str| -> Result<Option<String>> {
        let mut ebpf = object::load(object::BPF_LOOP_REJECT)?;
        Ok(object::load_program::<SocketFilter>(&mut ebpf, prog)
            .err()
            .map(|e| format!("{e:#}")))
    };
    let limit = match MAX_CALL_FRAMES.iter().find(|(k, _)| *k == kernel) {
        Some(&(_, limit)) => limit,
        None if load(PROG_REJECT_FRAMES[0].1)?.is_some() => 8,
        None => 16,
    };
    let too_deep = format!("the call stack of {} frames is too deep", limit + 1);
    for (frames, prog) in PROG_REJECT_FRAMES {
        match load(prog)? {
            None => assert!(
                frames <= limit,
                "{prog}: {frames} frames loaded, limit {limit}"
            ),
            Some(log) => {
                assert!(
                    frames > limit,
                    "{prog}: {frames} frames rejected, limit {limit}\n{log}"
                );
                assert!(
                    log.lines().any(|l| l.contains(&too_deep)),
                    "{prog}: no {too_deep:?} in\n{log}"
                );
            }
        }
    }
    Ok(())
}

/// The error (with the verifier log) of loading `prog` from the reject object.
fn rejection_log(prog: &str) -> Result<String> {
    let mut ebpf = object::load(object::BPF_LOOP_REJECT)?;
    let Err(e) = object::load_program::<SocketFilter>(&mut ebpf, prog) else {
        bail!("the verifier accepted {prog}");
    };
    Ok(format!("{e:#}"))
}

#[test]
fn verifier_rejects_callback_returning_other_than_0_or_1() -> Result<()> {
    crate::require_object!(object::BPF_LOOP_REJECT);
    let log = rejection_log(PROG_REJECT)?;
    // The callback returns a zero-extended u32. 6.1 logs
    // "At callback return the register R0 has value (0x0; 0xffffffff) should have been in (0x0; 0x1)"
    // and 6.18 "At callback return the register R0 has smin=0 smax=4294967295 should have been in [0, 1]":
    // match what both share.
    assert!(
        log.lines()
            .any(|l| l.starts_with("At callback return the register R0 has ")
                && l.contains(" should have been in ")),
        "{log}"
    );
    Ok(())
}

/// `nr_loops` as a constant in the program gives what the same value read from the map gives.
/// `loop_const*` and `loop_inlined` take the inlined path and must agree in all 64 bits;
/// `loop_helper` in the low 32 (see the E2BIG test above). All pass the same callback.
#[test_case(PROG_CONST, CONST_LOOPS; "constant 500")]
#[test_case(PROG_CONST_TOO_MANY, CONST_TOO_MANY; "constant max plus 1")]
fn constant_nr_loops_behaves_like_one_read_from_a_map(prog: &str, n: u32) -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    let constant = run(prog, n, 0, NO_STOP)?;
    let expected = if n > BPF_MAX_LOOPS {
        called(E2BIG, 0)
    } else {
        called(i64::from(n), u64::from(n))
    };
    assert_eq!(constant.clone().ret32(), expected);
    assert_eq!(run(PROG_INLINED, n, 0, NO_STOP)?, constant, "inlined");
    assert_eq!(run(PROG_HELPER, n, 0, NO_STOP)?.ret32(), expected, "helper");
    Ok(())
}

/// Which code the paths above take: the xlated program keeps a call to the `bpf_loop` helper
/// only when the flags come from the map.
#[test]
fn constant_zero_flags_are_inlined() -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    crate::require!(Feature::BpfLoopInlining);
    // The inlining probe read the same address: it cannot be missing here.
    let helper =
        sys::helper_call_imm("bpf_loop")?.context("no bpf_loop address in /proc/kallsyms")?;
    let mut ebpf = object::load(object::BPF_LOOP)?;
    // How many `bpf_loop` calls stay helper calls.
    for (prog, helper_calls) in [
        (PROG_HELPER, 1),
        (PROG_INLINED, 0),
        (PROG_CONST, 0),
        (PROG_CONST_TOO_MANY, 0),
        (PROG_NULL_CTX, 0),
        (PROG_NULL_CTX_HELPER, 1),
        (PROG_NESTED, 0),
        (PROG_NESTED_HELPER, 3),
        (PROG_DEEPEST, 0),
        (PROG_STACK_CHECK, 0),
        // Two callbacks reach one call: `update_loop_inline_state` clears `fit_for_inline`.
        (PROG_RUNTIME_CALLBACK, 1),
    ] {
        let p: &mut SocketFilter = object::load_program(&mut ebpf, prog)?;
        let calls = sys::xlated(p.fd()?.as_fd().as_raw_fd())?
            .iter()
            .filter(|&&i| sys::is_helper_call(i, helper))
            .count();
        assert_eq!(calls, helper_calls, "{prog}: calls of the helper");
    }
    Ok(())
}

/// `check_stack` (tools/testing/selftests/bpf/prog_tests/bpf_loop.c, `stack_check` in
/// progs/bpf_loop.c): values the program and an outer callback keep across a `bpf_loop` call
/// (six each, so in callee-saved registers R6-R9 and on the stack) survive, although the
/// inlined loop borrows R6-R8 as its counter, bound and context and the outer callback runs an
/// inlined loop of its own. `inline_bpf_loop` in kernel/bpf/verifier.c spills R6-R8 to stack
/// slots that `optimize_bpf_loop` adds below the subprogram's frame and restores them after
/// the loop; a slot shared with the program's own stack would corrupt them. Each key starts at
/// its own number and must end one higher. (That both loops are inlined is checked by
/// `constant_zero_flags_are_inlined`.)
#[test]
fn values_kept_across_nested_inlined_loops_survive() -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    let mut ebpf = object::load(object::BPF_LOOP)?;
    let keys: Vec<i32> = STACK_INNER_KEYS
        .into_iter()
        .chain(STACK_OUTER_KEYS)
        .collect();
    {
        let mut stack: HashMap<_, i32, i32> =
            HashMap::try_from(ebpf.map_mut(STACK).context("no stack map")?)?;
        for &k in &keys {
            stack.insert(k, k, u64::from(aya_obj::generated::BPF_NOEXIST))?;
        }
    }
    test_run(&mut ebpf, PROG_STACK_CHECK)?;
    let stack: HashMap<_, i32, i32> = HashMap::try_from(ebpf.map(STACK).context("no stack map")?)?;
    let got: Vec<(i32, i32)> = keys
        .iter()
        .map(|&k| Ok((k, stack.get(&k, 0)?)))
        .collect::<Result<_>>()?;
    let want: Vec<(i32, i32)> = keys.iter().map(|&k| (k, k + 1)).collect();
    assert_eq!(got, want, "(key, value) after one run: each value + 1");
    Ok(())
}

/// `check_non_constant_callback` (prog_tests/bpf_loop.c, `prog_non_constant_callback` in
/// progs/bpf_loop.c): the callback is picked at run time, so one `bpf_loop` call sees two
/// callbacks; `update_loop_inline_state` in kernel/bpf/verifier.c then leaves it to the helper
/// (`constant_zero_flags_are_inlined` checks that), and the helper (`bpf_loop` in
/// kernel/bpf/bpf_iter.c) calls whichever callback was passed.
#[test_case(MARK_0F ; "selects_0x0f")]
#[test_case(MARK_F0 ; "selects_0xf0")]
fn callback_chosen_at_run_time_is_the_one_called(select: u64) -> Result<()> {
    crate::require_object!(object::BPF_LOOP);
    let mut ebpf = object::load(object::BPF_LOOP)?;
    let mut before = [UNWRITTEN; RUNTIME_LEN];
    before[RUNTIME_SELECT as usize] = select;
    fill(&mut ebpf, RUNTIME, &before)?;
    test_run(&mut ebpf, PROG_RUNTIME_CALLBACK)?;
    let out: Array<_, u64> = Array::try_from(ebpf.map(RUNTIME).context("no RUNTIME map")?)?;
    assert_eq!(out.get(&RUNTIME_MARK, 0)?, select, "the callback's mark");
    assert_eq!(out.get(&RUNTIME_RET, 0)?, 1, "bpf_loop(1, ...) returns 1");
    Ok(())
}
