//! The kernel's own `bench` (tools/testing/selftests/bpf/bench, built by `selftests` from the
//! pin's Debian source) in bench-vm's boots, after the suite's benchmarks: the bloom filter
//! thread's benchmarks and `bpf-loop` at the seeds' parameters, every invocation a row of the
//! report beside the suite's (`figures`), judged and compared like them.
//!
//! bench times itself in whole seconds of the guest's clock (`-w`, `-d`: at least 1 each, one
//! `Iter` line per second, iterations 0 to w+d): under the instruction clock a second is 10^9
//! instructions, so each invocation costs (w + d + 1) * 10^9 of them, and `--quick` runs the
//! least bench accepts, `-w1 -d1` (two measured iterations).
pub mod parse;

use std::path::{Path, PathBuf};

use super::groups;
use super::model::{BenchReport, Clock, Figure, Mode, Pair, Size, LATENCY, RATE};
pub use super::model::{Call, Outcome};
use super::stats::{median, Better};
use bpfvm_common::bench::Group;

/// What the kernel's bench does with a call (the type is the report's, `model::Call`).
impl Call {
    fn new(bench: &str, args: &[(&str, u32)]) -> Self {
        Self {
            bench: bench.to_string(),
            args: args
                .iter()
                .flat_map(|(k, v)| [format!("--{k}"), v.to_string()])
                .collect(),
        }
    }

    /// The row's key: the command, as a kernel developer types it (less the timing).
    pub fn key(&self) -> String {
        let mut words = vec!["bench".to_string()];
        words.extend(self.args.iter().cloned());
        words.push(self.bench.clone());
        words.join(" ")
    }

    /// An option's value.
    pub fn arg(&self, name: &str) -> Option<u32> {
        let at = self.args.iter().position(|a| *a == format!("--{name}"))?;
        self.args.get(at + 1)?.parse().ok()
    }

    /// The suite's group of the same operation (`--only` selects both).
    fn group(&self) -> Group {
        match self.bench.as_str() {
            BPF_LOOP => Group::BpfLoop,
            _ => Group::Bloom,
        }
    }

    /// What the figure is: bpf-loop's latency per loop, the false-positive percentage, or
    /// the others' operations per second.
    fn kind(&self) -> Kind {
        match self.bench.as_str() {
            BPF_LOOP => Kind::Latency,
            FALSE_POSITIVE => Kind::Percentage,
            _ => Kind::Rate,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rate,
    Latency,
    Percentage,
}

pub const BLOOM_LOOKUP: &str = "bloom-lookup";
pub const BLOOM_UPDATE: &str = "bloom-update";
pub const FALSE_POSITIVE: &str = "bloom-false-positive";
pub const WITHOUT_BLOOM: &str = "hashmap-without-bloom";
pub const WITH_BLOOM: &str = "hashmap-with-bloom";
pub const BPF_LOOP: &str = "bpf-loop";

/// What bench runs in each boot.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// `-w`: iterations left out of the figures.
    pub warmup: u32,
    /// `-d`: measured seconds (bench prints one more iteration than that).
    pub duration: u32,
    pub calls: Vec<Call>,
}

/// The plan of a size, the calls of the groups `only` names (all when empty); None for
/// `--smoke` (CI's run: no selftests build in it) or when no call is left (`--only batch`).
///
/// The bloom family at the bloom thread's headline parameters (its benchmark patch,
/// benchs/run_bench_bloom_filter_map.sh: `--nr_hash_funcs`, `--nr_entries`, `--value_size`),
/// the suite's own quick rows: 3 hashes, 50,000 entries of 8 B for the filter, 100,000 for the
/// hash map; `bpf-loop` at `--nr_loops` from the bpf_loop thread's benchs/run_bench_bpf_loop.sh
/// (1 to 1,000,000): 1, 100 and 1,000 in `--quick`, all eleven in `--full`. Not 1,000,000 in
/// `--quick`: bpf_loop_bench.c calls bpf_loop 1,000 times per trigger, so one trigger is 10^9
/// loops, 15 * 10^9 instructions, and each of bench's "seconds" waits for it (measured: 14 s
/// iterations, 45 * 10^9 instructions a call).
pub fn plan(size: Size, only: &[Group]) -> Option<Plan> {
    let (duration, loops): (u32, &[u32]) = match size {
        Size::Smoke => return None,
        Size::Quick => (1, &[1, 100, 1000]),
        // bench's own defaults, -w1 -d5.
        Size::Full => (
            5,
            &[
                1, 10, 100, 500, 1000, 5000, 10_000, 50_000, 100_000, 500_000, 1_000_000,
            ],
        ),
    };
    let bloom = [
        ("nr_hash_funcs", 3),
        ("nr_entries", 50_000),
        ("value_size", 8),
    ];
    let hashmap = [
        ("nr_hash_funcs", 3),
        ("nr_entries", 100_000),
        ("value_size", 8),
    ];
    let mut calls = vec![
        Call::new(BLOOM_LOOKUP, &bloom),
        Call::new(BLOOM_UPDATE, &bloom),
        Call::new(FALSE_POSITIVE, &bloom),
        Call::new(WITHOUT_BLOOM, &hashmap),
        Call::new(WITH_BLOOM, &hashmap),
    ];
    calls.extend(
        loops
            .iter()
            .map(|&n| Call::new(BPF_LOOP, &[("nr_loops", n)])),
    );
    calls.retain(|c| only.is_empty() || only.contains(&c.group()));
    if calls.is_empty() {
        return None;
    }
    Some(Plan {
        warmup: 1,
        duration,
        calls,
    })
}

impl Outcome {
    /// What is wrong with this run of bench, if anything: a run that failed or measured less
    /// than it was asked to is a benchmark error of its boot.
    pub fn problem(&self, plan: &Plan, output: &str) -> Option<String> {
        // Its last lines: bench says why before it exits.
        let mut last: Vec<&str> = output
            .lines()
            .rev()
            .filter(|l| !l.trim().is_empty())
            .take(3)
            .collect();
        last.reverse();
        let why = match self.status {
            None => "wrote no exit status".to_string(),
            Some(0) if self.samples.len() >= plan.duration as usize => return None,
            Some(0) => format!(
                "printed {} measured iterations, not {} (-w{} -d{})",
                self.samples.len(),
                plan.duration + 1,
                plan.warmup,
                plan.duration
            ),
            Some(rc) => format!("exited with status {rc}"),
        };
        Some(format!(
            "{}: {why}; its last lines: {}",
            self.call.key(),
            if last.is_empty() {
                "(no output)".to_string()
            } else {
                last.join(" | ")
            }
        ))
    }
}

/// The shared directory's folder for bench's output.
pub const DIR: &str = "upstream-bench";

/// Where call `i` of the plan leaves its output and its exit status.
pub fn files(shared: &Path, i: usize) -> (PathBuf, PathBuf) {
    let dir = shared.join(DIR);
    (dir.join(format!("{i}.out")), dir.join(format!("{i}.rc")))
}

/// Reads and parses what the guest wrote for each call of `plan` (`files`); returns
/// the outcomes and their problems.
pub fn collect(shared: &Path, plan: &Plan) -> (Vec<Outcome>, Vec<String>) {
    let mut problems = Vec::new();
    let outcomes = plan
        .calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let (out, rc) = files(shared, i);
            let text = crate::support::guest_files::read(&out).unwrap_or_default();
            let parsed = parse::output(&text, plan.warmup);
            let o = Outcome {
                call: call.clone(),
                status: crate::support::guest_files::read(&rc)
                    .ok()
                    .and_then(|s| s.trim().parse().ok()),
                samples: parsed.samples,
                summary: parsed.summary,
            };
            problems.extend(o.problem(plan, &text));
            o
        })
        .collect();
    (outcomes, problems)
}

/// A boot's figure for `call`: the fastest measured iteration under the instruction clock
/// (other work on the vCPU only adds instructions: `model::boot_value`), the median by the
/// wall clock; the percentage's median for the false-positive rate.
fn boot_value(clock: Clock, kind: Kind, samples: &[f64]) -> Option<f64> {
    match (clock, kind) {
        (Clock::Icount, Kind::Rate | Kind::Latency) => samples.iter().copied().reduce(f64::max),
        _ => median(samples),
    }
}

/// Each call's boot values by mode (counted boots only).
pub fn pair(r: &BenchReport, call: &Call) -> Pair {
    let mut p = Pair::default();
    for run in r.runs.iter().filter(|run| run.counts()) {
        let Some(o) = run.upstream_bench.iter().find(|o| o.call == *call) else {
            continue;
        };
        if let Some(v) = boot_value(r.clock, call.kind(), &o.samples) {
            match run.mode {
                Mode::Retpoline => p.on.push(v),
                Mode::Off => p.off.push(v),
            }
        }
    }
    p
}

/// Every call the report's boots ran, in first-seen order.
pub fn calls(r: &BenchReport) -> Vec<Call> {
    let mut out: Vec<Call> = Vec::new();
    for o in r.runs.iter().flat_map(|run| &run.upstream_bench) {
        if !out.contains(&o.call) {
            out.push(o.call.clone());
        }
    }
    out
}

pub const BLOOM_TABLE: &str = "The kernel's bench: bloom filter and hash map";
pub const LOOP_TABLE: &str = "The kernel's bench: bpf-loop";

/// The report's rows of bench's timed calls (the false-positive rate is a table of its own,
/// `side::false_positives`), before `figures::figures` converts them to instructions.
pub fn figures(r: &BenchReport) -> Vec<Figure> {
    let mut out = Vec::new();
    for call in calls(r) {
        let kind = call.kind();
        if kind == Kind::Percentage {
            continue;
        }
        let mut values = pair(r, &call);
        let (table, unit, better, suite_table, key) = match kind {
            Kind::Latency => {
                // ns per loop, as bench's `latency` (`ops_report_final`, one producer).
                for v in values.on.iter_mut().chain(values.off.iter_mut()) {
                    *v = 1000.0 / *v;
                }
                let n = call.arg("nr_loops").unwrap_or(0);
                (
                    LOOP_TABLE,
                    LATENCY,
                    Better::Lower,
                    groups::BPF_LOOP,
                    (n, 0, 0),
                )
            }
            _ => {
                let key = (
                    call.arg("nr_hash_funcs").unwrap_or(0),
                    call.arg("nr_entries").unwrap_or(0),
                    call.arg("value_size").unwrap_or(0),
                );
                let suite = match call.bench.as_str() {
                    BLOOM_LOOKUP => groups::BLOOM_LOOKUP,
                    BLOOM_UPDATE => groups::BLOOM_UPDATE,
                    _ => "",
                };
                (BLOOM_TABLE, RATE, Better::Higher, suite, key)
            }
        };
        out.push(Figure {
            key: call.key(),
            table,
            unit,
            params: format!("{} {}", call.bench, call.args.join(" ")),
            better,
            // bench's rows for the suite's headline operations are headline rows too.
            headline: groups::headline(suite_table, key),
            relative: values.clone(),
            values,
            thread: None,
        });
    }
    out
}

/// A recorded report (three boots a mode, instruction clock) with bench's rows added: bloom
/// lookups at 217.16 / 215.15 instructions (retpoline / off, as measured on 6.1) and bpf-loop
/// at 15.055, each boot's two iterations a little apart.
#[cfg(test)]
pub(crate) fn recorded_with_bench() -> BenchReport {
    let mut r: BenchReport = serde_json::from_str(include_str!(
        "../../../../tests/data/bench-6.1-quick-icount-least-b.json"
    ))
    .unwrap();
    let plan = plan(Size::Quick, &[]).unwrap();
    let call = |bench: &str| {
        plan.calls
            .iter()
            .find(|c| c.bench == bench)
            .unwrap()
            .clone()
    };
    let outcome = |call: Call, rate: f64| Outcome {
        call,
        status: Some(0),
        samples: vec![rate, rate * 0.9999],
        summary: None,
    };
    for run in &mut r.runs {
        let lookup = match run.mode {
            Mode::Retpoline => 1000.0 / 217.16,
            Mode::Off => 1000.0 / 215.15,
        };
        run.upstream_bench = vec![
            outcome(call(BLOOM_LOOKUP), lookup),
            outcome(
                plan.calls
                    .iter()
                    .find(|c| c.arg("nr_loops") == Some(1000))
                    .unwrap()
                    .clone(),
                1000.0 / 15.055,
            ),
        ];
    }
    r.params.upstream = true;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_runs_the_bloom_family_and_three_loop_counts_and_smoke_nothing() {
        assert_eq!(plan(Size::Smoke, &[]), None);
        let q = plan(Size::Quick, &[]).unwrap();
        assert_eq!((q.warmup, q.duration), (1, 1));
        let keys: Vec<String> = q.calls.iter().map(Call::key).collect();
        assert_eq!(
            keys[0],
            "bench --nr_hash_funcs 3 --nr_entries 50000 --value_size 8 bloom-lookup"
        );
        assert!(keys.contains(
            &"bench --nr_hash_funcs 3 --nr_entries 100000 --value_size 8 hashmap-with-bloom"
                .to_string()
        ));
        let loops: Vec<u32> = q.calls.iter().filter_map(|c| c.arg("nr_loops")).collect();
        assert_eq!(loops, [1, 100, 1000]);
        assert_eq!(plan(Size::Full, &[]).unwrap().calls.len(), 5 + 11);
        let loops_only = plan(Size::Quick, &[Group::BpfLoop]).unwrap();
        assert!(loops_only.calls.iter().all(|c| c.bench == BPF_LOOP));
        assert_eq!(plan(Size::Quick, &[Group::Bloom]).unwrap().calls.len(), 5);
        assert_eq!(plan(Size::Quick, &[Group::Batch]), None);
    }

    #[test]
    fn a_failed_or_short_run_is_a_problem_naming_the_call() {
        let plan = plan(Size::Quick, &[]).unwrap();
        let call = plan.calls[0].clone();
        let ok = Outcome {
            call: call.clone(),
            status: Some(0),
            samples: vec![2.0, 2.0],
            summary: None,
        };
        assert_eq!(ok.problem(&plan, ""), None);
        let failed = Outcome {
            status: Some(1),
            ..ok.clone()
        };
        let why = failed
            .problem(&plan, "Setting up\nfailed to load BPF skeleton\n")
            .unwrap();
        assert!(why.starts_with("bench --nr_hash_funcs 3"), "{why}");
        assert!(
            why.ends_with(
                "exited with status 1; its last lines: Setting up | failed to load BPF skeleton"
            ),
            "{why}"
        );
        let short = Outcome {
            samples: vec![],
            ..ok
        };
        assert!(short
            .problem(&plan, "")
            .unwrap()
            .contains("printed 0 measured iterations, not 2"));
    }
}
