//! SVG plots (plotters' SVG backend writes text as `<text>`: no fonts needed): bpf_loop ns per
//! iteration, bloom throughput, and the retpoline cost of every row with its 95 % CI.
use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use super::figures::figures;
use super::groups;
use super::model::{BenchReport, Figure};
use super::stats::median;

/// One line: a name and its (x, y) points.
type Series = (String, Vec<(f64, f64)>);

/// Writes every plot into `dir`.
pub fn write_all(r: &BenchReport, dir: &Path) -> Result<()> {
    let figs = figures(r);
    bpf_loop(r, &figs, &dir.join("bpf_loop_ns.svg"))?;
    bloom(r, &figs, &dir.join("bloom_throughput.svg"))?;
    cost_ci(r, &figs, &dir.join("cost_ci.svg"))
}

/// (x, median) of each mode for the figures of `table` that `x` places.
fn series(figs: &[Figure], table: &str, x: impl Fn(&Figure) -> Option<f64>) -> Vec<Series> {
    [("spectre_v2=retpoline", true), ("spectre_v2=off", false)]
        .into_iter()
        .map(|(name, on)| {
            let pts = figs
                .iter()
                .filter(|f| f.table == table)
                .filter_map(|f| {
                    let y = median(if on { &f.values.on } else { &f.values.off })?;
                    Some((x(f)?, y))
                })
                .collect();
            (name.to_string(), pts)
        })
        .collect()
}

/// The number after `name=` in a figure key.
fn param(f: &Figure, name: &str) -> Option<f64> {
    f.key
        .split_whitespace()
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.trim_end_matches('B').parse().ok())
}

fn title(r: &BenchReport, what: &str) -> String {
    format!(
        "{what}, kernel {} ({})",
        r.kernel,
        r.accel.name.to_uppercase()
    )
}

/// The unit of a table's figures (they share one).
fn unit(figs: &[Figure], table: &str) -> &'static str {
    figs.iter()
        .find(|f| f.table == table)
        .map_or("", |f| f.unit)
}

/// bpf_loop ns/op against nr_loops (log x), both modes.
fn bpf_loop(r: &BenchReport, figs: &[Figure], path: &Path) -> Result<()> {
    let s = series(figs, groups::BPF_LOOP, |f| param(f, "nr_loops"));
    draw(
        path,
        &title(r, "bpf_loop latency"),
        "nr_loops",
        unit(figs, groups::BPF_LOOP),
        true,
        &s,
    )
}

/// Bloom lookup and update throughput against the number of hash functions, for the first
/// (entries, value size) measured, both modes.
fn bloom(r: &BenchReport, figs: &[Figure], path: &Path) -> Result<()> {
    let first = figs
        .iter()
        .find(|f| f.table == groups::BLOOM_LOOKUP)
        .map(|f| (param(f, "entries"), param(f, "value")));
    let mut all = Vec::new();
    for (op, table) in [
        ("lookup", groups::BLOOM_LOOKUP),
        ("update", groups::BLOOM_UPDATE),
    ] {
        for (name, pts) in series(figs, table, |f| {
            ((param(f, "entries"), param(f, "value")) == first?).then(|| param(f, "k"))?
        }) {
            all.push((format!("{op}, {name}"), pts));
        }
    }
    let what = match first {
        Some((Some(n), Some(vs))) => format!("bloom filter, {n} entries, {vs} B values"),
        _ => "bloom filter: not measured".to_string(),
    };
    draw(
        path,
        &title(r, &what),
        "hash functions",
        unit(figs, groups::BLOOM_LOOKUP),
        false,
        &all,
    )
}

/// The retpoline cost of every row with a CI: a point and its interval per row, a line at 1.
fn cost_ci(r: &BenchReport, figs: &[Figure], path: &Path) -> Result<()> {
    let rows: Vec<(String, f64, f64, f64)> = figs
        .iter()
        .filter_map(|f| f.cost().map(|c| (f.key.clone(), c.ratio, c.lo, c.hi)))
        .collect();
    let n = rows.len().max(1);
    let (lo, hi) = rows
        .iter()
        .fold((1.0f64, 1.0f64), |(a, b), r| (a.min(r.2), b.max(r.3)));
    let pad = (hi - lo).max(0.02) * 0.1;
    let root = SVGBackend::new(path, (1100, 120 + 24 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            title(r, "retpoline cost (time ratio on/off) with 95 % CI"),
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(330)
        .build_cartesian_2d((lo - pad)..(hi + pad), -0.5..(n as f64 - 0.5))
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("cost (above 1: retpoline slower)")
        .y_labels(n)
        .y_label_formatter(&|y| {
            let i = y.round();
            if (y - i).abs() < 0.01 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(1.0, -0.5), (1.0, n as f64 - 0.5)],
            BLACK.stroke_width(1),
        )))
        .map_err(|e| anyhow!("{e}"))?;
    for (i, (_, ratio, lo, hi)) in rows.iter().enumerate() {
        let y = i as f64;
        let color = if *lo > 1.0 || *hi < 1.0 { RED } else { BLUE };
        chart
            .draw_series([
                PathElement::new(vec![(*lo, y), (*hi, y)], color.stroke_width(2)),
                PathElement::new(vec![(*lo, y - 0.2), (*lo, y + 0.2)], color.stroke_width(2)),
                PathElement::new(vec![(*hi, y - 0.2), (*hi, y + 0.2)], color.stroke_width(2)),
            ])
            .map_err(|e| anyhow!("{e}"))?;
        chart
            .draw_series(std::iter::once(Circle::new((*ratio, y), 4, color.filled())))
            .map_err(|e| anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

fn draw(path: &Path, title: &str, x: &str, y: &str, log_x: bool, series: &[Series]) -> Result<()> {
    let all: Vec<(f64, f64)> = series.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    let (x0, x1) = bounds(all.iter().map(|p| p.0), 1.0);
    let (_, y1) = bounds(all.iter().map(|p| p.1), 1.0);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let colors = [RED, BLUE, MAGENTA, CYAN];
    let mut chart = ChartBuilder::on(&root);
    chart
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65);
    macro_rules! plot {
        ($chart:expr) => {{
            let mut c = $chart;
            c.configure_mesh()
                .x_desc(x)
                .y_desc(y)
                .draw()
                .map_err(|e| anyhow!("{e}"))?;
            for (i, (name, pts)) in series.iter().enumerate() {
                let color = colors[i % colors.len()];
                c.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                    .map_err(|e| anyhow!("{e}"))?
                    .label(name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
                c.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                    .map_err(|e| anyhow!("{e}"))?;
            }
            // Upper right: both plots fall to the right, so the legend covers no point there.
            c.configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| anyhow!("{e}"))?;
        }};
    }
    if log_x {
        plot!(chart
            .build_cartesian_2d((x0.max(0.5)..x1 * 2.0).log_scale(), 0.0..y1 * 1.1)
            .map_err(|e| anyhow!("{e}"))?);
    } else {
        plot!(chart
            .build_cartesian_2d((x0 - 0.5)..(x1 + 0.5), 0.0..y1 * 1.1)
            .map_err(|e| anyhow!("{e}"))?);
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// (min, max) of `v`, or (`default`, `default`) when empty.
fn bounds(v: impl Iterator<Item = f64>, default: f64) -> (f64, f64) {
    let (lo, hi) = v.fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    if lo > hi {
        (default, default)
    } else {
        (lo, hi)
    }
}
