//! The statistics of bench-vm and bench-compare. Boots are the unit of replication: each boot
//! gives one value per figure (the median of its samples), and two groups of boots (retpoline
//! and off, or report A and report B) are compared by the ratio of their geometric means with
//! a 95 % Welch t-interval on the difference of the mean logarithms, exponentiated. Logs make
//! the interval a ratio interval and suit timing noise, which is multiplicative; Welch does not
//! assume the two groups are equally noisy.
//!
//! The t quantiles come from `distrs` (Hill's algorithm 396, real degrees of freedom, no
//! dependencies): `bench-compare` needs them at any confidence level, for its family-wise
//! correction, where a table of 0.975 quantiles does not reach.

/// Which way is better for a figure: throughput up, time down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

pub use bpfvm_common::stats::median;

/// A ratio with its confidence interval (95 % unless the caller asked for another level).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Ci {
    pub ratio: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Ci {
    /// The interval excludes 1 (no change).
    pub fn excludes_one(&self) -> bool {
        self.lo > 1.0 || self.hi < 1.0
    }

    /// Half the interval's width relative to the ratio, in percent.
    pub fn half_width_pct(&self) -> f64 {
        (self.hi - self.lo) / 2.0 / self.ratio * 100.0
    }

    fn inverse(self) -> Ci {
        Ci {
            ratio: 1.0 / self.ratio,
            lo: 1.0 / self.hi,
            hi: 1.0 / self.lo,
        }
    }
}

/// `a / b` (geometric means) with the 95 % Welch t-interval on logs; None unless both groups
/// have two or more positive values.
pub fn ratio_ci(a: &[f64], b: &[f64]) -> Option<Ci> {
    ratio_ci_at(a, b, 0.95)
}

/// [`ratio_ci`] at another two-sided confidence level (0.95: 95 %).
pub fn ratio_ci_at(a: &[f64], b: &[f64], confidence: f64) -> Option<Ci> {
    let la = logs(a)?;
    let lb = logs(b)?;
    let (ma, va) = mean_var(&la);
    let (mb, vb) = mean_var(&lb);
    let (na, nb) = (la.len() as f64, lb.len() as f64);
    let (sa, sb) = (va / na, vb / nb);
    let se = (sa + sb).sqrt();
    let d = ma - mb;
    // Welch-Satterthwaite degrees of freedom; with no spread at all the interval is a point.
    let df = if se == 0.0 {
        f64::INFINITY
    } else {
        (sa + sb).powi(2) / (sa * sa / (na - 1.0) + sb * sb / (nb - 1.0))
    };
    let h = t_quantile(1.0 - (1.0 - confidence) / 2.0, df) * se;
    Some(Ci {
        ratio: d.exp(),
        lo: (d - h).exp(),
        hi: (d + h).exp(),
    })
}

/// The cost of `on` against `off` as a time ratio (above 1: `on` is slower), whichever way the
/// figure is better.
pub fn cost(on: &[f64], off: &[f64], better: Better) -> Option<Ci> {
    cost_at(on, off, better, 0.95)
}

/// [`cost`] at another two-sided confidence level.
pub fn cost_at(on: &[f64], off: &[f64], better: Better, confidence: f64) -> Option<Ci> {
    let ci = ratio_ci_at(on, off, confidence)?;
    Some(match better {
        Better::Lower => ci,
        Better::Higher => ci.inverse(),
    })
}

fn logs(v: &[f64]) -> Option<Vec<f64>> {
    let l: Vec<f64> = v
        .iter()
        .filter(|x| x.is_finite() && **x > 0.0)
        .map(|x| x.ln())
        .collect();
    (l.len() >= 2).then_some(l)
}

/// Mean and sample variance (n - 1).
fn mean_var(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    (
        m,
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0),
    )
}

/// The `p` quantile of Student's t with `df` degrees of freedom (real; Welch's are). Below
/// one degree of freedom (two groups of two values can give 1.0x), the df = 1 quantile.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    distrs::StudentsT::ppf(p, if df.is_nan() { 1.0 } else { df.max(1.0) })
}

/// `+12.3` (percent of a ratio above 1).
pub fn pct(ratio: f64) -> String {
    format!("{:+.1}", (ratio - 1.0) * 100.0)
}

/// The verdict on a retpoline cost interval: a cost only when the interval excludes 1.
pub fn verdict(cost: Option<Ci>) -> String {
    match cost {
        None => "no CI: fewer than 2 valid boots per mode".to_string(),
        Some(c) if c.excludes_one() => format!(
            "retpoline costs {} % (CI {}..{})",
            pct(c.ratio),
            pct(c.lo),
            pct(c.hi)
        ),
        Some(c) => format!("no difference resolved (CI {}..{} %)", pct(c.lo), pct(c.hi)),
    }
}

/// The verdict on a null run's (A/A) interval: both arms booted the same kernel command line,
/// so an interval that excludes 1 is a false positive of the method.
pub fn null_verdict(cost: Option<Ci>) -> String {
    match cost {
        Some(c) if c.excludes_one() => format!(
            "false positive: A and B differ by {} % (CI {}..{})",
            pct(c.ratio),
            pct(c.lo),
            pct(c.hi)
        ),
        other => verdict(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welch_interval_on_logs_matches_a_hand_computation() {
        // logs of a: ln 10, ln 12; of b: ln 20, ln 22.
        let a = [10.0, 12.0];
        let b = [20.0, 22.0];
        let ci = ratio_ci(&a, &b).unwrap();
        let la = [10f64.ln(), 12f64.ln()];
        let lb = [20f64.ln(), 22f64.ln()];
        let d = (la[0] + la[1]) / 2.0 - (lb[0] + lb[1]) / 2.0;
        let va = (la[0] - la[1]).powi(2) / 2.0;
        let vb = (lb[0] - lb[1]).powi(2) / 2.0;
        let se = (va / 2.0 + vb / 2.0).sqrt();
        let df = (va / 2.0 + vb / 2.0).powi(2) / ((va / 2.0).powi(2) + (vb / 2.0).powi(2));
        assert!(df > 1.0 && df < 2.0, "{df}");
        let t = t_quantile(0.975, df);
        assert!(t > 4.303 && t < 12.706, "{t}");
        assert!((ci.ratio - d.exp()).abs() < 1e-12);
        assert!((ci.lo - (d - t * se).exp()).abs() < 1e-12);
        assert!((ci.hi - (d + t * se).exp()).abs() < 1e-12);
    }

    #[test]
    fn a_clear_difference_is_resolved_and_noise_is_not() {
        let on = [80.0, 81.0, 79.5, 80.5];
        let off = [100.0, 101.0, 99.0, 100.5];
        // Throughput: retpoline's is lower, so it costs time.
        let c = cost(&on, &off, Better::Higher).unwrap();
        assert!(c.excludes_one() && c.ratio > 1.2, "{c:?}");
        assert_eq!(
            verdict(Some(c)),
            "retpoline costs +24.8 % (CI +23.0..+26.6)"
        );
        let noisy = [70.0, 130.0, 90.0, 110.0];
        let c = cost(&noisy, &off, Better::Higher).unwrap();
        assert!(!c.excludes_one());
        assert!(verdict(Some(c)).starts_with("no difference resolved (CI "));
        assert_eq!(cost(&[1.0], &off, Better::Lower), None);
    }

    #[test]
    fn identical_groups_give_a_point_interval() {
        let c = ratio_ci(&[5.0, 5.0], &[5.0, 5.0]).unwrap();
        assert_eq!((c.ratio, c.lo, c.hi), (1.0, 1.0, 1.0));
        assert!(!c.excludes_one());
    }

    #[test]
    fn t_quantiles_match_published_tables() {
        // Student's t tables (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2), 0.975 and 0.999.
        for (df, q975, q999) in [
            (1.0, 12.706, 318.31),
            (4.0, 2.776, 7.173),
            (6.0, 2.447, 5.208),
            (30.0, 2.042, 3.385),
            (f64::INFINITY, 1.960, 3.090),
        ] {
            assert!((t_quantile(0.975, df) - q975).abs() < 0.002 * q975, "{df}");
            assert!((t_quantile(0.999, df) - q999).abs() < 0.002 * q999, "{df}");
        }
        assert_eq!(t_quantile(0.975, 0.5), t_quantile(0.975, 1.0));
    }
}
