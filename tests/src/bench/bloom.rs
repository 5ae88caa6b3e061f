//! The bloom filter thread's benchmarks (000: "bpf/benchs: Add benchmark tests for bloom
//! filter throughput + false positive", and 5/5: hash map lookups with and without a bloom
//! filter in front).
use anyhow::{bail, Context, Result};
use aya::maps::Map;
use aya::{Btf, Ebpf};
use bpfvm_common::bench::{self as names, value, ERRORS, HITS, OPS};

use super::prog::{self, Globals};
use super::sample::{self, trigger};
use super::{BloomRow, HashRow};
use super::{Plan, Progress, Results};
use crate::batch::{BatchMap, Flags};

/// Values walked per trigger (a few ms of TCG time at most).
const CHUNK: u32 = 16_384;
/// Hash map entries per `BPF_MAP_UPDATE_BATCH` when filling it.
const FILL_BATCH: u64 = 65_536;

pub fn run(plan: &Plan, progress: &mut Progress, out: &mut Results) -> Result<()> {
    let btf = Btf::from_sys_fs().context("read the kernel's BTF")?;
    sample::pin_to(0)?;
    for &vs in &plan.bloom_value_sizes {
        for &n in &plan.bloom_entries {
            for &k in &plan.bloom_hash_funcs {
                progress.start(&format!("bloom k={k} entries={n} value={vs}B"));
                out.bloom.push(bloom(plan, &btf, k, n, vs)?);
                progress.finish();
            }
        }
    }
    for &k in &plan.hashmap_hash_funcs {
        let n = plan.hashmap_entries;
        progress.start(&format!("hash map + bloom k={k} entries={n}"));
        out.bloom_hashmap.push(hashmap(plan, &btf, k, n)?);
        progress.finish();
    }
    Ok(())
}

fn globals(entries: u32, value_size: u32) -> Globals {
    Globals {
        nr_entries: entries as u64,
        value_size: value_size as u64,
        chunk: CHUNK.min(entries),
        ..Globals::default()
    }
}

/// Triggers enough runs of the attached program to walk `values` values.
fn walk(values: u64, chunk: u32) {
    for _ in 0..values.div_ceil(chunk as u64) {
        trigger();
    }
}

fn bloom(plan: &Plan, btf: &Btf, k: u32, n: u32, vs: u32) -> Result<BloomRow> {
    let g = globals(n, vs);
    let mut ebpf = prog::load(&g, Some(prog::create_bloom(n, vs, k)?), None)?;
    let ops = |e: &Ebpf| prog::counter(e, OPS);
    let update = prog::with_attached(&mut ebpf, names::BLOOM_UPDATE, btf, |e| {
        // A whole walk first: every value is in before the lookups, and the filter's pages
        // are touched (first touches are slow under emulation) before any sample.
        walk(n as u64, g.chunk);
        sample::measure(&plan.sampling, || ops(e))
    })?;
    let lookup = prog::with_attached(&mut ebpf, names::BLOOM_LOOKUP, btf, |e| {
        sample::measure(&plan.sampling, || ops(e))
    })?;
    let errors = prog::counter(&ebpf, ERRORS)?;
    if errors > 0 {
        bail!("bloom filter k={k} entries={n}: {errors} lookups of pushed values missed (false negatives)");
    }
    let (probes, positives) = prog::with_attached(&mut ebpf, names::BLOOM_FP, btf, |e| {
        let (o, h) = (prog::counter(e, OPS)?, prog::counter(e, HITS)?);
        walk(plan.fp_probes, g.chunk);
        Ok((prog::counter(e, OPS)? - o, prog::counter(e, HITS)? - h))
    })?;
    Ok(BloomRow {
        hash_funcs: k,
        entries: n,
        value_size: vs,
        lookup,
        update,
        fp_rate: positives as f64 / probes.max(1) as f64,
        fp_probes: probes,
    })
}

/// Fills the object's hash map with `value(i) -> i` for `i < n`.
fn fill_hash(ebpf: &Ebpf, n: u32) -> Result<()> {
    let Some(Map::HashMap(data)) = ebpf.map(names::HASH) else {
        bail!("no hash map {}", names::HASH);
    };
    let map = BatchMap::new(data.fd()).context("hash map layout")?;
    let mut start = 0u64;
    while start < n as u64 {
        let end = (start + FILL_BATCH).min(n as u64);
        let keys: Vec<u8> = (start..end).flat_map(|i| value(i).to_ne_bytes()).collect();
        let values: Vec<u8> = (start..end).flat_map(|i| i.to_ne_bytes()).collect();
        map.update_batch(&keys, &values, Flags::default())
            .context("fill the hash map")?;
        start = end;
    }
    Ok(())
}

fn hashmap(plan: &Plan, btf: &Btf, k: u32, n: u32) -> Result<HashRow> {
    let g = globals(n, 8);
    let mut ebpf = prog::load(&g, Some(prog::create_bloom(n, 8, k)?), Some(n))?;
    fill_hash(&ebpf, n)?;
    prog::with_attached(&mut ebpf, names::BLOOM_UPDATE, btf, |_| {
        walk(n as u64, g.chunk);
        Ok(())
    })?;
    let ops = |e: &Ebpf| prog::counter(e, OPS);
    let (without_bloom, hit_rate) = prog::with_attached(&mut ebpf, names::HASH_LOOKUP, btf, |e| {
        let (o, h) = (prog::counter(e, OPS)?, prog::counter(e, HITS)?);
        let s = sample::measure(&plan.sampling, || ops(e))?;
        let (o, h) = (prog::counter(e, OPS)? - o, prog::counter(e, HITS)? - h);
        Ok((s, h as f64 / o.max(1) as f64))
    })?;
    let with_bloom = prog::with_attached(&mut ebpf, names::HASH_BLOOM_LOOKUP, btf, |e| {
        sample::measure(&plan.sampling, || ops(e))
    })?;
    if prog::counter(&ebpf, ERRORS)? > 0 {
        bail!("the bloom filter in front of the hash map returned an error");
    }
    Ok(HashRow {
        hash_funcs: k,
        entries: n,
        without_bloom,
        with_bloom,
        hit_rate,
    })
}
