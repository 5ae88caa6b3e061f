//! Benchmark object for `cargo xtask bench-vm`, after the kernel's `bench` tool
//! (tools/testing/selftests/bpf/progs/{bloom_filter_bench,bpf_loop_bench}.c).
//!
//! Every program is an fentry program on `getpgid(2)`'s entry: producer threads in the guest
//! call getpgid in a loop, as `bench` does.
//!
//! As in bloom_filter_bench.c, the bloom lookup and update programs walk an array of random
//! values with `bpf_for_each_map_elem`: one indirect call of the callback per element (the
//! call retpoline makes expensive) and one stats update per element, in the slot of the CPU
//! (`percpu_stats[cpu]` there; here an array map entry, whose lookup the verifier inlines).
//! The hash map programs probe 1024 random keys per run from a random buffer, as
//! `bloom_hashmap_lookup` does.
#![no_std]
#![no_main]
// The BPF target has no `AtomicU64::fetch_add` (no compare-and-swap), but LLVM lowers an
// atomic add whose result is unused to BPF's `lock +=`, as clang does `__sync_add_and_fetch`.
#![allow(internal_features)]
#![feature(core_intrinsics)]

use core::ffi::c_void;
use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::{
    btf_maps::{Array, BloomFilter, HashMap},
    helpers::generated::{
        bpf_for_each_map_elem, bpf_get_prandom_u32, bpf_get_smp_processor_id, bpf_loop,
        bpf_map_lookup_elem, bpf_map_peek_elem, bpf_map_push_elem,
    },
    macros::{btf_map, fentry},
    programs::FEntryContext,
};
use bpfvm_common::bench::{
    lane, probe, CURSOR, DROPS, ERRORS, FALSE_HITS, HASHMAP_PROBES, HITS, LOOP_FLAGS, MAX_CPUS,
    MAX_VALUE_SIZE, PROBES, RAND_BYTES, RAND_MASK, SLOT_LEN,
};

/// Replaced at load time by a filter of the benchmarked size (passed in by pin path).
#[btf_map]
static BENCH_BLOOM: BloomFilter<[u64; MAX_VALUE_SIZE / 8], 1> = BloomFilter::new();

/// Replaced at load time by the array of random values of the benchmarked size.
#[btf_map]
static BENCH_VALUES: Array<[u64; MAX_VALUE_SIZE / 8], 1> = Array::new();

#[btf_map]
static BENCH_HASH: HashMap<u64, u64, 1> = HashMap::new();

#[btf_map]
static BENCH_RAND: Array<[u8; RAND_BYTES], 1> = Array::new();

#[btf_map]
static BENCH_SLOTS: Array<[u64; SLOT_LEN], { MAX_CPUS as usize }> = Array::new();

// Read-only globals, set by the loader (bpfvm_common::bench names them).
#[no_mangle]
static NR_ENTRIES: u64 = 1;
#[no_mangle]
static VALUE_SIZE: u64 = 8;
#[no_mangle]
static CHUNK: u32 = 1;
#[no_mangle]
static NR_LOOPS: u32 = 1;
#[no_mangle]
static OUTER: u32 = 1;

/// `-ENOENT`: what a bloom filter peek returns for an absent value.
const ENOENT: i32 = -2;

#[inline(always)]
fn global<T: Copy>(v: &T) -> T {
    // SAFETY: a plain read of a global; volatile so the loader's value is used.
    unsafe { core::ptr::read_volatile(v) }
}

#[inline(always)]
fn map<T>(m: &T) -> *mut c_void {
    m as *const T as *mut c_void
}

/// This CPU's stats slot.
#[inline(always)]
fn slot() -> Option<*mut [u64; SLOT_LEN]> {
    // SAFETY: a helper without arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    BENCH_SLOTS.get_ptr_mut(cpu & (MAX_CPUS - 1))
}

/// The kernel's `log_result`: one counter of this CPU's slot, plus one.
#[inline(always)]
fn log_result(key: usize) {
    if let Some(s) = slot() {
        // SAFETY: a valid map value; only this CPU writes its slot.
        unsafe { (*s)[key] += 1 };
    }
}

/// The kernel's `bloom_callback`: `ctx` points at the update flag.
unsafe extern "C" fn bloom_callback(
    _map: *mut c_void,
    _key: *mut u32,
    val: *mut c_void,
    ctx: *mut c_void,
) -> i64 {
    let update = *(ctx as *const u64) != 0;
    // As an int, as the kernel's bench does: the verifier turns these helper calls into direct
    // calls of the map's `int` ops, so only the low 32 bits of the result are defined.
    let err = if update {
        bpf_map_push_elem(map(&BENCH_BLOOM), val, 0)
    } else {
        bpf_map_peek_elem(map(&BENCH_BLOOM), val)
    } as i32;
    if err != 0 {
        log_result(ERRORS);
        return 1; // stop the iteration
    }
    log_result(HITS);
    0
}

#[inline(always)]
fn for_each_value(update: bool) -> u32 {
    let mut data: u64 = update as u64;
    // SAFETY: a map, a static callback and a context on this stack that outlives the call.
    unsafe {
        bpf_for_each_map_elem(
            map(&BENCH_VALUES),
            bloom_callback as *mut c_void,
            &mut data as *mut u64 as *mut c_void,
            0,
        )
    };
    0
}

#[fentry(function = "__x64_sys_getpgid")]
pub fn bloom_lookup(_ctx: FEntryContext) -> u32 {
    for_each_value(false)
}

#[fentry(function = "__x64_sys_getpgid")]
pub fn bloom_update(_ctx: FEntryContext) -> u32 {
    for_each_value(true)
}

/// The kernel's `bloom_hashmap_lookup` for 8-byte values: `HASHMAP_PROBES` probes of keys read
/// from a random offset of `BENCH_RAND`; with `use_bloom`, a key the filter rejects skips the
/// hash lookup (and counts as a hit, as there).
#[inline(always)]
fn hashmap_lookup(use_bloom: bool) -> u32 {
    let Some(rand) = BENCH_RAND.get_ptr(0) else {
        return 0;
    };
    let rand = rand as *const u8;
    let step = global(&VALUE_SIZE) as u32;
    // SAFETY: a helper without arguments.
    let mut index = unsafe { bpf_get_prandom_u32() };
    let mut i = 0;
    while i < HASHMAP_PROBES {
        index &= RAND_MASK;
        // SAFETY: index <= RAND_MASK and RAND_BYTES leaves MAX_VALUE_SIZE bytes past it.
        let key = unsafe { rand.add(index as usize) } as *mut c_void;
        i += 1;
        index = index.wrapping_add(step);
        if use_bloom {
            // SAFETY: a map and a key in a map value.
            let err = unsafe { bpf_map_peek_elem(map(&BENCH_BLOOM), key) } as i32;
            if err != 0 {
                if err != ENOENT {
                    log_result(ERRORS);
                    return 0;
                }
                log_result(HITS);
                continue;
            }
        }
        // SAFETY: as above.
        if unsafe { bpf_map_lookup_elem(map(&BENCH_HASH), key) }.is_null() {
            log_result(DROPS);
        } else {
            log_result(HITS);
        }
    }
    0
}

#[fentry(function = "__x64_sys_getpgid")]
pub fn hashmap_without_bloom(_ctx: FEntryContext) -> u32 {
    hashmap_lookup(false)
}

#[fentry(function = "__x64_sys_getpgid")]
pub fn hashmap_with_bloom(_ctx: FEntryContext) -> u32 {
    hashmap_lookup(true)
}

/// The false-positive probe `i`: 8 bytes, or 64 when `wide`.
#[inline(always)]
fn fill(i: u64, wide: bool) -> [u64; MAX_VALUE_SIZE / 8] {
    let v = probe(i);
    let mut buf = [v; MAX_VALUE_SIZE / 8];
    if wide {
        let mut l = 1;
        while l < buf.len() {
            buf[l] = lane(v, l as u64);
            l += 1;
        }
    }
    buf
}

/// One trigger's false-positive probes, passed to the callback on the stack.
#[repr(C)]
struct Probes {
    start: u64,
    wide: u64,
    hits: u64,
}

unsafe extern "C" fn fp_cb(i: u32, ctx: *mut c_void) -> i64 {
    let p = &mut *(ctx as *mut Probes);
    if BENCH_BLOOM
        .contains(fill(p.start + i as u64, p.wide != 0))
        .is_ok()
    {
        p.hits += 1;
    }
    0
}

/// `CHUNK` probes of values never pushed (the filter holds random values), from this CPU's
/// cursor; counts probes and positives. Not a throughput program: it counts false positives.
#[fentry(function = "__x64_sys_getpgid")]
pub fn bloom_fp(_ctx: FEntryContext) -> u32 {
    let Some(s) = slot() else {
        return 0;
    };
    // SAFETY: a valid map value of this CPU.
    let s = unsafe { &mut *s };
    let mut p = Probes {
        start: global(&NR_ENTRIES) + s[CURSOR],
        wide: (global(&VALUE_SIZE) > 8) as u64,
        hits: 0,
    };
    // SAFETY: the callback and its context (on this stack) outlive the call.
    let done = unsafe {
        bpf_loop(
            global(&CHUNK),
            fp_cb as *mut c_void,
            &mut p as *mut Probes as *mut c_void,
            0,
        )
    };
    if done > 0 {
        s[CURSOR] += done as u64;
        s[PROBES] += done as u64;
    }
    s[FALSE_HITS] += p.hits;
    0
}

unsafe extern "C" fn empty_cb(_i: u32, _ctx: *mut c_void) -> i64 {
    0
}

/// What [`outer_cb`] needs of the program: this CPU's hits and, for the helper variant, the flags.
#[repr(C)]
struct LoopCtx {
    hits: *mut u64,
    flags: u64,
}

/// One outer iteration: `bpf_loop(NR_LOOPS, empty, NULL, flags)`, its iterations added to this
/// CPU's hits with an atomic add (`__sync_add_and_fetch` in bpf_loop_bench.c). The add takes the
/// result unchecked: the plans' `NR_LOOPS` are below `BPF_MAX_LOOPS` and the flags are zero, so
/// none of `bpf_loop`'s errors can occur (kernel/bpf/bpf_iter.c).
unsafe extern "C" fn outer_cb<const FLAGS_FROM_MAP: bool>(_i: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: `loops` passes its `LoopCtx`.
    let c = unsafe { &*(ctx as *const LoopCtx) };
    // A literal zero for the inline variant: the verifier inlines only a known-zero flags.
    let flags = if FLAGS_FROM_MAP { c.flags } else { 0 };
    // SAFETY: a static callback without context.
    let done = unsafe {
        bpf_loop(
            global(&NR_LOOPS),
            empty_cb as *mut c_void,
            core::ptr::null_mut(),
            flags,
        )
    };
    // SAFETY: `hits` points into this CPU's map value; the result is unused (see the top).
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(c.hits, done as u64) };
    0
}

/// As bpf_loop_bench.c: `bpf_loop(OUTER, outer, ...)` per trigger (the kernel makes 1000 outer
/// calls; fewer for long loops keeps one run short under emulation). The outer loop is a
/// `bpf_loop` there since 6.8's callback verification (a callback is followed as a loop,
/// `push_callback_call`, kernel/bpf/verifier.c): 6.12 walks a plain loop of 1000 `bpf_loop`
/// calls to 1,000,001 insns and rejects it.
#[inline(always)]
fn loops<const FLAGS_FROM_MAP: bool>() -> u32 {
    let Some(s) = slot() else {
        return 0;
    };
    let mut ctx = LoopCtx {
        // SAFETY: a valid map value of this CPU.
        hits: unsafe { &mut (*s)[HITS] } as *mut u64,
        // A map value is unknown to the verifier: the inner call cannot be inlined.
        // SAFETY: as above.
        flags: unsafe { core::ptr::read_volatile(&(*s)[LOOP_FLAGS]) },
    };
    // SAFETY: a static callback; `ctx` lives on this program's stack for the call.
    unsafe {
        bpf_loop(
            global(&OUTER),
            outer_cb::<FLAGS_FROM_MAP> as *mut c_void,
            &mut ctx as *mut LoopCtx as *mut c_void,
            0,
        )
    };
    0
}

/// Constant zero flags: the verifier inlines the loop (on the pins that run it).
#[fentry(function = "__x64_sys_getpgid")]
pub fn bpf_loop_bench(_ctx: FEntryContext) -> u32 {
    loops::<false>()
}

/// Flags from a map: the helper runs, calling the callback indirectly.
#[fentry(function = "__x64_sys_getpgid")]
pub fn bpf_loop_helper_bench(_ctx: FEntryContext) -> u32 {
    loops::<true>()
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
