//! The suite's benchmark groups, each declared once here: the tables it fills, its headline
//! rows, the note on its method under each table, and its figures, read from its field of the guest's results (`bench_results::Results`)
//! with the threads' figures beside them (`reference`). A new group is one function here, a
//! line in [`SUITE`], and its program and runner (docs/writing-tests.md, "Add a benchmark").
use super::model::{
    boot_relative, boot_value, dump_value, BenchReport, Figure, DUMP, ENTRY_DUMP_KEY, LATENCY, RATE,
};
use super::reference;
use super::stats::{self, Better};
use bpfvm_common::bench_results::{Results, Stat};

pub const BLOOM_LOOKUP: &str = "Bloom filter lookups";
pub const BLOOM_UPDATE: &str = "Bloom filter updates";
pub const HASH_WITHOUT: &str = "Hash map lookups without a bloom filter";
pub const HASH_WITH: &str = "Hash map lookups with a bloom filter in front";
pub const BPF_LOOP: &str = "bpf_loop latency";
pub const BATCH_DUMP: &str = "Batch dump (BPF_MAP_LOOKUP_BATCH)";
pub const ENTRY_DUMP: &str = "get_next_key + lookup dump";

/// Each group's figures, in the report's table order.
pub const SUITE: [fn(&BenchReport) -> Vec<Figure>; 5] =
    [bloom, hashmap, bpf_loop, batch_dump, entry_dump];

/// The headline rows of the issue: bloom lookup and update k=3, 50,000 entries, 8 B;
/// bpf_loop 1,000 and 1,000,000 loops; batch buffers 230 and 100,000.
pub(crate) fn headline(table: &str, key: (u32, u32, u32)) -> bool {
    match table {
        BLOOM_LOOKUP | BLOOM_UPDATE => key == (3, 50_000, 8),
        BPF_LOOP => key.0 == 1000 || key.0 == 1_000_000,
        BATCH_DUMP => key.0 == 230 || key.0 == 100_000,
        _ => false,
    }
}

/// Whether a batch dump at `buffer` entries per call measures the thread's operation: at 1
/// and 2 most calls hit ENOSPC (a bucket larger than the buffer) and are retried, or copy one
/// bucket, so the timed path is retries and per-call overhead.
pub fn comparable_to_thread(buffer: u32) -> bool {
    buffer > 2
}

/// What a suite table's note under it says: the method, the thread's figures, its plot.
pub fn method(table: &str) -> &'static str {
    match table {
        BLOOM_UPDATE => {
            "Method: tools/testing/selftests/bpf/progs/bloom_filter_bench.c (`bloom_lookup`, \
             `bloom_update`: bpf_for_each_map_elem over an array of random values). Thread: \
             see the false-positive table.\n\n![bloom throughput](bloom_throughput.svg)\n\n"
        }
        HASH_WITH => {
            "Method: bloom_filter_bench.c `bloom_hashmap_lookup`: 1024 random keys per run, \
             nearly all absent; with the filter, a key it rejects skips the hash lookup.\n\n"
        }
        BPF_LOOP => {
            "Method: tools/testing/selftests/bpf/progs/bpf_loop_bench.c (hits counted with an \
             atomic add, latency per producer as bench.c `ops_report_final`), twice: with \
             constant zero flags, which the verifier inlines (kernel/bpf/verifier.c \
             `update_loop_inline_state`, `loop_flag_is_zero`, `inline_bpf_loop`: no indirect \
             call left), and with flags read from a map value, which it cannot, so the helper \
             calls the callback through a pointer. The parameters say what the verified program \
             kept (its xlated instructions). Thread column: the bpf_loop thread's qemu series, \
             which measured the helper, beside the helper rows.\n\n\
             ![bpf_loop ns/op](bpf_loop_ns.svg)\n\n"
        }
        ENTRY_DUMP => {
            "Method: the batch thread's; a hash map with a fixed hash seed (the same buckets \
             every boot), raw syscalls into preallocated buffers, the first method alternating, \
             several repetitions per boot. Wall clock: one warm-up dump each, the boot's figure \
             the median; instruction clock: no warm-up, the least count (other work on the \
             vCPU only adds instructions). Buffers of 1 and 2 entries are not the thread's \
             operation: most calls there hit ENOSPC and are retried, or copy one bucket (see \
             calls per entry below), so no thread figure stands beside them.\n\n"
        }
        _ => "",
    }
}

/// Bloom filter lookups and updates (`Results::bloom`), one row per hash count, size and
/// value size.
fn bloom(r: &BenchReport) -> Vec<Figure> {
    let mut out = Vec::new();
    let best = |s: &Stat| boot_value(r.clock, s);
    let bloom_keys: Vec<(u32, u32, u32)> = unique(r.runs.iter().flat_map(|run| {
        run.results
            .bloom
            .iter()
            .map(|b| (b.hash_funcs, b.entries, b.value_size))
    }));
    for (table, lookup) in [(BLOOM_LOOKUP, true), (BLOOM_UPDATE, false)] {
        for &(k, n, vs) in &bloom_keys {
            let of = |value: &dyn Fn(&Stat) -> f64| {
                r.pair(|res| {
                    let b = res
                        .bloom
                        .iter()
                        .find(|b| (b.hash_funcs, b.entries, b.value_size) == (k, n, vs))?;
                    Some(value(if lookup { &b.lookup } else { &b.update }))
                })
            };
            let (values, relative) = (of(&best), of(&boot_relative));
            let thread =
                reference::bloom(k, n, vs).map(|t| if lookup { t.lookup } else { t.update });
            out.push(Figure {
                key: format!(
                    "bloom {} k={k} entries={n} value={vs}B",
                    if lookup { "lookup" } else { "update" }
                ),
                table,
                unit: RATE,
                params: format!("k={k}, {n} entries, {vs} B"),
                better: Better::Higher,
                headline: headline(table, (k, n, vs)),
                values,
                relative,
                thread,
            });
        }
    }
    out
}

/// Hash map lookups with and without the bloom filter in front (`Results::bloom_hashmap`).
fn hashmap(r: &BenchReport) -> Vec<Figure> {
    let mut out = Vec::new();
    let best = |s: &Stat| boot_value(r.clock, s);
    let hash_keys: Vec<(u32, u32)> = unique(r.runs.iter().flat_map(|run| {
        run.results
            .bloom_hashmap
            .iter()
            .map(|h| (h.hash_funcs, h.entries))
    }));
    for (table, with) in [(HASH_WITHOUT, false), (HASH_WITH, true)] {
        for &(k, n) in &hash_keys {
            let of = |value: &dyn Fn(&Stat) -> f64| {
                r.pair(|res| {
                    let h = res
                        .bloom_hashmap
                        .iter()
                        .find(|h| (h.hash_funcs, h.entries) == (k, n))?;
                    Some(value(if with {
                        &h.with_bloom
                    } else {
                        &h.without_bloom
                    }))
                })
            };
            let (values, relative) = (of(&best), of(&boot_relative));
            out.push(Figure {
                key: format!(
                    "hashmap {} k={k} entries={n}",
                    if with { "with bloom" } else { "without bloom" }
                ),
                table,
                unit: RATE,
                params: format!("k={k}, {n} entries, 8 B"),
                better: Better::Higher,
                headline: false,
                values,
                relative,
                thread: None,
            });
        }
    }
    out
}

/// bpf_loop's latency per iteration (`Results::bpf_loop`), with constant and map flags.
fn bpf_loop(r: &BenchReport) -> Vec<Figure> {
    let mut out = Vec::new();
    let best = |s: &Stat| boot_value(r.clock, s);
    let loop_keys: Vec<(u32, bool)> = unique(r.runs.iter().flat_map(|run| {
        run.results
            .bpf_loop
            .iter()
            .map(|l| (l.nr_loops, l.flags_from_map))
    }));
    let producers = r.params.producers.max(1) as f64;
    for (n, helper) in loop_keys {
        let of = |value: &dyn Fn(&Stat) -> f64| {
            r.pair(|res| {
                let l = res
                    .bpf_loop
                    .iter()
                    .find(|l| (l.nr_loops, l.flags_from_map) == (n, helper))?;
                // Per producer, as the kernel's bench (bench.c `ops_report_final`).
                Some(1000.0 * producers / value(&l.throughput))
            })
        };
        let (values, relative) = (of(&best), of(&boot_relative));
        let inlined = r
            .runs
            .iter()
            .flat_map(|run| &run.results.bpf_loop)
            .filter(|l| (l.nr_loops, l.flags_from_map) == (n, helper))
            .find_map(|l| l.helper_calls)
            .map_or("inlining unknown", |c| {
                if c == 0 {
                    "inlined"
                } else {
                    "helper called"
                }
            });
        out.push(Figure {
            key: if helper {
                format!("bpf_loop flags-from-map nr_loops={n}")
            } else {
                format!("bpf_loop nr_loops={n}")
            },
            table: BPF_LOOP,
            unit: LATENCY,
            params: format!(
                "nr_loops={n}, {} flags ({inlined})",
                if helper { "map" } else { "constant 0" }
            ),
            better: Better::Lower,
            headline: headline(BPF_LOOP, (n, 0, 0)),
            values,
            relative,
            // The thread's qemu series (its hardware series is in the markdown): the helper
            // with an indirect callback, so beside the row that calls it.
            thread: reference::bpf_loop(n).filter(|_| helper).map(|t| t.qemu_ns),
        });
    }
    out
}

/// The batch dump's time per buffer size (`Results::batch`).
fn batch_dump(r: &BenchReport) -> Vec<Figure> {
    let buffers = r.distinct(|res| res.batch.iter().map(|x| x.buffer).collect());
    let mut out = Vec::new();
    for b in buffers {
        let values = r.pair(|res| {
            let x = res.batch.iter().find(|x| x.buffer == b)?;
            Some(dump_value(r.clock, &x.batch_runs_ns, x.batch_ns))
        });
        let relative = r.pair(|res| {
            let x = res.batch.iter().find(|x| x.buffer == b)?;
            Some(batch_relative(
                &x.batch_runs_ns,
                &x.batch_speeds,
                x.batch_ns,
            ))
        });
        out.push(Figure {
            key: format!("batch dump buffer={b}"),
            table: BATCH_DUMP,
            unit: DUMP,
            params: if comparable_to_thread(b) {
                format!("buffer {b}")
            } else {
                format!("buffer {b} (not comparable to the thread: mostly ENOSPC retries and per-bucket copies)")
            },
            better: Better::Lower,
            headline: headline(BATCH_DUMP, (b, 0, 0)),
            values,
            relative,
            thread: reference::batch(b)
                .filter(|_| comparable_to_thread(b))
                .map(|t| t.batch_ns as f64 / 1e6),
        });
    }
    out
}

/// The get_next_key + lookup dump beside the batch dump (`Results::batch`'s `entry_*`).
fn entry_dump(r: &BenchReport) -> Vec<Figure> {
    let buffers = r.distinct(|res| res.batch.iter().map(|x| x.buffer).collect());
    // From format 3 every buffer's row carries the boot's one get_next_key dump: one figure,
    // from the first buffer's row; before, one figure per buffer.
    let entry_rows: Vec<(String, String, u32)> = if r.format >= 3 {
        buffers
            .first()
            .map(|&b| {
                let once = "once per boot (it does not depend on the buffer)";
                (ENTRY_DUMP_KEY.to_string(), once.to_string(), b)
            })
            .into_iter()
            .collect()
    } else {
        buffers
            .iter()
            .map(|&b| {
                (
                    format!("{ENTRY_DUMP_KEY} buffer={b}"),
                    format!("buffer {b}"),
                    b,
                )
            })
            .collect()
    };
    let mut out = Vec::new();
    for (key, params, b) in entry_rows {
        let row = |res: &Results| res.batch.iter().find(|x| x.buffer == b).cloned();
        let values = r.pair(|res| {
            let x = row(res)?;
            Some(dump_value(r.clock, &x.entry_runs_ns, x.entry_ns))
        });
        let relative = r.pair(|res| {
            let x = row(res)?;
            Some(batch_relative(
                &x.entry_runs_ns,
                &x.entry_speeds,
                x.entry_ns,
            ))
        });
        out.push(Figure {
            key,
            table: ENTRY_DUMP,
            unit: DUMP,
            params,
            better: Better::Lower,
            headline: false,
            values,
            relative,
            // The thread timed it beside every buffer size (within 3 %): the same buffer's.
            thread: reference::batch(b).map(|t| t.entry_ns as f64 / 1e6),
        });
    }
    out
}

/// A time in ms, median over repetitions, times the reference speed when recorded.
fn batch_relative(runs_ns: &[u64], speeds: &[f64], fallback_ns: f64) -> f64 {
    if runs_ns.is_empty() || speeds.len() != runs_ns.len() {
        return fallback_ns / 1e6;
    }
    let r: Vec<f64> = runs_ns
        .iter()
        .zip(speeds)
        .map(|(t, v)| *t as f64 * v / 1e6)
        .collect();
    stats::median(&r).unwrap_or(f64::NAN)
}

/// The distinct items in first-seen order.
fn unique<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v = Vec::new();
    for i in items {
        if !v.contains(&i) {
            v.push(i);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_figures_divide_each_sample_by_its_reference_speed() {
        let s = Stat {
            speeds: vec![2.0, 1.0, 4.0],
            ..Stat::of(vec![4.0, 2.0, 12.0])
        };
        // 2, 2, 3 -> median 2: the doubled host speed of the first sample cancels.
        assert_eq!(boot_relative(&s), 2.0);
        assert_eq!(
            batch_relative(&[1_000_000, 3_000_000], &[2.0, 1.0], 0.0),
            2.5
        );
        assert_eq!(batch_relative(&[], &[], 5e6), 5.0);
    }
}
