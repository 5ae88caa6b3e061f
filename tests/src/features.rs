//! Feature probes, done the way bpftool and aya do them: try to create the map or load a tiny
//! program on the running kernel, never guess from the version number.
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock};

use crate::batch::{BatchError, BatchMap, Flags};
use crate::sys::{self, bpf_map_type, bpf_prog_type, MapAttr};

/// A kernel feature a test may need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feature {
    /// `BPF_MAP_TYPE_BLOOM_FILTER` with `map_extra` (5.16).
    BloomFilter,
    /// The `bpf_loop` helper (5.17).
    BpfLoop,
    /// `BPF_MAP_*_BATCH` commands on this map type (5.6 for hash and array maps).
    Batch(bpf_map_type),
}

/// Every feature the suite knows, in report order.
pub const ALL: &[Feature] = &[
    Feature::BloomFilter,
    Feature::BpfLoop,
    Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH),
    Feature::Batch(bpf_map_type::BPF_MAP_TYPE_PERCPU_HASH),
    Feature::Batch(bpf_map_type::BPF_MAP_TYPE_LRU_HASH),
    Feature::Batch(bpf_map_type::BPF_MAP_TYPE_ARRAY),
    Feature::Batch(bpf_map_type::BPF_MAP_TYPE_PERCPU_ARRAY),
    // 5.6, with the other hash tables (`BATCH_OPS(htab_lru_percpu)` in kernel/bpf/hashtab.c).
    Feature::Batch(bpf_map_type::BPF_MAP_TYPE_LRU_PERCPU_HASH),
    // 5.13: "bpf: Add support for batched ops in LPM trie maps" (generic ops in lpm_trie.c).
    Feature::Batch(bpf_map_type::BPF_MAP_TYPE_LPM_TRIE),
    // 5.19: "bpf: Extend batch operations for map-in-map bpf-maps" (9263dddc7b6f).
    Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH_OF_MAPS),
    Feature::Batch(bpf_map_type::BPF_MAP_TYPE_ARRAY_OF_MAPS),
];

impl Feature {
    /// The stable name used in `report.json` (`features`).
    pub fn name(self) -> String {
        match self {
            Feature::BloomFilter => "bloom_filter_map".into(),
            Feature::BpfLoop => "bpf_loop_helper".into(),
            Feature::Batch(t) => format!("batch_ops_{}", map_type_name(t)),
        }
    }

    /// Why a test needing this feature is skipped.
    fn missing_reason(self) -> String {
        match self {
            Feature::BloomFilter => "bloom filter map not supported by this kernel".into(),
            Feature::BpfLoop => "bpf_loop helper not supported by this kernel".into(),
            Feature::Batch(t) => format!(
                "batch map operations on {} not supported by this kernel",
                map_type_name(t)
            ),
        }
    }

    fn probe(self) -> Result<(), String> {
        sys::raise_memlock();
        let supported = match self {
            Feature::BloomFilter => probe_map(bpf_map_type::BPF_MAP_TYPE_BLOOM_FILTER as u32, 0, 4),
            Feature::BpfLoop => probe_helper(181), // BPF_FUNC_loop
            Feature::Batch(t) => probe_batch(t),
        };
        match supported {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.missing_reason()),
            Err(e) => Err(format!("{} (probe failed: {e})", self.missing_reason())),
        }
    }
}

/// Lower-case map type name without the prefix, e.g. `percpu_hash`.
pub fn map_type_name(t: bpf_map_type) -> String {
    format!("{t:?}")
        .trim_start_matches("BPF_MAP_TYPE_")
        .to_lowercase()
}

/// `Ok(())` when the running kernel has `feature`, else the reason to skip. Probed once.
pub fn require(feature: Feature) -> Result<(), String> {
    static CACHE: OnceLock<Mutex<HashMap<Feature, Result<(), String>>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    cache
        .entry(feature)
        .or_insert_with(|| feature.probe())
        .clone()
}

/// A map type exists when a minimal map of it can be created; EINVAL means unknown type.
fn probe_map(map_type: u32, key_size: u32, value_size: u32) -> io::Result<bool> {
    let attr = MapAttr {
        map_type,
        key_size,
        value_size,
        max_entries: 1,
        map_flags: 0,
        map_extra: 0,
    };
    match sys::map_create(&attr) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(false),
        Err(e) => Err(e),
    }
}

/// A helper exists when the verifier does not call it unknown (bpftool's probe): the program
/// passes it no valid arguments, so other rejections are expected and mean "known".
fn probe_helper(helper: i32) -> io::Result<bool> {
    let insns = [
        sys::mov64_imm(1, 0),
        sys::mov64_imm(2, 0),
        sys::mov64_imm(3, 0),
        sys::mov64_imm(4, 0),
        sys::call(helper),
        sys::mov64_imm(0, 0),
        sys::EXIT,
    ];
    match sys::prog_load(bpf_prog_type::BPF_PROG_TYPE_SOCKET_FILTER, &insns) {
        Ok(_) => Ok(true),
        Err((_, log)) if log.contains("invalid func ") || log.contains("unknown func ") => {
            Ok(false)
        }
        Err((e, log)) if log.is_empty() => Err(e),
        Err(_) => Ok(true),
    }
}

/// Batch lookup on an empty map: ENOENT (end of map) means supported; EINVAL (unknown command,
/// before 5.6) or ENOTSUPP (no batch ops for this type) mean not.
fn probe_batch(map_type: bpf_map_type) -> io::Result<bool> {
    let fd = match batch_probe_map(map_type) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(false),
        Err(e) => return Err(e),
    };
    // The end of the empty map (ENOENT) comes back as Ok with `end` set.
    match BatchMap::new(fd.as_fd())?.lookup_batch(None, 1, Flags::default()) {
        Ok(_) => Ok(true),
        Err(BatchError::Invalid { .. } | BatchError::NotSupported) => Ok(false),
        Err(e) => Err(io::Error::other(e)),
    }
}

/// A small empty map of `map_type` for [`probe_batch`]: an LPM trie needs `BPF_F_NO_PREALLOC`
/// and a prefix length in its key (`trie_alloc`), a map of maps an inner map template
/// (`bpf_map_meta_alloc`).
fn batch_probe_map(map_type: bpf_map_type) -> io::Result<OwnedFd> {
    use bpf_map_type::*;
    let (key_size, value_size, map_flags) = match map_type {
        BPF_MAP_TYPE_LPM_TRIE => (8, 8, aya_obj::generated::BPF_F_NO_PREALLOC),
        BPF_MAP_TYPE_HASH_OF_MAPS | BPF_MAP_TYPE_ARRAY_OF_MAPS => (4, 4, 0),
        _ => (4, 8, 0),
    };
    let a = MapAttr {
        map_type: map_type as u32,
        key_size,
        value_size,
        max_entries: 4,
        map_flags,
        map_extra: 0,
    };
    if !matches!(
        map_type,
        BPF_MAP_TYPE_HASH_OF_MAPS | BPF_MAP_TYPE_ARRAY_OF_MAPS
    ) {
        return sys::map_create(&a);
    }
    let inner = sys::map_create(&MapAttr {
        map_type: BPF_MAP_TYPE_ARRAY as u32,
        value_size: 4,
        ..a
    })?;
    let mut attr = sys::map_create_attr(&a);
    attr.__bindgen_anon_1.inner_map_fd = inner.as_raw_fd() as u32;
    sys::map_create_from(&mut attr)
}

/// The number of possible CPUs: the length of every per-CPU value array.
pub fn possible_cpus() -> io::Result<usize> {
    aya::util::nr_cpus().map_err(|(_, e)| e)
}

/// Probes every known feature: `name -> supported` for `features.json`.
pub fn probe_all() -> BTreeMap<String, bool> {
    ALL.iter()
        .map(|f| (f.name(), require(*f).is_ok()))
        .collect()
}

#[cfg(test)]
mod probes_can_say_no {
    use super::*;

    #[test]
    fn an_unknown_helper_is_reported_missing() {
        assert!(!probe_helper(1_000_000).expect("probe"));
    }

    #[test]
    fn an_unknown_map_type_is_reported_missing() {
        assert!(!probe_map(10_000, 4, 4).expect("probe"));
    }
}
