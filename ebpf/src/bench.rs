//! Benchmark object for `cargo xtask bench-vm`, after the kernel's `bench` tool
//! (tools/testing/selftests/bpf/progs/{bloom_filter_bench,bpf_loop_bench}.c).
//!
//! Every program is an fentry program on `getpgid(2)`'s entry: the producer thread in the
//! guest calls getpgid in a loop, as `bench` does. fentry (not a syscall tracepoint) because
//! it fires for this one syscall only and costs one direct call from the trampoline.
//!
//! The value walks run as `bpf_loop` callbacks, one per value, like the kernel's
//! `bpf_for_each_map_elem` callbacks; each trigger walks `CHUNK` values from a per-CPU cursor,
//! so one program run stays short even under emulation. Counters are per-CPU.
#![no_std]
#![no_main]

use core::ffi::c_void;

use aya_ebpf::{
    btf_maps::{BloomFilter, HashMap, PerCpuArray},
    helpers::generated::bpf_loop,
    macros::{btf_map, fentry},
    programs::FEntryContext,
};
use bpfvm_common::bench::{
    lane, value, CURSOR, ERRORS, HITS, MAX_OUTER, MAX_VALUE_SIZE, OPS, STATS_LEN,
};

/// Replaced at load time by a filter of the benchmarked size (passed in by pin path).
#[btf_map]
static BENCH_BLOOM: BloomFilter<[u64; MAX_VALUE_SIZE / 8], 1> = BloomFilter::new();

#[btf_map]
static BENCH_HASH: HashMap<u64, u64, 1> = HashMap::new();

#[btf_map]
static BENCH_STATS: PerCpuArray<[u64; STATS_LEN], 1> = PerCpuArray::new();

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

/// `-ENOENT`: what a bloom filter lookup returns for an absent value.
const ENOENT: i32 = -2;

#[inline(always)]
fn global<T: Copy>(v: &T) -> T {
    // SAFETY: a plain read of a global; volatile so the loader's value is used.
    unsafe { core::ptr::read_volatile(v) }
}

/// One trigger's walk, passed to the callbacks on the stack.
#[repr(C)]
struct Walk {
    start: u64,
    /// The walk wraps at this index.
    span: u64,
    entries: u64,
    wide: u64,
    hits: u64,
    errors: u64,
}

/// The bloom value of index `i`: 8 bytes, or 64 when `wide`.
#[inline(always)]
fn fill(i: u64, wide: bool) -> [u64; MAX_VALUE_SIZE / 8] {
    let v = value(i);
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

#[inline(always)]
fn index(w: &Walk, i: u32) -> u64 {
    let idx = w.start + i as u64;
    if idx >= w.span {
        idx - w.span
    } else {
        idx
    }
}

unsafe extern "C" fn update_cb(i: u32, ctx: *mut c_void) -> i64 {
    let w = &mut *(ctx as *mut Walk);
    if BENCH_BLOOM
        .insert(fill(index(w, i), w.wide != 0), 0)
        .is_err()
    {
        w.errors += 1;
        return 1;
    }
    0
}

unsafe extern "C" fn lookup_cb(i: u32, ctx: *mut c_void) -> i64 {
    let w = &mut *(ctx as *mut Walk);
    if BENCH_BLOOM
        .contains(fill(index(w, i), w.wide != 0))
        .is_err()
    {
        // Every walked value was pushed: a miss is a false negative.
        w.errors += 1;
        return 1;
    }
    0
}

unsafe extern "C" fn fp_cb(i: u32, ctx: *mut c_void) -> i64 {
    let w = &mut *(ctx as *mut Walk);
    // Indices past the set are never members (value() is a bijection).
    if BENCH_BLOOM
        .contains(fill(w.entries + w.start + i as u64, w.wide != 0))
        .is_ok()
    {
        w.hits += 1;
    }
    0
}

unsafe extern "C" fn hash_cb(i: u32, ctx: *mut c_void) -> i64 {
    let w = &mut *(ctx as *mut Walk);
    if BENCH_HASH.get_ptr(value(index(w, i))).is_some() {
        w.hits += 1;
    }
    0
}

unsafe extern "C" fn hash_bloom_cb(i: u32, ctx: *mut c_void) -> i64 {
    let w = &mut *(ctx as *mut Walk);
    let key = value(index(w, i));
    match BENCH_BLOOM.contains(fill(index(w, i), false)) {
        Ok(()) => {}
        Err(ENOENT) => return 0,
        Err(_) => {
            w.errors += 1;
            return 1;
        }
    }
    if BENCH_HASH.get_ptr(key).is_some() {
        w.hits += 1;
    }
    0
}

unsafe extern "C" fn empty_cb(_i: u32, _ctx: *mut c_void) -> i64 {
    0
}

/// Walks `CHUNK` indices from this CPU's cursor with `cb`, wrapping at `span`; `grow`: the
/// cursor never wraps (fresh indices every time). Adds the counts to the per-CPU stats.
#[inline(always)]
fn walk(cb: unsafe extern "C" fn(u32, *mut c_void) -> i64, span: u64, grow: bool) -> u32 {
    let Some(stats) = BENCH_STATS.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: a valid per-CPU map value of this CPU.
    let stats = unsafe { &mut *stats };
    let chunk = global(&CHUNK);
    let mut w = Walk {
        start: stats[CURSOR],
        span,
        entries: global(&NR_ENTRIES),
        wide: (global(&VALUE_SIZE) > 8) as u64,
        hits: 0,
        errors: 0,
    };
    // SAFETY: the callback and its context (on this stack) outlive the call.
    let done = unsafe {
        bpf_loop(
            chunk,
            cb as *mut c_void,
            &mut w as *mut Walk as *mut c_void,
            0,
        )
    };
    if done > 0 {
        stats[OPS] += done as u64;
        let next = w.start + done as u64;
        stats[CURSOR] = if !grow && next >= span {
            next - span
        } else {
            next
        };
    }
    stats[HITS] += w.hits;
    stats[ERRORS] += w.errors;
    0
}

#[fentry(function = "__x64_sys_getpgid")]
pub fn bloom_update(_ctx: FEntryContext) -> u32 {
    walk(update_cb, global(&NR_ENTRIES), false)
}

#[fentry(function = "__x64_sys_getpgid")]
pub fn bloom_lookup(_ctx: FEntryContext) -> u32 {
    walk(lookup_cb, global(&NR_ENTRIES), false)
}

#[fentry(function = "__x64_sys_getpgid")]
pub fn bloom_fp(_ctx: FEntryContext) -> u32 {
    walk(fp_cb, u64::MAX, true)
}

/// Probes indices `0..2 * NR_ENTRIES`: half members, half not.
#[fentry(function = "__x64_sys_getpgid")]
pub fn hash_lookup(_ctx: FEntryContext) -> u32 {
    walk(hash_cb, 2 * global(&NR_ENTRIES), false)
}

#[fentry(function = "__x64_sys_getpgid")]
pub fn hash_bloom_lookup(_ctx: FEntryContext) -> u32 {
    walk(hash_bloom_cb, 2 * global(&NR_ENTRIES), false)
}

/// As bpf_loop_bench.c: `OUTER` calls of `bpf_loop(NR_LOOPS, empty)` per trigger (the kernel
/// makes 1000; fewer for long loops keeps one run short under emulation).
#[fentry(function = "__x64_sys_getpgid")]
pub fn bpf_loop_bench(_ctx: FEntryContext) -> u32 {
    let Some(stats) = BENCH_STATS.get_ptr_mut(0) else {
        return 0;
    };
    let nr = global(&NR_LOOPS);
    let outer = global(&OUTER);
    let mut i = 0;
    while i < MAX_OUTER && i < outer {
        // SAFETY: a static callback without context.
        let done = unsafe { bpf_loop(nr, empty_cb as *mut c_void, core::ptr::null_mut(), 0) };
        if done > 0 {
            // SAFETY: a valid per-CPU map value of this CPU.
            unsafe { (*stats)[OPS] += done as u64 };
        }
        i += 1;
    }
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
