//! `bpf_loop_reject` object: a `bpf_loop` callback that can return values other than 0 and 1,
//! which the verifier must reject. Kept out of `object::all()`: it is meant not to load.
#![no_std]
#![no_main]

use core::ffi::c_void;

use aya_ebpf::{helpers::generated::bpf_loop, macros::socket_filter, programs::SkBuffContext};

/// Returns its index: any value in `[0, nr_loops)`, not only 0 or 1.
#[inline(never)]
extern "C" fn returns_index(index: u32, _ctx: *mut c_void) -> i64 {
    i64::from(index)
}

#[socket_filter]
pub fn loop_bad_callback_return(_ctx: SkBuffContext) -> i64 {
    let cb: extern "C" fn(u32, *mut c_void) -> i64 = returns_index;
    // SAFETY: `cb` has the callback signature; the verifier checks the rest.
    unsafe { bpf_loop(4, cb as *mut c_void, core::ptr::null_mut(), 0) };
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
