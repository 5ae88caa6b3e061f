//! `bpf_loop` object: socket filters calling `bpf_loop` with arguments from a map (the helper
//! path when the flags come from it too) or constants with flags 0 (the path the verifier
//! inlines since 6.0), recording the return value and what the callbacks saw in `OUT`.
#![no_std]
#![no_main]

use core::ffi::c_void;

use aya_ebpf::{
    btf_maps::{Array, HashMap},
    macros::{btf_map, socket_filter},
    programs::SkBuffContext,
};
use bpfvm_common::bpf_loop::{
    ARGS_LEN, ARG_FLAGS, ARG_NR_LOOPS, ARG_STOP_AT, CONST_LOOPS, CONST_TOO_MANY, MARK_0F, MARK_F0,
    NESTED, OUT_CALLS, OUT_CTX, OUT_LEN, OUT_MID_CALLS, OUT_NESTED_RET_SUM, OUT_OUTER_CALLS,
    OUT_RET, OUT_SUM, RUNTIME_LEN, RUNTIME_MARK, RUNTIME_RET, RUNTIME_SELECT, STACK_INNER_KEYS,
    STACK_MAX_ENTRIES, STACK_OUTER_KEYS,
};
use bpfvm_ebpf::{bpf_loop_chain, bpf_loop_wide, Callback};

#[btf_map]
static BPF_LOOP_ARGS: Array<u64, ARGS_LEN> = Array::new();

#[btf_map]
static BPF_LOOP_OUT: Array<u64, OUT_LEN> = Array::new();

/// What the counting callback sees through its context (on the program's stack).
#[repr(C)]
struct Count {
    stop_at: u64,
    calls: u64,
    sum: u64,
}

fn arg(i: u32) -> u64 {
    BPF_LOOP_ARGS.get(i).copied().unwrap_or(0)
}

fn out(i: u32, v: u64) {
    if let Some(p) = BPF_LOOP_OUT.get_ptr_mut(i) {
        // SAFETY: an array map value, valid for the program's run.
        unsafe { *p = v };
    }
}

/// The flags a program of the helper path (`HELPER`) or the inlined path passes: read from the
/// map (never provably 0, so never inlined) or the constant 0.
fn flags<const HELPER: bool>() -> u64 {
    if HELPER {
        arg(ARG_FLAGS)
    } else {
        0
    }
}

fn call(nr_loops: u64, cb: Callback, ctx: *mut c_void, flags: u64) -> i64 {
    // SAFETY: `cb` has the callback signature; the kernel checks `ctx` and the rest.
    unsafe { bpf_loop_wide(nr_loops, cb, ctx, flags) }
}

#[inline(never)]
extern "C" fn count(index: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: every caller passes a `Count` on its stack.
    let c = unsafe { &mut *(ctx as *mut Count) };
    c.calls += 1;
    c.sum += u64::from(index);
    if u64::from(index) == c.stop_at {
        1
    } else {
        0
    }
}

/// Runs the counting callback `nr_loops` times and stores the outcome: what it counted comes
/// back only through `ctx`, so the outcome also shows that `ctx` reached it.
#[inline(always)]
fn counted(nr_loops: u64, flags: u64) {
    let mut c = Count {
        stop_at: arg(ARG_STOP_AT),
        calls: 0,
        sum: 0,
    };
    let ret = call(nr_loops, count, &mut c as *mut Count as *mut c_void, flags);
    out(OUT_RET, ret as u64);
    out(OUT_CALLS, c.calls);
    out(OUT_SUM, c.sum);
}

#[socket_filter]
pub fn loop_helper(_ctx: SkBuffContext) -> i64 {
    counted(arg(ARG_NR_LOOPS), arg(ARG_FLAGS));
    0
}

#[socket_filter]
pub fn loop_inlined(_ctx: SkBuffContext) -> i64 {
    counted(arg(ARG_NR_LOOPS), 0);
    0
}

#[socket_filter]
pub fn loop_const(_ctx: SkBuffContext) -> i64 {
    counted(u64::from(CONST_LOOPS), 0);
    0
}

#[socket_filter]
pub fn loop_const_too_many(_ctx: SkBuffContext) -> i64 {
    counted(u64::from(CONST_TOO_MANY), 0);
    0
}

/// Counts through the map (there is no context to count in) and records the `ctx` it got.
#[inline(never)]
extern "C" fn count_in_map(_index: u32, ctx: *mut c_void) -> i64 {
    if let Some(p) = BPF_LOOP_OUT.get_ptr_mut(OUT_CALLS) {
        // SAFETY: an array map value, valid for the program's run.
        unsafe { *p += 1 };
    }
    out(OUT_CTX, ctx as u64);
    0
}

#[inline(always)]
fn null_ctx<const HELPER: bool>() {
    out(OUT_CALLS, 0);
    let ret = call(
        arg(ARG_NR_LOOPS),
        count_in_map,
        core::ptr::null_mut(),
        flags::<HELPER>(),
    );
    out(OUT_RET, ret as u64);
}

#[socket_filter]
pub fn loop_null_ctx(_ctx: SkBuffContext) -> i64 {
    null_ctx::<false>();
    0
}

#[socket_filter]
pub fn loop_null_ctx_helper(_ctx: SkBuffContext) -> i64 {
    null_ctx::<true>();
    0
}

#[repr(C)]
struct Nested {
    outer_calls: u64,
    mid_calls: u64,
    inner_calls: u64,
    ret_sum: u64,
}

#[inline(never)]
extern "C" fn nested_inner(_index: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: `loop_nested` passes its `Nested` down every level.
    let n = unsafe { &mut *(ctx as *mut Nested) };
    n.inner_calls += 1;
    0
}

#[inline(never)]
extern "C" fn nested_mid<const HELPER: bool>(_index: u32, ctx: *mut c_void) -> i64 {
    let ret = call(u64::from(NESTED[2]), nested_inner, ctx, flags::<HELPER>());
    // SAFETY: as in `nested_inner`.
    let n = unsafe { &mut *(ctx as *mut Nested) };
    n.mid_calls += 1;
    n.ret_sum += ret as u64;
    0
}

#[inline(never)]
extern "C" fn nested_outer<const HELPER: bool>(_index: u32, ctx: *mut c_void) -> i64 {
    let ret = call(
        u64::from(NESTED[1]),
        nested_mid::<HELPER>,
        ctx,
        flags::<HELPER>(),
    );
    // SAFETY: as in `nested_inner`.
    let n = unsafe { &mut *(ctx as *mut Nested) };
    n.outer_calls += 1;
    n.ret_sum += ret as u64;
    0
}

#[inline(always)]
fn nested<const HELPER: bool>() {
    let mut n = Nested {
        outer_calls: 0,
        mid_calls: 0,
        inner_calls: 0,
        ret_sum: 0,
    };
    let ret = call(
        u64::from(NESTED[0]),
        nested_outer::<HELPER>,
        &mut n as *mut Nested as *mut c_void,
        flags::<HELPER>(),
    );
    out(OUT_RET, ret as u64);
    out(OUT_OUTER_CALLS, n.outer_calls);
    out(OUT_MID_CALLS, n.mid_calls);
    out(OUT_CALLS, n.inner_calls);
    out(OUT_NESTED_RET_SUM, n.ret_sum);
}

#[socket_filter]
pub fn loop_nested(_ctx: SkBuffContext) -> i64 {
    nested::<false>();
    0
}

#[socket_filter]
pub fn loop_nested_helper(_ctx: SkBuffContext) -> i64 {
    nested::<true>();
    0
}

/// The innermost callback of [`loop_deepest`]: counts that the chain reached it.
#[inline(never)]
extern "C" fn deepest_leaf(_index: u32, _ctx: *mut c_void) -> i64 {
    out(OUT_CALLS, 1);
    0
}

// The program's frame and six nested callbacks calling `bpf_loop`, whose callback is the
// leaf: eight frames, the verifier's `MAX_CALL_FRAMES`.
bpf_loop_chain!(deepest_1, deepest_2, deepest_3, deepest_4, deepest_5, deepest_6 => deepest_leaf);

/// `MAX_CALL_FRAMES` (8) frames of nested `bpf_loop` callbacks: as deep as the verifier allows
/// (`bpf_loop_reject`'s `loop_too_deep` is one more).
#[socket_filter]
pub fn loop_deepest(_ctx: SkBuffContext) -> i64 {
    out(OUT_CALLS, 0);
    let ret = call(1, deepest_1, core::ptr::null_mut(), 0);
    out(OUT_RET, ret as u64);
    0
}

#[btf_map]
static BPF_LOOP_STACK: HashMap<i32, i32, STACK_MAX_ENTRIES> = HashMap::new();

/// The value under `key`, -1 when absent (`map1_lookup_elem` of `progs/bpf_loop.c`).
fn stack_get(key: i32) -> i32 {
    match BPF_LOOP_STACK.get_ptr(key) {
        // SAFETY: a hash map value, valid until the program ends (no deletes run meanwhile).
        Some(p) => unsafe { *p },
        None => -1,
    }
}

fn stack_set(key: i32, v: i32) {
    let _ = BPF_LOOP_STACK.insert(key, v, 0);
}

#[inline(never)]
extern "C" fn stack_check_inner(_index: u32, _ctx: *mut c_void) -> i64 {
    0
}

/// Reads six values, runs a nested (inlined) loop, writes each value plus 1 back.
#[inline(never)]
extern "C" fn stack_check_outer(_index: u32, _ctx: *mut c_void) -> i64 {
    let [k0, k1, k2, k3, k4, k5] = STACK_INNER_KEYS;
    let (a, b, c) = (stack_get(k0), stack_get(k1), stack_get(k2));
    let (d, e, f) = (stack_get(k3), stack_get(k4), stack_get(k5));
    call(1, stack_check_inner, core::ptr::null_mut(), 0);
    stack_set(k0, a.wrapping_add(1));
    stack_set(k1, b.wrapping_add(1));
    stack_set(k2, c.wrapping_add(1));
    stack_set(k3, d.wrapping_add(1));
    stack_set(k4, e.wrapping_add(1));
    stack_set(k5, f.wrapping_add(1));
    0
}

/// `stack_check` of `progs/bpf_loop.c`: six values live across an inlined loop whose callback
/// has one of its own.
#[socket_filter]
pub fn loop_stack_check(_ctx: SkBuffContext) -> i64 {
    let [k0, k1, k2, k3, k4, k5] = STACK_OUTER_KEYS;
    let (a, b, c) = (stack_get(k0), stack_get(k1), stack_get(k2));
    let (d, e, f) = (stack_get(k3), stack_get(k4), stack_get(k5));
    call(1, stack_check_outer, core::ptr::null_mut(), 0);
    stack_set(k0, a.wrapping_add(1));
    stack_set(k1, b.wrapping_add(1));
    stack_set(k2, c.wrapping_add(1));
    stack_set(k3, d.wrapping_add(1));
    stack_set(k4, e.wrapping_add(1));
    stack_set(k5, f.wrapping_add(1));
    0
}

#[btf_map]
static BPF_LOOP_RUNTIME: Array<u64, RUNTIME_LEN> = Array::new();

fn runtime_set(i: u32, v: u64) {
    if let Some(p) = BPF_LOOP_RUNTIME.get_ptr_mut(i) {
        // SAFETY: an array map value, valid for the program's run.
        unsafe { *p = v };
    }
}

#[inline(never)]
extern "C" fn mark_0f(_index: u32, _ctx: *mut c_void) -> i64 {
    runtime_set(RUNTIME_MARK, MARK_0F);
    0
}

#[inline(never)]
extern "C" fn mark_f0(_index: u32, _ctx: *mut c_void) -> i64 {
    runtime_set(RUNTIME_MARK, MARK_F0);
    0
}

/// `prog_non_constant_callback` of `progs/bpf_loop.c`: one `bpf_loop` call reached with either
/// callback.
#[socket_filter]
pub fn loop_runtime_callback(_ctx: SkBuffContext) -> i64 {
    runtime_set(RUNTIME_MARK, 0);
    let select = BPF_LOOP_RUNTIME.get(RUNTIME_SELECT).copied().unwrap_or(0);
    let cb: Callback = if select == MARK_0F { mark_0f } else { mark_f0 };
    let ret = call(1, cb, core::ptr::null_mut(), 0);
    runtime_set(RUNTIME_RET, ret as u64);
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
