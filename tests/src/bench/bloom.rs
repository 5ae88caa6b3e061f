//! The bloom filter thread's benchmarks (000: "bpf/benchs: Add benchmark tests for bloom
//! filter throughput + false positive", and 5/5: hash map lookups with and without a bloom
//! filter in front), set up as tools/testing/selftests/bpf/benchs/bench_bloom_filter_map.c
//! sets them up: an array of `nr_entries` random values (the bloom programs walk it), a hash
//! map and bloom filter holding the same random values, and a buffer of random bytes the hash
//! map probes read their keys from (nearly all non-members).
use std::os::fd::AsFd;

use anyhow::{bail, Context, Result};
use aya::maps::{Array, Map};
use aya::{Btf, Ebpf};
use bpfvm_common::bench::{self as names, DROPS, ERRORS, FALSE_HITS, HITS, PROBES, RAND_BYTES};

use super::prog::{self, Globals, Replace};
use super::sample::{self, trigger};
use super::{BloomRow, HashRow};
use super::{Plan, Progress, Results};
use crate::maps::batch::{BatchMap, Flags};

/// False-positive probes per trigger (a few ms of TCG time at most).
const FP_CHUNK: u32 = 16_384;
/// Entries per `BPF_MAP_UPDATE_BATCH` when filling a map.
const FILL_BATCH: usize = 65_536;

pub fn run(plan: &Plan, progress: &mut Progress, out: &mut Results) -> Result<()> {
    let btf = Btf::from_sys_fs().context("read the kernel's BTF")?;
    // The false-positive probes run from this thread: always on CPU 0.
    crate::sys::pin_to_cpu(0).context("pin to CPU 0")?;
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

/// `len` bytes from getrandom(2), as the kernel's bench fills its maps.
fn random_bytes(len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        // SAFETY: writes at most `len - done` bytes into the buffer's tail.
        let r = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), len - done, 0) };
        if r < 0 {
            return Err(std::io::Error::last_os_error()).context("getrandom");
        }
        done += r as usize;
    }
    Ok(buf)
}

/// Writes `values` (`value_size` bytes each) into `map` at keys `0..` (an array) or with
/// `keys` (a hash map), in batches.
fn fill<F: AsFd>(map: &BatchMap<F>, keys: &[u8], values: &[u8], key_size: usize) -> Result<()> {
    let (ks, vs) = (key_size, map.layout().value_stride());
    let n = keys.len() / ks;
    let mut start = 0;
    while start < n {
        let end = (start + FILL_BATCH).min(n);
        map.update_batch(
            &keys[start * ks..end * ks],
            &values[start * vs..end * vs],
            Flags::default(),
        )
        .context("fill a map with BPF_MAP_UPDATE_BATCH")?;
        start = end;
    }
    Ok(())
}

/// The values array: `n` random values of `vs` bytes (returned too, for the hash map).
fn values_array(n: u32, vs: u32) -> Result<(std::os::fd::OwnedFd, Vec<u8>)> {
    let fd = prog::create_values(n, vs)?;
    let values = random_bytes(n as usize * vs as usize)?;
    let indices: Vec<u8> = (0..n).flat_map(|i| i.to_ne_bytes()).collect();
    let map = BatchMap::new(fd.as_fd()).context("values array layout")?;
    fill(&map, &indices, &values, 4)?;
    Ok((fd, values))
}

/// Samples `plan.producers` producers' throughput of `counters` (summed) in this CPU's slot.
fn measure(plan: &Plan, e: &Ebpf, counters: &[usize]) -> Result<super::Stat> {
    sample::measure(&plan.sampling, plan.producers, |cpu| {
        let s = prog::slot(e, cpu)?;
        Ok(counters.iter().map(|&i| s[i]).sum())
    })
}

fn bloom(plan: &Plan, btf: &Btf, k: u32, n: u32, vs: u32) -> Result<BloomRow> {
    let g = Globals {
        nr_entries: n as u64,
        value_size: vs as u64,
        chunk: FP_CHUNK,
        ..Globals::default()
    };
    let (values, _) = values_array(n, vs)?;
    let replace = Replace {
        bloom: Some(prog::create_bloom(n, vs, k)?),
        values: Some(values),
    };
    let mut ebpf = prog::load(&g, replace, None)?;
    let update = prog::with_attached(&mut ebpf, names::BLOOM_UPDATE, btf, |e| {
        // One whole walk first: every value is in before the lookups, and the filter's pages
        // are touched (first touches are slow under emulation) before any sample.
        trigger();
        measure(plan, e, &[HITS])
    })?;
    let lookup = prog::with_attached(&mut ebpf, names::BLOOM_LOOKUP, btf, |e| {
        measure(plan, e, &[HITS])
    })?;
    let errors = prog::counter(&ebpf, ERRORS)?;
    if errors > 0 {
        bail!("bloom filter k={k} entries={n}: {errors} lookups of pushed values missed (false negatives)");
    }
    let (probes, false_hits) = prog::with_attached(&mut ebpf, names::BLOOM_FP, btf, |e| {
        let (p, f) = (prog::counter(e, PROBES)?, prog::counter(e, FALSE_HITS)?);
        for _ in 0..plan.fp_probes.div_ceil(FP_CHUNK as u64) {
            trigger();
        }
        Ok((
            prog::counter(e, PROBES)? - p,
            prog::counter(e, FALSE_HITS)? - f,
        ))
    })?;
    Ok(BloomRow {
        hash_funcs: k,
        entries: n,
        value_size: vs,
        lookup,
        update,
        fp_rate: false_hits as f64 / probes.max(1) as f64,
        fp_probes: probes,
        fp_false_hits: false_hits,
    })
}

fn hashmap(plan: &Plan, btf: &Btf, k: u32, n: u32) -> Result<HashRow> {
    // The object's hash map has 8-byte keys: the thread's and the kernel's default value size.
    let vs = 8;
    let g = Globals {
        nr_entries: n as u64,
        value_size: vs as u64,
        ..Globals::default()
    };
    let (values, keys) = values_array(n, vs)?;
    let replace = Replace {
        bloom: Some(prog::create_bloom(n, vs, k)?),
        values: Some(values),
    };
    let mut ebpf = prog::load(&g, replace, Some(n))?;
    {
        let Some(Map::HashMap(data)) = ebpf.map(names::HASH) else {
            bail!("no hash map {}", names::HASH);
        };
        // The value is the key, as in bench_bloom_filter_map.c.
        let map = BatchMap::new(data.fd()).context("hash map layout")?;
        fill(&map, &keys, &keys, vs as usize)?;
    }
    {
        let mut rand: Array<_, [u8; RAND_BYTES]> = Array::try_from(
            ebpf.map_mut(names::RAND)
                .with_context(|| format!("no map {}", names::RAND))?,
        )?;
        let bytes: Box<[u8; RAND_BYTES]> = random_bytes(RAND_BYTES)?
            .into_boxed_slice()
            .try_into()
            .map_err(|_| anyhow::anyhow!("random buffer of the wrong size"))?;
        // By reference: a 2 MiB value does not belong on the stack.
        let bytes: &[u8; RAND_BYTES] = &bytes;
        rand.set(0, bytes, 0).context("fill the random buffer")?;
    }
    // The bloom filter gets the same values: one walk of the update program.
    prog::with_attached(&mut ebpf, names::BLOOM_UPDATE, btf, |_| {
        trigger();
        Ok(())
    })?;
    if prog::counter(&ebpf, ERRORS)? > 0 {
        bail!("pushing the hash map's keys into the bloom filter failed");
    }
    let (without_bloom, hit_rate) =
        prog::with_attached(&mut ebpf, names::HASHMAP_WITHOUT_BLOOM, btf, |e| {
            let (h, d) = (prog::counter(e, HITS)?, prog::counter(e, DROPS)?);
            let s = measure(plan, e, &[HITS, DROPS])?;
            let (h, d) = (prog::counter(e, HITS)? - h, prog::counter(e, DROPS)? - d);
            Ok((s, h as f64 / (h + d).max(1) as f64))
        })?;
    let with_bloom = prog::with_attached(&mut ebpf, names::HASHMAP_WITH_BLOOM, btf, |e| {
        measure(plan, e, &[HITS, DROPS])
    })?;
    let errors = prog::counter(&ebpf, ERRORS)?;
    if errors > 0 {
        bail!(
            "the bloom filter in front of the hash map returned an error other than ENOENT \
             ({errors} runs; hits {}, drops {})",
            prog::counter(&ebpf, HITS)?,
            prog::counter(&ebpf, DROPS)?
        );
    }
    Ok(HashRow {
        hash_funcs: k,
        entries: n,
        without_bloom,
        with_bloom,
        hit_rate,
    })
}
