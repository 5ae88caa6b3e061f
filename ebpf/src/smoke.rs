//! Smoke object: proves that the toolchain, BTF maps (with `map_extra`) and
//! `BPF_PROG_TEST_RUN` work end to end.
#![no_std]
#![no_main]

use aya_ebpf::{
    btf_maps::{BloomFilter, HashMap},
    macros::{btf_map, socket_filter},
    programs::SkBuffContext,
};
use bpfvm_common::smoke::{
    BLOOM_HASH_FUNCS, BLOOM_MAX_ENTRIES, HASH_MAX_ENTRIES, KEY_BLOOM_HIT, KEY_VALUE, RETVAL, VALUE,
};

#[btf_map]
static SMOKE_HASH: HashMap<u32, u64, HASH_MAX_ENTRIES> = HashMap::new();

#[btf_map]
static SMOKE_BLOOM: BloomFilter<u64, BLOOM_MAX_ENTRIES, 0, BLOOM_HASH_FUNCS> = BloomFilter::new();

#[socket_filter]
pub fn smoke(_ctx: SkBuffContext) -> i64 {
    let _ = SMOKE_HASH.insert(KEY_VALUE, VALUE, 0);
    let hit = match SMOKE_BLOOM.insert(VALUE, 0) {
        Ok(()) => match SMOKE_BLOOM.contains(VALUE) {
            Ok(()) => 1,
            Err(e) => e as u64,
        },
        Err(e) => e as u64,
    };
    let _ = SMOKE_HASH.insert(KEY_BLOOM_HIT, hit, 0);
    RETVAL as i64
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
