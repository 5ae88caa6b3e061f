//! Batch map operations (`BPF_MAP_*_BATCH`, 5.6) through [`crate::maps::batch`], on maps created with
//! aya. References: the kernel's `map_tests/htab_map_batch_ops.c` and `array_map_batch_ops.c`,
//! docs/kernel-behaviour.md (batch operations).
//!
//! Maps are filled and checked with the single-element commands (`BPF_MAP_UPDATE_ELEM`,
//! `GET_NEXT_KEY`, `LOOKUP_ELEM`), never with the batch wrapper under test. Where filling is not
//! what a test is about and its own checks would show a wrong fill (a dump compared with what
//! was inserted), [`TestMap::fill_in_one_batch`] fills with one raw `BPF_MAP_UPDATE_BATCH`
//! instead of a syscall per key: under TCG each syscall costs tens of microseconds
//! (docs/test-durations.md). Key `i` is `i` as a native u32 followed by a pattern; its value in
//! per-CPU slot `c` is a pattern of `(i, c)`, so a value paired with the wrong key or CPU is
//! caught.
use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Barrier};

use anyhow::{Context, Result};
use aya::maps::{MapData, MapFd};
use aya::programs::SchedClassifier;

use crate::features::{self, Feature};
use crate::maps::batch::{BatchError, BatchMap, Flags, Layout, Token, BATCH_ATTR_END, BPF_F_LOCK};
use crate::sys::{self, bpf_cmd, bpf_map_type};

mod concurrency;
mod dump;
mod errors;
mod map_types;
mod percpu;
mod tokens;
mod writes;

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
    fn new(kind: Kind, key_size: usize, value_size: usize, max_entries: u32) -> Result<Self> {
        Self::create(kind.map_type(), key_size, value_size, max_entries, 0)
    }

    fn create(
        map_type: bpf_map_type,
        key_size: usize,
        value_size: usize,
        max_entries: u32,
        flags: u32,
    ) -> Result<Self> {
        sys::raise_memlock();
        let obj = aya_obj::Map::new_from_params(
            map_type as u32,
            key_size as u32,
            value_size as u32,
            max_entries,
            flags,
        );
        let data = MapData::create(obj, "bpfvm_batch", None)
            .with_context(|| format!("create a {map_type:?} map"))?;
        let cpus = features::possible_cpus().context("possible CPUs")?;
        let layout = Layout::new(map_type as u32, key_size, value_size, max_entries, cpus);
        Ok(Self { data, layout })
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.data.fd().as_fd()
    }

    /// The wrapper under test, with the layout it reads from the kernel.
    fn batch(&self) -> Result<BatchMap<&MapFd>> {
        let b = BatchMap::new(self.data.fd()).context("read the map's layout")?;
        assert_eq!(
            b.layout(),
            self.layout,
            "layout from BPF_OBJ_GET_INFO_BY_FD"
        );
        Ok(b)
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
    fn fill(&self, n: u32) -> Result<Contents> {
        pin_for_lru()?;
        // The map's sizes read once: a fill of 100,000 keys makes 100,000 syscalls, not 200,000.
        let elems = self.elems()?;
        (0..n)
            .map(|i| {
                let (k, v) = (self.key(i), self.value(i));
                elems
                    .update(Some(&k), &v, BPF_ANY)
                    .with_context(|| format!("insert key {i}"))?;
                Ok((k, v))
            })
            .collect()
    }

    /// Inserts keys `0..n` with their values in one raw `BPF_MAP_UPDATE_BATCH` (the kernel's
    /// `generic_map_update_batch` updates them one by one, as `BPF_MAP_UPDATE_ELEM` would),
    /// bypassing the wrapper under test ([`crate::maps::batch`]): one syscall instead of `n`.
    /// Returns nothing: a map of 100,000 entries costs seconds under TCG as a [`Contents`];
    /// [`Self::contents`] builds one where a test needs it.
    fn fill_in_one_batch(&self, n: u32) -> Result<()> {
        pin_for_lru()?;
        self.update_in_one_batch(&keys_of(self, 0..n), &values_of(self, 0..n))
    }

    /// Writes `keys` (whole keys of this map, back to back) with `values` (one value stride
    /// each) in one raw `BPF_MAP_UPDATE_BATCH`; fails unless the kernel wrote them all.
    fn update_in_one_batch(&self, keys: &[u8], values: &[u8]) -> Result<()> {
        let l = self.layout;
        let n = keys.len() / l.key_size;
        assert!(
            keys.len() == n * l.key_size && values.len() == n * l.value_stride(),
            "{} key bytes and {} value bytes are not {n} entries of this map",
            keys.len(),
            values.len()
        );
        let mut attr = crate::maps::batch::encode_write(
            self.fd().as_raw_fd() as u32,
            keys.as_ptr() as u64,
            values.as_ptr() as u64,
            n as u32,
            Flags::default(),
        );
        // SAFETY: `keys` holds `n` keys of this map's key size and `values` `n` values of its
        // value stride (checked above); the kernel only reads them, and both outlive the call.
        unsafe { sys::bpf(bpf_cmd::BPF_MAP_UPDATE_BATCH, &mut attr) }
            .with_context(|| format!("BPF_MAP_UPDATE_BATCH of {n} keys"))?;
        let written = crate::maps::batch::attr_count(&attr) as usize;
        assert_eq!(
            written, n,
            "BPF_MAP_UPDATE_BATCH wrote {written} of {n} keys"
        );
        Ok(())
    }

    /// Keys `0..n` with their values: what [`Self::fill`] returns.
    fn contents(&self, n: u32) -> Contents {
        (0..n).map(|i| (self.key(i), self.value(i))).collect()
    }

    /// The element commands on this map (`BPF_OBJ_GET_INFO_BY_FD` once per call).
    fn elems(&self) -> io::Result<sys::Elems<'_>> {
        sys::Elems::of(self.fd())
    }

    fn update(&self, key: &[u8], value: &[u8], flags: u64) -> io::Result<()> {
        self.elems()?.update(Some(key), value, flags)
    }

    fn delete(&self, key: &[u8]) -> io::Result<()> {
        self.elems()?.delete(Some(key))
    }

    fn lookup(&self, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        elem_lookup(&self.elems()?, key, self.layout.value_stride())
    }

    /// The reference: a walk with get_next_key + lookup.
    fn walk(&self) -> Result<Contents> {
        let elems = self.elems()?;
        let mut out = Contents::new();
        let mut prev: Option<Vec<u8>> = None;
        while let Some(k) =
            elem_next_key(&elems, prev.as_deref(), self.layout.key_size).context("get_next_key")?
        {
            if let Some(v) =
                elem_lookup(&elems, &k, self.layout.value_stride()).context("lookup")?
            {
                assert!(out.insert(k.clone(), v).is_none(), "walk repeated {k:?}");
            }
            prev = Some(k);
        }
        Ok(out)
    }
}

/// LRU maps keep free elements on per-CPU lists: a thread that migrates while filling can make
/// the map evict before it is full. Tests run in their own threads, so pinning is local.
fn pin_for_lru() -> Result<()> {
    sys::pin_to_current_cpu()
        .context("pinning this test's thread to its CPU (sched_getcpu, sched_setaffinity)")?;
    Ok(())
}

fn elem_lookup(elems: &sys::Elems<'_>, key: &[u8], stride: usize) -> io::Result<Option<Vec<u8>>> {
    let mut v = vec![0u8; stride];
    match elems.lookup(Some(key), &mut v, 0) {
        Ok(()) => Ok(Some(v)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

fn elem_next_key(
    elems: &sys::Elems<'_>,
    key: Option<&[u8]>,
    key_size: usize,
) -> io::Result<Option<Vec<u8>>> {
    let mut next = vec![0u8; key_size];
    match elems.next_key(key, &mut next) {
        Ok(()) => Ok(Some(next)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Dumps the whole map with the wrapper's iterator; asserts no key comes twice.
fn dump_all(
    b: &BatchMap<&MapFd>,
    buffer: u32,
) -> Result<(Contents, crate::maps::batch::DumpStats)> {
    let mut out = Contents::new();
    let mut dump = b.dump(buffer);
    for entry in &mut dump {
        let (k, v) = entry.with_context(|| format!("dump with buffer {buffer}"))?;
        assert!(
            out.insert(k.clone(), v).is_none(),
            "dump returned {k:?} twice"
        );
    }
    Ok((out, dump.stats()))
}

fn keys_of(m: &TestMap, ids: impl IntoIterator<Item = u32>) -> Vec<u8> {
    ids.into_iter().flat_map(|i| m.key(i)).collect()
}

fn values_of(m: &TestMap, ids: impl IntoIterator<Item = u32>) -> Vec<u8> {
    ids.into_iter().flat_map(|i| m.value(i)).collect()
}

/// An LPM trie key: prefix length, then an IPv4 address (`struct test_lpm_key`).
fn lpm_key(prefix: u32, addr: [u8; 4]) -> Vec<u8> {
    prefix.to_ne_bytes().into_iter().chain(addr).collect()
}
