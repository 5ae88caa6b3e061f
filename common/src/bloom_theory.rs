//! The kernel's bloom filter sizing (`bloom_map_alloc` in kernel/bpf/bloom_filter.c) and the
//! textbook false-positive rate: the guest tests compare the kernel against them and the
//! bench-vm report prints them beside the measured rate. One copy for both.
extern crate std;

/// Hash functions the kernel uses for a `map_extra` it accepted: 0 means 5.
pub fn hash_funcs(map_extra: u64) -> u32 {
    match map_extra {
        0 => 5,
        k => k as u32,
    }
}

/// Bits of the kernel's bitmap: `max_entries * k / 5 * 7` in u32 arithmetic, division first
/// (7/5 approximates 1/ln 2, the optimum), rounded up to a power of two and at least 64
/// (`BITS_PER_LONG`); 2^32 when that overflows or exceeds 2^31.
pub fn bitmap_bits(max_entries: u32, k: u32) -> u64 {
    let Some(bits) = max_entries
        .checked_mul(k)
        .and_then(|nk| (nk / 5).checked_mul(7))
        .filter(|&b| u64::from(b) <= 1 << 31)
    else {
        return 1 << 32;
    };
    u64::from(bits).max(64).next_power_of_two()
}

/// The largest `max_entries` whose bitmap with `k` hash functions is exactly `bits` (a power
/// of two): the load the kernel sizes for, with no slack from the rounding up.
pub fn entries_filling(bits: u64, k: u32) -> u32 {
    // (n * k / 5) * 7 <= bits  <=>  n * k / 5 <= bits / 7  <=>  n * k <= 5 * (bits / 7) + 4
    ((5 * (bits / 7) + 4) / u64::from(k)) as u32
}

/// Textbook false-positive rate after `n` inserts into `m` bits with `k` hash functions:
/// `(1 - e^(-k n / m))^k`.
pub fn false_positive_rate(n: u64, m: u64, k: u32) -> f64 {
    let fill = 1.0 - (-(f64::from(k) * n as f64) / m as f64).exp();
    fill.powi(k as i32)
}

/// How far a measured rate may be from [`false_positive_rate`]: `sigmas` standard deviations
/// of two independent errors. Sampling: `probes` probes are binomial around the filter's own
/// rate. Filling: the fraction of set bits `rho` is itself random (one draw per filter, and
/// with `BPF_F_ZERO_SEED` the same draw on every run), binomial over `m` bits, and the rate
/// `rho^k` moves by `k * rate * sd(rho) / rho`.
pub fn tolerance(n: u64, m: u64, k: u32, probes: u64, sigmas: f64) -> f64 {
    let p = false_positive_rate(n, m, k);
    let rho = 1.0 - (-(f64::from(k) * n as f64) / m as f64).exp();
    let sampling = p * (1.0 - p) / probes as f64;
    let filling = f64::from(k) * p * (rho * (1.0 - rho) / m as f64).sqrt() / rho;
    sigmas * (sampling + filling * filling).sqrt()
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn map_extra_zero_means_five_hash_functions() {
        assert_eq!(hash_funcs(0), 5);
        assert_eq!(hash_funcs(1), 1);
        assert_eq!(hash_funcs(15), 15);
    }

    #[test]
    fn bitmap_is_seven_fifths_of_n_k_rounded_up_to_a_power_of_two() {
        assert_eq!(bitmap_bits(10_000, 5), 131_072); // 70,000 -> 2^17
        assert_eq!(bitmap_bits(100, 3), 512); // 420 -> 2^9
        assert_eq!(bitmap_bits(9_362, 5), 65_536); // 65,534 -> 2^16
        assert_eq!(bitmap_bits(9_363, 5), 131_072); // 65,541 -> 2^17
    }

    #[test]
    fn bitmap_divides_before_it_multiplies() {
        // 4 * 1 / 5 = 0 in the kernel's u32 arithmetic, not 5.6: then the 64-bit minimum.
        assert_eq!(bitmap_bits(4, 1), 64);
        // 6 * 1 / 5 * 7 = 7, while 6 * 7 / 5 would be 8: both give the minimum.
        assert_eq!(bitmap_bits(6, 1), 64);
        // 1,000 * 3 / 5 * 7 = 4,200 -> 4,096 < 4,200 -> 2^13.
        assert_eq!(bitmap_bits(1_000, 3), 8_192);
    }

    #[test]
    fn bitmap_is_at_least_64_bits_and_at_most_2_pow_32() {
        assert_eq!(bitmap_bits(1, 1), 64);
        assert_eq!(bitmap_bits(1, 15), 64);
        assert_eq!(bitmap_bits(u32::MAX, 15), 1 << 32);
        assert_eq!(bitmap_bits(400_000_000, 1), 1 << 30); // 560,000,000 bits fit
        assert_eq!(bitmap_bits(400_000_000, 5), 1 << 32); // 2.8e9 bits > 2^31
        assert_eq!(bitmap_bits(1_000_000_000, 5), 1 << 32); // n * k overflows u32
    }

    #[test]
    fn bitmap_overflow_edges_follow_bloom_map_alloc() {
        // nr_bits = n * k / 5 * 7 <= 2^31 is kept (rounded up to 2^31); one more entry takes
        // it past 2^31 and the kernel falls back to 2^32 bits.
        assert_eq!(bitmap_bits(1_533_916_894, 1), 1 << 31); // 306,783,378 * 7 = 2^31 - 2
        assert_eq!(bitmap_bits(1_533_916_895, 1), 1 << 32); // 306,783,379 * 7 = 2^31 + 5
                                                            // n * k fits u32 but (n * k / 5) * 7 does not: check_mul_overflow, 2^32.
        assert_eq!(bitmap_bits(286_331_153, 15), 1 << 32); // n * k = u32::MAX
        assert_eq!(bitmap_bits(286_331_154, 15), 1 << 32); // n * k overflows u32
    }

    #[test]
    fn entries_filling_is_the_largest_n_for_that_bitmap() {
        for k in 1..=15 {
            for shift in 10..=20 {
                let bits = 1u64 << shift;
                let n = entries_filling(bits, k);
                assert_eq!(bitmap_bits(n, k), bits, "k={k} bits={bits} n={n}");
                assert!(bitmap_bits(n + 1, k) > bits, "k={k} bits={bits} n={n}");
            }
        }
    }

    #[test]
    fn false_positive_rate_follows_the_formula() {
        assert_eq!(false_positive_rate(0, 64, 3), 0.0);
        // k = 1: the fraction of set bits, 1 - e^(-n/m).
        let p = false_positive_rate(1_000, 1_000, 1);
        assert!((p - (1.0 - (-1.0f64).exp())).abs() < 1e-12, "{p}");
        // At the kernel's design load (m = 1.4 k n) the rate is about 0.51^k.
        let p = false_positive_rate(10_000, 70_000, 5);
        assert!((p - 0.5105f64.powi(5)).abs() / p < 0.01, "{p}");
        assert!(false_positive_rate(2_000, 8_192, 3) > false_positive_rate(1_000, 8_192, 3));
    }

    #[test]
    fn tolerance_shrinks_with_more_probes_but_keeps_the_fill_spread() {
        let few = tolerance(9_362, 65_536, 5, 1_000, 5.0);
        let many = tolerance(9_362, 65_536, 5, 100_000_000, 5.0);
        assert!(many < few);
        assert!(many > 0.0);
    }
}
