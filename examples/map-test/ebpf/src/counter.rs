//! A socket filter that counts the packets it sees in an array map and keeps them whole: the
//! userspace test runs it with BPF_PROG_TEST_RUN and reads the count back.
#![no_std]
#![no_main]

use aya_ebpf::{
    macros::{map, socket_filter},
    maps::Array,
    programs::SkBuffContext,
};

/// Slot 0: how many packets the filter saw.
#[map]
static PACKETS: Array<u64> = Array::with_max_entries(1, 0);

#[socket_filter]
pub fn count_packets(ctx: SkBuffContext) -> i64 {
    if let Some(n) = PACKETS.get_ptr_mut(0) {
        // SAFETY: the pointer is the map's own slot 0, valid while the program runs.
        unsafe { *n += 1 };
    }
    // A socket filter returns how many bytes of the packet to keep: all of them.
    ctx.len() as i64
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
