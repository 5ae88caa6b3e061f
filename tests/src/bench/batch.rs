//! The batch thread's benchmark (004: "bpf: add BPF_MAP_DUMP command to dump more than one
//! entry per call"): the time to dump a 100,000-entry u64/u64 hash map with
//! `BPF_MAP_LOOKUP_BATCH` at a given buffer size, against get_next_key + lookup per entry.
//!
//! Both dumps are raw syscalls into buffers allocated before the clock starts (the batch
//! wrapper's iterator allocates per entry, which is not what the thread timed), and both fold
//! every key and value they read into the same checksum, checked against the map's (the same
//! user-space work on each side); one untimed dump of each warms up. The get_next_key dump does not depend on the buffer size, so it is
//! timed once per boot (`Plan::entry_reps` times) and every buffer's row carries those runs.
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bpfvm_common::stats::median;

use super::sample::reference_speed;
use super::{BatchRow, Plan, Progress};
use crate::maps::batch::{attr_count, encode_lookup, BatchMap, Flags};
use crate::sys::{self, bpf_cmd, bpf_map_type, MapAttr};

/// Entries per call the preallocated buffers hold at least: an ENOSPC retry doubles the
/// buffer until a whole hash bucket fits, and buckets are far smaller than this.
const MIN_CAPACITY: u32 = 1024;
/// `BPF_F_ZERO_SEED` (include/uapi/linux/bpf.h, since 5.0; needs CAP_SYS_ADMIN).
const ZERO_SEED: u32 = 1 << 6;

pub fn run(plan: &Plan, progress: &mut Progress, out: &mut Vec<BatchRow>) -> Result<()> {
    let n = plan.batch_entries;
    let fd = sys::map_create(&MapAttr {
        map_type: bpf_map_type::BPF_MAP_TYPE_HASH as u32,
        key_size: 8,
        value_size: 8,
        max_entries: n,
        // A fixed hash seed: the same buckets in every boot. With a random one (the default,
        // `htab_map_alloc`'s get_random_u32) the bucket sizes, so the calls and ENOSPC
        // retries of a small-buffer dump, differ from boot to boot.
        map_flags: ZERO_SEED,
        map_extra: 0,
    })
    .context("create the hash map")?;
    let map = BatchMap::new(fd.as_fd()).context("hash map layout")?;
    let keys: Vec<u8> = (0..n as u64).flat_map(|i| i.to_ne_bytes()).collect();
    let values: Vec<u8> = (0..n as u64)
        .flat_map(|i| value_of(i).to_ne_bytes())
        .collect();
    map.update_batch(&keys, &values, Flags::default())
        .context("fill the hash map")?;
    if plan.batch_warmup {
        dump_entries(fd.as_fd(), n)?;
    }
    let (mut entry_runs, mut entry_speeds) = (Vec::new(), Vec::new());
    for _ in 0..plan.entry_reps.max(1) {
        let (ns, speed) = timed(plan, || dump_entries(fd.as_fd(), n))?;
        entry_runs.push(ns);
        entry_speeds.extend(speed);
    }
    let entry_ns = median_ns(&entry_runs);
    for &buffer in &plan.batch_buffers {
        progress.start(&format!("batch dump buffer={buffer}"));
        let mut bufs = Buffers::new(buffer);
        let (mut batch_runs, mut batch_speeds) = (Vec::new(), Vec::new());
        let mut last = DumpStats::default();
        if plan.batch_warmup {
            last = dump_batch(fd.as_fd(), &mut bufs, n)?;
        }
        for _ in 0..plan.batch_reps.max(1) {
            let (ns, speed) = timed(plan, || {
                last = dump_batch(fd.as_fd(), &mut bufs, n)?;
                Ok(())
            })?;
            batch_runs.push(ns);
            batch_speeds.extend(speed);
        }
        let batch_ns = median_ns(&batch_runs);
        out.push(BatchRow {
            buffer,
            batch_ns,
            entry_ns,
            batch_runs_ns: batch_runs,
            entry_runs_ns: entry_runs.clone(),
            batch_speeds,
            entry_speeds: entry_speeds.clone(),
            improvement_pct: (entry_ns - batch_ns) / entry_ns * 100.0,
            calls: last.calls,
            enospc_retries: last.enospc_retries,
            max_buffer: last.max_buffer,
            entries: last.entries,
        });
        progress.finish();
    }
    Ok(())
}

/// Times `dump` in ns and, when the plan measures it, the reference speed over it (the mean
/// of the reference loop on both sides).
fn timed(plan: &Plan, dump: impl FnOnce() -> Result<()>) -> Result<(u64, Option<f64>)> {
    let before = plan.sampling.reference.then(reference_speed);
    let t = Instant::now();
    dump()?;
    let ns = t.elapsed().as_nanos() as u64;
    Ok((ns, before.map(|b| (b + reference_speed()) / 2.0)))
}

/// The median of runs in ns (`bpfvm_common::stats::median`); a plan always has runs.
fn median_ns(runs: &[u64]) -> f64 {
    let runs: Vec<f64> = runs.iter().map(|&ns| ns as f64).collect();
    median(&runs).unwrap_or(0.0)
}

/// The keys, values and token buffers of one batch dump, allocated once.
struct Buffers {
    buffer: u32,
    keys: Vec<u64>,
    values: Vec<u64>,
    tokens: [u64; 2],
}

impl Buffers {
    fn new(buffer: u32) -> Self {
        let cap = buffer.max(MIN_CAPACITY) as usize;
        Self {
            buffer,
            keys: vec![0; cap],
            values: vec![0; cap],
            tokens: [0; 2],
        }
    }
}

/// What one batch dump did.
#[derive(Debug, Clone, Copy, Default)]
struct DumpStats {
    calls: u32,
    enospc_retries: u32,
    max_buffer: u32,
    entries: u64,
}

/// Dumps the map with `BPF_MAP_LOOKUP_BATCH` calls of `bufs.buffer` entries; on ENOSPC (a hash
/// bucket larger than the buffer) the call is retried from the same token with the buffer
/// doubled, as the batch wrapper does.
fn dump_batch(fd: BorrowedFd<'_>, bufs: &mut Buffers, n: u32) -> Result<DumpStats> {
    let map_fd = fd.as_raw_fd() as u32;
    let mut st = DumpStats::default();
    let mut first = true;
    let mut sum = 0u64;
    loop {
        let mut size = bufs.buffer;
        let (got, end) = loop {
            if size as usize > bufs.keys.len() {
                // Past the preallocated capacity (never seen): grow, and say so in the stats.
                bufs.keys.resize(size as usize, 0);
                bufs.values.resize(size as usize, 0);
            }
            st.calls += 1;
            st.max_buffer = st.max_buffer.max(size);
            let [tin, tout] = &mut bufs.tokens;
            let mut attr = encode_lookup(
                map_fd,
                if first { 0 } else { tin as *mut u64 as u64 },
                tout as *mut u64 as u64,
                bufs.keys.as_mut_ptr() as u64,
                bufs.values.as_mut_ptr() as u64,
                size,
                Flags::default(),
            );
            // SAFETY: `bufs` holds `size` keys and values and both tokens, alive past the call.
            match unsafe { sys::bpf(bpf_cmd::BPF_MAP_LOOKUP_BATCH, &mut attr) } {
                Ok(_) => break (attr_count(&attr), false),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    break (attr_count(&attr), true)
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && size < 2 * n => {
                    st.enospc_retries += 1;
                    size = size.saturating_mul(2);
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("BPF_MAP_LOOKUP_BATCH, buffer {size}"))
                }
            }
        };
        let got = (got as usize).min(size as usize);
        sum = bufs.keys[..got]
            .iter()
            .zip(&bufs.values[..got])
            .fold(sum, |s, (&k, &v)| add_entry(s, k, v));
        st.entries += got as u64;
        if end {
            break;
        }
        bufs.tokens[0] = bufs.tokens[1];
        first = false;
    }
    if st.entries != n as u64 || sum != checksum(n) {
        bail!(
            "batch dump (buffer {}) saw {} entries summing to {sum}, the map holds {n} \
             summing to {}",
            bufs.buffer,
            st.entries,
            checksum(n)
        );
    }
    Ok(st)
}

/// The value stored under key `i`.
fn value_of(i: u64) -> u64 {
    i * 3
}

/// What each dump folds every entry it read into, so that both timed dumps do the same work
/// on what they copied out (and prove they read every key and value).
fn add_entry(sum: u64, key: u64, value: u64) -> u64 {
    sum.wrapping_add(key).wrapping_add(value)
}

/// The sum of a whole dump of the map of `n` entries.
fn checksum(n: u32) -> u64 {
    (0..n as u64).fold(0, |s, i| add_entry(s, i, value_of(i)))
}

/// Dumps the map the old way: `BPF_MAP_GET_NEXT_KEY` then `BPF_MAP_LOOKUP_ELEM` per entry,
/// into locals; fails unless it saw the map's `n` entries.
fn dump_entries(fd: BorrowedFd<'_>, n: u32) -> Result<()> {
    let (seen, sum) = walk_entries(fd)?;
    if seen != n as u64 || sum != checksum(n) {
        bail!(
            "get_next_key dump saw {seen} entries summing to {sum}, the map holds {n} summing \
             to {}",
            checksum(n)
        );
    }
    Ok(())
}

/// The entries seen and their sum (`add_entry`, as the batch dump sums its buffers).
fn walk_entries(fd: BorrowedFd<'_>) -> Result<(u64, u64)> {
    let elems = sys::Elems::of(fd).context("map info")?;
    let (mut key, mut next, mut value) = ([0u8; 8], [0u8; 8], [0u8; 8]);
    let (mut seen, mut sum) = (0u64, 0u64);
    loop {
        // The first call passes a NULL key: the kernel answers with the first key.
        let prev = (seen > 0).then_some(&key[..]);
        match elems.next_key(prev, &mut next) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok((seen, sum)),
            Err(e) => return Err(e).context("BPF_MAP_GET_NEXT_KEY"),
        }
        elems
            .lookup(Some(&next), &mut value, 0)
            .context("BPF_MAP_LOOKUP_ELEM")?;
        sum = add_entry(sum, u64::from_ne_bytes(next), u64::from_ne_bytes(value));
        key = next;
        seen += 1;
    }
}
