//! Batch map operations (`BPF_MAP_*_BATCH`, 5.6) through [`crate::maps::batch`], on maps created with
//! aya. References: the kernel's `map_tests/htab_map_batch_ops.c` and `array_map_batch_ops.c`,
//! docs/kernel-behaviour.md (batch operations).
//!
//! Maps are filled and checked with the single-element commands (`BPF_MAP_UPDATE_ELEM`,
//! `GET_NEXT_KEY`, `LOOKUP_ELEM`), never with the batch code under test. Key `i` is `i` as a
//! native u32 followed by a pattern; its value in per-CPU slot `c` is a pattern of `(i, c)`, so a
//! value paired with the wrong key or CPU is caught.
use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Barrier};

use anyhow::Result;
use aya::maps::{MapData, MapFd};
use aya::programs::SchedClassifier;
use rstest::rstest;
use test_case::test_case;

use crate::features::{self, Feature};
use crate::maps::batch::{BatchError, BatchMap, Flags, Layout, Token, BATCH_ATTR_END, BPF_F_LOCK};
use crate::sys::{self, bpf_cmd, bpf_map_type};

const BPF_ANY: u64 = 0;
const BPF_NOEXIST: u64 = 1;
const BPF_EXIST: u64 = 2;

/// The map types with batch support that the suite covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Hash,
    PercpuHash,
    LruHash,
    LruPercpuHash,
    Array,
    PercpuArray,
}

use Kind::*;

impl Kind {
    fn map_type(self) -> bpf_map_type {
        match self {
            Hash => bpf_map_type::BPF_MAP_TYPE_HASH,
            PercpuHash => bpf_map_type::BPF_MAP_TYPE_PERCPU_HASH,
            LruHash => bpf_map_type::BPF_MAP_TYPE_LRU_HASH,
            LruPercpuHash => bpf_map_type::BPF_MAP_TYPE_LRU_PERCPU_HASH,
            Array => bpf_map_type::BPF_MAP_TYPE_ARRAY,
            PercpuArray => bpf_map_type::BPF_MAP_TYPE_PERCPU_ARRAY,
        }
    }

    fn is_array(self) -> bool {
        matches!(self, Array | PercpuArray)
    }
}

/// A map created through aya, with byte-level single-element access for filling and checking.
struct TestMap {
    data: MapData,
    layout: Layout,
}

type Contents = BTreeMap<Vec<u8>, Vec<u8>>;

impl TestMap {
    fn new(kind: Kind, key_size: usize, value_size: usize, max_entries: u32) -> Self {
        Self::create(kind.map_type(), key_size, value_size, max_entries, 0)
    }

    fn create(
        map_type: bpf_map_type,
        key_size: usize,
        value_size: usize,
        max_entries: u32,
        flags: u32,
    ) -> Self {
        sys::raise_memlock();
        let obj = aya_obj::Map::new_from_params(
            map_type as u32,
            key_size as u32,
            value_size as u32,
            max_entries,
            flags,
        );
        let data = MapData::create(obj, "bpfvm_batch", None)
            .unwrap_or_else(|e| panic!("create {map_type:?} map: {e}"));
        let cpus = features::possible_cpus().expect("possible cpus");
        let layout = Layout::new(map_type as u32, key_size, value_size, max_entries, cpus);
        Self { data, layout }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.data.fd().as_fd()
    }

    /// The wrapper under test, with the layout it reads from the kernel.
    fn batch(&self) -> BatchMap<&MapFd> {
        let b = BatchMap::new(self.data.fd()).expect("read map layout");
        assert_eq!(
            b.layout(),
            self.layout,
            "layout from BPF_OBJ_GET_INFO_BY_FD"
        );
        b
    }

    /// Key number `i`: `i` as a native u32 (an array index), then a pattern.
    fn key(&self, i: u32) -> Vec<u8> {
        let mut k: Vec<u8> = (0..self.layout.key_size)
            .map(|j| (i as usize).wrapping_mul(31).wrapping_add(j) as u8)
            .collect();
        k[..4].copy_from_slice(&i.to_ne_bytes());
        k
    }

    /// The value stored under key `i`: every per-CPU slot distinct, padding zero.
    fn value(&self, i: u32) -> Vec<u8> {
        let l = self.layout;
        let mut v = vec![0u8; l.value_stride()];
        for c in 0..l.slots {
            let seed = (i ^ 0x5a5a_5a5a ^ ((c as u32) << 24)).to_le_bytes();
            for j in 0..l.value_size {
                v[c * l.slot_size() + j] = seed[j % 4].wrapping_add((j / 4) as u8);
            }
        }
        v
    }

    /// Inserts keys `0..n` with their values.
    fn fill(&self, n: u32) -> Contents {
        pin_for_lru();
        (0..n)
            .map(|i| {
                let (k, v) = (self.key(i), self.value(i));
                self.update(&k, &v, BPF_ANY)
                    .unwrap_or_else(|e| panic!("insert key {i}: {e}"));
                (k, v)
            })
            .collect()
    }

    fn update(&self, key: &[u8], value: &[u8], flags: u64) -> io::Result<()> {
        elem_update(self.fd(), key, value, flags)
    }

    fn delete(&self, key: &[u8]) -> io::Result<()> {
        elem_delete(self.fd(), key)
    }

    fn lookup(&self, key: &[u8]) -> Option<Vec<u8>> {
        elem_lookup(self.fd(), key, self.layout.value_stride())
    }

    /// The reference: a walk with get_next_key + lookup.
    fn walk(&self) -> Contents {
        let mut out = Contents::new();
        let mut prev: Option<Vec<u8>> = None;
        while let Some(k) = elem_next_key(self.fd(), prev.as_deref(), self.layout.key_size) {
            if let Some(v) = self.lookup(&k) {
                assert!(out.insert(k.clone(), v).is_none(), "walk repeated {k:?}");
            }
            prev = Some(k);
        }
        out
    }
}

/// LRU maps keep free elements on per-CPU lists: a thread that migrates while filling can make
/// the map evict before it is full. Tests run in their own threads, so pinning is local.
fn pin_for_lru() {
    if let Err(e) = sys::pin_to_current_cpu() {
        panic!("pinning this test's thread to its CPU (sched_getcpu, sched_setaffinity): {e}");
    }
}

fn elem_update(fd: BorrowedFd<'_>, key: &[u8], value: &[u8], flags: u64) -> io::Result<()> {
    sys::Elems::of(fd)?.update(Some(key), value, flags)
}

fn elem_delete(fd: BorrowedFd<'_>, key: &[u8]) -> io::Result<()> {
    sys::Elems::of(fd)?.delete(Some(key))
}

fn elem_lookup(fd: BorrowedFd<'_>, key: &[u8], stride: usize) -> Option<Vec<u8>> {
    let mut v = vec![0u8; stride];
    let elems = sys::Elems::of(fd).expect("map info");
    match elems.lookup(Some(key), &mut v, 0) {
        Ok(()) => Some(v),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
        Err(e) => panic!("lookup: {e}"),
    }
}

fn elem_next_key(fd: BorrowedFd<'_>, key: Option<&[u8]>, key_size: usize) -> Option<Vec<u8>> {
    let mut next = vec![0u8; key_size];
    let elems = sys::Elems::of(fd).expect("map info");
    match elems.next_key(key, &mut next) {
        Ok(()) => Some(next),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
        Err(e) => panic!("get_next_key: {e}"),
    }
}

/// Dumps the whole map with the wrapper's iterator; asserts no key comes twice.
fn dump_all(b: &BatchMap<&MapFd>, buffer: u32) -> (Contents, crate::maps::batch::DumpStats) {
    let mut out = Contents::new();
    let mut dump = b.dump(buffer);
    for entry in &mut dump {
        let (k, v) = entry.unwrap_or_else(|e| panic!("dump with buffer {buffer}: {e}"));
        assert!(
            out.insert(k.clone(), v).is_none(),
            "dump returned {k:?} twice"
        );
    }
    (out, dump.stats())
}

fn keys_of(m: &TestMap, ids: impl IntoIterator<Item = u32>) -> Vec<u8> {
    ids.into_iter().flat_map(|i| m.key(i)).collect()
}

fn values_of(m: &TestMap, ids: impl IntoIterator<Item = u32>) -> Vec<u8> {
    ids.into_iter().flat_map(|i| m.value(i)).collect()
}

/// The dump grid's map size, and its two buffer sizes named for it (rstest names each case by
/// the expression: `buffer_5_MAX_ENTRIES`).
const MAX_ENTRIES: u32 = 1000;
const MORE_THAN_MAX_ENTRIES: u32 = MAX_ENTRIES + MAX_ENTRIES / 2 + 1;

// 1. A batch dump returns every entry once, with its value (all possible CPUs), and agrees with
// a get_next_key + lookup walk. Hash maps are 80 % full (800 of 1000): with buffers 1 and 2
// some bucket holds more keys than fit, so the dumper must grow and retry (ENOSPC).
#[rstest]
fn dump_equals_contents(
    #[values(Hash, PercpuHash, LruHash, LruPercpuHash, Array, PercpuArray)] kind: Kind,
    #[values(1, 2, 7, 230, MAX_ENTRIES, MORE_THAN_MAX_ENTRIES)] buffer: u32,
) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, MAX_ENTRIES);
    let n = if kind.is_array() {
        MAX_ENTRIES
    } else {
        MAX_ENTRIES * 8 / 10
    };
    let expected = m.fill(n);
    let walk = m.walk();
    assert_eq!(
        walk, expected,
        "get_next_key + lookup walk differs from what was inserted"
    );

    let (got, stats) = dump_all(&m.batch(), buffer);
    eprintln!("{kind:?} buffer {buffer}: {stats:?}");
    assert_eq!(got.len(), expected.len(), "entries dumped");
    assert_eq!(got, walk, "batch dump differs from the walk");
    if kind.is_array() {
        assert_eq!(
            stats.enospc_retries, 0,
            "arrays use key tokens: never ENOSPC"
        );
    }
    if buffer >= n {
        assert_eq!(
            stats.enospc_retries, 0,
            "a buffer of the whole map always fits"
        );
    }
}

// 2. Sizes.
#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruHash ; "lru_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
fn empty_map_gives_enoent_with_count_0(kind: Kind) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 64);
    let b = m.batch();
    let r = b
        .lookup_batch(None, 16, Flags::default())
        .expect("lookup batch");
    assert!(r.end, "an empty map must end at once (ENOENT)");
    assert!(r.next.is_none());
    assert_eq!(r.entries.len(), 0);
    let r = b
        .lookup_and_delete_batch(None, 16, Flags::default())
        .expect("lookup and delete");
    assert!(r.end && r.entries.is_empty());
    assert_eq!(b.dump(1).count(), 0);
}

#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruHash ; "lru_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
#[test_case(Array ; "array")]
#[test_case(PercpuArray ; "percpu_array")]
fn count_0_gives_success_and_nothing(kind: Kind) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 64);
    let before = m.fill(40);
    let b = m.batch();
    let r = b
        .lookup_batch(None, 0, Flags::default())
        .expect("lookup batch, count 0");
    assert!(!r.end, "count 0 returns success, not ENOENT");
    assert!(r.entries.is_empty());
    if !kind.is_array() {
        let r = b
            .lookup_and_delete_batch(None, 0, Flags::default())
            .expect("lookup+delete, count 0");
        assert!(!r.end && r.entries.is_empty());
        assert_eq!(b.delete_batch(&[], Flags::default()), Ok(0));
    }
    assert_eq!(b.update_batch(&[], &[], Flags::default()), Ok(0));
    let after = m.walk();
    if kind.is_array() {
        assert_eq!(after.len(), 64);
        assert!(before.iter().all(|(k, v)| after.get(k) == Some(v)));
    } else {
        assert_eq!(after, before, "count 0 changed the map");
    }
}

#[test_case(10_000, 100, 64 ; "percent_1")]
#[test_case(10_000, 1_000, 64 ; "percent_10")]
#[test_case(10_000, 5_000, 64 ; "percent_50")]
#[test_case(131_072, 100_000, 4_096 ; "entries_100000")]
fn partially_filled_hash_dumps_completely(max_entries: u32, n: u32, buffer: u32) {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let m = TestMap::new(Hash, 4, 8, max_entries);
    let expected = m.fill(n);
    let (got, stats) = dump_all(&m.batch(), buffer);
    eprintln!("{n} of {max_entries}, buffer {buffer}: {stats:?}");
    assert_eq!(got.len(), n as usize);
    assert!(
        got == expected,
        "dumped contents differ from what was inserted"
    );
}

#[test_case(Hash, 4, 4 ; "hash_key_4_value_4")]
#[test_case(Hash, 4, 8 ; "hash_key_4_value_8")]
#[test_case(Hash, 4, 64 ; "hash_key_4_value_64")]
#[test_case(Hash, 8, 4 ; "hash_key_8_value_4")]
#[test_case(Hash, 8, 8 ; "hash_key_8_value_8")]
#[test_case(Hash, 8, 64 ; "hash_key_8_value_64")]
#[test_case(Hash, 64, 4 ; "hash_key_64_value_4")]
#[test_case(Hash, 64, 8 ; "hash_key_64_value_8")]
#[test_case(Hash, 64, 64 ; "hash_key_64_value_64")]
#[test_case(PercpuHash, 4, 4 ; "percpu_hash_key_4_value_4")]
#[test_case(PercpuHash, 64, 64 ; "percpu_hash_key_64_value_64")]
#[test_case(LruHash, 64, 64 ; "lru_hash_key_64_value_64")]
#[test_case(LruPercpuHash, 64, 64 ; "lru_percpu_hash_key_64_value_64")]
#[test_case(Array, 4, 4 ; "array_key_4_value_4")]
#[test_case(Array, 4, 64 ; "array_key_4_value_64")]
#[test_case(PercpuArray, 4, 4 ; "percpu_array_key_4_value_4")]
#[test_case(PercpuArray, 4, 64 ; "percpu_array_key_4_value_64")]
fn key_and_value_sizes_dump_completely(kind: Kind, key_size: usize, value_size: usize) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, key_size, value_size, 256);
    let expected = m.fill(if kind.is_array() { 256 } else { 200 });
    let (got, _) = dump_all(&m.batch(), 7);
    assert_eq!(got.len(), expected.len());
    assert!(
        got == expected,
        "dumped contents differ from what was inserted"
    );
}

/// The last batch is ENOENT and may carry entries: a hash map ends in the call that reaches the
/// last bucket; an array ends with ENOENT only when the buffer outlasts its keys (a buffer of
/// exactly max_entries succeeds, and the next call returns ENOENT with nothing).
#[test_case(Hash ; "hash")]
#[test_case(Array ; "array")]
fn last_batch_gives_enoent_with_entries(kind: Kind) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 100);
    let n = if kind.is_array() { 100 } else { 60 };
    m.fill(n);
    let b = m.batch();
    let r = b
        .lookup_batch(None, 200, Flags::default())
        .expect("lookup batch");
    assert!(r.end, "one call larger than the map must end (ENOENT)");
    assert_eq!(
        r.entries.len(),
        n as usize,
        "ENOENT still carries the entries"
    );
    if kind.is_array() {
        let r = b
            .lookup_batch(None, 100, Flags::default())
            .expect("lookup batch");
        assert!(
            !r.end && r.entries.len() == 100,
            "exactly max_entries: success"
        );
        let r = b
            .lookup_batch(r.next.as_ref(), 100, Flags::default())
            .expect("lookup batch");
        assert!(r.end && r.entries.is_empty(), "then ENOENT with count 0");
    }
}

/// A hash map's token is the index of the next bucket to read: it only grows, and stays below
/// the bucket count (max_entries rounded up to a power of two).
#[test]
fn hash_tokens_are_increasing_bucket_indices() {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let m = TestMap::new(Hash, 4, 8, 1000);
    m.fill(800);
    let b = m.batch();
    let mut token = None;
    let mut last = 0;
    loop {
        let r = b
            .lookup_batch(token.as_ref(), 64, Flags::default())
            .expect("lookup batch");
        let Some(next) = r.next else { break };
        assert!(
            next.bucket() > last,
            "bucket {} after {last}",
            next.bucket()
        );
        assert!(next.bucket() < 1024, "bucket {} of 1024", next.bucket());
        last = next.bucket();
        token = Some(next);
    }
}

// 3. Error semantics.

/// A hash map with two buckets (max_entries 2): keep key 0 and try second keys until both share
/// the first non-empty bucket, which a lookup batch of count 1 then reports as ENOSPC. Each
/// try collides with probability 1/2 (random seed), so 64 tries fail with 2^-64.
#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruHash ; "lru_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
fn buffer_smaller_than_first_bucket_gives_enospc(kind: Kind) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 2);
    m.fill(1);
    let b = m.batch();
    let mut found = None;
    for i in 1..=64 {
        m.update(&m.key(i), &m.value(i), BPF_NOEXIST)
            .expect("insert second key");
        match b.lookup_batch(None, 1, Flags::default()) {
            Err(e) => {
                assert_eq!(
                    e,
                    BatchError::NoSpace { processed: 0 },
                    "count 1, bucket of 2"
                );
                found = Some(i);
                break;
            }
            Ok(r) => {
                assert_eq!(
                    r.entries.len(),
                    1,
                    "count 1 returned {} entries",
                    r.entries.len()
                );
                m.delete(&m.key(i)).expect("delete second key");
            }
        }
    }
    let Some(i) = found else {
        panic!("64 second keys never shared a bucket with key 0 in a 2-bucket map");
    };
    assert!(m.lookup(&m.key(0)).is_some(), "key 0 evicted");
    // Count 2 takes the whole bucket.
    let r = b.lookup_batch(None, 2, Flags::default()).expect("count 2");
    assert_eq!(r.entries.len(), 2);
    // The dumper grows its buffer for that call and still returns both, once.
    let (got, stats) = dump_all(&b, 1);
    assert_eq!(got, m.walk());
    assert_eq!(got.len(), 2);
    assert!(stats.enospc_retries >= 1, "{stats:?}");
    eprintln!("{kind:?}: key 0 and key {i} share a bucket; dump stats {stats:?}");
}

#[derive(Debug, Clone, Copy)]
enum Cmd {
    Lookup,
    LookupAndDelete,
    Update,
    Delete,
}

fn run_cmd(m: &TestMap, cmd: Cmd, flags: Flags) -> Result<u32, BatchError> {
    let b = m.batch();
    let ids = 0..4;
    match cmd {
        Cmd::Lookup => b
            .lookup_batch(None, 4, flags)
            .map(|r| r.entries.len() as u32),
        Cmd::LookupAndDelete => b
            .lookup_and_delete_batch(None, 4, flags)
            .map(|r| r.entries.len() as u32),
        Cmd::Update => b.update_batch(&keys_of(m, ids.clone()), &values_of(m, ids), flags),
        Cmd::Delete => b.delete_batch(&keys_of(m, ids), flags),
    }
}

/// `batch.flags` must be 0, but only the hash tables' lookup paths check it
/// (`__htab_map_lookup_and_delete_batch`).
#[test_case(Hash, Cmd::Lookup ; "hash_lookup")]
#[test_case(Hash, Cmd::LookupAndDelete ; "hash_lookup_and_delete")]
#[test_case(PercpuHash, Cmd::Lookup ; "percpu_hash_lookup")]
#[test_case(LruHash, Cmd::LookupAndDelete ; "lru_hash_lookup_and_delete")]
fn nonzero_flags_gives_einval(kind: Kind, cmd: Cmd) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 64);
    let before = m.fill(10);
    for flags in [1, 2, 4, 1 << 63] {
        let r = run_cmd(
            &m,
            cmd,
            Flags {
                elem_flags: 0,
                flags,
            },
        );
        assert!(
            matches!(r, Err(BatchError::Invalid { .. })),
            "{cmd:?} with flags {flags:#x}: {r:?}"
        );
    }
    assert_eq!(m.walk(), before, "a rejected batch changed the map");
}

/// The generic implementations (`generic_map_lookup_batch` for arrays,
/// `generic_map_update_batch`, `generic_map_delete_batch`) never read `batch.flags`: a non-zero
/// value is silently ignored (seen on 5.10, 6.1, 6.12 and 6.18), unlike the hash lookups above.
#[test_case(Array, Cmd::Lookup ; "array_lookup")]
#[test_case(Array, Cmd::Update ; "array_update")]
#[test_case(Hash, Cmd::Update ; "hash_update")]
#[test_case(Hash, Cmd::Delete ; "hash_delete")]
fn nonzero_flags_are_ignored_by_generic_batch_ops(kind: Kind, cmd: Cmd) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 64);
    m.fill(10);
    let r = run_cmd(
        &m,
        cmd,
        Flags {
            elem_flags: 0,
            flags: 1,
        },
    );
    assert_eq!(r, Ok(4), "{kind:?} {cmd:?} with flags 1");
    if matches!(cmd, Cmd::Delete) {
        assert_eq!(m.walk().len(), 6, "the 4 keys were deleted");
    }
}

#[test_case(Cmd::Lookup, BPF_NOEXIST ; "lookup_noexist")]
#[test_case(Cmd::Lookup, BPF_EXIST ; "lookup_exist")]
#[test_case(Cmd::Lookup, 8 ; "lookup_bit_3")]
#[test_case(Cmd::Lookup, 1 << 32 ; "lookup_bit_32")]
#[test_case(Cmd::Lookup, BPF_F_LOCK ; "lookup_f_lock_without_spin_lock")]
#[test_case(Cmd::LookupAndDelete, BPF_EXIST ; "lookup_and_delete_exist")]
#[test_case(Cmd::Update, 8 ; "update_bit_3")]
#[test_case(Cmd::Update, BPF_F_LOCK ; "update_f_lock_without_spin_lock")]
#[test_case(Cmd::Delete, BPF_NOEXIST ; "delete_noexist")]
#[test_case(Cmd::Delete, BPF_F_LOCK ; "delete_f_lock_without_spin_lock")]
fn elem_flags_other_than_f_lock_give_einval(cmd: Cmd, elem_flags: u64) {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let m = TestMap::new(Hash, 4, 8, 64);
    let before = m.fill(10);
    let r = run_cmd(
        &m,
        cmd,
        Flags {
            elem_flags,
            flags: 0,
        },
    );
    assert!(
        matches!(r, Err(BatchError::Invalid { .. })),
        "{cmd:?} with elem_flags {elem_flags:#x}: {r:?}"
    );
    assert_eq!(m.walk(), before, "a rejected batch changed the map");
}

#[test]
fn nonzero_byte_after_batch_flags_gives_einval() {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let m = TestMap::new(Hash, 4, 8, 64);
    m.fill(10);
    let mut keys = [0u8; 4 * 4];
    let mut values = [0u8; 8 * 4];
    let mut out = 0u64;
    let mut encode = || {
        crate::maps::batch::encode_lookup(
            m.fd().as_raw_fd() as u32,
            0,
            &mut out as *mut u64 as u64,
            keys.as_mut_ptr() as u64,
            values.as_mut_ptr() as u64,
            4,
            Flags::default(),
        )
    };
    let mut good = encode();
    // SAFETY: `out`, `keys` and `values` hold the 4 entries the attr asks for.
    assert!(
        unsafe { sys::bpf(bpf_cmd::BPF_MAP_LOOKUP_BATCH, &mut good) }.is_ok(),
        "the clean attr works"
    );
    let mut bad = encode();
    // SAFETY: writing one byte inside the attr union, just past batch.flags.
    unsafe {
        (&mut bad as *mut sys::bpf_attr as *mut u8)
            .add(BATCH_ATTR_END)
            .write(1)
    };
    // SAFETY: as for `good`.
    let e = unsafe { sys::bpf(bpf_cmd::BPF_MAP_LOOKUP_BATCH, &mut bad) };
    let e = e.expect_err("tail byte accepted");
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
}

#[derive(Debug, Clone, Copy)]
enum Unsupported {
    BloomFilter,
    RingBuf,
}

/// Batch commands on map types that do not implement them fail with ENOTSUPP (524), the
/// kernel-internal errno `BPF_DO_BATCH` returns (seen for bloom filters on 6.1, 6.12, 6.18 and ring
/// buffers on 5.10, 6.1, 6.12, 6.18).
#[test_case(Unsupported::BloomFilter ; "bloom_filter")]
#[test_case(Unsupported::RingBuf ; "ring_buffer")]
fn map_without_batch_support_gives_enotsupp(which: Unsupported) {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let (map_type, key_size, value_size, max_entries) = match which {
        Unsupported::BloomFilter => {
            crate::require!(Feature::BloomFilter);
            (bpf_map_type::BPF_MAP_TYPE_BLOOM_FILTER, 0, 4, 16)
        }
        Unsupported::RingBuf => (bpf_map_type::BPF_MAP_TYPE_RINGBUF, 0, 0, 4096),
    };
    sys::raise_memlock();
    // Ring buffers exist since 5.8 (457f44363a88), before every pin: a failure here is a bug.
    let fd: OwnedFd = sys::map_create(&sys::MapAttr {
        map_type: map_type as u32,
        key_size,
        value_size,
        max_entries,
        map_flags: 0,
        map_extra: 0,
    })
    .unwrap_or_else(|e| panic!("create {map_type:?}: {e}"));
    let b = BatchMap::new(&fd).expect("layout");
    let f = Flags::default();
    assert_eq!(
        b.lookup_batch(None, 4, f).err(),
        Some(BatchError::NotSupported)
    );
    assert_eq!(
        b.lookup_and_delete_batch(None, 4, f).err(),
        Some(BatchError::NotSupported)
    );
    let keys = vec![0u8; 4 * key_size as usize];
    let values = vec![0u8; 4 * value_size as usize];
    if key_size == 0 {
        // Zero-sized keys cannot describe a count for the safe wrapper: encode by hand.
        for cmd in [bpf_cmd::BPF_MAP_UPDATE_BATCH, bpf_cmd::BPF_MAP_DELETE_BATCH] {
            let mut attr = crate::maps::batch::encode_write(
                fd.as_raw_fd() as u32,
                keys.as_ptr() as u64,
                values.as_ptr() as u64,
                4,
                f,
            );
            // SAFETY: `keys` and `values` hold the 4 entries the attr names; writes only read.
            let e = unsafe { sys::bpf(cmd, &mut attr) }.expect_err("batch write accepted");
            assert_eq!(e.raw_os_error(), Some(sys::ENOTSUPP), "{cmd:?}: {e}");
        }
    }
}

/// Arrays implement lookup and update batches only: deleting is not an array operation.
#[test_case(Array ; "array")]
#[test_case(PercpuArray ; "percpu_array")]
fn array_delete_batches_give_enotsupp(kind: Kind) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 16);
    let before = m.fill(16);
    let b = m.batch();
    assert_eq!(
        b.lookup_and_delete_batch(None, 4, Flags::default()).err(),
        Some(BatchError::NotSupported)
    );
    assert_eq!(
        b.delete_batch(&keys_of(&m, 0..4), Flags::default()),
        Err(BatchError::NotSupported)
    );
    assert_eq!(m.walk(), before);
}

// 4. Writes.
#[test_case(Hash, 1 ; "hash_buffer_1")]
#[test_case(Hash, 64 ; "hash_buffer_64")]
#[test_case(PercpuHash, 64 ; "percpu_hash_buffer_64")]
#[test_case(LruHash, 64 ; "lru_hash_buffer_64")]
#[test_case(LruPercpuHash, 64 ; "lru_percpu_hash_buffer_64")]
fn lookup_and_delete_empties_map_and_returns_everything_once(kind: Kind, buffer: u32) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 1000);
    let expected = m.fill(800);
    let b = m.batch();
    let mut got = Contents::new();
    let mut drain = b.drain(buffer);
    for entry in &mut drain {
        let (k, v) = entry.expect("lookup and delete batch");
        assert!(got.insert(k.clone(), v).is_none(), "{k:?} returned twice");
    }
    eprintln!("{kind:?} drain buffer {buffer}: {:?}", drain.stats());
    assert!(
        got == expected,
        "drained entries differ from what was inserted"
    );
    assert!(m.walk().is_empty(), "map not empty after draining");
    assert!(
        b.lookup_batch(None, 8, Flags::default())
            .expect("lookup")
            .end
    );
}

#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruHash ; "lru_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
#[test_case(Array ; "array")]
#[test_case(PercpuArray ; "percpu_array")]
fn update_batch_writes_what_lookup_reads(kind: Kind) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 256);
    pin_for_lru();
    let n = if kind.is_array() { 256 } else { 200 };
    let b = m.batch();
    let done = b
        .update_batch(&keys_of(&m, 0..n), &values_of(&m, 0..n), Flags::default())
        .expect("update batch");
    assert_eq!(done, n);
    let expected: Contents = (0..n).map(|i| (m.key(i), m.value(i))).collect();
    assert!(m.walk() == expected, "map differs from the batch written");
}

/// `generic_map_update_batch` passes `elem_flags` to each element update but accepts only
/// `BPF_F_LOCK` there, so `BPF_NOEXIST` (or `BPF_EXIST`) never reaches an element: the batch is
/// rejected whole with EINVAL before anything is written, and EEXIST cannot come from a batch
/// update. The element command does honour `BPF_NOEXIST` with EEXIST.
#[test_case(Hash, BPF_NOEXIST ; "hash_noexist")]
#[test_case(Hash, BPF_EXIST ; "hash_exist")]
#[test_case(Array, BPF_NOEXIST ; "array_noexist")]
fn update_batch_with_noexist_is_rejected_whole_with_einval(kind: Kind, elem_flags: u64) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 64);
    let before = m.fill(5);
    let b = m.batch();
    let ids = [10, 11, 12, 3, 13];
    let flags = Flags {
        elem_flags,
        flags: 0,
    };
    let r = b.update_batch(&keys_of(&m, ids), &values_of(&m, ids), flags);
    assert!(matches!(r, Err(BatchError::Invalid { .. })), "{r:?}");
    if kind.is_array() {
        assert!(before.iter().all(|(k, v)| m.lookup(k).as_ref() == Some(v)));
        assert_eq!(
            m.lookup(&m.key(10)),
            Some(vec![0; 8]),
            "a rejected batch wrote key 10"
        );
    } else {
        assert_eq!(m.walk(), before, "a rejected batch changed the map");
        let e = m
            .update(&m.key(3), &m.value(3), BPF_NOEXIST)
            .expect_err("NOEXIST");
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    }
}

/// A batch that stops part-way reports how many it processed: a full hash map fails with
/// E2BIG at the first new key, after the overwrites before it.
#[test]
fn update_batch_reports_processed_count_when_map_is_full() {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let m = TestMap::new(Hash, 4, 8, 8);
    m.fill(8);
    let b = m.batch();
    let ids = [0, 1, 2, 100, 3];
    let r = b.update_batch(&keys_of(&m, ids), &values_of(&m, ids), Flags::default());
    assert_eq!(
        r,
        Err(BatchError::Os {
            errno: libc::E2BIG,
            processed: 3
        })
    );
    assert!(m.lookup(&m.key(100)).is_none());
}

#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruHash ; "lru_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
fn delete_batch_removes_exactly_the_given_keys(kind: Kind) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 256);
    let mut expected = m.fill(200);
    let gone: Vec<u32> = (0..200).filter(|i| i % 3 == 1).collect();
    let b = m.batch();
    let done = b
        .delete_batch(&keys_of(&m, gone.iter().copied()), Flags::default())
        .expect("delete batch");
    assert_eq!(done as usize, gone.len());
    for i in &gone {
        expected.remove(&m.key(*i));
    }
    assert!(
        m.walk() == expected,
        "delete batch removed other keys or missed some"
    );
}

#[test]
fn delete_batch_stops_at_a_missing_key_with_enoent() {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let m = TestMap::new(Hash, 4, 8, 64);
    m.fill(10);
    let b = m.batch();
    let ids = [1, 2, 50, 3];
    let r = b.delete_batch(&keys_of(&m, ids), Flags::default());
    assert_eq!(r, Err(BatchError::NotFound { processed: 2 }));
    assert!(
        m.lookup(&m.key(2)).is_none(),
        "key before the missing one kept"
    );
    assert!(
        m.lookup(&m.key(3)).is_some(),
        "key after the missing one deleted"
    );
}

// 5. Concurrent change: another thread deletes two thirds of the keys during the dump.

/// Entries deleted during a dump come back once or not at all, survivors exactly once, and the
/// dump ends. Any error fails, EINTR included: hash batches copy each bucket under its lock
/// (`__htab_map_lookup_and_delete_batch`, kernel/bpf/hashtab.c) and have no EINTR path.
#[test_case(Hash, 1 ; "hash_buffer_1")]
#[test_case(Hash, 7 ; "hash_buffer_7")]
#[test_case(Hash, 230 ; "hash_buffer_230")]
#[test_case(PercpuHash, 7 ; "percpu_hash_buffer_7")]
#[test_case(LruHash, 7 ; "lru_hash_buffer_7")]
fn concurrent_deletes_return_entries_once_or_not_at_all(kind: Kind, buffer: u32) {
    crate::require!(Feature::Batch(kind.map_type()));
    const N: u32 = 3000;
    const ROUNDS: usize = 3;
    for round in 0..ROUNDS {
        let m = Arc::new(TestMap::new(kind, 4, 8, 4096));
        let inserted = m.fill(N);
        // Delete keys with i % 3 != 0, in a scrambled order.
        let mut doomed: Vec<u32> = (0..N).filter(|i| i % 3 != 0).collect();
        let mut x = 0x2545_f491_4f6c_dd1du64 ^ round as u64;
        for i in (1..doomed.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            doomed.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let start = Arc::new(Barrier::new(2));
        let deleter = {
            let (m, start) = (Arc::clone(&m), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                for i in doomed {
                    m.delete(&m.key(i)).expect("delete");
                }
            })
        };
        let b = m.batch();
        let mut got = Contents::new();
        let mut dump = b.dump(buffer);
        start.wait();
        // Each entry is new or a duplicate (a panic), so the dump cannot outlast N entries.
        for entry in &mut dump {
            let (k, v) = entry.unwrap_or_else(|e| panic!("dump during deletes: {e}"));
            assert_eq!(inserted.get(&k), Some(&v), "unknown key or wrong value");
            assert!(got.insert(k.clone(), v).is_none(), "{k:?} returned twice");
        }
        deleter.join().expect("deleter thread");
        let stats = dump.stats();
        eprintln!(
            "{kind:?} buffer {buffer} round {round}: {} returned, {stats:?}",
            got.len()
        );
        // Keys nobody deleted stay in their buckets: every one is returned.
        for i in (0..N).filter(|i| i % 3 == 0) {
            assert!(
                got.contains_key(&m.key(i)),
                "surviving key {i} missing from the dump"
            );
        }
    }
}

// 6. Cases from the kernel selftests (tools/testing/selftests/bpf/map_tests/) and the edges of
// `__htab_map_lookup_and_delete_batch` (kernel/bpf/hashtab.c).

/// `__htab_map_lookup_and_delete_batch` checks the token first: a bucket index at or past
/// `n_buckets` (max_entries 100 rounded up to 128) is ENOENT with count 0, for lookups and
/// lookup-and-delete alike, and nothing is deleted. The last bucket (127) is a valid start.
#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruHash ; "lru_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
fn token_past_the_last_bucket_gives_enoent_with_nothing(kind: Kind) {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 100);
    let before = m.fill(60);
    let b = m.batch();
    let token = |bucket: u32| Token::from_bytes(&bucket.to_ne_bytes(), m.layout.token_len());
    for bucket in [128, 129, u32::MAX] {
        let r = b
            .lookup_batch(Some(&token(bucket)), 16, Flags::default())
            .unwrap_or_else(|e| panic!("lookup from bucket {bucket}: {e}"));
        assert!(r.end && r.entries.is_empty(), "lookup from bucket {bucket}");
        let r = b
            .lookup_and_delete_batch(Some(&token(bucket)), 16, Flags::default())
            .unwrap_or_else(|e| panic!("lookup and delete from bucket {bucket}: {e}"));
        assert!(
            r.end && r.entries.is_empty(),
            "lookup and delete from {bucket}"
        );
    }
    assert_eq!(m.walk(), before, "a batch past the end changed the map");
    let r = b
        .lookup_batch(Some(&token(127)), 128, Flags::default())
        .expect("lookup from the last bucket");
    assert!(r.end, "a batch from the last bucket ends there");
    for i in 0..r.entries.len() {
        assert_eq!(
            before.get(r.entries.key(i)).map(Vec::as_slice),
            Some(r.entries.value(i))
        );
    }
}

/// A full hash map (one more key is E2BIG) read with `count = max_entries`: one call returns
/// every entry and ENOENT, since the walk reaches the last bucket without ever meeting a bucket
/// larger than the room left (`__htab_map_lookup_and_delete_batch`); with delete, the map is
/// then empty. LRU maps are left out: filling one to exactly max_entries may evict (per-CPU
/// free lists, `bpf_lru_pop_free`).
#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
fn full_hash_map_drains_with_one_batch_of_max_entries(kind: Kind) {
    crate::require!(Feature::Batch(kind.map_type()));
    const MAX: u32 = 1000;
    let m = TestMap::new(kind, 4, 8, MAX);
    let expected = m.fill(MAX);
    let e = m
        .update(&m.key(MAX), &m.value(MAX), BPF_ANY)
        .expect_err("insert into a full map");
    assert_eq!(e.raw_os_error(), Some(libc::E2BIG), "the map is full");
    let b = m.batch();
    let collect = |r: crate::maps::batch::LookupBatch| -> Contents {
        (0..r.entries.len())
            .map(|i| (r.entries.key(i).to_vec(), r.entries.value(i).to_vec()))
            .collect()
    };
    let r = b
        .lookup_batch(None, MAX, Flags::default())
        .expect("lookup batch of max_entries");
    assert!(r.end, "one call of max_entries reaches the end (ENOENT)");
    assert_eq!(r.entries.len(), MAX as usize);
    assert!(
        collect(r) == expected,
        "looked-up entries differ from the map"
    );
    let r = b
        .lookup_and_delete_batch(None, MAX, Flags::default())
        .expect("lookup and delete batch of max_entries");
    assert!(r.end, "one call of max_entries reaches the end (ENOENT)");
    assert_eq!(r.entries.len(), MAX as usize);
    assert!(
        collect(r) == expected,
        "drained entries differ from the map"
    );
    assert!(m.walk().is_empty(), "map not empty after the drain");
}

/// An LPM trie key: prefix length, then an IPv4 address (`struct test_lpm_key`).
fn lpm_key(prefix: u32, addr: [u8; 4]) -> Vec<u8> {
    prefix.to_ne_bytes().into_iter().chain(addr).collect()
}

/// `map_tests/lpm_trie_map_batch_ops.c`: LPM tries have the generic batch ops (5.13, the
/// `generic_map_*_batch` entries of `trie_map_ops` in kernel/bpf/lpm_trie.c): an update batch
/// writes every prefix, lookup batches of each step from 1 to max_entries return each once
/// (key tokens from `trie_get_next_key`: never ENOSPC), delete batches remove them all. There is
/// no lookup-and-delete batch (ENOTSUPP). Besides the selftest's /32 prefixes, a /24 and a /16
/// covering them, so the walk crosses inner nodes.
#[test]
fn lpm_trie_batch_ops_write_read_and_delete_every_prefix() {
    use bpf_map_type::BPF_MAP_TYPE_LPM_TRIE;
    crate::require!(Feature::Batch(BPF_MAP_TYPE_LPM_TRIE));
    const MAX: u32 = 10;
    let mut keys: Vec<Vec<u8>> = (1..=8).map(|i| lpm_key(32, [192, 168, 1, i])).collect();
    keys.push(lpm_key(24, [192, 168, 1, 0]));
    keys.push(lpm_key(16, [192, 168, 0, 0]));
    let expected: Contents = keys
        .iter()
        .zip(1i32..)
        .map(|(k, v)| (k.clone(), v.to_ne_bytes().to_vec()))
        .collect();
    let m = TestMap::create(
        BPF_MAP_TYPE_LPM_TRIE,
        8,
        4,
        MAX,
        aya_obj::generated::BPF_F_NO_PREALLOC,
    );
    let b = m.batch();
    let all_keys: Vec<u8> = expected.keys().flatten().copied().collect();
    let all_values: Vec<u8> = expected.values().flatten().copied().collect();
    for step in 1..=MAX {
        let written = b
            .update_batch(&all_keys, &all_values, Flags::default())
            .expect("update batch");
        assert_eq!(written, MAX);
        assert_eq!(
            m.walk(),
            expected,
            "get_next_key + lookup walk after the update"
        );
        let (got, stats) = dump_all(&b, step);
        assert_eq!(got, expected, "lookup batches of {step}");
        assert_eq!(stats.enospc_retries, 0, "key tokens never give ENOSPC");
        assert_eq!(
            b.lookup_and_delete_batch(None, step, Flags::default())
                .err(),
            Some(BatchError::NotSupported)
        );
        for chunk in all_keys.chunks(8 * step as usize) {
            let n = b
                .delete_batch(chunk, Flags::default())
                .expect("delete batch");
            assert_eq!(n as usize, chunk.len() / 8);
        }
        assert!(
            m.walk().is_empty(),
            "trie not empty after deleting every prefix"
        );
    }
}

/// A map of maps filled by an update batch of inner map fds.
struct MapOfMaps {
    outer: OwnedFd,
    /// The inner maps (kept open), in key order.
    inner: Vec<OwnedFd>,
    /// (outer key, inner map id), as a batch lookup must return them.
    expected: Contents,
}

/// `map_tests/map_in_map_batch_ops.c`: ten inner maps (`inner_type`, each holding its own id
/// at key 0), put into an outer map with one update batch of their fds: keys 9 down to 0 for
/// an array of maps, 1000 down to 991 for a hash of maps.
fn map_of_maps(outer_type: bpf_map_type, inner_type: bpf_map_type) -> MapOfMaps {
    const N: u32 = 10;
    sys::raise_memlock();
    let attr = |map_type: bpf_map_type, max_entries| sys::MapAttr {
        map_type: map_type as u32,
        key_size: 4,
        value_size: 4,
        max_entries,
        map_flags: 0,
        map_extra: 0,
    };
    let inner: Vec<OwnedFd> = (0..N)
        .map(|_| {
            let fd = sys::map_create(&attr(inner_type, 1)).expect("create inner map");
            let id = sys::map_info(fd.as_fd()).expect("inner map info").id;
            elem_update(fd.as_fd(), &0u32.to_ne_bytes(), &id.to_ne_bytes(), BPF_ANY)
                .expect("store the inner map's id");
            fd
        })
        .collect();
    let mut create = sys::map_create_attr(&attr(outer_type, N));
    create.__bindgen_anon_1.inner_map_fd = inner[0].as_raw_fd() as u32;
    let outer = sys::map_create_from(&mut create).expect("create outer map");
    let base = if outer_type == bpf_map_type::BPF_MAP_TYPE_ARRAY_OF_MAPS {
        9
    } else {
        1000
    };
    let keys: Vec<u32> = (0..N).map(|i| base - i).collect();
    let expected = keys
        .iter()
        .zip(&inner)
        .map(|(k, fd)| {
            let id = sys::map_info(fd.as_fd()).expect("inner map info").id;
            (k.to_ne_bytes().to_vec(), id.to_ne_bytes().to_vec())
        })
        .collect();
    let key_bytes: Vec<u8> = keys.iter().flat_map(|k| k.to_ne_bytes()).collect();
    let fds: Vec<u8> = inner
        .iter()
        .flat_map(|fd| (fd.as_raw_fd() as u32).to_ne_bytes())
        .collect();
    let written = BatchMap::new(&outer)
        .expect("outer layout")
        .update_batch(&key_bytes, &fds, Flags::default())
        .expect("update batch of inner map fds");
    assert_eq!(written, N);
    MapOfMaps {
        outer,
        inner,
        expected,
    }
}

/// Batch lookups of a map of maps return each slot's inner map *id* (what
/// `map_fd_sys_lookup_elem` gives: `generic_map_lookup_batch` for arrays,
/// `__htab_map_lookup_and_delete_batch` for hashes; 5.19), for buffers of 5 and 10 as in
/// `map_in_map_batch_ops.c`, and of 1 and 3. A hash of maps also drains with lookup-and-delete;
/// an array of maps has no delete batches (ENOTSUPP).
#[test_case(bpf_map_type::BPF_MAP_TYPE_ARRAY_OF_MAPS, bpf_map_type::BPF_MAP_TYPE_ARRAY ; "array_of_maps_inner_array")]
#[test_case(bpf_map_type::BPF_MAP_TYPE_ARRAY_OF_MAPS, bpf_map_type::BPF_MAP_TYPE_HASH ; "array_of_maps_inner_hash")]
#[test_case(bpf_map_type::BPF_MAP_TYPE_HASH_OF_MAPS, bpf_map_type::BPF_MAP_TYPE_ARRAY ; "hash_of_maps_inner_array")]
#[test_case(bpf_map_type::BPF_MAP_TYPE_HASH_OF_MAPS, bpf_map_type::BPF_MAP_TYPE_HASH ; "hash_of_maps_inner_hash")]
fn map_in_map_batches_return_inner_map_ids(outer_type: bpf_map_type, inner_type: bpf_map_type) {
    crate::require!(Feature::Batch(outer_type));
    let m = map_of_maps(outer_type, inner_type);
    let b = BatchMap::new(&m.outer).expect("outer layout");
    for buffer in [1, 3, 5, 10] {
        let mut got = Contents::new();
        for entry in b.dump(buffer) {
            let (k, v) = entry.unwrap_or_else(|e| panic!("dump with buffer {buffer}: {e}"));
            assert!(got.insert(k.clone(), v).is_none(), "{k:?} returned twice");
        }
        assert_eq!(got, m.expected, "(key, inner map id) with buffer {buffer}");
    }
    let f = Flags::default();
    if outer_type == bpf_map_type::BPF_MAP_TYPE_HASH_OF_MAPS {
        let r = b
            .lookup_and_delete_batch(None, 10, f)
            .expect("lookup and delete batch");
        assert!(
            r.end && r.entries.len() == 10,
            "one batch of 10 drains the map"
        );
        assert_eq!(
            b.lookup_batch(None, 10, f)
                .map(|r| (r.end, r.entries.len())),
            Ok((true, 0)),
            "map empty after the drain"
        );
    } else {
        assert_eq!(
            b.lookup_and_delete_batch(None, 10, f).err(),
            Some(BatchError::NotSupported)
        );
        let keys: Vec<u8> = (0u32..10).flat_map(u32::to_ne_bytes).collect();
        assert_eq!(b.delete_batch(&keys, f), Err(BatchError::NotSupported));
    }
    // The inner maps stay open until the batches are done.
    drop(m.inner);
}

/// The `spin_lock` object's map: values hold a `bpf_spin_lock` at offset 0.
fn locked_value(i: u32, lock: u32) -> Vec<u8> {
    use bpfvm_common::spin_lock::{DATA_OFFSET, LOCK_OFFSET, VALUE_SIZE};
    let mut v: Vec<u8> = (0..VALUE_SIZE)
        .map(|j| (i as usize * 7 + j) as u8 | 1)
        .collect();
    v[LOCK_OFFSET..LOCK_OFFSET + 4].copy_from_slice(&lock.to_ne_bytes());
    v[DATA_OFFSET..DATA_OFFSET + 8].copy_from_slice(&u64::from(i).to_ne_bytes());
    v
}

/// The `BPF_F_LOCK` success path, on a hash map whose BTF value holds a `bpf_spin_lock`
/// (`test_map_lock` in the selftests' test_maps.c does it element by element): an update batch
/// with `BPF_F_LOCK` (`generic_map_update_batch` passes it to `htab_map_update_elem`) and lookup
/// and lookup-and-delete batches with it (`copy_map_value_locked` in
/// `__htab_map_lookup_and_delete_batch`) move every byte but the lock's, which userspace never
/// writes (`copy_map_value` skips it) and always reads as 0 (`check_and_init_map_value`).
/// A program bumping a value under the lock is seen by the next locked read.
#[test]
fn f_lock_batches_copy_values_but_never_the_lock() -> Result<()> {
    use bpfvm_common::spin_lock::{BUMP_KEY, DATA_OFFSET, LOCK_OFFSET, MAP, PROG_BUMP};
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    crate::require_object!(crate::object::SPIN_LOCK);
    let mut ebpf = crate::object::load(crate::object::SPIN_LOCK)?;
    let map = match ebpf.map(MAP) {
        Some(aya::maps::Map::HashMap(d)) => d.fd().as_fd().try_clone_to_owned()?,
        other => anyhow::bail!("map {MAP}: {other:?}"),
    };
    let b = BatchMap::new(&map)?;
    let n = 40u32;
    let lock = Flags {
        elem_flags: BPF_F_LOCK,
        flags: 0,
    };
    // Garbage in the lock word: the kernel must neither store it nor hand it back.
    let keys: Vec<u8> = (0..n).flat_map(u32::to_ne_bytes).collect();
    let values: Vec<u8> = (0..n).flat_map(|i| locked_value(i, u32::MAX)).collect();
    assert_eq!(b.update_batch(&keys, &values, lock), Ok(n));
    let expected: Contents = (0..n)
        .map(|i| (i.to_ne_bytes().to_vec(), locked_value(i, 0)))
        .collect();
    let read = |flags: Flags, delete: bool| -> Contents {
        let r = if delete {
            b.lookup_and_delete_batch(None, 64, flags)
        } else {
            b.lookup_batch(None, 64, flags)
        }
        .unwrap_or_else(|e| panic!("lookup batch ({flags:?}, delete {delete}): {e}"));
        assert!(r.end, "a buffer of max_entries reaches the end");
        (0..r.entries.len())
            .map(|i| (r.entries.key(i).to_vec(), r.entries.value(i).to_vec()))
            .collect()
    };
    assert!(read(lock, false) == expected, "locked lookup batch");
    assert!(
        read(Flags::default(), false) == expected,
        "plain lookup batch"
    );

    let prog: &mut SchedClassifier = crate::object::load_program(&mut ebpf, PROG_BUMP)?;
    crate::object::test_run_packet(prog)?;
    let mut bumped = expected.clone();
    let v = bumped
        .get_mut(&BUMP_KEY.to_ne_bytes()[..])
        .expect("key BUMP_KEY");
    let data0 = u64::from_ne_bytes(v[DATA_OFFSET..DATA_OFFSET + 8].try_into()?) + 1;
    v[DATA_OFFSET..DATA_OFFSET + 8].copy_from_slice(&data0.to_ne_bytes());
    assert_eq!(&v[LOCK_OFFSET..LOCK_OFFSET + 4], &[0; 4]);
    assert!(
        read(lock, true) == bumped,
        "locked lookup and delete batch after the bump"
    );
    assert!(
        read(lock, false).is_empty(),
        "map empty after lookup and delete"
    );
    Ok(())
}
