//! Sampling, as `bench` does it: producers (`-p N`, one per CPU) trigger the program with
//! getpgid(2), one throughput sample per interval, warm-up samples dropped, mean and sample
//! stddev (n-1).
//!
//! Unlike `bench`, each producer takes its samples itself, between triggers, from its own CPU's
//! stats slot: under TCG one trigger can take milliseconds (a whole walk of the values array),
//! and a sample cut in the middle of a program run would count that run's ops in the wrong
//! interval. Between triggers a CPU's slot is exact.
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

use anyhow::{anyhow, Context, Result};

use super::Stat;

#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    pub interval: Duration,
    pub warmup: u32,
    pub samples: u32,
    /// Time the reference loop around every sample (see [`reference_speed`]); pointless when
    /// the clock counts instructions, where the loop's speed is a constant.
    pub reference: bool,
}

impl Sampling {
    pub fn new(interval: Duration, warmup: u32, samples: u32) -> Self {
        Self {
            interval,
            warmup,
            samples,
            reference: true,
        }
    }
}

/// Iterations of the reference loop per speed measurement: about 10 ms under TCG here, long
/// enough that one timer interrupt does not move it (1 << 18, about 2 ms, was not).
const REFERENCE_ITERATIONS: u64 = 1 << 21;

/// The speed of a fixed user-space loop (M iterations/s): a measure of how fast the emulator
/// runs right now, untouched by the kernel's spectre_v2 mode (no kernel code in it).
pub fn reference_speed() -> f64 {
    let t = Instant::now();
    let mut x = std::hint::black_box(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..REFERENCE_ITERATIONS {
        // xorshift64: a dependent chain of cheap integer operations.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = std::hint::black_box(x);
    }
    REFERENCE_ITERATIONS as f64 / t.elapsed().as_secs_f64() / 1e6
}

/// Triggers the attached program (one `getpgid` each).
pub fn trigger() {
    // SAFETY: getpgid has no memory arguments.
    unsafe { libc::getpgid(0) };
}

/// Runs `producers` threads, producer `i` pinned to CPU `i`, each triggering the program and
/// reading its own CPU's count (`ops(cpu)`, exact between triggers) every `s.interval`; all
/// start together. Returns the kept samples, summed over producers, in M ops/s, each with the
/// reference speed measured on both sides of it (the producers' mean) when `s.reference`.
pub fn measure(
    s: &Sampling,
    producers: u32,
    ops: impl Fn(u32) -> Result<u64> + Sync,
) -> Result<Stat> {
    let start = Barrier::new(producers.max(1) as usize);
    // Every producer reaches the barrier, pinned or not (one that returned before it would
    // leave the others waiting until the VM's timeout); then all stop if one could not pin.
    let unpinned = AtomicBool::new(false);
    let per_producer: Vec<(Vec<f64>, Vec<f64>)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..producers.max(1))
            .map(|cpu| {
                let (ops, start, unpinned) = (&ops, &start, &unpinned);
                scope.spawn(move || -> Result<Option<(Vec<f64>, Vec<f64>)>> {
                    let pinned = crate::sys::pin_to_cpu(cpu as usize)
                        .with_context(|| format!("pin producer {cpu} to CPU {cpu}"));
                    if pinned.is_err() {
                        unpinned.store(true, Ordering::SeqCst);
                    }
                    start.wait();
                    pinned?;
                    if unpinned.load(Ordering::SeqCst) {
                        return Ok(None);
                    }
                    let mut rates = Vec::new();
                    let mut speeds = Vec::new();
                    for _ in 0..s.warmup + s.samples {
                        let speed_before = s.reference.then(reference_speed);
                        let before = ops(cpu)?;
                        let t0 = Instant::now();
                        while t0.elapsed() < s.interval {
                            trigger();
                        }
                        let secs = t0.elapsed().as_secs_f64();
                        let done = ops(cpu)?.saturating_sub(before);
                        rates.push(done as f64 / secs / 1e6);
                        // The host's speed over the sample: the mean of both sides.
                        if let Some(before) = speed_before {
                            speeds.push((before + reference_speed()) / 2.0);
                        }
                    }
                    Ok(Some((rates, speeds)))
                })
            })
            .collect();
        let done = threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(anyhow!("a producer thread panicked")))
            })
            .collect::<Result<Vec<_>>>()?;
        // `None`: it stopped for another producer's error, which was returned above.
        done.into_iter()
            .map(|p| p.context("a producer stopped for no error"))
            .collect::<Result<_>>()
    })?;
    let kept = (s.warmup..s.warmup + s.samples)
        .map(|i| per_producer.iter().map(|(r, _)| r[i as usize]).sum())
        .collect();
    let speeds = (s.warmup..s.warmup + s.samples)
        .filter(|_| s.reference)
        .map(|i| {
            let v: Vec<f64> = per_producer.iter().map(|(_, sp)| sp[i as usize]).collect();
            v.iter().sum::<f64>() / v.len() as f64
        })
        .collect();
    Ok(Stat {
        speeds,
        ..Stat::of(kept)
    })
}

#[cfg(test)]
mod unit {
    use super::*;

    /// A producer that cannot pin itself (a CPU past the online ones) fails the measurement at
    /// once, named, instead of leaving the others at the start barrier.
    #[test]
    fn a_producer_that_cannot_start_fails_at_once_named() {
        let online = std::thread::available_parallelism().unwrap().get() as u32;
        let s = Sampling::new(Duration::from_millis(1), 0, 1);
        let t = Instant::now();
        let e = measure(&s, online + 1, |_| Ok(0)).unwrap_err();
        assert!(
            format!("{e:#}").contains(&format!("pin producer {online} to CPU {online}")),
            "{e:#}"
        );
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    }
}
