//! The kernel features the suite probes, and the first upstream release that has each: what a
//! kernel is *expected* to have. The guest probes (`tests/src/features.rs`) answer what it
//! *does* have; the runner (`vm::expect`) fails a run where the two disagree, so a broken probe
//! or a regression can never pass as "not supported by this kernel".
//!
//! To add a feature: one row here (its `features.json` name, the release, the commit that added
//! it), a `Feature` variant with its probe in `tests/src/features.rs`, and the name in the
//! `features` list of every pin at or above that release (`kernels/*.toml`; a host test names
//! the pins to change).

/// One feature: its name in `features.json` and `report.json`, the first mainline release that
/// has it, and the kernel source that added it (commit and file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub name: &'static str,
    /// `(major, minor)` of the first mainline release with the feature.
    pub since: (u32, u32),
    pub source: &'static str,
}

/// Every feature the suite probes, oldest first. One row per feature, one line per row.
#[rustfmt::skip]
pub const EXPECTED: &[Expected] = &[
    row("batch_ops_hash", (5, 6), "057996380a42 \"bpf: Add batch ops to all htab bpf map\" (kernel/bpf/hashtab.c, BATCH_OPS(htab))"),
    row("batch_ops_percpu_hash", (5, 6), "057996380a42 \"bpf: Add batch ops to all htab bpf map\" (kernel/bpf/hashtab.c, BATCH_OPS(htab_percpu))"),
    row("batch_ops_lru_hash", (5, 6), "057996380a42 \"bpf: Add batch ops to all htab bpf map\" (kernel/bpf/hashtab.c, BATCH_OPS(htab_lru))"),
    row("batch_ops_lru_percpu_hash", (5, 6), "057996380a42 \"bpf: Add batch ops to all htab bpf map\" (kernel/bpf/hashtab.c, BATCH_OPS(htab_lru_percpu))"),
    row("batch_ops_array", (5, 6), "\"bpf: Add lookup and update batch ops to arraymap\" (kernel/bpf/arraymap.c, array_map_ops)"),
    row("batch_ops_percpu_array", (5, 13), "f008d732ab18 \"bpf: Add batched ops support for percpu array\" (kernel/bpf/arraymap.c, percpu_array_map_ops)"),
    row("batch_ops_lpm_trie", (5, 13), "\"bpf: Add support for batched ops in LPM trie maps\" (kernel/bpf/lpm_trie.c, trie_map_ops: generic_map_*_batch)"),
    row("bpf_for_each_map_elem_helper", (5, 13), "69c087ba6225 \"bpf: Add bpf_for_each_map_elem() helper\" (kernel/bpf/bpf_iter.c, bpf_for_each_map_elem)"),
    row("bloom_filter_map", (5, 16), "9330986c0300 \"bpf: Add bloom filter map implementation\" (kernel/bpf/bloom_filter.c)"),
    row("bpf_loop_helper", (5, 17), "e6f2dd0f8067 \"bpf: Add bpf_loop helper\" (kernel/bpf/bpf_iter.c, bpf_loop)"),
    row("batch_ops_hash_of_maps", (5, 19), "9263dddc7b6f \"bpf: Extend batch operations for map-in-map bpf-maps\" (kernel/bpf/hashtab.c, htab_of_maps_map_ops)"),
    row("batch_ops_array_of_maps", (5, 19), "9263dddc7b6f \"bpf: Extend batch operations for map-in-map bpf-maps\" (kernel/bpf/arraymap.c, array_of_maps_map_ops)"),
    row("bpf_loop_inlining", (6, 0), "1ade23711971 \"bpf: Inline calls to bpf_loop when callback is known\" (kernel/bpf/verifier.c, inline_bpf_loop)"),
];

const fn row(name: &'static str, since: (u32, u32), source: &'static str) -> Expected {
    Expected {
        name,
        since,
        source,
    }
}

/// The row of feature `name`.
pub fn find(name: &str) -> Option<&'static Expected> {
    EXPECTED.iter().find(|e| e.name == name)
}

/// The features a mainline kernel `major.minor` has.
pub fn expected_in(version: (u32, u32)) -> impl Iterator<Item = &'static Expected> {
    EXPECTED.iter().filter(move |e| e.since <= version)
}
