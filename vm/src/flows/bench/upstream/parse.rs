//! Reads what the kernel's `bench` prints (tools/testing/selftests/bpf/bench.c, 6.1): one
//! `Iter` line per second of its clock, warm-up included, then a `Summary:` line.
//!
//! ```text
//! Iter   1 (  12.345us): hits   20.391M/s ( 20.391M/prod), drops    0.000M/s, total operations   20.391M/s
//! Iter   1 (  -1.013us): hits   45.312M/s ( 45.312M/prod)
//! Iter   1 (   3.020us): 1834 false hits of 61722 total operations. Percentage = 2.97 %
//! ```
//!
//! (`hits_drops_report_progress`, `ops_report_progress`, `false_hits_report_progress`.)

/// The figures of one run of `bench`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    /// Each measured iteration's figure (those from `warmup` on): M operations per second of
    /// the guest's clock (hits + drops where bench counts drops, hits otherwise), or the
    /// false-positive percentage.
    pub samples: Vec<f64>,
    /// The `Summary:` line, as printed.
    pub summary: Option<String>,
}

/// Parses bench's output; `warmup` is its `-w`: bench numbers its iterations from 0 and leaves
/// the first `warmup` out of its summary, and so does this.
pub fn output(text: &str, warmup: u32) -> Parsed {
    let mut p = Parsed::default();
    for line in text.lines().map(str::trim) {
        if line.starts_with("Summary:") {
            p.summary = Some(line.to_string());
        } else if let Some((iter, figure)) = iteration(line) {
            if iter >= warmup {
                p.samples.push(figure);
            }
        }
    }
    p
}

/// An `Iter` line's number and figure.
fn iteration(line: &str) -> Option<(u32, f64)> {
    let rest = line.strip_prefix("Iter")?;
    let (iter, rest) = rest.trim_start().split_once(' ')?;
    let iter = iter.parse().ok()?;
    let (_, body) = rest.split_once("): ")?;
    // The false-positive line says "total operations" too: it goes first.
    let figure = if body.contains("false hits of") {
        after(body, "Percentage =")?
            .trim_end_matches('%')
            .trim()
            .parse()
            .ok()?
    } else if let Some(total) = after(body, "total operations") {
        rate(total)?
    } else {
        rate(after(body, "hits")?)?
    };
    Some((iter, figure))
}

/// The text after `label`, trimmed.
fn after<'a>(body: &'a str, label: &str) -> Option<&'a str> {
    body.split_once(label).map(|(_, v)| v.trim_start())
}

/// `20.391M/s ...` -> 20.391.
fn rate(text: &str) -> Option<f64> {
    text.split_once("M/s")?.0.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_and_drops_lines_give_total_operations_after_the_warm_up() {
        let out = "Setting up benchmark 'hashmap-with-bloom'...\n\
            Benchmark 'hashmap-with-bloom' started.\n\
            Iter   0 (-10.880us): hits    0.050M/s (  0.050M/prod), drops    1.950M/s, total operations    2.000M/s\n\
            Iter   1 (  3.255us): hits    0.052M/s (  0.052M/prod), drops    2.048M/s, total operations    2.100M/s\n\
            Iter   2 ( -0.101us): hits    0.051M/s (  0.051M/prod), drops    2.049M/s, total operations    2.100M/s\n\
            Summary: hits    0.052 \u{b1} 0.001M/s (  0.052M/prod), drops    2.049 \u{b1} 0.001M/s, total operations    2.100 \u{b1} 0.000M/s\n";
        let p = output(out, 1);
        assert_eq!(p.samples, [2.1, 2.1]);
        assert!(p.summary.unwrap().starts_with("Summary: hits    0.052"));
    }

    #[test]
    fn ops_lines_give_hits_and_false_positive_lines_the_percentage() {
        let ops = "Iter   0 ( 25.100us): hits   40.000M/s ( 40.000M/prod)\n\
                   Iter   1 ( -1.013us): hits   45.312M/s ( 45.312M/prod)\n";
        assert_eq!(output(ops, 1).samples, [45.312]);
        let fp = "Iter   1 (   3.020us): 1834 false hits of 61722 total operations. Percentage = 2.97 %\n";
        assert_eq!(output(fp, 1).samples, [2.97]);
        assert_eq!(output(fp, 2).samples, Vec::<f64>::new());
    }

    #[test]
    fn other_lines_and_broken_ones_give_nothing() {
        let p = output(
            "libbpf: failed to load\nIter   x (1us): hits 1M/s\nIter   1 (1us): hits 1.2 M\n",
            0,
        );
        assert_eq!(p, Parsed::default());
    }
}
