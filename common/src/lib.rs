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
