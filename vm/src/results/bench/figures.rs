//! Every figure of a report, in table order: the suite's groups (`groups`), then the kernel's
//! own `bench` rows (`upstream`), relabelled as instruction counts under the instruction clock.
//! What the renderers (`markdown`, `plot`) and `compare` read.
use super::groups;
use super::model::{BenchReport, Clock, Figure, Pair, DUMP, LATENCY, RATE};
use super::stats::Better;
use super::upstream;

/// Every figure of the report, in table order.
pub fn figures(r: &BenchReport) -> Vec<Figure> {
    let mut out: Vec<Figure> = groups::SUITE.iter().flat_map(|group| group(r)).collect();
    out.extend(upstream::figures(r));
    match r.clock {
        Clock::Wall => out,
        Clock::Icount => out.into_iter().map(in_instructions).collect(),
    }
}

/// Relabels a figure timed by the instruction clock: a virtual nanosecond is one guest
/// instruction, so a rate becomes instructions per operation and a time an instruction count.
/// The reference speed is a constant of this clock (the loop's instructions per iteration),
/// so the figures compare as they are; the threads' wall-clock figures do not compare.
fn in_instructions(mut f: Figure) -> Figure {
    let per_op = |p: &Pair| Pair {
        on: p.on.iter().map(|x| 1000.0 / x).collect(),
        off: p.off.iter().map(|x| 1000.0 / x).collect(),
    };
    (f.unit, f.values, f.better) = match f.unit {
        RATE => ("instructions per op", per_op(&f.values), Better::Lower),
        LATENCY => ("instructions per iteration", f.values, f.better),
        DUMP => ("M instructions per dump", f.values, f.better),
        other => (other, f.values, f.better),
    };
    f.relative = f.values.clone();
    f.thread = None;
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::bench::groups::ENTRY_DUMP;
    use crate::results::bench::model::{dump_value, Mode, ENTRY_DUMP_KEY};

    #[test]
    fn instruction_clock_figures_are_instructions_per_op() {
        let mut r: BenchReport =
            serde_json::from_str(include_str!("../../../tests/data/bench-6.1-quick.json")).unwrap();
        let wall = figures(&r);
        r.clock = Clock::Icount;
        let icount = figures(&r);
        let find = |f: &[Figure], key: &str| f.iter().find(|x| x.key == key).unwrap().clone();
        let (w, i) = (
            find(&wall, "bloom lookup k=3 entries=50000 value=8B"),
            find(&icount, "bloom lookup k=3 entries=50000 value=8B"),
        );
        assert_eq!((w.unit, i.unit), ("M ops/s", "instructions per op"));
        assert_eq!(i.better, Better::Lower);
        // The first retpoline boot's fastest sample, as instructions per op.
        let first = r
            .runs
            .iter()
            .find(|run| run.mode == Mode::Retpoline)
            .unwrap();
        let samples = &first
            .results
            .bloom
            .iter()
            .find(|b| b.hash_funcs == 3)
            .unwrap();
        let fastest = samples.lookup.samples.iter().copied().fold(0.0, f64::max);
        assert_eq!(i.values.on[0], 1000.0 / fastest);
        assert_ne!(
            w.values.on[0], fastest,
            "the wall clock's figure is the median"
        );
        assert_eq!(i.relative, i.values);
        assert_eq!(i.thread, None);
        let units: Vec<&str> = icount.iter().map(|f| f.unit).collect();
        assert!(units.contains(&"instructions per iteration"));
        assert!(units.contains(&"M instructions per dump"));
        let timed = |u: &&str| u.split(' ').any(|w| ["ns", "ms", "ops/s"].contains(&w));
        assert!(!units.iter().any(timed), "{units:?}");
    }

    #[test]
    fn from_format_3_the_get_next_key_dump_is_one_row() {
        let mut r: BenchReport = serde_json::from_str(include_str!(
            "../../../tests/data/bench-6.1-quick-icount-least-b.json"
        ))
        .unwrap();
        let entry_keys = |r: &BenchReport| -> Vec<String> {
            figures(r)
                .into_iter()
                .filter(|f| f.table == ENTRY_DUMP)
                .map(|f| f.key)
                .collect()
        };
        assert_eq!(r.format, 2);
        assert_eq!(
            entry_keys(&r),
            [
                "get_next_key dump buffer=1",
                "get_next_key dump buffer=230",
                "get_next_key dump buffer=100000"
            ]
        );
        r.format = 3;
        assert_eq!(entry_keys(&r), [ENTRY_DUMP_KEY]);
        let f = figures(&r);
        let entry = f.iter().find(|f| f.key == ENTRY_DUMP_KEY).unwrap();
        // The first buffer's row: buffer 1's runs, least per boot.
        let first = r.runs[0].results.batch[0].entry_runs_ns.clone();
        assert_eq!(entry.values.on[0], dump_value(Clock::Icount, &first, 0.0));
    }
}
