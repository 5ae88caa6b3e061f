//! The guest script's part that runs the kernel's `bench`: each call of the plan in turn, its
//! output and exit status into the shared directory, a progress line before each.
use std::fmt::Write as _;
use std::path::Path;

use crate::results::bench::upstream::{Plan, DIR};
use crate::support::shell::{join, quote};

/// The lines that run `bench` (the built binary) for every call of `plan`. Without
/// benchs/run_common.sh's `-a`: it pins the producer to CPU 1 (the consumer takes CPU 0), which
/// the instruction clock's one vCPU lacks ("setting affinity to CPU #1 failed").
pub(super) fn lines(bench: &Path, plan: &Plan) -> String {
    let mut s = String::new();
    s.push_str("bpfvm_mark phase upstream-bench\n");
    writeln!(s, "mkdir -p \"$OUT/{DIR}\"").unwrap();
    let total = plan.calls.len();
    for (i, call) in plan.calls.iter().enumerate() {
        let mut argv = vec![
            bench.display().to_string(),
            format!("-w{}", plan.warmup),
            format!("-d{}", plan.duration),
        ];
        argv.extend(call.args.iter().cloned());
        argv.push(call.bench.clone());
        // The suite runner's progress format (`flows::bench::progress`).
        writeln!(
            s,
            "echo {}",
            quote(&format!("bpfvm-bench-progress {i} {total} {}", call.key()))
        )
        .unwrap();
        writeln!(
            s,
            "{} > \"$OUT/{DIR}/{i}.out\" 2>&1 < /dev/null; echo $? > \"$OUT/{DIR}/{i}.rc\"",
            join(&argv)
        )
        .unwrap();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::bench::model::Size;
    use crate::results::bench::upstream::{files, plan};

    #[test]
    fn each_call_runs_with_the_plans_timing_and_keeps_its_output_and_status() {
        let plan = plan(Size::Quick, &[]).unwrap();
        let s = lines(Path::new("/c/bpf/bench"), &plan);
        assert!(s.starts_with("bpfvm_mark phase upstream-bench\n"));
        assert!(s.contains(
            "/c/bpf/bench -w1 -d1 --nr_hash_funcs 3 --nr_entries 50000 --value_size 8 \
             bloom-lookup > \"$OUT/upstream-bench/0.out\" 2>&1 < /dev/null; echo $? > \
             \"$OUT/upstream-bench/0.rc\"\n"
        ));
        assert!(s.contains("/c/bpf/bench -w1 -d1 --nr_loops 1000 bpf-loop > "));
        assert_eq!(s.matches("bpfvm-bench-progress").count(), plan.calls.len());
        let (out, rc) = files(Path::new("/o"), 7);
        assert_eq!(
            (out, rc),
            (
                "/o/upstream-bench/7.out".into(),
                "/o/upstream-bench/7.rc".into()
            )
        );
    }
}
