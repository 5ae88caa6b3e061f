//! The statistics of bench-vm and bench-compare. Boots are the unit of replication: each boot
//! gives one value per figure (the median of its samples), and two groups of boots (retpoline
//! and off, or report A and report B) are compared by the ratio of their geometric means with
//! a 95 % Welch t-interval on the difference of the mean logarithms, exponentiated. Logs make
//! the interval a ratio interval and suit timing noise, which is multiplicative; Welch does not
//! assume the two groups are equally noisy.
//!
//! The t quantiles are a table: the one crate that has them (statrs) brings nalgebra along,
//! far more than 34 numbers.

/// Which way is better for a figure: throughput up, time down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Higher,
    Lower,
}

pub use bpfvm_common::stats::median;

/// A ratio with its 95 % confidence interval.
#[derive(Debug, Clone, Copy, PartialEq)]
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
    let h = t975(df) * se;
    Some(Ci {
        ratio: d.exp(),
        lo: (d - h).exp(),
        hi: (d + h).exp(),
    })
}

/// The cost of `on` against `off` as a time ratio (above 1: `on` is slower), whichever way the
/// figure is better.
pub fn cost(on: &[f64], off: &[f64], better: Better) -> Option<Ci> {
    let ci = ratio_ci(on, off)?;
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

/// The 0.975 quantile of Student's t with `df` degrees of freedom, from the table at the
/// largest tabulated df not above `df` (so never narrower than the exact interval).
pub fn t975(df: f64) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        d if d.is_nan() || d < 1.0 => T[0],
        d if d < 31.0 => T[d as usize - 1],
        d if d < 40.0 => 2.042,
        d if d < 60.0 => 2.021,
        d if d < 120.0 => 2.000,
        d if d.is_finite() => 1.980,
        _ => 1.960,
    }
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
        // df in [1, 2): the table's df = 1 quantile.
        assert!((ci.ratio - d.exp()).abs() < 1e-12);
        assert!((ci.lo - (d - 12.706 * se).exp()).abs() < 1e-12);
        assert!((ci.hi - (d + 12.706 * se).exp()).abs() < 1e-12);
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
            "retpoline costs +24.8 % (CI +22.9..+26.7)"
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
    fn t_quantiles_are_conservative_between_table_rows() {
        assert_eq!(t975(1.0), 12.706);
        assert_eq!(t975(4.9), 2.776);
        assert_eq!(t975(30.5), 2.042);
        assert_eq!(t975(1000.0), 1.980);
        assert_eq!(t975(f64::INFINITY), 1.960);
    }
}
