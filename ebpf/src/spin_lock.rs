//! `spin_lock` object: a BTF hash map whose value starts with a `struct bpf_spin_lock`, so the
//! kernel finds the lock in the value's BTF and accepts `BPF_F_LOCK` on it (the selftests'
//! `test_map_lock`), and a tc classifier that updates a value under its lock (socket filters
//! may not touch a map with a lock: `check_map_prog_compatibility` in kernel/bpf/verifier.c).
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::bpf_spin_lock as SpinLock,
    btf_maps::HashMap,
    helpers::generated::{bpf_spin_lock, bpf_spin_unlock},
    macros::{btf_map, classifier},
    programs::TcContext,
};
use bpfvm_common::spin_lock::{BUMP_KEY, DATA_WORDS, MAX_ENTRIES};

/// The value: the lock, then data (`VALUE_SIZE` bytes, the lock at offset 0).
#[repr(C)]
pub struct Locked {
    lock: SpinLock,
    data: [u64; DATA_WORDS],
}

#[btf_map]
static LOCKED: HashMap<u32, Locked, MAX_ENTRIES> = HashMap::new();

/// Adds 1 to `data[0]` of key `BUMP_KEY` while holding its lock.
#[classifier]
pub fn bump_locked(_ctx: TcContext) -> i32 {
    let Some(v) = LOCKED.get_ptr_mut(BUMP_KEY) else {
        return 0;
    };
    // SAFETY: `v` is a map value holding the lock; nothing else runs between lock and unlock.
    unsafe {
        bpf_spin_lock(&mut (*v).lock);
        (*v).data[0] += 1;
        bpf_spin_unlock(&mut (*v).lock);
    }
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
