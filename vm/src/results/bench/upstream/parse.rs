//! Reads what the kernel's `bench` prints (tools/testing/selftests/bpf/bench.c, 6.1): one
//! `Iter` line per second of its clock, warm-up included, then a `Summary:` line.
//!
//! ```text
//! Iter   1 (-1031.586us): hits    4.605M/s (  4.605M/prod), drops    0.000M/s, total operations    4.605M/s
//! Iter   1 (  2.029us): hits   16.798M/s ( 16.798M/prod)
//! Iter   1 (-15.423us): 597656 false hits of 7827096 total operations. Percentage = 7.64 %
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

    // Recorded: 6.1's bench (linux-source 6.1.192-3) in bench-vm's boots under the
    // instruction clock, `-w1 -d1`, 2026-12-03.
    const BLOOM_LOOKUP: &str = "Setting up benchmark 'bloom-lookup'...
Benchmark 'bloom-lookup' started.
Iter   0 (9866.615us): hits    4.605M/s (  4.605M/prod), drops    0.000M/s, total operations    4.605M/s
Iter   1 (-1031.586us): hits    4.605M/s (  4.605M/prod), drops    0.000M/s, total operations    4.605M/s
Iter   2 (-1017.833us): hits    4.605M/s (  4.605M/prod), drops    0.000M/s, total operations    4.605M/s
Summary: hits    4.600 \u{b1} 0.000M/s (  4.600M/prod), drops    0.000 \u{b1} 0.000M/s, total operations    4.600 \u{b1} 0.000M/s
";
    const WITHOUT_BLOOM: &str = "Setting up benchmark 'hashmap-without-bloom'...
Benchmark 'hashmap-without-bloom' started.
Iter   0 ( 87.445us): hits    0.000M/s (  0.000M/prod), drops    6.538M/s, total operations    6.538M/s
Iter   1 ( 30.721us): hits    0.000M/s (  0.000M/prod), drops    6.540M/s, total operations    6.540M/s
Iter   2 ( 22.646us): hits    0.000M/s (  0.000M/prod), drops    6.540M/s, total operations    6.540M/s
Summary: hits    0.000 \u{b1} 0.000M/s (  0.000M/prod), drops    6.540 \u{b1} 0.000M/s, total operations    6.540 \u{b1} 0.000M/s
";
    const FALSE_POSITIVE: &str = "Setting up benchmark 'bloom-false-positive'...
Benchmark 'bloom-false-positive' started.
Iter   0 ( 45.892us): 597002 false hits of 7827466 total operations. Percentage = 7.63 %
Iter   1 (-15.423us): 597656 false hits of 7827096 total operations. Percentage = 7.64 %
Iter   2 ( 32.033us): 596975 false hits of 7826415 total operations. Percentage = 7.63 %
Summary: 1194631 false hits of 15653511 total operations. Percentage =  7.63 %
";
    const BPF_LOOP: &str = "Setting up benchmark 'bpf-loop'...
Benchmark 'bpf-loop' started.
Iter   0 ( 46.065us): hits   16.796M/s ( 16.796M/prod)
Iter   1 (  2.029us): hits   16.798M/s ( 16.798M/prod)
Iter   2 ( 20.927us): hits   16.798M/s ( 16.798M/prod)
Summary: throughput   16.798 \u{b1} 0.000 M ops/s ( 16.798M ops/prod), latency   59.531 ns/op
";

    #[test]
    fn hits_and_drops_lines_give_total_operations_after_the_warm_up() {
        let p = output(BLOOM_LOOKUP, 1);
        assert_eq!(p.samples, [4.605, 4.605]);
        assert!(p.summary.unwrap().starts_with("Summary: hits    4.600"));
        // All drops (keys absent from the map): the total counts them.
        assert_eq!(output(WITHOUT_BLOOM, 1).samples, [6.54, 6.54]);
    }

    #[test]
    fn ops_lines_give_hits_and_false_positive_lines_the_percentage() {
        assert_eq!(output(BPF_LOOP, 1).samples, [16.798, 16.798]);
        assert_eq!(output(BPF_LOOP, 0).samples, [16.796, 16.798, 16.798]);
        let fp = output(FALSE_POSITIVE, 1);
        assert_eq!(fp.samples, [7.64, 7.63]);
        assert!(fp.summary.unwrap().ends_with("Percentage =  7.63 %"));
        assert_eq!(output(FALSE_POSITIVE, 3).samples, Vec::<f64>::new());
    }

    #[test]
    fn other_lines_and_broken_ones_give_nothing() {
        let p = output(
            "setting affinity to CPU #1 failed: 2\nIter   x (1us): hits 1M/s\nIter   1 (1us): hits 1.2 M\n",
            0,
        );
        assert_eq!(p, Parsed::default());
    }
}
