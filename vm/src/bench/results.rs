//! The guest runner's results (`tests/src/bench`, written as `bench.json`), as the host
//! reads them. Fields mirror the guest's; unknown ones are ignored.
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    /// M ops/s.
    pub mean: f64,
    pub stddev: f64,
    #[serde(default)]
    pub samples: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BloomRow {
    pub hash_funcs: u32,
    pub entries: u32,
    pub value_size: u32,
    pub lookup: Stat,
    pub update: Stat,
    pub fp_rate: f64,
    pub fp_probes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HashRow {
    pub hash_funcs: u32,
    pub entries: u32,
    pub without_bloom: Stat,
    pub with_bloom: Stat,
    pub hit_rate: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopRow {
    pub nr_loops: u32,
    pub calls_per_trigger: u32,
    pub throughput: Stat,
    pub ns_per_op: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchRow {
    pub buffer: u32,
    pub batch_ns: f64,
    pub entry_ns: f64,
    #[serde(default)]
    pub batch_runs_ns: Vec<u64>,
    #[serde(default)]
    pub entry_runs_ns: Vec<u64>,
    pub improvement_pct: f64,
    pub calls: u32,
    pub enospc_retries: u32,
    pub max_buffer: u32,
    pub entries: u64,
}

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
    #[serde(default)]
    pub errors: Vec<String>,
    /// Groups the kernel cannot run, with the reason.
    #[serde(default)]
    pub skipped: Vec<String>,
}
