//! Bloom filter object: programs that peek and push through bloom filters held in
//! array-of-maps slots, as the kernel selftest `progs/bloom_filter_map.c` does.
//!
//! Why inner maps: a BTF map fixes value size, hash count and flags at compile time, and the
//! tests need a grid of hash counts and seeds. The verifier only checks a program against the
//! inner map template's type, key/value size and flags (`bpf_map_meta_equal`), not its
//! `map_extra` or `max_entries`, so one outer map per (value size, seed flag) serves every hash
//! count and capacity the tests create at run time. Each callback reaches the filter through a
//! map pointer spilled in its context, which the verifier tracks across the call.
#![no_std]
#![no_main]

use core::ffi::c_void;

use aya_ebpf::{
    btf_maps::{Array, ArrayOfMaps, BloomFilter},
    helpers::generated::{bpf_for_each_map_elem, bpf_loop},
    macros::{btf_map, socket_filter},
    programs::SkBuffContext,
};
use bpfvm_common::bloom_filter::{
    value, ARG_COUNT, ARG_FIRST, OUT_COUNT, OUT_NO_INNER, OUT_VISITED, STATE_SLOTS, VALUES,
    ZERO_SEED,
};

/// A filter of `S`-byte values; the hash count (`map_extra`) comes from the runtime map.
type Bloom<const S: usize, const F: usize> = BloomFilter<[u8; S], VALUES, F, 0>;
type Outer<const S: usize, const F: usize> = ArrayOfMaps<Bloom<S, F>, 1>;
type Values<const S: usize> = Array<[u8; S], VALUES>;

#[btf_map]
static BLOOM_STATE: Array<u64, STATE_SLOTS> = Array::new();

fn state(slot: u32) -> u64 {
    BLOOM_STATE.get(slot).copied().unwrap_or(0)
}

fn set_state(slot: u32, v: u64) {
    let _ = BLOOM_STATE.set(slot, v, 0);
}

/// The callbacks' context: the filter and a counter.
#[repr(C)]
struct Walk<T> {
    bloom: *const T,
    count: u64,
}

/// `bpf_for_each_map_elem` callback: peeks (`PUSH` false) or pushes (`PUSH` true) each value
/// and counts the values the filter does not report, or the pushes that fail.
extern "C" fn each_value<const S: usize, const F: usize, const PUSH: bool>(
    _map: *mut c_void,
    _key: *mut u32,
    val: *mut [u8; S],
    ctx: *mut Walk<Bloom<S, F>>,
) -> i64 {
    // SAFETY: the kernel passes a valid array value and our stack context.
    unsafe {
        let bloom = &*(*ctx).bloom;
        let failed = if PUSH {
            bloom.insert(&*val, 0).is_err()
        } else {
            bloom.contains(&*val).is_err()
        };
        if failed {
            (*ctx).count += 1;
        }
    }
    0
}

type Callback<const S: usize, const F: usize> =
    extern "C" fn(*mut c_void, *mut u32, *mut [u8; S], *mut Walk<Bloom<S, F>>) -> i64;

/// Walks `values` with `cb` on the filter in slot 0 of `outer`; records the walk in BLOOM_STATE.
#[inline(always)]
fn walk<const S: usize, const F: usize>(
    outer: &Outer<S, F>,
    values: &Values<S>,
    cb: Callback<S, F>,
) -> i64 {
    let Some(bloom) = outer.get(0) else {
        set_state(OUT_NO_INNER, 1);
        return 0;
    };
    let mut ctx = Walk { bloom, count: 0 };
    // SAFETY: a map, a static callback and a stack context, as the helper requires.
    let visited = unsafe {
        bpf_for_each_map_elem(
            values as *const _ as *mut c_void,
            cb as *mut c_void,
            &mut ctx as *mut _ as *mut c_void,
            0,
        )
    };
    set_state(OUT_VISITED, visited as u64);
    set_state(OUT_COUNT, ctx.count);
    0
}

/// Declares `VALUES_<S>`, both outer maps of size `S` and their `check_*` programs.
macro_rules! checks {
    ($s:literal, $values:ident, $outer:ident, $outer_zs:ident, $check:ident, $check_zs:ident) => {
        #[btf_map]
        static $values: Values<$s> = Array::new();
        #[btf_map]
        static $outer: Outer<$s, 0> = ArrayOfMaps::new();
        #[btf_map]
        static $outer_zs: Outer<$s, ZERO_SEED> = ArrayOfMaps::new();

        #[socket_filter]
        pub fn $check(_ctx: SkBuffContext) -> i64 {
            walk(&$outer, &$values, each_value::<$s, 0, false>)
        }

        #[socket_filter]
        pub fn $check_zs(_ctx: SkBuffContext) -> i64 {
            walk(&$outer_zs, &$values, each_value::<$s, ZERO_SEED, false>)
        }
    };
}

checks!(
    4,
    VALUES_4,
    OUTER_4,
    OUTER_4_ZERO_SEED,
    check_4,
    check_4_zero_seed
);
checks!(
    8,
    VALUES_8,
    OUTER_8,
    OUTER_8_ZERO_SEED,
    check_8,
    check_8_zero_seed
);
checks!(
    11,
    VALUES_11,
    OUTER_11,
    OUTER_11_ZERO_SEED,
    check_11,
    check_11_zero_seed
);
checks!(
    64,
    VALUES_64,
    OUTER_64,
    OUTER_64_ZERO_SEED,
    check_64,
    check_64_zero_seed
);

#[socket_filter]
pub fn push_8(_ctx: SkBuffContext) -> i64 {
    walk(&OUTER_8, &VALUES_8, each_value::<8, 0, true>)
}

/// Context of [`probe`]: the filter, the first probe index and the hits.
#[repr(C)]
struct Probe {
    bloom: *const Bloom<8, ZERO_SEED>,
    first: u64,
    hits: u64,
}

/// `bpf_loop` callback: peeks `value(first + i)`, counts hits.
extern "C" fn probe(i: u64, ctx: *mut Probe) -> i64 {
    // SAFETY: our stack context.
    unsafe {
        let v = value((*ctx).first + i).to_ne_bytes();
        if (*(*ctx).bloom).contains(&v).is_ok() {
            (*ctx).hits += 1;
        }
    }
    0
}

/// Probes values never inserted in a loop (a test run per probe would cost a syscall each).
#[socket_filter]
pub fn false_positives(_ctx: SkBuffContext) -> i64 {
    let Some(bloom) = OUTER_8_ZERO_SEED.get(0) else {
        set_state(OUT_NO_INNER, 1);
        return 0;
    };
    let mut ctx = Probe {
        bloom,
        first: state(ARG_FIRST),
        hits: 0,
    };
    // SAFETY: a static callback and a stack context, as the helper requires.
    let visited = unsafe {
        bpf_loop(
            state(ARG_COUNT) as u32,
            probe as *mut c_void,
            &mut ctx as *mut _ as *mut c_void,
            0,
        )
    };
    set_state(OUT_VISITED, visited as u64);
    set_state(OUT_COUNT, ctx.hits);
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
