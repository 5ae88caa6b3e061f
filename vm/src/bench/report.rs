//! The bench-vm report: `report.json` (every run's figures), `report.md` (one table per
//! benchmark: retpoline, off, their ratio against the runs' spread, the thread's figure) and
//! the SVG plots.
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::{host_cpu, plot, reference, theory, BenchOptions, Mode, Size};
use crate::report::AccelInfo;
use crate::run::Prepared;
use bpfvm_common::bench_results::Results;

#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub mode: Mode,
    pub spectre_v2: Option<String>,
    pub cmdline: Option<String>,
    /// The guest ran in the asked mode and its runner finished.
    pub valid: bool,
    pub invalid_reason: Option<String>,
    pub wall_time_s: f64,
    #[serde(flatten)]
    pub results: Results,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub kernel: String,
    pub release: String,
    pub accel: AccelInfo,
    /// What the accelerator means for the figures.
    pub accel_note: String,
    pub host_cpu: String,
    pub size: Size,
    pub only: Vec<String>,
    pub wall_time_s: f64,
    pub runs: Vec<Run>,
}

impl BenchReport {
    /// The distinct values of one parameter over every run's rows, sorted.
    pub fn distinct(&self, param: impl Fn(&Results) -> Vec<u32>) -> Vec<u32> {
        let mut keys: Vec<u32> = self
            .runs
            .iter()
            .flat_map(|run| param(&run.results))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// Every run valid and no benchmark failed.
    pub fn ok(&self) -> bool {
        self.runs
            .iter()
            .all(|r| r.valid && r.results.errors.is_empty())
    }
}

pub(crate) fn build(
    p: &Prepared,
    opts: &BenchOptions,
    runs: Vec<Run>,
    wall_time_s: f64,
) -> BenchReport {
    let accel_note = if p.accel.is_kvm() {
        "KVM: guest code runs on the host CPU, so the figures are hardware figures of a virtual \
         machine (with its exits and a shared host)."
            .to_string()
    } else {
        "TCG: software emulation. Absolute numbers are not hardware numbers, and TCG models no \
         speculation: the on/off ratio shows only the instruction cost of the retpoline thunks."
            .to_string()
    };
    BenchReport {
        kernel: p.label.clone(),
        release: p.tree.release.clone(),
        accel: AccelInfo::from(&p.accel),
        accel_note,
        host_cpu: host_cpu(),
        size: opts.size,
        only: opts.only.clone(),
        wall_time_s,
        runs,
    }
}

/// Writes report.json, report.md and the plots into `dir`.
pub fn write(r: &BenchReport, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(r)?;
    // Atomic: two runs at once never leave a torn report.
    crate::report::write_atomic(&dir.join("report.json"), (json + "\n").as_bytes())?;
    crate::report::write_atomic(&dir.join("report.md"), markdown(r).as_bytes())?;
    plot::bpf_loop(r, &dir.join("bpf_loop_ns.svg"))?;
    plot::bloom(r, &dir.join("bloom_throughput.svg"))?;
    Ok(())
}

/// One figure measured in both modes, every valid run's value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pair {
    pub on: Vec<f64>,
    pub off: Vec<f64>,
}

impl Pair {
    /// Collects `f` (None: the run lacks that row) from every valid run.
    pub fn collect(r: &BenchReport, f: impl Fn(&Results) -> Option<f64>) -> Self {
        let mut p = Pair::default();
        for run in r.runs.iter().filter(|run| run.valid) {
            if let Some(v) = f(&run.results) {
                match run.mode {
                    Mode::Retpoline => p.on.push(v),
                    Mode::Off => p.off.push(v),
                }
            }
        }
        p
    }

    pub fn ratio(&self) -> Option<f64> {
        Some(mean(&self.on)? / mean(&self.off)?)
    }

    /// The largest relative spread, (max - min) / mean, of the runs of one mode; None with
    /// fewer than two runs of each mode.
    pub fn spread(&self) -> Option<f64> {
        Some(spread(&self.on)?.max(spread(&self.off)?))
    }

    /// Whether the on/off ratio is a difference or lies within the boot-to-boot noise.
    pub fn verdict(&self) -> &'static str {
        match (self.ratio(), self.spread()) {
            (Some(ratio), Some(spread)) if (ratio - 1.0).abs() > spread => "difference",
            (Some(_), Some(_)) => "within noise",
            (Some(_), None) => "one run per mode: no spread",
            _ => "no data",
        }
    }
}

pub fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn spread(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let max = v.iter().copied().fold(f64::MIN, f64::max);
    let min = v.iter().copied().fold(f64::MAX, f64::min);
    Some((max - min) / mean(v)?)
}

/// A number with 3 significant digits (at most 3 decimals).
fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let digits = if v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else if v.abs() >= 1.0 {
        2
    } else {
        3
    };
    format!("{v:.digits$}")
}

/// `mean (run, run)`.
fn runs(v: &[f64]) -> String {
    match mean(v) {
        None => "-".into(),
        Some(m) if v.len() == 1 => num(m),
        Some(m) => format!(
            "{} ({})",
            num(m),
            v.iter().map(|x| num(*x)).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// A table of one figure: parameters, retpoline, off, on/off, spread, verdict, thread.
fn pair_table(out: &mut String, params_head: &str, rows: &[(String, Pair, String)]) {
    writeln!(
        out,
        "| {params_head} | retpoline | off | on/off | spread | verdict | thread |\n|---|---|---|---|---|---|---|"
    )
    .unwrap();
    for (params, p, thread) in rows {
        writeln!(
            out,
            "| {params} | {} | {} | {} | {} | {} | {thread} |",
            runs(&p.on),
            runs(&p.off),
            p.ratio().map_or("-".into(), |r| format!("{r:.3}")),
            p.spread()
                .map_or("-".into(), |s| format!("{:.1} %", s * 100.0)),
            p.verdict()
        )
        .unwrap();
    }
    out.push('\n');
}

pub fn markdown(r: &BenchReport) -> String {
    let mut s = String::new();
    writeln!(s, "# bench-vm: kernel {} ({})\n", r.kernel, r.release).unwrap();
    writeln!(
        s,
        "- accelerator: **{}** ({})\n- {}\n- host CPU: {}\n- size: {}{}\n- wall time: {:.0} s\n",
        r.accel.name.to_uppercase(),
        r.accel.reason,
        r.accel_note,
        r.host_cpu,
        r.size.name(),
        if r.only.is_empty() {
            String::new()
        } else {
            format!(" (only {})", r.only.join(","))
        },
        r.wall_time_s
    )
    .unwrap();
    s.push_str(
        "Each cell gives the mean over the valid runs of a mode, then every run's figure. \
         *spread* is the largest (max - min) / mean among the runs of one mode; an on/off ratio \
         is called a *difference* only when it departs from 1 by more than that spread.\n\n",
    );
    s.push_str("## Runs\n\n| # | mode | valid | spectre_v2 | cmdline (spectre_v2=) | wall s |\n|---|---|---|---|---|---|\n");
    for (i, run) in r.runs.iter().enumerate() {
        writeln!(
            s,
            "| {} | {} | {} | {} | `{}` | {:.0} |",
            i + 1,
            run.mode.name(),
            if run.valid {
                "yes".to_string()
            } else {
                format!("**no**: {}", run.invalid_reason.as_deref().unwrap_or(""))
            },
            run.spectre_v2.as_deref().unwrap_or("-"),
            // The whole line is in report.json; the table shows the mitigation arguments.
            run.cmdline.as_deref().map_or("-".into(), |c| c
                .split_whitespace()
                .filter(|a| a.starts_with("spectre_v2="))
                .collect::<Vec<_>>()
                .join(" ")),
            run.wall_time_s
        )
        .unwrap();
        for e in &run.results.errors {
            writeln!(s, "|  | error | {e} | | | |").unwrap();
        }
        for skip in &run.results.skipped {
            writeln!(s, "|  | skipped | {skip} | | | |").unwrap();
        }
    }
    s.push('\n');
    bloom_tables(&mut s, r);
    loop_table(&mut s, r);
    batch_tables(&mut s, r);
    s
}

/// The (k, entries, value size) rows of the first run that has bloom rows.
fn bloom_keys(r: &BenchReport) -> Vec<(u32, u32, u32)> {
    r.runs
        .iter()
        .map(|run| {
            run.results
                .bloom
                .iter()
                .map(|b| (b.hash_funcs, b.entries, b.value_size))
                .collect::<Vec<_>>()
        })
        .max_by_key(|v| v.len())
        .unwrap_or_default()
}

fn bloom_tables(s: &mut String, r: &BenchReport) {
    let keys = bloom_keys(r);
    if keys.is_empty() {
        return;
    }
    let row = |res: &Results, k, n, vs| {
        res.bloom
            .iter()
            .find(|b| (b.hash_funcs, b.entries, b.value_size) == (k, n, vs))
            .cloned()
    };
    writeln!(
        s,
        "## Bloom filter\n\nThread: {}.\n",
        reference::BLOOM.cite()
    )
    .unwrap();
    for (title, lookup) in [("Lookups", true), ("Updates", false)] {
        writeln!(s, "### {title} (M ops/s)\n").unwrap();
        let rows: Vec<_> = keys
            .iter()
            .map(|&(k, n, vs)| {
                let p = Pair::collect(r, |res| {
                    row(res, k, n, vs).map(|b| if lookup { b.lookup.mean } else { b.update.mean })
                });
                let t = reference::bloom(k, n, vs).map_or("-".into(), |t| {
                    num(if lookup { t.lookup } else { t.update })
                });
                (format!("k={k}, {n} entries, {vs} B"), p, t)
            })
            .collect();
        pair_table(s, "parameters", &rows);
    }
    s.push_str(
        "### False positive rate (%)\n\nMeasured over non-member values; theory is \
         (1 - e^(-kn/m))^k for the kernel's bitmap of m bits.\n\n\
         | parameters | retpoline | off | m (bits) | theory | measured/theory | thread |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for &(k, n, vs) in &keys {
        let p = Pair::collect(r, |res| row(res, k, n, vs).map(|b| b.fp_rate * 100.0));
        let theory = theory::fp_rate(n, k) * 100.0;
        let all: Vec<f64> = p.on.iter().chain(&p.off).copied().collect();
        writeln!(
            s,
            "| k={k}, {n} entries, {vs} B | {} | {} | {} | {} | {} | {} |",
            runs(&p.on),
            runs(&p.off),
            theory::bitmap_bits(n, k),
            num(theory),
            mean(&all).map_or("-".into(), |m| format!("{:.3}", m / theory)),
            reference::bloom(k, n, vs).map_or("-".into(), |t| num(t.fp_pct))
        )
        .unwrap();
    }
    s.push_str("\n![bloom throughput](bloom_throughput.svg)\n\n");

    let hkeys: Vec<(u32, u32)> = r
        .runs
        .iter()
        .flat_map(|run| {
            run.results
                .bloom_hashmap
                .iter()
                .map(|h| (h.hash_funcs, h.entries))
        })
        .fold(Vec::new(), |mut v, k| {
            if !v.contains(&k) {
                v.push(k);
            }
            v
        });
    if hkeys.is_empty() {
        return;
    }
    s.push_str(
        "### Hash map lookups with a bloom filter in front (M ops/s)\n\nHalf the probed keys \
         are in the map; with the filter, a key it rejects skips the hash lookup (the thread's \
         5/5 patch).\n\n",
    );
    for (title, with) in [
        ("without the bloom filter", false),
        ("bloom filter checked first", true),
    ] {
        writeln!(s, "#### {title}\n").unwrap();
        let rows: Vec<_> = hkeys
            .iter()
            .map(|&(k, n)| {
                let p = Pair::collect(r, |res| {
                    res.bloom_hashmap
                        .iter()
                        .find(|h| (h.hash_funcs, h.entries) == (k, n))
                        .map(|h| {
                            if with {
                                h.with_bloom.mean
                            } else {
                                h.without_bloom.mean
                            }
                        })
                });
                (format!("k={k}, {n} entries"), p, "-".to_string())
            })
            .collect();
        pair_table(s, "parameters", &rows);
    }
}

fn loop_table(s: &mut String, r: &BenchReport) {
    let keys = r.distinct(|res| res.bpf_loop.iter().map(|l| l.nr_loops).collect());
    if keys.is_empty() {
        return;
    }
    writeln!(
        s,
        "## bpf_loop: latency (ns per loop iteration)\n\nThread: {}. Thread column: qemu / \
         hardware without retpoline.\n",
        reference::BPF_LOOP.cite()
    )
    .unwrap();
    let rows: Vec<_> = keys
        .iter()
        .map(|&n| {
            let p = Pair::collect(r, |res| {
                res.bpf_loop
                    .iter()
                    .find(|l| l.nr_loops == n)
                    .map(|l| l.ns_per_op)
            });
            let t = reference::bpf_loop(n).map_or("-".into(), |t| {
                format!("{} / {}", num(t.qemu_ns), num(t.hardware_ns))
            });
            (format!("nr_loops={n}"), p, t)
        })
        .collect();
    pair_table(s, "parameters", &rows);
    s.push_str("![bpf_loop ns/op](bpf_loop_ns.svg)\n\n");
}

fn batch_tables(s: &mut String, r: &BenchReport) {
    let keys = r.distinct(|res| res.batch.iter().map(|b| b.buffer).collect());
    if keys.is_empty() {
        return;
    }
    writeln!(
        s,
        "## Batch dump of a 100,000-entry hash map\n\nThread: {}.\n\n### Improvement of \
         BPF_MAP_LOOKUP_BATCH over get_next_key + lookup (%)\n",
        reference::BATCH.cite()
    )
    .unwrap();
    let row = |res: &Results, b: u32| res.batch.iter().find(|x| x.buffer == b).cloned();
    let rows: Vec<_> = keys
        .iter()
        .map(|&b| {
            let p = Pair::collect(r, |res| row(res, b).map(|x| x.improvement_pct));
            let retries: Vec<String> = r
                .runs
                .iter()
                .filter_map(|run| row(&run.results, b).map(|x| x.enospc_retries.to_string()))
                .collect();
            let t = reference::batch(b).map_or("-".into(), |t| num(t.improvement_pct));
            (
                format!(
                    "buffer {b} (ENOSPC retries per run: {})",
                    retries.join(", ")
                ),
                p,
                t,
            )
        })
        .collect();
    pair_table(s, "buffer", &rows);
    for (title, batch) in [
        ("batch dump (ms)", true),
        ("get_next_key + lookup dump (ms)", false),
    ] {
        writeln!(s, "### {title}\n").unwrap();
        let rows: Vec<_> = keys
            .iter()
            .map(|&b| {
                let p = Pair::collect(r, |res| {
                    row(res, b).map(|x| if batch { x.batch_ns } else { x.entry_ns } / 1e6)
                });
                let t = reference::batch(b).map_or("-".into(), |t| {
                    num(if batch { t.batch_ns } else { t.entry_ns } as f64 / 1e6)
                });
                (format!("buffer {b}"), p, t)
            })
            .collect();
        pair_table(s, "buffer", &rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_is_a_difference_only_beyond_the_spread() {
        let p = Pair {
            on: vec![10.0, 11.0],
            off: vec![12.0, 12.5],
        };
        // on/off = 10.5 / 12.25 = 0.857; spread = max(1/10.5, 0.5/12.25) = 9.5 %.
        assert_eq!(p.verdict(), "difference");
        let p = Pair {
            on: vec![10.0, 12.0],
            off: vec![11.0, 11.5],
        };
        assert_eq!(p.verdict(), "within noise");
        let p = Pair {
            on: vec![10.0],
            off: vec![11.0],
        };
        assert_eq!(p.verdict(), "one run per mode: no spread");
    }

    #[test]
    fn numbers_keep_three_significant_digits() {
        assert_eq!(num(123.456), "123");
        assert_eq!(num(12.345), "12.3");
        assert_eq!(num(1.2345), "1.23");
        assert_eq!(num(0.01234), "0.012");
    }
}
