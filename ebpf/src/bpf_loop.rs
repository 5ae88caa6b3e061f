//! `bpf_loop` object: socket filters calling `bpf_loop` with arguments from a map (the helper
//! path when the flags come from it too) or constants with flags 0 (the path the verifier
//! inlines since 6.0), recording the return value and what the callbacks saw in `OUT`.
#![no_std]
#![no_main]

use core::ffi::c_void;

use aya_ebpf::{
    btf_maps::Array,
    helpers::generated::bpf_loop,
    macros::{btf_map, socket_filter},
    programs::SkBuffContext,
};
use bpfvm_common::bpf_loop::{
    ARGS_LEN, ARG_FLAGS, ARG_NR_LOOPS, ARG_STOP_AT, CONST_LOOPS, CONST_TOO_MANY, NESTED, OUT_CALLS,
    OUT_LEN, OUT_MID_CALLS, OUT_NESTED_RET_SUM, OUT_OUTER_CALLS, OUT_RET, OUT_SUM,
};

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

/// A callback as `bpf_loop` calls it: `long (*)(u32 index, void *ctx)`.
type Callback = extern "C" fn(u32, *mut c_void) -> i64;

fn arg(i: u32) -> u64 {
    BPF_LOOP_ARGS.get(i).copied().unwrap_or(0)
}

fn out(i: u32, v: u64) {
    if let Some(p) = BPF_LOOP_OUT.get_ptr_mut(i) {
        // SAFETY: an array map value, valid for the program's run.
        unsafe { *p = v };
    }
}

fn call(nr_loops: u32, cb: Callback, ctx: *mut c_void, flags: u64) -> i64 {
    // SAFETY: `cb` has the callback signature; the kernel checks `ctx` and the rest.
    unsafe { bpf_loop(nr_loops, cb as *mut c_void, ctx, flags) }
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

/// Runs the counting callback `nr_loops` times and stores the outcome.
#[inline(always)]
fn counted(nr_loops: u32, flags: u64) {
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
    counted(arg(ARG_NR_LOOPS) as u32, arg(ARG_FLAGS));
    0
}

#[socket_filter]
pub fn loop_inlined(_ctx: SkBuffContext) -> i64 {
    counted(arg(ARG_NR_LOOPS) as u32, 0);
    0
}

#[socket_filter]
pub fn loop_const(_ctx: SkBuffContext) -> i64 {
    counted(CONST_LOOPS, 0);
    0
}

#[socket_filter]
pub fn loop_const_too_many(_ctx: SkBuffContext) -> i64 {
    counted(CONST_TOO_MANY, 0);
    0
}

/// Counts through the map: there is no context to count in.
#[inline(never)]
extern "C" fn count_in_map(_index: u32, _ctx: *mut c_void) -> i64 {
    if let Some(p) = BPF_LOOP_OUT.get_ptr_mut(OUT_CALLS) {
        // SAFETY: an array map value, valid for the program's run.
        unsafe { *p += 1 };
    }
    0
}

#[socket_filter]
pub fn loop_null_ctx(_ctx: SkBuffContext) -> i64 {
    out(OUT_CALLS, 0);
    let ret = call(
        arg(ARG_NR_LOOPS) as u32,
        count_in_map,
        core::ptr::null_mut(),
        0,
    );
    out(OUT_RET, ret as u64);
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
extern "C" fn nested_mid(_index: u32, ctx: *mut c_void) -> i64 {
    let ret = call(NESTED[2], nested_inner, ctx, 0);
    // SAFETY: as in `nested_inner`.
    let n = unsafe { &mut *(ctx as *mut Nested) };
    n.mid_calls += 1;
    n.ret_sum += ret as u64;
    0
}

#[inline(never)]
extern "C" fn nested_outer(_index: u32, ctx: *mut c_void) -> i64 {
    let ret = call(NESTED[1], nested_mid, ctx, 0);
    // SAFETY: as in `nested_inner`.
    let n = unsafe { &mut *(ctx as *mut Nested) };
    n.outer_calls += 1;
    n.ret_sum += ret as u64;
    0
}

#[socket_filter]
pub fn loop_nested(_ctx: SkBuffContext) -> i64 {
    let mut n = Nested {
        outer_calls: 0,
        mid_calls: 0,
        inner_calls: 0,
        ret_sum: 0,
    };
    let ret = call(
        NESTED[0],
        nested_outer,
        &mut n as *mut Nested as *mut c_void,
        0,
    );
    out(OUT_RET, ret as u64);
    out(OUT_OUTER_CALLS, n.outer_calls);
    out(OUT_MID_CALLS, n.mid_calls);
    out(OUT_CALLS, n.inner_calls);
    out(OUT_NESTED_RET_SUM, n.ret_sum);
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
