//! Loading the bench object: its globals, a hand-made bloom filter and values array in place
//! of the object's, fentry programs on getpgid, and the per-CPU stats slots.
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;

use anyhow::{Context, Result};
use aya::maps::{Array, MapData};
use aya::programs::fentry::FEntryLinkId;
use aya::programs::FEntry;
use aya::{Btf, Ebpf, EbpfLoader};
use bpfvm_common::bench::{self as names, SLOT_LEN};

use crate::object;
use crate::sys::{self, bpf_map_type, MapAttr};

/// The object's read-only globals.
#[derive(Debug, Clone, Copy)]
pub struct Globals {
    pub nr_entries: u64,
    pub value_size: u64,
    pub chunk: u32,
    pub nr_loops: u32,
    pub outer: u32,
}

impl Default for Globals {
    fn default() -> Self {
        Self {
            nr_entries: 1,
            value_size: 8,
            chunk: 1,
            nr_loops: 1,
            outer: 1,
        }
    }
}

/// Creates a bloom filter as `BPF_MAP_CREATE` sees it: the object's own definition cannot vary
/// value size and hash count at load time.
pub fn create_bloom(entries: u32, value_size: u32, hash_funcs: u32) -> Result<OwnedFd> {
    sys::map_create(&MapAttr {
        map_type: bpf_map_type::BPF_MAP_TYPE_BLOOM_FILTER as u32,
        key_size: 0,
        value_size,
        max_entries: entries,
        map_flags: 0,
        map_extra: hash_funcs as u64,
    })
    .with_context(|| {
        format!("create a bloom filter ({entries} entries, {value_size} B, k={hash_funcs})")
    })
}

/// Creates the array of `entries` values of `value_size` bytes the bloom programs walk.
pub fn create_values(entries: u32, value_size: u32) -> Result<OwnedFd> {
    sys::map_create(&MapAttr {
        map_type: bpf_map_type::BPF_MAP_TYPE_ARRAY as u32,
        key_size: 4,
        value_size,
        max_entries: entries,
        map_flags: 0,
        map_extra: 0,
    })
    .with_context(|| format!("create the values array ({entries} entries of {value_size} B)"))
}

/// Maps created by hand that replace the object's maps of the same name.
#[derive(Default)]
pub struct Replace {
    pub bloom: Option<OwnedFd>,
    pub values: Option<OwnedFd>,
}

/// Loads the bench object with `globals`; the maps in `replace` take the place of the object's
/// (aya reuses a map pinned at the path it is given), `hash_entries` sizes the hash map.
pub fn load(globals: &Globals, replace: Replace, hash_entries: Option<u32>) -> Result<Ebpf> {
    crate::sys::raise_memlock();
    let mut loader = EbpfLoader::new();
    loader
        .override_global(names::NR_ENTRIES, &globals.nr_entries, true)
        .override_global(names::VALUE_SIZE, &globals.value_size, true)
        .override_global(names::CHUNK, &globals.chunk, true)
        .override_global(names::NR_LOOPS, &globals.nr_loops, true)
        .override_global(names::OUTER, &globals.outer, true);
    if let Some(n) = hash_entries {
        loader.map_max_entries(names::HASH, n);
    }
    let mut pins = Vec::new();
    for (name, fd) in [
        (names::BLOOM, replace.bloom),
        (names::VALUES, replace.values),
    ] {
        let Some(fd) = fd else { continue };
        let pin = PathBuf::from(format!(
            "/sys/fs/bpf/bpfvm-bench-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&pin);
        MapData::from_fd(fd)
            .with_context(|| format!("wrap {name}"))?
            .pin(&pin)
            .with_context(|| format!("pin {name} at {} (is bpffs mounted?)", pin.display()))?;
        pins.push((name, pin));
    }
    for (name, pin) in &pins {
        loader.map_pin_path(name, pin.as_path());
    }
    let loaded = loader.load(object::BENCH);
    for (_, pin) in &pins {
        let _ = std::fs::remove_file(pin);
    }
    loaded.context("load the bench object")
}

/// Loads program `name` as fentry on getpgid and attaches it.
pub fn attach(ebpf: &mut Ebpf, name: &str, btf: &Btf) -> Result<FEntryLinkId> {
    let p: &mut FEntry = ebpf
        .program_mut(name)
        .with_context(|| format!("no program `{name}`"))?
        .try_into()
        .map_err(|e| object::program_error(name, e))?;
    if p.fd().is_err() {
        p.load(names::TRIGGER_FN, btf)
            .map_err(|e| object::program_error(name, e))?;
    }
    p.attach().map_err(|e| object::program_error(name, e))
}

pub fn detach(ebpf: &mut Ebpf, name: &str, link: FEntryLinkId) -> Result<()> {
    let p: &mut FEntry = ebpf
        .program_mut(name)
        .with_context(|| format!("no program `{name}`"))?
        .try_into()
        .map_err(|e| object::program_error(name, e))?;
    p.detach(link).map_err(|e| object::program_error(name, e))
}

/// How many calls of the helper whose call `imm` is (`sys::helper_call_imm`) the loaded
/// program `name` kept after the verifier's rewrites: 0 when it inlined them.
pub fn helper_calls(ebpf: &Ebpf, name: &str, imm: i32) -> Result<u32> {
    let p: &FEntry = ebpf
        .program(name)
        .with_context(|| format!("no program `{name}`"))?
        .try_into()
        .map_err(|e| object::program_error(name, e))?;
    let fd = p.fd().map_err(|e| object::program_error(name, e))?;
    let insns = sys::xlated(fd.as_fd().as_raw_fd())
        .with_context(|| format!("read the verified instructions of `{name}`"))?;
    Ok(insns
        .iter()
        .filter(|&&i| sys::is_helper_call(i, imm))
        .count() as u32)
}

/// Attaches `name`, runs `f`, detaches.
pub fn with_attached<T>(
    ebpf: &mut Ebpf,
    name: &str,
    btf: &Btf,
    f: impl FnOnce(&Ebpf) -> Result<T>,
) -> Result<T> {
    let link = attach(ebpf, name, btf)?;
    let r = f(ebpf);
    detach(ebpf, name, link)?;
    r
}

/// This CPU's stats slot (`bpfvm_common::bench::HITS` and the other indices).
pub fn slot(ebpf: &Ebpf, cpu: u32) -> Result<[u64; SLOT_LEN]> {
    let map = ebpf
        .map(names::SLOTS)
        .with_context(|| format!("no map {}", names::SLOTS))?;
    let slots: Array<&MapData, [u64; SLOT_LEN]> = Array::try_from(map)?;
    slots
        .get(&cpu, 0)
        .with_context(|| format!("read the stats slot of CPU {cpu}"))
}

/// One counter summed over every CPU's slot.
pub fn counter(ebpf: &Ebpf, index: usize) -> Result<u64> {
    let cpus = aya::util::online_cpus().map_err(|(_, e)| e)?;
    let mut sum = 0;
    for cpu in cpus {
        sum += slot(ebpf, cpu)?[index];
    }
    Ok(sum)
}
