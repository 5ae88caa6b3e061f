//! `report.md`: the headline rows, every boot with the host's load, then one table per
//! benchmark (median per mode with every boot's figure, the retpoline cost with its 95 % CI
//! and the verdict, the thread's figure), the false-positive rates under both definitions and
//! the batch improvement.
use std::fmt::Write as _;

use super::figures::figures;
use super::groups;
use super::model::{BenchReport, Figure, Mode};
use super::reference;
use super::stats::{self, median};
use bpfvm_common::bench_results::BatchRow;
use bpfvm_common::bloom_theory::{bitmap_bits, false_positive_rate};

/// A number with 3 significant digits (at most 3 decimals).
pub fn num(v: f64) -> String {
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

/// `median (boot, boot, ...)`.
fn boots(v: &[f64]) -> String {
    match median(v) {
        None => "-".into(),
        Some(m) if v.len() == 1 => num(m),
        Some(m) => format!(
            "{} ({})",
            num(m),
            v.iter().map(|x| num(*x)).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn ci_cells(f: &Figure) -> (String, String) {
    match f.cost() {
        None => ("-".into(), "-".into()),
        Some(c) => (
            format!("{:.3} ({:.3}..{:.3})", c.ratio, c.lo, c.hi),
            format!("{:.1} %", c.half_width_pct()),
        ),
    }
}

pub fn render(r: &BenchReport) -> String {
    let mut s = String::new();
    writeln!(s, "# bench-vm: kernel {} ({})\n", r.kernel, r.release).unwrap();
    if let Some(tree) = &r.tree {
        writeln!(s, "Kernel {}.\n", crate::results::report::built_from(tree)).unwrap();
    }
    let p = &r.params;
    writeln!(
        s,
        "- architecture: **{}**; modes: {} against {}\n- accelerator: **{}** ({})\n- {}\n- clock: {}\n- host CPU: {}\n- size: {}{}; {} boot(s) per mode; \
         {} producer(s); guest {} CPU(s), {}\n- wall time: {:.0} s\n",
        p.arch,
        Mode::Retpoline.cmdline_arg(p.arch),
        Mode::Off.cmdline_arg(p.arch),
        r.accel.name.to_uppercase(),
        r.accel.why(),
        r.accel_note,
        r.clock.note(),
        r.host_cpu,
        p.size.name(),
        if p.only.is_empty() {
            String::new()
        } else {
            format!(" (only {})", p.only.join(","))
        },
        p.boots_per_mode,
        p.producers,
        p.cpus,
        p.memory,
        r.wall_time_s
    )
    .unwrap();
    s.push_str(
        "**How to read it.** Each boot gives one figure per row (the median of its samples). A \
         mode's cell is the median over its boots, then every boot's figure. *cost* is the \
         retpoline time ratio (on/off for times, off/on for throughputs: above 1, retpoline is \
         slower), the ratio of the two modes' geometric means, with its 95 % confidence \
         interval: a Welch t-interval on the logarithms over boots. By the wall clock the cost \
         compares figures relative to the guest's reference speed (a user-space loop timed \
         around every sample: under TCG the host's speed drifts by up to 2x within a boot); by \
         the instruction clock it compares the instruction counts themselves. The verdict says \
         \"retpoline costs X %\" only when the interval excludes 1, else \"no difference \
         resolved\". *±* is the interval's half-width.\n\n",
    );
    let figs = figures(r);
    if r.params.null {
        null_summary(&mut s, &figs);
    }
    headline_table(&mut s, &figs, r);
    runs_table(&mut s, r);
    let (on, off) = arms(r);
    let mut table = "";
    for (i, f) in figs.iter().enumerate() {
        if f.table != table {
            table = f.table;
            writeln!(
                s,
                "## {} ({})\n\n| parameters | {} | {} | cost (95 % CI) | ± | raw cost (95 % CI) | verdict | thread |\n|---|---|---|---|---|---|---|---|",
                f.table, f.unit, on, off
            )
            .unwrap();
        }
        let (cost, hw) = ci_cells(f);
        let raw = f.raw_cost().map_or("-".into(), |c| {
            format!("{:.3} ({:.3}..{:.3})", c.ratio, c.lo, c.hi)
        });
        writeln!(
            s,
            "| {} | {} | {} | {cost} | {hw} | {raw} | {} | {} |",
            f.params,
            boots(&f.values.on),
            boots(&f.values.off),
            verdict(r, f),
            f.thread.map_or("-".into(), num)
        )
        .unwrap();
        if figs.get(i + 1).is_none_or(|g| g.table != f.table) {
            s.push('\n');
            s.push_str(sources(f.table));
        }
    }
    fp_table(&mut s, r);
    improvement_table(&mut s, r);
    s.push_str(&super::side::render(r, &figs));
    s.push_str("![retpoline cost per row](cost_ci.svg)\n");
    s
}

/// Where a table's method and thread figures come from.
fn sources(table: &str) -> &'static str {
    match table {
        super::upstream::BLOOM_TABLE | super::upstream::LOOP_TABLE => {
            "Method: the kernel's own `bench` (tools/testing/selftests/bpf/bench.c, built from \
             the pin's source as `selftests` builds it), run after the suite's benchmarks in the \
             same boot, each row its command (less `-w1 -d1` in --quick, `-w1 -d5` in --full; \
             no `-a`: one vCPU). bench prints one figure per second of the guest's clock (hits + drops, or \
             hits for bpf-loop: `hits_drops_report_progress`, `ops_report_progress`); a boot's \
             figure is its iterations after the warm-up: the fastest under the instruction \
             clock, their median by the wall clock.\n\n"
        }
        table => groups::method(table),
    }
}

/// The two columns' names: the modes, or a null run's two arms.
fn arms(r: &BenchReport) -> (&'static str, &'static str) {
    let null = r.params.null;
    let arch = r.params.arch;
    (
        Mode::Retpoline.label(null, arch),
        Mode::Off.label(null, arch),
    )
}

/// A row's verdict: the retpoline cost's, or in a null run whether the arms differ.
fn verdict(r: &BenchReport, f: &Figure) -> String {
    if r.params.null {
        stats::null_verdict(f.cost())
    } else {
        stats::verdict(f.cost())
    }
}

/// A null run says so first, with how many rows' intervals exclude 1 (false positives).
fn null_summary(s: &mut String, figs: &[Figure]) {
    let with_ci: Vec<stats::Ci> = figs.iter().filter_map(Figure::cost).collect();
    let false_positives = with_ci.iter().filter(|c| c.excludes_one()).count();
    writeln!(
        s,
        "## Null run (A/A)\n\n**This is a null run (`--null`): both arms of every boot pair, A (the \
         retpoline slot of the ABBA schedule) and B (the off slot), booted with \
         `spectre_v2=off`, the same kernel command line.** Every true cost is 1, so a row whose \
         interval excludes 1 is a false positive of the method: **{false_positives} of {} rows** \
         with an interval (each at 95 %, not simultaneous: about 5 % of rows are expected by \
         chance under the wall clock).\n",
        with_ci.len()
    )
    .unwrap();
}

fn headline_table(s: &mut String, figs: &[Figure], r: &BenchReport) {
    let target_pct = r.clock.headline_target_pct();
    let heads: Vec<&Figure> = figs.iter().filter(|f| f.headline).collect();
    if heads.is_empty() {
        return;
    }
    writeln!(
        s,
        "## Headline rows\n\nTarget: a 95 % CI half-width of at most {target_pct} %.\n\n\
         | row | boots (on/off) | cost (95 % CI) | ± | within target | verdict |\n|---|---|---|---|---|---|"
    )
    .unwrap();
    for f in heads {
        let (cost, hw) = ci_cells(f);
        let ok = f.cost().map_or("-", |c| {
            if c.half_width_pct() <= target_pct {
                "yes"
            } else {
                "**no**"
            }
        });
        writeln!(
            s,
            "| {} | {}/{} | {cost} | {hw} | {ok} | {} |",
            f.key,
            f.values.on.len(),
            f.values.off.len(),
            verdict(r, f)
        )
        .unwrap();
    }
    s.push('\n');
}

fn runs_table(s: &mut String, r: &BenchReport) {
    s.push_str(
        "## Boots\n\n*other CPUs*: CPUs' worth of time other processes used on the host during \
         the boot (host busy time from /proc/stat minus this run's own). A boot above the busy \
         threshold is repeated and left out of the statistics.\n\n\
         *ref. speed*: the guest's reference loop (M iterations/s), median over the boot's \
         measurements (wall clock; none under the instruction clock, where it is a constant).\n\n\
         | # | mode | valid | counted | other CPUs | load 1m | spectre_v2 | ref. speed | wall s |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for (i, run) in r.runs.iter().enumerate() {
        writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {:.0} |",
            i + 1,
            run.mode.label(r.params.null, r.params.arch),
            if run.valid {
                "yes".to_string()
            } else {
                format!("**no**: {}", run.invalid_reason.as_deref().unwrap_or(""))
            },
            match &run.excluded {
                None if run.valid => "yes".to_string(),
                None => "no".to_string(),
                Some(why) => format!("no: {why}"),
            },
            run.host.other_cpus,
            run.host.loadavg_1m,
            run.spectre_v2.as_deref().unwrap_or("-"),
            median(&reference_speeds(&run.results)).map_or("-".into(), num),
            run.wall_time_s
        )
        .unwrap();
        for e in &run.results.errors {
            writeln!(s, "|  | error | {e} | | | | | | |").unwrap();
        }
        for skip in &run.results.skipped {
            writeln!(
                s,
                "|  | skipped | {}: {} ({}) | | | | | | |",
                skip.group, skip.reason, skip.feature
            )
            .unwrap();
        }
    }
    s.push('\n');
    vulnerabilities(s, r);
}

/// Every reference-loop speed one boot measured (samples and dumps).
fn reference_speeds(r: &bpfvm_common::bench_results::Results) -> Vec<f64> {
    let stats = r
        .bloom
        .iter()
        .flat_map(|b| [&b.lookup, &b.update])
        .chain(
            r.bloom_hashmap
                .iter()
                .flat_map(|h| [&h.without_bloom, &h.with_bloom]),
        )
        .chain(r.bpf_loop.iter().map(|l| &l.throughput));
    stats
        .flat_map(|s| s.speeds.iter().copied())
        .chain(
            r.batch
                .iter()
                .flat_map(|b| b.batch_speeds.iter().chain(&b.entry_speeds).copied()),
        )
        .collect()
}

/// Each line of /sys/devices/system/cpu/vulnerabilities/ the boots read, with the boots that
/// read it (reports before the field have none).
fn vulnerabilities(s: &mut String, r: &BenchReport) {
    let mut lines: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, run) in r.runs.iter().enumerate() {
        for l in &run.results.vulnerabilities {
            match lines.iter_mut().find(|(x, _)| x == l) {
                Some((_, boots)) => boots.push(i + 1),
                None => lines.push((l, vec![i + 1])),
            }
        }
    }
    if lines.is_empty() {
        return;
    }
    lines.sort();
    s.push_str(
        "### /sys/devices/system/cpu/vulnerabilities/ per boot\n\n| line | boots |\n|---|---|\n",
    );
    for (l, boots) in lines {
        let boots: Vec<String> = boots.iter().map(|b| b.to_string()).collect();
        writeln!(s, "| {l} | {} |", boots.join(", ")).unwrap();
    }
    s.push('\n');
}

/// Both false-positive definitions, each beside its own reference.
fn fp_table(s: &mut String, r: &BenchReport) {
    let keys: Vec<(u32, u32, u32)> = {
        let mut k: Vec<_> = r
            .runs
            .iter()
            .flat_map(|run| {
                run.results
                    .bloom
                    .iter()
                    .map(|b| (b.hash_funcs, b.entries, b.value_size))
            })
            .collect();
        k.dedup();
        k.sort_unstable();
        k.dedup();
        k
    };
    if keys.is_empty() {
        return;
    }
    writeln!(
        s,
        "## Bloom filter false-positive rate (%)\n\nThread: {}.\n\n\
         F false positives among N probes of values never pushed, pooled over every counted \
         boot of both modes. **F/N** is the rate the theory predicts, (1 - e^(-kn/m))^k for the \
         kernel's bitmap of m bits (kernel/bpf/bloom_filter.c `bloom_map_alloc`). **F/(N+F)** is \
         what the kernel's bench prints (benchs/bench.c `false_hits_report_final`: its program \
         logs each false positive as a false hit and as a drop, and divides by all three \
         counters), so it compares with the thread's figure.\n\n\
         | parameters | N | F/N | theory | F/N ÷ theory | F/(N+F) | thread | m (bits) |\n|---|---|---|---|---|---|---|---|",
        reference::BLOOM.cite()
    )
    .unwrap();
    for (k, n, vs) in keys {
        let (mut f, mut probes) = (0u64, 0u64);
        for run in r.runs.iter().filter(|run| run.counts()) {
            for b in &run.results.bloom {
                if (b.hash_funcs, b.entries, b.value_size) == (k, n, vs) {
                    f += b.fp_false_hits;
                    probes += b.fp_probes;
                }
            }
        }
        let m = bitmap_bits(n, k);
        let theory = false_positive_rate(n as u64, m, k) * 100.0;
        let per_n = f as f64 / probes.max(1) as f64 * 100.0;
        let kernel = f as f64 / (probes + f).max(1) as f64 * 100.0;
        writeln!(
            s,
            "| k={k}, {n} entries, {vs} B | {probes} | {} | {} | {:.3} | {} | {} | {m} |",
            num(per_n),
            num(theory),
            per_n / theory,
            num(kernel),
            reference::bloom(k, n, vs).map_or("-".into(), |t| num(t.fp_pct))
        )
        .unwrap();
    }
    s.push('\n');
}

fn improvement_table(s: &mut String, r: &BenchReport) {
    let keys = r.distinct(|res| res.batch.iter().map(|b| b.buffer).collect());
    if keys.is_empty() {
        return;
    }
    writeln!(
        s,
        "## Improvement of BPF_MAP_LOOKUP_BATCH over get_next_key + lookup (%)\n\nThread: {}. \
         (entry - batch) / entry, per boot; ENOSPC retries are the batch calls retried with a \
         doubled buffer because a hash bucket did not fit; calls per entry are the batch \
         calls (retries included) over the entries dumped, median over boots. At buffers of 1 \
         and 2 the timed path is mostly retries and per-bucket copies, not the thread's \
         operation: not comparable to its figure.\n\n\
         | buffer | {} | {} | thread | ENOSPC retries per boot | calls per entry |\n|---|---|---|---|---|---|",
        reference::BATCH.cite(),
        arms(r).0,
        arms(r).1
    )
    .unwrap();
    for b in keys {
        let p = r.pair(|res| {
            res.batch
                .iter()
                .find(|x| x.buffer == b)
                .map(|x| x.improvement_pct)
        });
        let rows: Vec<&BatchRow> = r
            .runs
            .iter()
            .filter_map(|run| run.results.batch.iter().find(|x| x.buffer == b))
            .collect();
        let retries: Vec<String> = rows.iter().map(|x| x.enospc_retries.to_string()).collect();
        let per_entry: Vec<f64> = rows.iter().map(|x| calls_per_entry(x)).collect();
        let thread = if groups::comparable_to_thread(b) {
            reference::batch(b).map_or("-".into(), |t| num(t.improvement_pct))
        } else {
            "not comparable".into()
        };
        writeln!(
            s,
            "| {b} | {} | {} | {thread} | {} | {} |",
            boots(&p.on),
            boots(&p.off),
            retries.join(", "),
            median(&per_entry).map_or("-".into(), |c| format!("{c:.3}"))
        )
        .unwrap();
    }
    s.push('\n');
}

/// Batch calls (retries included) per entry dumped, of a row's last dump.
pub fn calls_per_entry(x: &BatchRow) -> f64 {
    x.calls as f64 / x.entries.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::bench::model::Run;

    /// A null run from recorded boots: the off boots of two instruction-clock quick runs of
    /// identical code (docs/benchmarks.md: runs B and C), B's as arm A and C's as arm B.
    fn null_run_from_recorded_off_boots() -> BenchReport {
        let load = |json: &str| -> BenchReport { serde_json::from_str(json).unwrap() };
        let b = load(include_str!(
            "../../../tests/data/bench-6.1-quick-icount-least-b.json"
        ));
        let c = load(include_str!(
            "../../../tests/data/bench-6.1-quick-icount-least-c.json"
        ));
        let mut null = b.clone();
        null.params.null = true;
        let off = |r: &BenchReport| -> Vec<Run> {
            r.runs
                .iter()
                .filter(|x| x.mode == Mode::Off)
                .cloned()
                .collect()
        };
        null.runs = off(&b)
            .into_iter()
            .map(|run| Run {
                mode: Mode::Retpoline,
                ..run
            })
            .chain(off(&c))
            .collect();
        null
    }

    #[test]
    fn a_null_run_says_so_and_every_row_says_no_difference() {
        let r = null_run_from_recorded_off_boots();
        let figs = figures(&r);
        assert!(figs.len() >= 18, "{} rows", figs.len());
        for f in &figs {
            let v = verdict(&r, f);
            assert!(v.starts_with("no difference resolved"), "{}: {v}", f.key);
        }
        let md = render(&r);
        assert!(md.contains("This is a null run (`--null`)"), "{md}");
        assert!(
            md.contains(&format!("**0 of {} rows**", figs.len())),
            "{md}"
        );
        assert!(md.contains("| parameters | A (off) | B (off) |"));
        let rows = md.lines().filter(|l| l.starts_with('|'));
        assert!(!rows.into_iter().any(|l| l.contains("retpoline costs")));
    }

    #[test]
    fn a_null_run_names_a_difference_a_false_positive() {
        let mut r = null_run_from_recorded_off_boots();
        for run in r.runs.iter_mut().filter(|x| x.mode == Mode::Retpoline) {
            for l in &mut run.results.bpf_loop {
                l.throughput.samples.iter_mut().for_each(|x| *x /= 1.02);
            }
        }
        let md = render(&r);
        assert!(
            md.contains("false positive: A and B differ by +2.0 %"),
            "{md}"
        );
        assert!(!md.contains("**0 of"), "{md}");
    }

    #[test]
    fn every_vulnerabilities_line_is_listed_with_the_boots_that_read_it() {
        let mut r: BenchReport =
            serde_json::from_str(include_str!("../../../tests/data/bench-6.1-quick.json")).unwrap();
        for (i, run) in r.runs.iter_mut().enumerate() {
            let v2 = if i % 2 == 0 {
                "Mitigation: Retpolines"
            } else {
                "Vulnerable"
            };
            run.results.vulnerabilities =
                vec!["mds: Not affected".into(), format!("spectre_v2: {v2}")];
        }
        let md = render(&r);
        let n = r.runs.len();
        let all: Vec<String> = (1..=n).map(|b| b.to_string()).collect();
        assert!(
            md.contains(&format!("| mds: Not affected | {} |", all.join(", "))),
            "{md}"
        );
        let odd: Vec<String> = (1..=n).step_by(2).map(|b| b.to_string()).collect();
        assert!(md.contains(&format!(
            "| spectre_v2: Mitigation: Retpolines | {} |",
            odd.join(", ")
        )));
    }

    #[test]
    fn the_recorded_report_renders_headlines_verdicts_and_both_fp_definitions() {
        let r: BenchReport =
            serde_json::from_str(include_str!("../../../tests/data/bench-6.1-quick.json")).unwrap();
        let md = render(&r);
        assert!(md.contains("## Headline rows"));
        assert!(md.contains("| bloom lookup k=3 entries=50000 value=8B | "));
        assert!(md.contains("| bpf_loop nr_loops=1000000 | "));
        assert!(md.contains("| batch dump buffer=230 | "));
        assert!(md.contains("raw cost (95 % CI)"));
        // The recorded wall-clock report has reference speeds: every boot shows one.
        let boots = md
            .split("## Boots")
            .nth(1)
            .unwrap()
            .split("\n\n")
            .nth(2)
            .unwrap();
        assert!(
            boots.lines().skip(2).all(|l| !l.contains("| - |")),
            "{boots}"
        );
        assert!(md.contains("retpoline costs") || md.contains("no difference resolved"));
        assert!(md.contains("F/(N+F)") && md.contains("| F/N |"));
        // The plots render from the same report.
        let dir = tempfile::tempdir().unwrap();
        super::super::plot::write_all(&r, dir.path()).unwrap();
        let svg = std::fs::read_to_string(dir.path().join("cost_ci.svg")).unwrap();
        assert!(svg.contains("bloom lookup k=3 entries=50000 value=8B"));
    }

    #[test]
    fn numbers_keep_three_significant_digits() {
        assert_eq!(num(123.456), "123");
        assert_eq!(num(12.345), "12.3");
        assert_eq!(num(1.2345), "1.23");
        assert_eq!(num(0.01234), "0.012");
    }
}
