//! The guest script of a bench-vm boot: the suite's benchmark runner, then the kernel's own
//! `bench` when the run has it (`upstream_script`), in one boot.
use std::fmt::Write as _;
use std::path::Path;

use super::upstream_script;
use crate::machine::guest;
use crate::results::bench::upstream::Plan;
use crate::support::shell::{join, quote};

/// What one boot runs.
pub(super) struct Boot<'a> {
    /// The guest runner (`tests/src/bin/bench.rs`), its plan's name and its other arguments.
    pub runner: &'a Path,
    pub size: &'a str,
    pub args: &'a [String],
    /// Where the runner writes its results and its exit status.
    pub results: &'a Path,
    pub rc: &'a Path,
    /// The kernel's `bench` and what it runs.
    pub upstream: Option<(&'a Path, &'a Plan)>,
}

/// The script, writing into the shared directory `out`.
pub(super) fn script(out: &Path, b: &Boot) -> String {
    let mut s = guest::preamble(out);
    s.push_str("bpfvm_mark phase bench\n");
    let mut argv = vec![b.runner.display().to_string(), b.size.to_string()];
    argv.extend(b.args.iter().cloned());
    argv.extend(["--out".to_string(), b.results.display().to_string()]);
    writeln!(
        s,
        "{}; echo $? > {}",
        join(&argv),
        quote(&b.rc.display().to_string())
    )
    .unwrap();
    if let Some((bench, plan)) = b.upstream {
        // The selftests' conditions for bench: no locked-memory limit (kernels before 5.11
        // charge maps to it).
        s.push_str("ulimit -l unlimited\n");
        s.push_str(&upstream_script::lines(bench, plan));
    }
    guest::epilogue(&mut s, "0");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::bench::model::Size;
    use crate::results::bench::upstream;

    #[test]
    fn the_suite_runs_first_then_the_kernels_bench_before_the_log_ends() {
        let plan = upstream::plan(Size::Quick, &[]).unwrap();
        let args = ["--instruction-clock".to_string()];
        let mut boot = Boot {
            runner: Path::new("/t/bench"),
            size: "quick",
            args: &args,
            results: Path::new("/o/bench.json"),
            rc: Path::new("/o/bench.rc"),
            upstream: Some((Path::new("/c/bpf/bench"), &plan)),
        };
        let s = script(Path::new("/o"), &boot);
        let runner = s
            .find("/t/bench quick --instruction-clock --out /o/bench.json; echo $? > /o/bench.rc\n")
            .unwrap();
        let bench = s.find("bpfvm_mark phase upstream-bench").unwrap();
        let end = s.find("bpfvm_mark phase end").unwrap();
        assert!(runner < bench && bench < end, "{s}");
        boot.upstream = None;
        let without = script(Path::new("/o"), &boot);
        assert!(!without.contains("upstream-bench"));
        assert!(without.contains("/t/bench quick --instruction-clock --out /o/bench.json"));
    }
}
