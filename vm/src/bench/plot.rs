//! SVG plots (plotters' SVG backend writes text as `<text>`: no fonts needed).
use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use super::report::{mean, BenchReport, Pair};
use super::Mode;

/// One line: a name and its (x, y) points.
type Series = (String, Vec<(f64, f64)>);

/// Mean per x of `f` over the valid runs of `mode`.
fn points(
    r: &BenchReport,
    mode: Mode,
    xs: &[u32],
    f: impl Fn(&bpfvm_common::bench_results::Results, u32) -> Option<f64>,
) -> Vec<(f64, f64)> {
    xs.iter()
        .filter_map(|&x| {
            let p = Pair::collect(r, |res| f(res, x));
            let v = match mode {
                Mode::Retpoline => p.on,
                Mode::Off => p.off,
            };
            mean(&v).map(|y| (x as f64, y))
        })
        .collect()
}

/// bpf_loop ns/op against nr_loops (log x), both modes.
pub fn bpf_loop(r: &BenchReport, path: &Path) -> Result<()> {
    let xs = r.distinct(|res| res.bpf_loop.iter().map(|l| l.nr_loops).collect());
    let series: Vec<Series> = [Mode::Retpoline, Mode::Off]
        .into_iter()
        .map(|m| {
            let pts = points(r, m, &xs, |res, x| {
                res.bpf_loop
                    .iter()
                    .find(|l| l.nr_loops == x)
                    .map(|l| l.ns_per_op)
            });
            (format!("spectre_v2={}", m.name()), pts)
        })
        .collect();
    draw(
        path,
        &format!(
            "bpf_loop latency, kernel {} ({})",
            r.kernel,
            r.accel.name.to_uppercase()
        ),
        "nr_loops",
        "ns per loop iteration",
        true,
        &series,
    )
}

/// Bloom lookup and update throughput against the number of hash functions, for the first
/// (entries, value size) measured, both modes.
pub fn bloom(r: &BenchReport, path: &Path) -> Result<()> {
    let Some((n, vs)) = r
        .runs
        .iter()
        .find_map(|run| run.results.bloom.first().map(|b| (b.entries, b.value_size)))
    else {
        return draw(
            path,
            "bloom filter: not measured",
            "hash functions",
            "M ops/s",
            false,
            &[],
        );
    };
    let ks = r.distinct(|res| res.bloom.iter().map(|b| b.hash_funcs).collect());
    let mut series = Vec::new();
    for (op, lookup) in [("lookup", true), ("update", false)] {
        for m in [Mode::Retpoline, Mode::Off] {
            let pts = points(r, m, &ks, |res, k| {
                res.bloom
                    .iter()
                    .find(|b| (b.hash_funcs, b.entries, b.value_size) == (k, n, vs))
                    .map(|b| if lookup { b.lookup.mean } else { b.update.mean })
            });
            series.push((format!("{op}, spectre_v2={}", m.name()), pts));
        }
    }
    draw(
        path,
        &format!(
            "bloom filter, {n} entries, {vs} B values, kernel {} ({})",
            r.kernel,
            r.accel.name.to_uppercase()
        ),
        "hash functions",
        "M ops/s",
        false,
        &series,
    )
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
