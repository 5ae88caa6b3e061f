//! Helpers shared by the per-feature BPF objects in `src/<feature>.rs` (each a `[[bin]]`).
#![no_std]

use core::ffi::c_void;

/// A callback as `bpf_loop` calls it: `long (*)(u32 index, void *ctx)`.
pub type Callback = extern "C" fn(u32, *mut c_void) -> i64;

/// `BPF_FUNC_loop` in include/uapi/linux/bpf.h.
const BPF_FUNC_LOOP: usize = 181;

/// `bpf_loop` with `nr_loops` passed as the whole 64-bit R1. aya-ebpf declares it `u32` (as the
/// helper's C prototype does), which hides what the kernel does with the upper half: the
/// helper drops it (`BPF_CALL_4` casts to `u32`), the inlined loop compares all 64 bits.
///
/// # Safety
///
/// As for any helper: the verifier checks `cb`, `ctx` and `flags`.
#[inline(always)]
pub unsafe fn bpf_loop_wide(nr_loops: u64, cb: Callback, ctx: *mut c_void, flags: u64) -> i64 {
    // SAFETY: a helper id stands for the helper's address in BPF (aya-ebpf's bindings do the
    // same), with the arguments in R1-R4.
    let f: unsafe extern "C" fn(u64, *mut c_void, *mut c_void, u64) -> i64 =
        unsafe { core::mem::transmute(BPF_FUNC_LOOP) };
    unsafe { f(nr_loops, cb as *mut c_void, ctx, flags) }
}

/// Callbacks `$level` each running `bpf_loop(1, next, ctx, 0)` on the next one, the last on
/// `$leaf`: with the program's own frame and the leaf's, `levels + 2` nested frames when the
/// program calls `bpf_loop` on the first.
#[macro_export]
macro_rules! bpf_loop_chain {
    ($level:ident => $leaf:ident) => {
        #[inline(never)]
        extern "C" fn $level(_index: u32, ctx: *mut core::ffi::c_void) -> i64 {
            // SAFETY: the verifier checks the callback and `ctx`.
            unsafe { $crate::bpf_loop_wide(1, $leaf, ctx, 0) };
            0
        }
    };
    ($level:ident, $next:ident $(, $rest:ident)* => $leaf:ident) => {
        $crate::bpf_loop_chain!($level => $next);
        $crate::bpf_loop_chain!($next $(, $rest)* => $leaf);
    };
}
