//! The batch thread's benchmark (004: "bpf: add BPF_MAP_DUMP command to dump more than one
//! entry per call"): the time to dump a 100,000-entry u64/u64 hash map with
//! `BPF_MAP_LOOKUP_BATCH` at a given buffer size, against get_next_key + lookup per entry.
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::{BatchRow, Plan, Progress};
use crate::batch::{BatchMap, DumpStats, Flags};
use crate::sys::{self, bpf_cmd, bpf_map_type, MapAttr};

pub fn run(plan: &Plan, progress: &mut Progress, out: &mut Vec<BatchRow>) -> Result<()> {
    let n = plan.batch_entries;
    let fd = sys::map_create(&MapAttr {
        map_type: bpf_map_type::BPF_MAP_TYPE_HASH as u32,
        key_size: 8,
        value_size: 8,
        max_entries: n,
        map_flags: 0,
        map_extra: 0,
    })
    .context("create the hash map")?;
    let map = BatchMap::new(fd.as_fd()).context("hash map layout")?;
    let keys: Vec<u8> = (0..n as u64).flat_map(|i| i.to_ne_bytes()).collect();
    let values: Vec<u8> = (0..n as u64).flat_map(|i| (i * 3).to_ne_bytes()).collect();
    map.update_batch(&keys, &values, Flags::default())
        .context("fill the hash map")?;
    for &buffer in &plan.batch_buffers {
        progress.start(&format!("batch dump buffer={buffer}"));
        let mut batch_runs = Vec::new();
        let mut entry_runs = Vec::new();
        let mut last = DumpStats::default();
        for _ in 0..plan.batch_reps.max(1) {
            let t = Instant::now();
            last = dump_batch(&map, buffer, n)?;
            batch_runs.push(t.elapsed().as_nanos() as u64);
            let t = Instant::now();
            let got = dump_entries(fd.as_fd())?;
            entry_runs.push(t.elapsed().as_nanos() as u64);
            if got != n as u64 {
                bail!("get_next_key dump saw {got} entries, the map holds {n}");
            }
        }
        let batch_ns = mean(&batch_runs);
        let entry_ns = mean(&entry_runs);
        out.push(BatchRow {
            buffer,
            batch_ns,
            entry_ns,
            batch_runs_ns: batch_runs,
            entry_runs_ns: entry_runs,
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

fn mean(v: &[u64]) -> f64 {
    v.iter().sum::<u64>() as f64 / v.len().max(1) as f64
}

/// Dumps the map with the batch dump iterator, growing the buffer on ENOSPC.
fn dump_batch<F: AsFd>(map: &BatchMap<F>, buffer: u32, n: u32) -> Result<DumpStats> {
    let mut dump = map.dump(buffer);
    let mut sum = 0u64;
    for e in dump.by_ref() {
        let (k, v) = e.with_context(|| format!("batch dump, buffer {buffer}"))?;
        sum = sum.wrapping_add(k[0] as u64 ^ v[0] as u64);
    }
    std::hint::black_box(sum);
    let stats = dump.stats();
    if stats.entries != n as u64 {
        bail!(
            "batch dump (buffer {buffer}) saw {} entries, the map holds {n}",
            stats.entries
        );
    }
    Ok(stats)
}

/// Dumps the map the old way: `BPF_MAP_GET_NEXT_KEY` then `BPF_MAP_LOOKUP_ELEM` per entry.
/// Returns the entries seen.
fn dump_entries(fd: BorrowedFd<'_>) -> Result<u64> {
    let map_fd = fd.as_raw_fd() as u32;
    let mut key = 0u64;
    let mut next = 0u64;
    let mut value = 0u64;
    let mut seen = 0u64;
    loop {
        let mut attr = sys::zeroed_attr();
        // SAFETY: integers and pointers to locals that outlive the call.
        unsafe {
            let a = &mut attr.__bindgen_anon_2;
            a.map_fd = map_fd;
            a.key = if seen == 0 {
                0
            } else {
                &key as *const u64 as u64
            };
            a.__bindgen_anon_1.next_key = &mut next as *mut u64 as u64;
        }
        match sys::bpf(bpf_cmd::BPF_MAP_GET_NEXT_KEY, &mut attr) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(seen),
            Err(e) => return Err(e).context("BPF_MAP_GET_NEXT_KEY"),
        }
        let mut attr = sys::zeroed_attr();
        // SAFETY: as above.
        unsafe {
            let a = &mut attr.__bindgen_anon_2;
            a.map_fd = map_fd;
            a.key = &next as *const u64 as u64;
            a.__bindgen_anon_1.value = &mut value as *mut u64 as u64;
        }
        sys::bpf(bpf_cmd::BPF_MAP_LOOKUP_ELEM, &mut attr).context("BPF_MAP_LOOKUP_ELEM")?;
        std::hint::black_box(value);
        key = next;
        seen += 1;
    }
}
