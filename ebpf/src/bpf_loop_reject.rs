//! `bpf_loop_reject` object: `bpf_loop` calls the verifier rejects, one program each (the test
//! loads each on its own and reads the verifier log); `loop_frames_16` loads only where
//! `MAX_CALL_FRAMES` is 16. Declared under `by_hand` in `tests/src/object.rs`, out of
//! `object::all()`: its programs are meant not to load.
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

// Chains of nested callbacks ending in `returns_0`: with the program's frame, 9, 16 and 17
// frames. `MAX_CALL_FRAMES` is 8 on the 6.1 and 6.12 pins and 16 on the 7.2 pin, so the first
// is one past the older limit, the second the newer limit, the third one past it.
bpf_loop_chain!(f9_1, f9_2, f9_3, f9_4, f9_5, f9_6, f9_7 => returns_0);
bpf_loop_chain!(
    f16_1, f16_2, f16_3, f16_4, f16_5, f16_6, f16_7, f16_8, f16_9, f16_10, f16_11, f16_12,
    f16_13, f16_14 => returns_0
);
bpf_loop_chain!(
    f17_1, f17_2, f17_3, f17_4, f17_5, f17_6, f17_7, f17_8, f17_9, f17_10, f17_11, f17_12,
    f17_13, f17_14, f17_15 => returns_0
);

#[socket_filter]
pub fn loop_frames_9(_ctx: SkBuffContext) -> i64 {
    call(f9_1, core::ptr::null_mut());
    0
}

#[socket_filter]
pub fn loop_frames_16(_ctx: SkBuffContext) -> i64 {
    call(f16_1, core::ptr::null_mut());
    0
}

#[socket_filter]
pub fn loop_frames_17(_ctx: SkBuffContext) -> i64 {
    call(f17_1, core::ptr::null_mut());
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
