//! The report's side-by-side table: the suite's rows and the kernel's `bench` rows for the same
//! operation, from the same boots, each with the retpoline cost it gives.
use std::fmt::Write as _;

use super::upstream::{
    calls, Call, BLOOM_LOOKUP, BLOOM_TABLE, BLOOM_UPDATE, BPF_LOOP, FALSE_POSITIVE, LOOP_TABLE,
    WITHOUT_BLOOM, WITH_BLOOM,
};
use crate::results::bench::model::{BenchReport, Figure};
use crate::results::bench::stats::{self, median};

/// The suite's row that measures what `call` does, by its figure key; None for a call the
/// suite has no row for.
pub fn suite_key(call: &Call) -> Option<String> {
    let arg = |name: &str| call.arg(name);
    Some(match call.bench.as_str() {
        BLOOM_LOOKUP | BLOOM_UPDATE => format!(
            "bloom {} k={} entries={} value={}B",
            if call.bench == BLOOM_LOOKUP {
                "lookup"
            } else {
                "update"
            },
            arg("nr_hash_funcs")?,
            arg("nr_entries")?,
            arg("value_size")?
        ),
        WITHOUT_BLOOM | WITH_BLOOM => format!(
            "hashmap {} k={} entries={}",
            if call.bench == WITH_BLOOM {
                "with bloom"
            } else {
                "without bloom"
            },
            arg("nr_hash_funcs")?,
            arg("nr_entries")?
        ),
        // bench's bpf_loop_bench.c passes constant zero flags: the suite's constant-flags row.
        BPF_LOOP => format!("bpf_loop nr_loops={}", arg("nr_loops")?),
        _ => return None,
    })
}

/// `median on / median off (on - off)`: the difference is what retpoline adds per operation,
/// in instructions under the instruction clock.
fn cells(f: &Figure) -> String {
    match (median(&f.values.on), median(&f.values.off)) {
        (Some(on), Some(off)) => format!("{} / {} ({:+.2})", sig(on), sig(off), on - off),
        _ => "-".into(),
    }
}

/// Five significant digits: the instruction counts repeat to 0.01 %.
fn sig(v: f64) -> String {
    let digits = (4 - v.abs().log10().floor() as i32).clamp(0, 4) as usize;
    format!("{v:.digits$}")
}

fn cost(f: &Figure) -> String {
    f.cost().map_or("-".into(), |c| {
        format!(
            "{} % (CI {}..{})",
            stats::pct(c.ratio),
            stats::pct(c.lo),
            stats::pct(c.hi)
        )
    })
}

/// The section, from the report's figures (`figures::figures`); empty when the run had no
/// kernel's bench, a note when it was asked for and skipped.
pub fn render(r: &BenchReport, figs: &[Figure]) -> String {
    let mut s = String::new();
    if let Some(why) = &r.upstream_skipped {
        writeln!(
            s,
            "## Side by side: the suite and the kernel's bench\n\n{why}.\n"
        )
        .unwrap();
        return s;
    }
    let calls = calls(r);
    if calls.is_empty() {
        return s;
    }
    // The units of bench's rows, each once (rates and loop latencies).
    let mut units: Vec<&str> = Vec::new();
    for f in figs
        .iter()
        .filter(|f| [BLOOM_TABLE, LOOP_TABLE].contains(&f.table))
    {
        if !units.contains(&f.unit) {
            units.push(f.unit);
        }
    }
    let unit = units.join("; ");
    writeln!(
        s,
        "## Side by side: the suite and the kernel's bench\n\n\
         The same boots: the suite's row and the kernel's `bench` (tools/testing/selftests/bpf) \
         for the same operation. Cells: retpoline / off, the median over boots ({unit}), and \
         their difference; cost: retpoline's over off's with its \
         95 % CI. bench's \
         bpf_loop_bench.c passes constant zero flags, so it stands beside the suite's inlined \
         row; the suite's helper row (flags from a map) has no bench counterpart on kernels \
         that inline.\n\n\
         | operation | suite | suite cost | bench | bench cost |\n|---|---|---|---|---|"
    )
    .unwrap();
    let find = |key: &str| figs.iter().find(|f| f.key == key);
    for call in &calls {
        if call.bench == FALSE_POSITIVE {
            continue;
        }
        let bench = find(&call.key());
        let suite = suite_key(call).and_then(|k| find(&k));
        writeln!(
            s,
            "| {} {} | {} | {} | {} | {} |",
            call.bench,
            call.args.join(" "),
            suite.map_or("-".into(), cells),
            suite.map_or("-".into(), cost),
            bench.map_or("-".into(), cells),
            bench.map_or("-".into(), cost),
        )
        .unwrap();
    }
    for call in calls.iter().filter(|c| c.bench == FALSE_POSITIVE) {
        false_positives(&mut s, r, call);
    }
    s.push('\n');
    s
}

/// The false-positive rate, both as bench prints it (F/(N+F), `false_hits_report_final`): the
/// suite's pooled over its boots, bench's the mean of its measured iterations over boots.
fn false_positives(s: &mut String, r: &BenchReport, call: &Call) {
    let key = (
        call.arg("nr_hash_funcs").unwrap_or(0),
        call.arg("nr_entries").unwrap_or(0),
        call.arg("value_size").unwrap_or(0),
    );
    let (mut f, mut n) = (0u64, 0u64);
    let mut bench = Vec::new();
    for run in r.runs.iter().filter(|run| run.counts()) {
        for b in &run.results.bloom {
            if (b.hash_funcs, b.entries, b.value_size) == key {
                f += b.fp_false_hits;
                n += b.fp_probes;
            }
        }
        for o in run.upstream_bench.iter().filter(|o| o.call == *call) {
            bench.extend(&o.samples);
        }
    }
    let suite = match n {
        0 => "-".to_string(),
        _ => format!("{:.2} % (F/(N+F))", f as f64 / (n + f) as f64 * 100.0),
    };
    let bench = match bench.len() {
        0 => "-".to_string(),
        k => format!("{:.2} %", bench.iter().sum::<f64>() / k as f64),
    };
    writeln!(
        s,
        "| {} {} (false-positive rate, both modes) | {suite} | - | {bench} | - |",
        call.bench,
        call.args.join(" ")
    )
    .unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::bench::figures::figures;
    use crate::results::bench::model::Size;
    use crate::results::bench::upstream;

    #[test]
    fn the_table_puts_each_bench_row_beside_the_suites_with_both_costs() {
        let r = upstream::recorded_with_bench();
        let s = render(&r, &figures(&r));
        let row = s
            .lines()
            .find(|l| l.starts_with("| bloom-lookup --nr_hash_funcs 3"))
            .unwrap();
        let cells: Vec<&str> = row.split(" | ").collect();
        // The suite's recorded k=3 lookups (235.17 / 233.17), then bench's.
        assert!(cells[1].starts_with("235.1"), "{row}");
        assert!(cells[2].starts_with("+0.9 % (CI +0.9..+0.9)"), "{row}");
        assert_eq!(cells[3], "217.16 / 215.15 (+2.01)", "{row}");
        assert!(cells[4].starts_with("+0.9 %"), "{row}");
        assert!(
            s.contains("| bpf-loop --nr_loops 1000 | 15.043 / 15.043 (+0.00) | -0.0 % (CI -0.0..+0.0) | 15.055 / 15.055 (+0.00) | +0.0 % "),
            "{s}"
        );
        assert!(
            s.contains("the median over boots (instructions per op; instructions per iteration)"),
            "{s}"
        );
        let mut skipped = r.clone();
        skipped.upstream_skipped = Some("kernel 6.1: no [selftests]".into());
        assert!(render(&skipped, &[]).contains("kernel 6.1: no [selftests]."));
    }

    #[test]
    fn each_timed_call_has_the_suite_row_of_its_operation() {
        let plan = upstream::plan(Size::Quick, &[]).unwrap();
        let keys: Vec<Option<String>> = plan.calls.iter().map(suite_key).collect();
        assert_eq!(
            keys,
            [
                Some("bloom lookup k=3 entries=50000 value=8B".to_string()),
                Some("bloom update k=3 entries=50000 value=8B".to_string()),
                None,
                Some("hashmap without bloom k=3 entries=100000".to_string()),
                Some("hashmap with bloom k=3 entries=100000".to_string()),
                Some("bpf_loop nr_loops=1".to_string()),
                Some("bpf_loop nr_loops=100".to_string()),
                Some("bpf_loop nr_loops=1000".to_string()),
            ]
        );
    }
}
