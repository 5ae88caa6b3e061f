//! What the guest benchmark runner (`tests/src/bench`) writes as `bench.json` and the host's
//! report (`vm/src/results/bench`) reads: one definition for both sides of the file.
extern crate std;

use serde::{Deserialize, Serialize};
use std::string::String;
use std::vec::Vec;

/// Throughput in M ops/s: every kept sample, their mean and sample standard deviation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub mean: f64,
    pub stddev: f64,
    #[serde(default)]
    pub samples: Vec<f64>,
    /// The guest's user-space reference loop speed (M iterations/s) measured on both sides of
    /// each sample (their mean): under TCG the host's speed drifts by up to 2x within a boot, and a sample
    /// divided by its reference speed does not.
    #[serde(default)]
    pub speeds: Vec<f64>,
}

impl Stat {
    /// Mean and sample standard deviation (n - 1), as the kernel's `bench` reports them.
    pub fn of(samples: Vec<f64>) -> Self {
        let n = samples.len() as f64;
        let mean = if samples.is_empty() {
            0.0
        } else {
            samples.iter().sum::<f64>() / n
        };
        let stddev = if samples.len() < 2 {
            0.0
        } else {
            (samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        };
        Self {
            mean,
            stddev,
            samples,
            speeds: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BloomRow {
    pub hash_funcs: u32,
    pub entries: u32,
    pub value_size: u32,
    /// M ops/s.
    pub lookup: Stat,
    /// M ops/s.
    pub update: Stat,
    /// F / N: non-members the filter reported present (F) over the non-members probed (N),
    /// the quantity the theory predicts.
    pub fp_rate: f64,
    /// N.
    pub fp_probes: u64,
    /// F.
    #[serde(default)]
    pub fp_false_hits: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HashRow {
    pub hash_funcs: u32,
    pub entries: u32,
    /// Hash map lookups alone, M ops/s.
    pub without_bloom: Stat,
    /// The same lookups with the bloom filter checked first, M ops/s.
    pub with_bloom: Stat,
    /// Share of the probed keys that are in the map (random keys: nearly none, as in the
    /// kernel's bench).
    pub hit_rate: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopRow {
    pub nr_loops: u32,
    /// bpf_loop calls per trigger.
    pub calls_per_trigger: u32,
    /// Loop iterations, M ops/s.
    pub throughput: Stat,
    /// Per producer, as the kernel's bench: 1000 / mean throughput * producers.
    pub ns_per_op: f64,
    /// `flags` came from a map value (the verifier cannot inline the call); false: constant
    /// zero flags, bpf_loop_bench.c's program.
    #[serde(default)]
    pub flags_from_map: bool,
    /// `bpf_loop` helper calls left in the verified program (0: inlined); None when the
    /// guest could not tell (kallsyms hides addresses) or the report predates the field.
    #[serde(default)]
    pub helper_calls: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchRow {
    /// Entries asked for per `BPF_MAP_LOOKUP_BATCH` call.
    pub buffer: u32,
    /// Median ns of a whole batch dump over the repetitions.
    pub batch_ns: f64,
    /// Median ns of a whole get_next_key + lookup dump. The walk does not depend on the
    /// buffer: it is timed once per boot and every row carries the same dumps.
    pub entry_ns: f64,
    #[serde(default)]
    pub batch_runs_ns: Vec<u64>,
    #[serde(default)]
    pub entry_runs_ns: Vec<u64>,
    /// The reference loop's speed (M iterations/s) around each batch dump (see
    /// [`Stat::speeds`]).
    #[serde(default)]
    pub batch_speeds: Vec<f64>,
    /// The same around each get_next_key dump.
    #[serde(default)]
    pub entry_speeds: Vec<f64>,
    /// `(entry - batch) / entry * 100`, as the thread computes it.
    pub improvement_pct: f64,
    /// Of the last batch dump: calls made (retries included).
    pub calls: u32,
    /// Of the last batch dump: calls that hit ENOSPC (a bucket larger than the buffer) and
    /// were retried with a doubled buffer.
    pub enospc_retries: u32,
    pub max_buffer: u32,
    pub entries: u64,
}

/// A benchmark group the guest did not run: the kernel lacks a feature it needs. The host
/// fails the run when the kernel is expected to have the feature (`expect::judge_skip`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    /// The group's `--only` name.
    pub group: String,
    /// The feature's name in the expected-features table (`bloom_filter_map`).
    pub feature: String,
    pub reason: String,
}

/// What one guest run measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Results {
    #[serde(default)]
    pub bloom: Vec<BloomRow>,
    #[serde(default)]
    pub bloom_hashmap: Vec<HashRow>,
    #[serde(default)]
    pub bpf_loop: Vec<LoopRow>,
    #[serde(default)]
    pub batch: Vec<BatchRow>,
    /// Benchmarks that failed, with the error.
    #[serde(default)]
    pub errors: Vec<String>,
    /// Benchmark groups this kernel cannot run, each with the feature it lacks.
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    /// Every file of /sys/devices/system/cpu/vulnerabilities/ as `name: line`, sorted by name
    /// (the mitigations this boot ran with, not only spectre_v2's).
    #[serde(default)]
    pub vulnerabilities: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stddev_is_the_sample_standard_deviation() {
        let s = Stat::of(std::vec![2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(s.mean, 5.0);
        // Population stddev would be 2.0; with n-1 it is sqrt(32/7).
        assert!((s.stddev - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn one_sample_has_no_spread() {
        assert_eq!(Stat::of(std::vec![3.0]).stddev, 0.0);
    }
}
