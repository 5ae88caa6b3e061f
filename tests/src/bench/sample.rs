//! Sampling, as `bench` does it: a producer triggers the program with getpgid(2), one
//! throughput sample per interval, warm-up samples dropped, mean and sample stddev (n-1).
//!
//! Unlike `bench`, the producer takes the samples itself, between triggers: under TCG one
//! trigger can take milliseconds, and a sample cut in the middle of a program run would count
//! that run's ops in the wrong interval. Between triggers the per-CPU counters are exact.
use std::time::{Duration, Instant};

use anyhow::Result;

use super::Stat;

#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    pub interval: Duration,
    pub warmup: u32,
    pub samples: u32,
}

impl Sampling {
    pub fn new(interval: Duration, warmup: u32, samples: u32) -> Self {
        Self {
            interval,
            warmup,
            samples,
        }
    }
}

/// Triggers the attached program (one `getpgid` each).
pub fn trigger() {
    // SAFETY: getpgid has no memory arguments.
    unsafe { libc::getpgid(0) };
}

/// Pins the calling thread to `cpu`, so the program always runs on one CPU and its per-CPU
/// walk cursor covers the whole value set.
pub fn pin_to(cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays within it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: a valid set of the size passed.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if r != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// Runs a producer thread pinned to CPU 0 that triggers the program and samples `ops()` (the
/// ops counted so far) every `s.interval`; returns the kept samples in M ops/s.
pub fn measure(s: &Sampling, ops: impl Fn() -> Result<u64> + Sync) -> Result<Stat> {
    std::thread::scope(|scope| {
        let producer = scope.spawn(|| -> Result<Stat> {
            pin_to(0)?;
            let mut kept = Vec::new();
            for i in 0..s.warmup + s.samples {
                let before = ops()?;
                let t0 = Instant::now();
                while t0.elapsed() < s.interval {
                    trigger();
                }
                let secs = t0.elapsed().as_secs_f64();
                let done = ops()?.saturating_sub(before);
                if i >= s.warmup {
                    kept.push(done as f64 / secs / 1e6);
                }
            }
            Ok(Stat::of(kept))
        });
        producer
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the producer thread panicked")))
    })
}
