//! `bpf_loop_reject` object: `bpf_loop` calls the verifier must reject, one program each (the
//! test loads each on its own and reads the verifier log). Kept out of `object::all()`: its
//! programs are meant not to load.
#![no_std]
#![no_main]

use core::ffi::c_void;

use aya_ebpf::{
    btf_maps::Array,
    helpers::generated::bpf_loop,
    macros::{btf_map, socket_filter},
    programs::SkBuffContext,
};
use bpfvm_ebpf::{bpf_loop_chain, bpf_loop_wide, Callback};

#[btf_map]
static BPF_LOOP_REJECT_ARGS: Array<u64, 1> = Array::new();

fn call(cb: Callback, ctx: *mut c_void) -> i64 {
    // SAFETY: the verifier checks the rest (and rejects these programs).
    unsafe { bpf_loop_wide(4, cb, ctx, 0) }
}

#[inline(never)]
extern "C" fn returns_0(_index: u32, _ctx: *mut c_void) -> i64 {
    0
}

/// Returns its index: any value in `[0, nr_loops)`, not only 0 or 1.
#[inline(never)]
extern "C" fn returns_index(index: u32, _ctx: *mut c_void) -> i64 {
    i64::from(index)
}

#[socket_filter]
pub fn loop_bad_callback_return(_ctx: SkBuffContext) -> i64 {
    call(returns_index, core::ptr::null_mut());
    0
}

/// `ctx` is a map value, not the program's stack (`ARG_PTR_TO_STACK_OR_NULL`).
#[socket_filter]
pub fn loop_ctx_not_stack(_ctx: SkBuffContext) -> i64 {
    if let Some(v) = BPF_LOOP_REJECT_ARGS.get_ptr_mut(0) {
        call(returns_0, v as *mut c_void);
    }
    0
}

/// The callback is a number read from a map, not a subprogram (`ARG_PTR_TO_FUNC`).
#[socket_filter]
pub fn loop_callback_not_subprog(_ctx: SkBuffContext) -> i64 {
    let n = BPF_LOOP_REJECT_ARGS.get(0).copied().unwrap_or(0);
    // SAFETY: never called: the verifier sees a scalar where it wants a function. (Not a Rust
    // fn pointer: those are never null, and the compiler would drop the map's NULL check.)
    unsafe { bpf_loop(4, n as *mut c_void, core::ptr::null_mut(), 0) };
    0
}

/// Declares a third argument and returns it: `bpf_loop` passes only R1 and R2.
#[inline(never)]
extern "C" fn reads_r3(_index: u32, _ctx: *mut c_void, extra: u64) -> i64 {
    (extra & 1) as i64
}

#[socket_filter]
pub fn loop_callback_reads_r3(_ctx: SkBuffContext) -> i64 {
    let cb: extern "C" fn(u32, *mut c_void, u64) -> i64 = reads_r3;
    // SAFETY: only the verifier sees the mismatch, and it rejects the program.
    let cb: Callback = unsafe { core::mem::transmute(cb) };
    call(cb, core::ptr::null_mut());
    0
}

// Seven nested callbacks and the leaf: with the program's frame, nine frames, one past the
// verifier's `MAX_CALL_FRAMES` (the `bpf_loop` object's `loop_deepest` has eight).
bpf_loop_chain!(deep_1, deep_2, deep_3, deep_4, deep_5, deep_6, deep_7 => returns_0);

#[socket_filter]
pub fn loop_too_deep(_ctx: SkBuffContext) -> i64 {
    call(deep_1, core::ptr::null_mut());
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
