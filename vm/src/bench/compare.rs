//! `cargo xtask bench-compare A.json B.json`: two bench-vm reports (two kernels, commits or
//! hosts) row by row and mode by mode: B's boots against A's, the time ratio B/A of their
//! geometric means with its 95 % CI (the statistics of `stats`), and a verdict. A row
//! regressed when B is slower by more than the threshold and the interval excludes 1.
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::model::{self, BenchReport, Mode};
use super::stats::{self, median, Ci};

/// One row of one mode in both reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub key: String,
    pub mode: Mode,
    pub unit: &'static str,
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// B's time against A's (above 1: B is slower).
    pub cost: Option<Ci>,
    pub regressed: bool,
}

impl Row {
    pub fn name(&self) -> String {
        format!("{} ({})", self.key, self.mode.cmdline_arg())
    }
}

pub fn load(path: &Path) -> Result<BenchReport> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a bench-vm report.json (from `cargo xtask bench-vm`)",
            path.display()
        )
    })
}

/// Compares the rows both reports have; `threshold_pct` is the slowdown that counts as a
/// regression. Refuses reports measured with different parameters or accelerators.
pub fn compare(a: &BenchReport, b: &BenchReport, threshold_pct: f64) -> Result<Vec<Row>> {
    if a.accel.name != b.accel.name {
        bail!(
            "the reports were measured under different accelerators (A: {}, B: {}): their \
             figures do not compare; measure both under the same --accel",
            a.accel.name,
            b.accel.name
        );
    }
    let (pa, pb) = (&a.params, &b.params);
    let differ: Vec<String> = [
        (
            "size",
            pa.size.name().to_string(),
            pb.size.name().to_string(),
        ),
        ("--only", pa.only.join(","), pb.only.join(",")),
        ("-p", pa.producers.to_string(), pb.producers.to_string()),
        ("--cpus", pa.cpus.to_string(), pb.cpus.to_string()),
        ("--memory", pa.memory.clone(), pb.memory.clone()),
        (
            "--boots",
            pa.boots_per_mode.to_string(),
            pb.boots_per_mode.to_string(),
        ),
    ]
    .into_iter()
    .filter(|(_, x, y)| x != y)
    .map(|(name, x, y)| format!("{name} {x:?} vs {y:?}"))
    .collect();
    if !differ.is_empty() {
        bail!(
            "the reports were measured with different parameters ({}): run bench-vm with the \
             same ones for both",
            differ.join(", ")
        );
    }
    let fa = model::figures(a);
    let fb = model::figures(b);
    let mut rows = Vec::new();
    for x in &fa {
        let Some(y) = fb.iter().find(|y| y.key == x.key) else {
            continue;
        };
        for mode in [Mode::Retpoline, Mode::Off] {
            let pick = |p: &model::Pair| match mode {
                Mode::Retpoline => p.on.clone(),
                Mode::Off => p.off.clone(),
            };
            let (va, vb) = (pick(&x.values), pick(&y.values));
            let cost = stats::cost(&pick(&y.relative), &pick(&x.relative), x.better);
            let regressed =
                cost.is_some_and(|c| c.lo > 1.0 && (c.ratio - 1.0) * 100.0 > threshold_pct);
            rows.push(Row {
                key: x.key.clone(),
                mode,
                unit: x.unit,
                a: median(&va),
                b: median(&vb),
                cost,
                regressed,
            });
        }
    }
    Ok(rows)
}

fn verdict(r: &Row, threshold_pct: f64) -> String {
    match r.cost {
        None => "no CI: fewer than 2 boots".into(),
        Some(c) if r.regressed => format!(
            "**regression**: B slower by {} % (CI {}..{}), beyond {threshold_pct} %",
            stats::pct(c.ratio),
            stats::pct(c.lo),
            stats::pct(c.hi)
        ),
        Some(c) if c.excludes_one() => format!(
            "B {} by {} % (CI {}..{})",
            if c.ratio > 1.0 { "slower" } else { "faster" },
            stats::pct(c.ratio),
            stats::pct(c.lo),
            stats::pct(c.hi)
        ),
        Some(c) => format!(
            "no difference resolved (CI {}..{} %)",
            stats::pct(c.lo),
            stats::pct(c.hi)
        ),
    }
}

pub fn markdown(a: &str, b: &str, rows: &[Row], threshold_pct: f64) -> String {
    let mut s = String::new();
    writeln!(
        s,
        "# bench-compare\n\n- A: {a}\n- B: {b}\n- cost: B's time over A's (throughputs \
         inverted), geometric means over boots, 95 % Welch t-interval on logs; a regression is \
         a cost above {threshold_pct} % whose interval excludes 1.\n\n\
         | row | unit | A median | B median | cost B/A (95 % CI) | verdict |\n|---|---|---|---|---|---|"
    )
    .unwrap();
    let n = |v: Option<f64>| v.map_or("-".into(), super::markdown::num);
    for r in rows {
        writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            r.name(),
            r.unit,
            n(r.a),
            n(r.b),
            r.cost.map_or("-".into(), |c| format!(
                "{:.3} ({:.3}..{:.3})",
                c.ratio, c.lo, c.hi
            )),
            verdict(r, threshold_pct)
        )
        .unwrap();
    }
    let bad: Vec<String> = rows.iter().filter(|r| r.regressed).map(Row::name).collect();
    if bad.is_empty() {
        s.push_str("\nNo regression.\n");
    } else {
        writeln!(s, "\nRegressed: {}.", bad.join("; ")).unwrap();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real `bench-vm --quick` report on 6.1 under TCG (see the README's Benchmarks section).
    const RECORDED: &str = include_str!("../../tests/data/bench-6.1-quick.json");

    fn recorded() -> BenchReport {
        serde_json::from_str(RECORDED).unwrap()
    }

    #[test]
    fn a_report_compared_with_itself_passes() {
        let r = recorded();
        let rows = compare(&r, &r, 5.0).unwrap();
        assert!(rows.len() >= 10, "{} rows", rows.len());
        assert!(rows.iter().all(|row| !row.regressed));
        assert!(markdown("A", "A", &rows, 5.0).contains("No regression."));
    }

    /// Scales every boot's samples of one throughput row by `f` (the hash map rows are left
    /// out: their key names no value size).
    fn scale(r: &mut BenchReport, key: &str, f: f64) {
        for run in &mut r.runs {
            let res = &mut run.results;
            let mut stats: Vec<(String, &mut bpfvm_common::bench_results::Stat)> = Vec::new();
            for b in &mut res.bloom {
                let p = format!(
                    "k={} entries={} value={}B",
                    b.hash_funcs, b.entries, b.value_size
                );
                stats.push((format!("bloom lookup {p}"), &mut b.lookup));
                stats.push((format!("bloom update {p}"), &mut b.update));
            }
            for l in &mut res.bpf_loop {
                stats.push((
                    format!("bpf_loop nr_loops={}", l.nr_loops),
                    &mut l.throughput,
                ));
            }
            for (k, s) in stats {
                if k == key {
                    s.samples.iter_mut().for_each(|x| *x *= f);
                    s.mean *= f;
                }
            }
        }
    }

    #[test]
    fn one_row_scaled_by_0_8_fails_naming_that_row() {
        let a = recorded();
        // The headline throughput row with the narrowest interval in the recorded report: a
        // 20 % drop must stand out of its noise (a TCG report's widest rows hide it).
        let self_rows = compare(&a, &a, 5.0).unwrap();
        let width = |key: &str| {
            self_rows
                .iter()
                .filter(|r| r.key == key)
                .filter_map(|r| r.cost.map(|c| c.half_width_pct()))
                .fold(0.0, f64::max)
        };
        let key = [
            "bloom lookup k=3 entries=50000 value=8B",
            "bloom update k=3 entries=50000 value=8B",
            "bpf_loop nr_loops=1000",
            "bpf_loop nr_loops=1000000",
        ]
        .into_iter()
        .min_by(|x, y| width(x).total_cmp(&width(y)))
        .unwrap();
        let mut b = a.clone();
        scale(&mut b, key, 0.8);
        let rows = compare(&a, &b, 5.0).unwrap();
        let bad: Vec<String> = rows.iter().filter(|r| r.regressed).map(Row::name).collect();
        assert!(!bad.is_empty(), "{key}: no row flagged");
        assert!(bad.iter().all(|n| n.starts_with(key)), "{bad:?}");
        assert!(markdown("A", "B", &rows, 5.0).contains(&format!("Regressed: {key}")));
    }

    #[test]
    fn reports_with_other_parameters_or_accelerators_are_refused() {
        let a = recorded();
        let mut b = a.clone();
        b.params.producers += 1;
        let e = compare(&a, &b, 5.0).unwrap_err().to_string();
        assert!(
            e.contains("different parameters (-p \"1\" vs \"2\")"),
            "{e}"
        );
        let mut b = a.clone();
        b.accel.name = "kvm".into();
        let e = compare(&a, &b, 5.0).unwrap_err().to_string();
        assert!(e.contains("different accelerators"), "{e}");
    }
}
