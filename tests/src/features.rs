//! Feature probes, done the way bpftool and aya do them: try to create the map or load a tiny
//! program on the running kernel, never guess from the version number.
//!
//! A probe answers [`Probe::Present`], [`Probe::Absent`] (only for the kernel's documented
//! "no": EINVAL for an unknown map type or command, "unknown func" for a helper) or
//! [`Probe::Error`] (anything else). The runner compares the answers with what the kernel is
//! expected to have (`bpfvm_common::features`): a test never skips for an expected feature, and
//! an error fails the run whatever the kernel.
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use aya::programs::SocketFilter;

use crate::maps::batch::{BatchError, BatchMap, Flags};
use crate::object;
use crate::sys::{self, bpf_map_type, bpf_prog_type, MapAttr};

/// A kernel feature a test may need. Each has a row (its [`Feature::name`], the release that
/// brought it) in `bpfvm_common::features::EXPECTED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feature {
    /// `BPF_MAP_TYPE_BLOOM_FILTER` with `map_extra` (5.16).
    BloomFilter,
    /// The `bpf_loop` helper (5.17).
    BpfLoop,
    /// The verifier inlines `bpf_loop` with a constant callback and flags 0 (6.0).
    BpfLoopInlining,
    /// The `bpf_for_each_map_elem` helper (5.13).
    ForEachMapElem,
    /// `BPF_MAP_*_BATCH` commands on this map type (5.6 for hash and array maps).
    Batch(bpf_map_type),
}

/// Every feature the suite knows, in report order.
pub const ALL: &[Feature] = &[
    Feature::BloomFilter,
    Feature::BpfLoop,
    Feature::BpfLoopInlining,
    Feature::ForEachMapElem,
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

/// `BPF_FUNC_for_each_map_elem` and `BPF_FUNC_loop` (include/uapi/linux/bpf.h).
const FUNC_FOR_EACH_MAP_ELEM: i32 = 164;
const FUNC_LOOP: i32 = 181;

/// A probe's answer: the type `features.json` holds, shared with the host.
pub use bpfvm_common::protocol::Probe;

fn answer(r: io::Result<Result<(), String>>) -> Probe {
    match r {
        Ok(Ok(())) => Probe::Present,
        Ok(Err(why)) => Probe::Absent(why),
        Err(e) => Probe::Error(e.to_string()),
    }
}

impl Feature {
    /// The stable name used in `features.json`, `report.json` and the expected-features table.
    pub fn name(self) -> String {
        match self {
            Feature::BloomFilter => "bloom_filter_map".into(),
            Feature::BpfLoop => "bpf_loop_helper".into(),
            Feature::BpfLoopInlining => "bpf_loop_inlining".into(),
            Feature::ForEachMapElem => "bpf_for_each_map_elem_helper".into(),
            Feature::Batch(t) => format!("batch_ops_{}", map_type_name(t)),
        }
    }

    /// Why a test needing this feature is skipped.
    fn missing_reason(self) -> String {
        match self {
            Feature::BloomFilter => "bloom filter map not supported by this kernel".into(),
            Feature::BpfLoop => "bpf_loop helper not supported by this kernel".into(),
            Feature::BpfLoopInlining => "this kernel's verifier does not inline bpf_loop".into(),
            Feature::ForEachMapElem => {
                "bpf_for_each_map_elem helper not supported by this kernel".into()
            }
            Feature::Batch(t) => format!(
                "batch map operations on {} not supported by this kernel",
                map_type_name(t)
            ),
        }
    }

    fn probe(self) -> Probe {
        sys::raise_memlock();
        match self {
            Feature::BloomFilter => answer(probe_map(
                bpf_map_type::BPF_MAP_TYPE_BLOOM_FILTER as u32,
                0,
                4,
            )),
            Feature::BpfLoop => answer(probe_helper(FUNC_LOOP)),
            Feature::BpfLoopInlining => probe_bpf_loop_inlining(),
            Feature::ForEachMapElem => answer(probe_helper(FUNC_FOR_EACH_MAP_ELEM)),
            Feature::Batch(t) => answer(probe_batch(t)),
        }
    }

    /// The feature a map type needs beyond what the oldest pin (5.10) has, if any.
    fn for_map_type(map_type: u32) -> Option<Feature> {
        (map_type == bpf_map_type::BPF_MAP_TYPE_BLOOM_FILTER as u32).then_some(Feature::BloomFilter)
    }

    /// The feature a helper needs beyond what the oldest pin (5.10) has, if any.
    fn for_helper(helper: i32) -> Option<Feature> {
        match helper {
            FUNC_FOR_EACH_MAP_ELEM => Some(Feature::ForEachMapElem),
            FUNC_LOOP => Some(Feature::BpfLoop),
            _ => None,
        }
    }
}

/// Why this kernel cannot create an object's maps, for each map type (inner map templates
/// included) whose feature the kernel lacks: the probe's answer. Empty when it has them all
/// (then a failed load is not a missing feature). Unlike [`needed_by`], any object will do.
pub fn absent_map_features(bytes: &[u8]) -> Vec<String> {
    let Ok(uses) = object::uses(bytes) else {
        return vec![];
    };
    absent(uses.map_types.into_iter().filter_map(Feature::for_map_type))
}

/// Why this kernel lacks each of `helpers` (helper ids) whose feature the probes find absent.
pub fn absent_helper_features(helpers: &[i32]) -> Vec<String> {
    absent(helpers.iter().filter_map(|&h| Feature::for_helper(h)))
}

/// The probes' reasons for those of `features` that are absent, each once.
fn absent(features: impl Iterator<Item = Feature>) -> Vec<String> {
    let mut out: Vec<String> = features
        .filter_map(|f| match probe(f) {
            Probe::Absent(why) => Some(format!("{}: {why}", f.missing_reason())),
            _ => None,
        })
        .collect();
    out.dedup();
    out
}

/// Map types and helpers up to these exist in 5.10, the oldest pin (`BPF_MAP_TYPE_INODE_STORAGE`,
/// `BPF_FUNC_redirect_peer` in its include/uapi/linux/bpf.h); newer ones need a [`Feature`].
const LAST_MAP_TYPE_IN_5_10: u32 = bpf_map_type::BPF_MAP_TYPE_INODE_STORAGE as u32;
const LAST_HELPER_IN_5_10: i32 = 155;

/// Every feature a BPF object needs, read from the object itself: its maps' types (inner map
/// templates included) and the helpers its programs call. Panics on a map type or helper newer
/// than 5.10 that has no [`Feature`] yet, so a new object cannot load untested on an old kernel.
pub fn needed_by(bytes: &[u8]) -> Vec<Feature> {
    let uses = object::uses(bytes).expect("parse the embedded BPF object");
    let mut needs = Vec::new();
    for t in uses.map_types {
        match Feature::for_map_type(t) {
            Some(f) => needs.push(f),
            None => assert!(
                t <= LAST_MAP_TYPE_IN_5_10,
                "the object uses map type {t}, newer than 5.10: add a Feature for it"
            ),
        }
    }
    for h in uses.helpers {
        match Feature::for_helper(h) {
            Some(f) => needs.push(f),
            None => assert!(
                h <= LAST_HELPER_IN_5_10,
                "the object calls helper {h}, newer than 5.10: add a Feature for it"
            ),
        }
    }
    needs.sort_by_key(|f| ALL.iter().position(|a| a == f));
    needs.dedup();
    needs
}

/// Lower-case map type name without the prefix, e.g. `percpu_hash`.
pub fn map_type_name(t: bpf_map_type) -> String {
    format!("{t:?}")
        .trim_start_matches("BPF_MAP_TYPE_")
        .to_lowercase()
}

/// Probe answers, each probed once per process.
#[derive(Default)]
struct Cache(Mutex<HashMap<Feature, Probe>>);

impl Cache {
    /// The lock, even if a thread panicked while holding it: the map is only ever inserted
    /// into whole, so it is never half-written.
    fn lock(&self) -> MutexGuard<'_, HashMap<Feature, Probe>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached answer, or `probe`'s. The probe runs outside the lock, and a panic in it is
    /// its answer (an error), so one broken probe cannot take the other features down with it.
    fn get(&self, feature: Feature, probe: impl FnOnce() -> Probe) -> Probe {
        if let Some(p) = self.lock().get(&feature) {
            return p.clone();
        }
        let answer = catch_unwind(AssertUnwindSafe(probe)).unwrap_or_else(|panic| {
            let msg = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a non-string panic");
            Probe::Error(format!("the probe panicked: {msg}"))
        });
        self.lock().entry(feature).or_insert(answer).clone()
    }
}

/// What the running kernel says about `feature` (probed once per process, or taken from
/// the probe process's answers: [`FEATURES_ENV`]).
pub fn probe(feature: Feature) -> Probe {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE
        .get_or_init(|| Cache(Mutex::new(probed_before())))
        .get(feature, || feature.probe())
}

pub use bpfvm_common::protocol::FEATURES_ENV;

/// The answers in [`FEATURES_ENV`]'s file, by feature; none when it is unset. A file that
/// cannot be read or parsed panics: every test that needs a feature then fails with this
/// message, as a broken probe should.
fn probed_before() -> HashMap<Feature, Probe> {
    let Some(path) = std::env::var_os(FEATURES_ENV) else {
        return HashMap::new();
    };
    std::fs::read_to_string(&path)
        .map_err(anyhow::Error::from)
        .and_then(|text| answers_in(&text))
        .unwrap_or_else(|e| {
            panic!(
                "{FEATURES_ENV}={}: not the probe's features.json: {e:#}",
                path.to_string_lossy()
            )
        })
}

/// The answers of a `features.json` (what `probe_all` printed) for the features it names.
fn answers_in(json: &str) -> anyhow::Result<HashMap<Feature, Probe>> {
    let answers: BTreeMap<String, Probe> = serde_json::from_str(json)?;
    Ok(ALL
        .iter()
        .filter_map(|f| answers.get(&f.name()).map(|p| (*f, p.clone())))
        .collect())
}

/// `Ok(())` when the running kernel has `feature`, else the reason to skip. A probe that erred
/// fails the calling test: an error is never a reason to skip.
pub fn require(feature: Feature) -> Result<(), String> {
    match probe(feature) {
        Probe::Present => Ok(()),
        Probe::Absent(why) => Err(format!("{}: {why}", feature.missing_reason())),
        Probe::Error(e) => panic!("the probe of {} failed: {e}", feature.name()),
    }
}

fn errno_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EINVAL) => "EINVAL".into(),
        _ => e.to_string(),
    }
}

/// A map type exists when a minimal map of it can be created; EINVAL means unknown type
/// (`map_create` -> `find_and_alloc_map` in kernel/bpf/syscall.c).
fn probe_map(map_type: u32, key_size: u32, value_size: u32) -> io::Result<Result<(), String>> {
    let attr = MapAttr {
        map_type,
        key_size,
        value_size,
        max_entries: 1,
        map_flags: 0,
        map_extra: 0,
    };
    match sys::map_create(&attr) {
        Ok(_) => Ok(Ok(())),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(Err(format!(
            "BPF_MAP_CREATE of type {map_type} gives EINVAL"
        ))),
        Err(e) => Err(e),
    }
}

/// A helper exists when the verifier does not call it unknown (bpftool's probe): the program
/// passes it no valid arguments, so other rejections are expected and mean "known".
fn probe_helper(helper: i32) -> io::Result<Result<(), String>> {
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
        Ok(_) => Ok(Ok(())),
        Err((_, log)) if log.contains("invalid func ") || log.contains("unknown func ") => {
            let line = log.lines().find(|l| l.contains(" func ")).unwrap_or("");
            Ok(Err(format!("the verifier says \"{}\"", line.trim())))
        }
        Err((e, log)) if log.is_empty() => Err(e),
        Err(_) => Ok(Ok(())),
    }
}

/// Batch lookup on an empty map: ENOENT (end of map) means supported; EINVAL (unknown command,
/// before 5.6) or ENOTSUPP (no batch ops for this type, `BPF_DO_BATCH` in kernel/bpf/syscall.c)
/// mean not.
fn probe_batch(map_type: bpf_map_type) -> io::Result<Result<(), String>> {
    let fd = match batch_probe_map(map_type) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            return Ok(Err(format!("BPF_MAP_CREATE gives {}", errno_name(&e))))
        }
        Err(e) => return Err(e),
    };
    // The end of the empty map (ENOENT) comes back as Ok with `end` set.
    match BatchMap::new(fd.as_fd())?.lookup_batch(None, 1, Flags::default()) {
        Ok(_) => Ok(Ok(())),
        Err(e @ (BatchError::Invalid { .. } | BatchError::NotSupported)) => {
            Ok(Err(format!("BPF_MAP_LOOKUP_BATCH gives {e}")))
        }
        Err(e) => Err(io::Error::other(e)),
    }
}

/// Inlined when the program that passes flags 0 and a constant callback (`loop_inlined` of the
/// `bpf_loop` object) keeps no call of the helper after verification (`optimize_bpf_loop` in
/// kernel/bpf/verifier.c).
fn probe_bpf_loop_inlining() -> Probe {
    match probe(Feature::BpfLoop) {
        Probe::Present => {}
        Probe::Absent(why) => return Probe::Absent(format!("no bpf_loop helper: {why}")),
        Probe::Error(e) => return Probe::Error(format!("the bpf_loop helper probe failed: {e}")),
    }
    let calls = || -> anyhow::Result<Option<usize>> {
        let Some(helper) = sys::helper_call_imm("bpf_loop")? else {
            return Ok(None);
        };
        let mut ebpf = object::load(object::BPF_LOOP)?;
        let prog: &mut SocketFilter =
            object::load_program(&mut ebpf, bpfvm_common::bpf_loop::PROG_INLINED)?;
        let insns = sys::xlated(prog.fd()?.as_fd().as_raw_fd())?;
        Ok(Some(
            insns
                .iter()
                .filter(|&&i| sys::is_helper_call(i, helper))
                .count(),
        ))
    };
    match calls() {
        Ok(Some(0)) => Probe::Present,
        Ok(Some(n)) => Probe::Absent(format!(
            "the verified `loop_inlined` still calls the bpf_loop helper {n} time(s)"
        )),
        Ok(None) => Probe::Error("no bpf_loop address in /proc/kallsyms (kptr_restrict?)".into()),
        Err(e) => Probe::Error(format!("{e:#}")),
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

/// Probes every known feature, for `features.json`.
pub fn probe_all() -> BTreeMap<String, Probe> {
    probe_all_with(probe)
}

/// Every feature's name and what `probe` says about it: `features.json`.
fn probe_all_with(probe: impl Fn(Feature) -> Probe) -> BTreeMap<String, Probe> {
    ALL.iter().map(|f| (f.name(), probe(*f))).collect()
}

#[cfg(test)]
mod probes_can_say_no {
    use super::*;

    #[test]
    fn an_unknown_helper_is_reported_missing() {
        assert!(probe_helper(1_000_000).expect("probe").is_err());
    }

    #[test]
    fn an_unknown_map_type_is_reported_missing() {
        assert!(probe_map(10_000, 4, 4).expect("probe").is_err());
    }

    #[test]
    fn the_probe_processs_answers_are_read_back_by_feature() {
        let mut printed = probe_all_with(|f| match f {
            Feature::BpfLoopInlining => Probe::Absent("not inlined".into()),
            Feature::ForEachMapElem => Probe::Error("broken".into()),
            _ => Probe::Present,
        });
        printed.remove(&Feature::BloomFilter.name());
        let json = serde_json::to_string_pretty(&printed).expect("serialise");
        let read = answers_in(&json).expect("parse");
        assert_eq!(
            read.len(),
            ALL.len() - 1,
            "every feature named, the removed one not"
        );
        assert!(!read.contains_key(&Feature::BloomFilter));
        assert_eq!(
            read[&Feature::BpfLoopInlining],
            Probe::Absent("not inlined".into())
        );
        assert_eq!(
            read[&Feature::ForEachMapElem],
            Probe::Error("broken".into())
        );
        assert_eq!(
            read[&Feature::Batch(bpf_map_type::BPF_MAP_TYPE_LPM_TRIE)],
            Probe::Present
        );
        assert!(answers_in("{\"bloom_filter_map\": \"yes\"}").is_err());
        assert!(answers_in("").is_err());
    }

    /// The cache once unwrapped its lock: a probe that panicked poisoned it, and every later
    /// `require!` panicked too.
    #[test]
    fn a_panicking_probe_fails_alone() {
        // `resume_unwind` unwinds as `panic!` does, minus the panic hook: with RUST_BACKTRACE=1
        // the hook symbolises a backtrace, seconds under TCG, holding std's backtrace lock.
        let cache = Cache::default();
        let broken = cache.get(Feature::BloomFilter, || {
            std::panic::resume_unwind(Box::new("broken probe"))
        });
        assert_eq!(
            broken,
            Probe::Error("the probe panicked: broken probe".into())
        );
        assert_eq!(
            cache.get(Feature::BpfLoop, || Probe::Present),
            Probe::Present
        );
        // A lock poisoned anyway (a panic while it was held) still serves the others.
        let _ = std::thread::scope(|s| {
            s.spawn(|| {
                let _held = cache.0.lock();
                std::panic::resume_unwind(Box::new("poison the lock"));
            })
            .join()
        });
        assert!(cache.0.is_poisoned());
        assert_eq!(
            cache.get(Feature::BpfLoop, || unreachable!("cached")),
            Probe::Present
        );
        assert_eq!(
            cache.get(Feature::BloomFilter, || unreachable!("cached")),
            broken
        );
    }

    #[test]
    fn every_feature_has_a_row_in_the_expected_features_table() {
        for f in ALL {
            assert!(
                bpfvm_common::features::find(&f.name()).is_some(),
                "{f:?} ({}) has no row in common/src/features.rs",
                f.name()
            );
        }
        assert_eq!(ALL.len(), bpfvm_common::features::EXPECTED.len());
    }

    #[test]
    fn objects_need_what_their_maps_and_helpers_need() {
        use Feature::*;
        assert_eq!(needed_by(object::SMOKE), [BloomFilter]);
        assert_eq!(needed_by(object::BPF_LOOP), [BpfLoop]);
        assert_eq!(
            needed_by(object::BLOOM_FILTER),
            [BloomFilter, BpfLoop, ForEachMapElem]
        );
    }
}
