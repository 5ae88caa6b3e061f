//! The bloom filter's expected false positive rate for the bitmap the kernel allocates.

/// Bits of the kernel's bitmap (kernel/bpf/bloom_filter.c, `bloom_map_alloc`):
/// `max_entries * k / 5 * 7` (the division first, as the kernel does it), rounded up to a
/// power of two, at least 64 (`BITS_PER_LONG`), at most 2^31.
pub fn bitmap_bits(entries: u32, hash_funcs: u32) -> u64 {
    let bits = (entries as u64 * hash_funcs as u64) / 5 * 7;
    if bits > 1 << 31 {
        1 << 31
    } else if bits <= 64 {
        64
    } else {
        bits.next_power_of_two()
    }
}

/// `(1 - e^(-k n / m))^k` with the kernel's `m`.
pub fn fp_rate(entries: u32, hash_funcs: u32) -> f64 {
    let m = bitmap_bits(entries, hash_funcs) as f64;
    let k = hash_funcs as f64;
    (1.0 - (-k * entries as f64 / m).exp()).powf(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_is_a_power_of_two_of_at_least_seven_fifths_n_k() {
        assert_eq!(bitmap_bits(50_000, 1), 131_072);
        assert_eq!(bitmap_bits(50_000, 3), 262_144);
        assert_eq!(bitmap_bits(1, 1), 64);
        assert_eq!(bitmap_bits(5_000_000, 10), 1 << 27);
        assert_eq!(bitmap_bits(u32::MAX, 1), 1 << 31);
    }

    #[test]
    fn fp_rate_follows_the_formula() {
        let expected = (1.0 - (-50_000.0f64 / 131_072.0).exp()).powi(1);
        assert!((fp_rate(50_000, 1) - expected).abs() < 1e-12);
        // More hash functions over a proportionally larger bitmap: fewer false positives.
        assert!(fp_rate(50_000, 5) < fp_rate(50_000, 1));
    }
}
