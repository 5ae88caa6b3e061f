//! Constants shared by the BPF programs in `ebpf/` and the guest tests in `tests/`, and the
//! expected-features table (`features`) the host runner judges probes against.
#![warn(unreachable_pub)]
#![no_std]

#[cfg(feature = "bench-results")]
pub mod bench_results;
#[cfg(feature = "std")]
pub mod bloom_theory;
pub mod features;
#[cfg(feature = "std")]
pub mod objects;
#[cfg(feature = "protocol")]
pub mod protocol;
#[cfg(feature = "std")]
pub mod stats;
#[cfg(feature = "protocol")]
pub mod verifier;

/// `smoke` object (ebpf/src/smoke.rs): a socket filter that fills a BTF hash map and a BTF
/// bloom filter, run through `BPF_PROG_TEST_RUN`.
pub mod smoke {
    /// Name of the program in the object.
    pub const PROG: &str = "smoke";
    /// Name of the BTF hash map (`u32 -> u64`).
    pub const HASH: &str = "SMOKE_HASH";
    /// Name of the BTF bloom filter (`u64` values).
    pub const BLOOM: &str = "SMOKE_BLOOM";
    /// Capacity of the hash map.
    pub const HASH_MAX_ENTRIES: usize = 16;
    /// Capacity of the bloom filter.
    pub const BLOOM_MAX_ENTRIES: usize = 64;
    /// Hash functions of the bloom filter: not the kernel default (5), so that the
    /// `map_extra` the object carries is visible in `BPF_OBJ_GET_INFO_BY_FD`.
    pub const BLOOM_HASH_FUNCS: usize = 3;
    /// Key under which the program stores [`VALUE`].
    pub const KEY_VALUE: u32 = 1;
    /// Key under which the program stores 1 if the bloom filter reports [`VALUE`] after
    /// pushing it, else the helper's error.
    pub const KEY_BLOOM_HIT: u32 = 2;
    /// The value the program writes.
    pub const VALUE: u64 = 0x5eed_b0f5_0000_002a;
    /// What the program returns.
    pub const RETVAL: u32 = 42;
}

/// `bloom_filter` object (ebpf/src/bloom_filter.rs): programs that reach bloom filters created
/// at run time through array-of-maps slots, so one object serves any hash count and capacity.
///
/// Naming: for each value size `S` in [`VALUE_SIZES`] the object has a values array
/// `VALUES_<S>` (`[u8; S]`, [`VALUES`] entries), outer maps `OUTER_<S>` (random seed) and
/// `OUTER_<S>_ZERO_SEED` (`BPF_F_ZERO_SEED`) whose slot 0 holds the filter, and socket filters
/// `check_<S>` / `check_<S>_zero_seed` that peek every value of `VALUES_<S>` in that filter.
pub mod bloom_filter {
    /// Value sizes with a values array and outer maps; 11 takes the kernel's `jhash` path
    /// (not a multiple of 4), the others `jhash2`.
    pub const VALUE_SIZES: [usize; 4] = [4, 8, 11, 64];
    /// Entries of every values array, and max_entries of the inner map templates. Each test
    /// that walks them pushes or peeks every value from userspace too, a syscall each (tens of
    /// microseconds under TCG, for 40 grid cases): 2,000 values still give every hash count,
    /// value size and seed thousands of bit positions to disagree on (docs/test-durations.md).
    pub const VALUES: usize = 2_000;
    /// `BPF_F_ZERO_SEED`.
    pub const ZERO_SEED: usize = 1 << 6;
    /// Slots of [`STATE`]: arguments written by the test, results written by the programs.
    pub const STATE: &str = "BLOOM_STATE";
    /// Number of slots of [`STATE`].
    pub const STATE_SLOTS: usize = 8;
    /// In: first index `i` of the probes `value(i)` of [`FALSE_POSITIVES`].
    pub const ARG_FIRST: u32 = 0;
    /// In: number of probes of [`FALSE_POSITIVES`].
    pub const ARG_COUNT: u32 = 1;
    /// Out: elements walked (values array entries or probes).
    pub const OUT_VISITED: u32 = 2;
    /// Out: peeks that did not find the value (`check_*`) or that found it
    /// ([`FALSE_POSITIVES`]), pushes that failed ([`PUSH_8`]).
    pub const OUT_COUNT: u32 = 3;
    /// Out: 1 when the outer map's slot 0 was empty.
    pub const OUT_NO_INNER: u32 = 4;
    /// Peeks `value(ARG_FIRST + i)` for `i < ARG_COUNT` (via `bpf_loop`) in slot 0 of
    /// `OUTER_8_ZERO_SEED` and counts the hits.
    pub const FALSE_POSITIVES: &str = "false_positives";
    /// Pushes every value of `VALUES_8` into the filter in slot 0 of `OUTER_8`.
    pub const PUSH_8: &str = "push_8";

    /// The `i`-th 8-byte test value: splitmix64's finaliser, a bijection, so distinct indices
    /// give distinct values and probes never collide with inserted values.
    pub const fn value(i: u64) -> u64 {
        let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// `bench` object (ebpf/src/bench.rs): the programs `cargo xtask bench-vm` measures, each an
/// fentry program on [`bench::TRIGGER_FN`], run by producer threads calling `getpgid(2)`, as
/// the kernel's `bench` tool (tools/testing/selftests/bpf/progs/bloom_filter_bench.c,
/// bpf_loop_bench.c).
pub mod bench {
    /// A benchmark group, as `--only` names it on the host and in the guest runner.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Group {
        /// Bloom filter throughput and false positives, and the filter in front of a hash map.
        Bloom,
        BpfLoop,
        Batch,
    }

    impl Group {
        pub const ALL: [Group; 3] = [Group::Bloom, Group::BpfLoop, Group::Batch];

        pub const fn name(self) -> &'static str {
            match self {
                Group::Bloom => "bloom",
                Group::BpfLoop => "bpf_loop",
                Group::Batch => "batch",
            }
        }

        pub fn parse(s: &str) -> Option<Self> {
            Self::ALL.into_iter().find(|g| g.name() == s)
        }
    }

    /// The prefix of the syscall wrappers on the architecture this is built for:
    /// `__x64_sys_<name>` on x86_64 (arch/x86/include/asm/syscall_wrapper.h),
    /// `__arm64_sys_<name>` on arm64 (arch/arm64/include/asm/syscall_wrapper.h).
    pub const SYSCALL_PREFIX: &str = if cfg!(target_arch = "aarch64") {
        "__arm64_sys_"
    } else {
        X86_SYSCALL_PREFIX
    };
    /// x86_64's: the objects, built once for every architecture, name it in their sections.
    pub const X86_SYSCALL_PREFIX: &str = "__x64_sys_";

    /// The syscall the producers call; the programs attach to its entry (fentry), its wrapper
    /// on the architecture this is built for.
    pub const TRIGGER_FN: &str = if cfg!(target_arch = "aarch64") {
        "__arm64_sys_getpgid"
    } else {
        "__x64_sys_getpgid"
    };

    /// `bpf_for_each_map_elem` over [`VALUES`], pushing each value into the bloom filter
    /// (bloom_filter_bench.c `bloom_update`).
    pub const BLOOM_UPDATE: &str = "bloom_update";
    /// The same walk, peeking each value (`bloom_lookup`); a miss is a false negative.
    pub const BLOOM_LOOKUP: &str = "bloom_lookup";
    /// Probes values never pushed; counts those the filter reports (false positives).
    pub const BLOOM_FP: &str = "bloom_fp";
    /// [`HASHMAP_PROBES`] hash map lookups of random keys from [`RAND`]
    /// (`bloom_hashmap_lookup` with `hashmap_use_bloom` false).
    pub const HASHMAP_WITHOUT_BLOOM: &str = "hashmap_without_bloom";
    /// The same probes, each checked in the bloom filter first (`hashmap_use_bloom` true).
    pub const HASHMAP_WITH_BLOOM: &str = "hashmap_with_bloom";
    /// `bpf_loop(NR_LOOPS, empty callback)`, `OUTER` times per trigger.
    pub const BPF_LOOP: &str = "bpf_loop_bench";
    /// The same loops with `flags` read from the CPU's slot ([`LOOP_FLAGS`], always 0): the
    /// verifier cannot prove them zero, so it leaves the `bpf_loop` helper call in place and
    /// the helper calls the callback through a pointer (kernel/bpf/verifier.c,
    /// `loop_flag_is_zero`, `update_loop_inline_state`, `inline_bpf_loop`).
    pub const BPF_LOOP_HELPER: &str = "bpf_loop_helper_bench";

    /// The bloom filter (user space creates it with the size, value size and hash count it
    /// wants, and hands it to the loader by pin path).
    pub const BLOOM: &str = "BENCH_BLOOM";
    /// The array of random values the for_each walks (created like [`BLOOM`]: its value size
    /// varies).
    pub const VALUES: &str = "BENCH_VALUES";
    /// `u64 -> u64` hash map for the hash lookups (max_entries set at load).
    pub const HASH: &str = "BENCH_HASH";
    /// One entry of [`RAND_BYTES`] random bytes the hash map probes read their keys from
    /// (the kernel's `rand_vals`).
    pub const RAND: &str = "BENCH_RAND";
    /// Stats slots: an array of [`MAX_CPUS`] `[u64; SLOT_LEN]`, one per CPU, indexed by
    /// `bpf_get_smp_processor_id()` (the kernel's `percpu_stats[256]`, one cache line each).
    pub const SLOTS: &str = "BENCH_SLOTS";
    pub const MAX_CPUS: u32 = 256;

    /// Index in a slot: hits (the throughput counter, as the kernel's `hit_key`).
    pub const HITS: usize = 0;
    /// Index: drops (hash map probes that missed, the kernel's `drop_key`).
    pub const DROPS: usize = 1;
    /// Index: false positives seen by [`BLOOM_FP`].
    pub const FALSE_HITS: usize = 2;
    /// Index: errors (a lookup miss in the bloom filter is a false negative: a bug).
    pub const ERRORS: usize = 3;
    /// Index: where this CPU's false-positive probes continue.
    pub const CURSOR: usize = 4;
    /// Index: probes made by [`BLOOM_FP`].
    pub const PROBES: usize = 5;
    /// Index: the flags [`BPF_LOOP_HELPER`] passes to `bpf_loop` (never written: 0).
    pub const LOOP_FLAGS: usize = 6;
    /// A slot is one 64-byte cache line, so two CPUs never share one.
    pub const SLOT_LEN: usize = 8;

    /// Bytes of [`RAND`]: the probes start at a random offset masked by [`RAND_MASK`] and read
    /// up to [`MAX_VALUE_SIZE`] bytes past it.
    pub const RAND_BYTES: usize = (1 << 21) + MAX_VALUE_SIZE;
    /// The kernel's `bitmask = (1ULL << 21) - 1`.
    pub const RAND_MASK: u32 = (1 << 21) - 1;
    /// Hash map probes per trigger (the kernel's 1024).
    pub const HASHMAP_PROBES: u32 = 1024;

    /// Global (read-only data): false-positive probes per trigger.
    pub const CHUNK: &str = "CHUNK";
    /// Global: entries in the value set (the false-positive probes start past them).
    pub const NR_ENTRIES: &str = "NR_ENTRIES";
    /// Global: bytes of a bloom value (8 or 64).
    pub const VALUE_SIZE: &str = "VALUE_SIZE";
    /// Global: `bpf_loop` iterations per call.
    pub const NR_LOOPS: &str = "NR_LOOPS";
    /// Global: `bpf_loop` calls per trigger.
    pub const OUTER: &str = "OUTER";
    /// Upper bound of [`OUTER`] (the kernel's bench makes 1000 calls per trigger).
    pub const MAX_OUTER: u32 = 1000;
    /// Largest bloom value in bytes.
    pub const MAX_VALUE_SIZE: usize = 64;

    /// The `i`-th false-positive probe: a bijection of `i`. The filter holds random values,
    /// so a probe is a member only with probability `n / 2^64`.
    #[inline(always)]
    pub const fn probe(i: u64) -> u64 {
        (i.wrapping_add(1)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    /// Word `lane` of a 64-byte probe (lane 0 is [`probe`]).
    #[inline(always)]
    pub const fn lane(v: u64, lane: u64) -> u64 {
        v ^ lane.wrapping_mul(0x0101_0101_0101_0101)
    }
}

/// `bpf_loop` object (ebpf/src/bpf_loop.rs): socket filters that call `bpf_loop` with
/// arguments from [`ARGS`](bpf_loop::ARGS) or constants and store what happened in
/// [`OUT`](bpf_loop::OUT), run through `BPF_PROG_TEST_RUN`. The counting callback adds 1 to
/// [`OUT_CALLS`](bpf_loop::OUT_CALLS) and its index to [`OUT_SUM`](bpf_loop::OUT_SUM), and
/// returns 1 (stop) at index [`ARG_STOP_AT`](bpf_loop::ARG_STOP_AT).
pub mod bpf_loop {
    /// `nr_loops` and `flags` read from `ARGS`; the helper is called (never inlined).
    pub const PROG_HELPER: &str = "loop_helper";
    /// `nr_loops` read from `ARGS`, `flags` the constant 0: inlined by the verifier since 6.0.
    pub const PROG_INLINED: &str = "loop_inlined";
    /// `nr_loops` the constant [`CONST_LOOPS`], `flags` 0: inlined since 6.0.
    pub const PROG_CONST: &str = "loop_const";
    /// `nr_loops` the constant [`CONST_TOO_MANY`], `flags` 0: inlined since 6.0.
    pub const PROG_CONST_TOO_MANY: &str = "loop_const_too_many";
    /// `nr_loops` from `ARGS`, a NULL context; the callback counts into `OUT` through the map.
    pub const PROG_NULL_CTX: &str = "loop_null_ctx";
    /// [`PROG_NULL_CTX`] with `flags` from `ARGS`: the helper path.
    pub const PROG_NULL_CTX_HELPER: &str = "loop_null_ctx_helper";
    /// [`NESTED`] loops inside one another; each level counts its calls.
    pub const PROG_NESTED: &str = "loop_nested";
    /// [`PROG_NESTED`] with every level's `flags` from `ARGS`: the helper path.
    pub const PROG_NESTED_HELPER: &str = "loop_nested_helper";
    /// Eight frames, the verifier's `MAX_CALL_FRAMES` (include/linux/bpf_verifier.h): the
    /// program, six nested callbacks, and a leaf callback that sets `OUT_CALLS` to 1.
    pub const PROG_DEEPEST: &str = "loop_deepest";

    /// Object `bpf_loop_reject` (ebpf/src/bpf_loop_reject.rs), a program per rejection: the
    /// callback returns its index.
    pub const PROG_REJECT: &str = "loop_bad_callback_return";
    /// `ctx` is a map value pointer.
    pub const PROG_REJECT_CTX_NOT_STACK: &str = "loop_ctx_not_stack";
    /// The callback is a scalar read from a map.
    pub const PROG_REJECT_CALLBACK_NOT_SUBPROG: &str = "loop_callback_not_subprog";
    /// The callback reads R3.
    pub const PROG_REJECT_CALLBACK_READS_R3: &str = "loop_callback_reads_r3";
    /// Nested callbacks making 9, 16 and 17 frames with the program's: one past
    /// `MAX_CALL_FRAMES` where it is 8, as many as it is where it is 16, one past that.
    pub const PROG_REJECT_FRAMES: [(u32, &str); 3] = [
        (9, "loop_frames_9"),
        (16, "loop_frames_16"),
        (17, "loop_frames_17"),
    ];

    /// `ARGS` (`u32 -> u64` array), written by the test.
    pub const ARGS: &str = "BPF_LOOP_ARGS";
    pub const ARG_NR_LOOPS: u32 = 0;
    pub const ARG_FLAGS: u32 = 1;
    /// Index at which the callback returns 1; `u64::MAX` (never an index) runs to the end.
    pub const ARG_STOP_AT: u32 = 2;
    pub const ARGS_LEN: usize = 3;

    /// `OUT` (`u32 -> u64` array), written by the programs.
    pub const OUT: &str = "BPF_LOOP_OUT";
    /// `bpf_loop`'s return value (as `i64`); for [`PROG_NESTED`], the outermost call's.
    pub const OUT_RET: u32 = 0;
    /// Callback calls; for [`PROG_NESTED`], the innermost level's.
    pub const OUT_CALLS: u32 = 1;
    /// Sum of the indexes the callback saw.
    pub const OUT_SUM: u32 = 2;
    /// [`PROG_NESTED`]: calls of the outer and the middle callback.
    pub const OUT_OUTER_CALLS: u32 = 3;
    pub const OUT_MID_CALLS: u32 = 4;
    /// [`PROG_NESTED`]: the sum of the return values of every middle and inner `bpf_loop`.
    pub const OUT_NESTED_RET_SUM: u32 = 5;
    /// [`PROG_NULL_CTX`]: the `ctx` argument the callback got, as a number.
    pub const OUT_CTX: u32 = 6;
    pub const OUT_LEN: usize = 7;

    /// The kernel's `BPF_MAX_LOOPS`.
    pub const BPF_MAX_LOOPS: u32 = 1 << 23;
    pub const CONST_LOOPS: u32 = 500;
    pub const CONST_TOO_MANY: u32 = BPF_MAX_LOOPS + 1;
    /// Outer, middle and inner `nr_loops` of [`PROG_NESTED`].
    pub const NESTED: [u32; 3] = [100, 4, 4];

    /// `check_stack` of the kernel's `prog_tests/bpf_loop.c`: reads keys
    /// [`STACK_OUTER_KEYS`] of [`STACK`], calls `bpf_loop(1, ...)` whose callback reads
    /// [`STACK_INNER_KEYS`], runs an inner `bpf_loop(1, ...)` and writes each value it read
    /// plus 1 back; then the program writes its own values plus 1. Six values live across each
    /// call: more than the callee-saved registers R6-R9, which the inlined loop borrows.
    pub const PROG_STACK_CHECK: &str = "loop_stack_check";
    /// `i32 -> i32` hash map of [`PROG_STACK_CHECK`] (`map1` of the kernel's
    /// `progs/bpf_loop.c`).
    pub const STACK: &str = "BPF_LOOP_STACK";
    pub const STACK_MAX_ENTRIES: usize = 32;
    /// Keys the outer callback reads and bumps.
    pub const STACK_INNER_KEYS: [i32; 6] = [1, 2, 3, 4, 5, 6];
    /// Keys the program reads and bumps around the outer loop.
    pub const STACK_OUTER_KEYS: [i32; 6] = [7, 8, 9, 10, 11, 12];

    /// `check_non_constant_callback` of `prog_tests/bpf_loop.c`: `bpf_loop(1, cb, NULL, 0)`
    /// with `cb` picked at run time by [`RUNTIME_SELECT`]: [`MARK_0F`] picks the callback that
    /// stores [`MARK_0F`] in [`RUNTIME_MARK`], any other value the one that stores [`MARK_F0`].
    /// Two callbacks reach one call, so the verifier must not inline it.
    pub const PROG_RUNTIME_CALLBACK: &str = "loop_runtime_callback";
    /// `u32 -> u64` array of [`PROG_RUNTIME_CALLBACK`].
    pub const RUNTIME: &str = "BPF_LOOP_RUNTIME";
    /// In: which callback to pass.
    pub const RUNTIME_SELECT: u32 = 0;
    /// Out: what the callback stored (the program zeroes it first).
    pub const RUNTIME_MARK: u32 = 1;
    /// Out: `bpf_loop`'s return value.
    pub const RUNTIME_RET: u32 = 2;
    pub const RUNTIME_LEN: usize = 3;
    pub const MARK_0F: u64 = 0x0f;
    pub const MARK_F0: u64 = 0xf0;
}

/// `spin_lock` object (ebpf/src/spin_lock.rs): a BTF hash map whose value holds a
/// `struct bpf_spin_lock`, the only kind of map on which the kernel accepts `BPF_F_LOCK`
/// (`map_value_has_spin_lock` / `btf_record_has_field(.., BPF_SPIN_LOCK)`), and a socket
/// filter that bumps a value under the lock.
pub mod spin_lock {
    /// The `u32 -> Locked` hash map.
    pub const MAP: &str = "LOCKED";
    pub const MAX_ENTRIES: usize = 64;
    /// Bumps `data[0]` of key [`BUMP_KEY`] under the value's lock.
    pub const PROG_BUMP: &str = "bump_locked";
    pub const BUMP_KEY: u32 = 0;
    /// `u64` words after the lock.
    pub const DATA_WORDS: usize = 3;
    /// Bytes of a value: the 4-byte lock, 4 bytes of padding, then the data words
    /// (`#[repr(C)]` layout of `Locked`).
    pub const VALUE_SIZE: usize = 8 + 8 * DATA_WORDS;
    /// Offset of the lock in the value.
    pub const LOCK_OFFSET: usize = 0;
    /// Offset of `data[0]`.
    pub const DATA_OFFSET: usize = 8;
}
