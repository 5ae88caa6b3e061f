//! What a run measures: `--smoke` (one size each, for CI), `--quick` (a subset that fits
//! the time budget under TCG) or `--full` (the threads' whole tables).
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::sample::Sampling;
use crate::features::Feature;
use crate::sys::bpf_map_type;

pub use bpfvm_common::bench::Group;

/// What the kernel must have for `group`'s programs and maps.
pub fn needs(group: Group) -> &'static [Feature] {
    match group {
        // The false-positive probe walks its values with bpf_loop.
        Group::Bloom => &[Feature::BloomFilter, Feature::BpfLoop],
        Group::BpfLoop => &[Feature::BpfLoop],
        Group::Batch => &[Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH)],
    }
}

/// A group by its `--only` name.
pub fn parse_group(s: &str) -> Result<Group> {
    Group::parse(s).with_context(|| {
        let known: Vec<&str> = Group::ALL.iter().map(|g| g.name()).collect();
        format!("unknown benchmark `{s}` (known: {})", known.join(", "))
    })
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub groups: Vec<Group>,
    /// Producer threads (`-p N`), one per CPU from CPU 0, as the kernel's `bench -p`.
    pub producers: u32,
    pub sampling: Sampling,
    pub bloom_hash_funcs: Vec<u32>,
    pub bloom_entries: Vec<u32>,
    pub bloom_value_sizes: Vec<u32>,
    /// Non-member values probed per false-positive measurement.
    pub fp_probes: u64,
    /// Entries of the hash map behind the bloom filter.
    pub hashmap_entries: u32,
    pub hashmap_hash_funcs: Vec<u32>,
    pub nr_loops: Vec<u32>,
    pub batch_entries: u32,
    pub batch_buffers: Vec<u32>,
    /// Timed batch dumps per buffer size.
    pub batch_reps: u32,
    /// Timed get_next_key dumps per boot (the walk does not depend on the buffer size).
    pub entry_reps: u32,
    /// One untimed get_next_key dump, and one batch dump per buffer size, first.
    pub batch_warmup: bool,
}

/// The thread's buffer sizes (004: BPF_MAP_DUMP), in entries.
pub const BATCH_BUFFERS: [u32; 7] = [1, 2, 230, 5000, 73000, 100_000, 234_567];
/// The bpf_loop thread's nr_loops (003).
pub const NR_LOOPS: [u32; 11] = [
    1, 10, 100, 500, 1000, 5000, 10_000, 50_000, 100_000, 500_000, 1_000_000,
];
/// The bloom thread's entries (000).
pub const BLOOM_ENTRIES: [u32; 6] = [50_000, 100_000, 500_000, 1_000_000, 2_500_000, 5_000_000];

impl Plan {
    pub fn named(name: &str, groups: Vec<Group>) -> Result<Self> {
        let groups = if groups.is_empty() {
            Group::ALL.to_vec()
        } else {
            groups
        };
        Ok(match name {
            "smoke" => Self {
                groups,
                producers: 1,
                sampling: Sampling::new(Duration::from_millis(100), 1, 2),
                bloom_hash_funcs: vec![3],
                bloom_entries: vec![50_000],
                bloom_value_sizes: vec![8],
                fp_probes: 20_000,
                hashmap_entries: 50_000,
                hashmap_hash_funcs: vec![3],
                nr_loops: vec![100],
                batch_entries: 100_000,
                batch_buffers: vec![230],
                batch_reps: 1,
                entry_reps: 1,
                batch_warmup: true,
            },
            "quick" => Self {
                groups,
                producers: 1,
                // Five samples, not three: a boot's figure is their median, and one sample
                // taken while the host was busy then cannot move it.
                sampling: Sampling::new(Duration::from_millis(200), 1, 5),
                bloom_hash_funcs: vec![1, 3, 5],
                bloom_entries: vec![50_000],
                // 8 B only: the 64 B rows' time buys a fifth boot per mode instead.
                bloom_value_sizes: vec![8],
                fp_probes: 200_000,
                hashmap_entries: 100_000,
                hashmap_hash_funcs: vec![3],
                // Each in both variants (inlined and helper).
                nr_loops: vec![1, 1000, 1_000_000],
                batch_entries: 100_000,
                // The headline buffers. Buffer 1 (not comparable to the thread) is in `full`:
                // three of its dumps were 834 M instructions a boot, a third of the batch's.
                batch_buffers: vec![230, 100_000],
                batch_reps: 3,
                entry_reps: 3,
                batch_warmup: true,
            },
            "full" => Self {
                groups,
                producers: 1,
                // bench's defaults: 1 s samples, 1 warm-up, 5 measured (-w1 -d5).
                sampling: Sampling::new(Duration::from_secs(1), 1, 5),
                bloom_hash_funcs: (1..=10).collect(),
                bloom_entries: BLOOM_ENTRIES.to_vec(),
                bloom_value_sizes: vec![8, 64],
                fp_probes: 1_000_000,
                hashmap_entries: 1_000_000,
                hashmap_hash_funcs: (1..=5).collect(),
                nr_loops: NR_LOOPS.to_vec(),
                batch_entries: 100_000,
                batch_buffers: BATCH_BUFFERS.to_vec(),
                batch_reps: 3,
                entry_reps: 3,
                batch_warmup: true,
            },
            other => bail!("unknown plan `{other}` (smoke, quick, full)"),
        })
    }

    /// The guest clock counts instructions (the host's `-icount`): a sample repeats to
    /// 0.01 % (smoke samples of 6.1 under TCG, within and across boots), and anything else the
    /// one vCPU does during a sample (a timer, a kworker) only adds instructions to it, so the
    /// host takes the boot's least count (`bench::model::boot_value`): three short samples
    /// and no warm-up, no reference loop (its speed is a constant of this clock), three timed
    /// batch dumps per buffer and two get_next_key dumps (about 480 M instructions each) per
    /// boot, without warm-up dumps.
    pub fn for_instruction_clock(&mut self) {
        let interval = self.sampling.interval.min(Duration::from_millis(20));
        self.sampling = Sampling {
            reference: false,
            ..Sampling::new(interval, 0, 3)
        };
        self.batch_reps = 3;
        self.entry_reps = 2;
        self.batch_warmup = false;
    }

    pub fn has(&self, g: Group) -> bool {
        self.groups.contains(&g)
    }

    /// Measured units, for the progress bar.
    pub fn units(&self) -> u64 {
        let mut n = 0;
        if self.has(Group::Bloom) {
            n += self.bloom_hash_funcs.len()
                * self.bloom_entries.len()
                * self.bloom_value_sizes.len()
                + self.hashmap_hash_funcs.len();
        }
        if self.has(Group::BpfLoop) {
            // Inlined and helper.
            n += 2 * self.nr_loops.len();
        }
        if self.has(Group::Batch) {
            n += self.batch_buffers.len();
        }
        n as u64
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn units_count_every_measured_configuration() {
        let p = Plan::named("quick", vec![]).unwrap();
        assert_eq!(p.units(), 3 + 1 + 2 * 3 + 2);
        let p = Plan::named("quick", vec![Group::Batch]).unwrap();
        assert_eq!(p.units(), 2);
    }

    #[test]
    fn the_instruction_clock_shortens_sampling() {
        let mut p = Plan::named("full", vec![]).unwrap();
        p.for_instruction_clock();
        assert_eq!(p.sampling.interval, Duration::from_millis(20));
        assert_eq!(
            (
                p.sampling.warmup,
                p.sampling.samples,
                p.batch_reps,
                p.entry_reps
            ),
            (0, 3, 3, 2)
        );
        assert!(!p.batch_warmup);
        assert!(!p.sampling.reference);
    }

    /// The bench program adds `bpf_loop`'s result to its hits without checking it (ebpf's
    /// bench.rs `loops`): no plan may ask for more loops than the helper takes, or the result
    /// would be -E2BIG (`BPF_MAX_LOOPS`, kernel/bpf/bpf_iter.c).
    #[test]
    fn every_plans_nr_loops_is_within_bpf_loops_bound() {
        for name in ["smoke", "quick", "full"] {
            let p = Plan::named(name, vec![]).unwrap();
            assert!(
                p.nr_loops
                    .iter()
                    .all(|&n| n <= bpfvm_common::bpf_loop::BPF_MAX_LOOPS),
                "{name}: {:?}",
                p.nr_loops
            );
        }
    }

    #[test]
    fn unknown_names_are_rejected() {
        assert!(Plan::named("medium", vec![]).is_err());
        assert!(parse_group("ringbuf").is_err());
        assert_eq!(parse_group("bpf_loop").unwrap(), Group::BpfLoop);
    }
}
