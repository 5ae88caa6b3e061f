//! Constants shared by the BPF programs in `ebpf/` and the guest tests in `tests/`.
#![no_std]

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
    /// Entries of every values array, and max_entries of the inner map templates.
    pub const VALUES: usize = 10_000;
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
