//! `cargo xtask bench-vm`: the retpoline benchmarks in the guest, a report under target/bench-vm.
use std::process::ExitCode;

use anyhow::Result;
use bpfvm::VmArgs;
use bpfvm_host::domain::options::defaults;
use bpfvm_host::flows::bench::{BenchOptions, Group, Size};
use bpfvm_host::support::output::Events;
use clap::Args;

use bpfvm_host::support::status::Status;

/// Benchmark retpoline against spectre_v2=off in the guest (bloom, bpf_loop, batch);
/// writes target/bench-vm/<kernel>/report.{json,md} and plots.
#[derive(Args)]
pub(crate) struct Options {
    #[command(flatten)]
    vm: VmArgs,
    /// Seconds before each VM is killed.
    #[arg(long, default_value_t = defaults::BENCH_TIMEOUT_S)]
    timeout: u64,
    /// The headline rows and a few more (the default; docs/benchmarks.md lists them).
    #[arg(long, conflicts_with_all = ["full", "smoke"])]
    quick: bool,
    /// The threads' whole tables (hours under TCG).
    #[arg(long, conflicts_with = "smoke")]
    full: bool,
    /// One size per benchmark and one boot per mode (CI).
    #[arg(long)]
    smoke: bool,
    /// Only these benchmarks: bloom, bpf_loop, batch (comma-separated).
    #[arg(long, value_delimiter = ',', value_parser = group_names())]
    only: Vec<String>,
    /// Producer threads in the guest, one per guest CPU (the kernel bench's -p).
    #[arg(short = 'p', long, default_value_t = 1)]
    producers: u32,
    /// Boots per mode (default: smoke 1; quick and full 3 under TCG, 5 and 3 under KVM).
    #[arg(long)]
    boots: Option<u32>,
    /// A null (A/A) run: both modes boot with spectre_v2=off, so every verdict of a
    /// difference is a false positive of the method.
    #[arg(long)]
    null: bool,
    /// An A/B of two kernels: this run's kernel (--kernel or --kernel-tree) is B, A is a pin,
    /// a kernel tree, a bzImage, or a git ref of --kernel-tree's repository. Boots alternate
    /// A and B; target/bench-vm/ab-<A>-vs-<B>/ab.md has every row's A, B and B/A and the rows
    /// that changed (docs/kernel-tree.md). Exits 1 when a row changed beyond --threshold,
    /// 255 when A does not build or fails its own boots (nothing is judged).
    #[arg(long, value_name = "BASE", conflicts_with = "null")]
    against: Option<String>,
    /// With --against: the change in percent, either way, a row's whole interval must exceed
    /// to count as changed.
    #[arg(long, default_value_t = 1.0, requires = "against")]
    threshold: f64,
    /// Also run the kernel's own bench (tools/testing/selftests/bpf/bench, built as
    /// `selftests` builds it) after the suite's benchmarks in every boot: its rows beside the
    /// suite's, and a side-by-side table (docs/benchmarks.md).
    #[arg(long, conflicts_with = "smoke")]
    upstream: bool,
}

pub(crate) fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    let Options {
        vm,
        timeout,
        quick: _,
        full,
        smoke,
        only,
        producers,
        boots,
        null,
        against,
        threshold,
        upstream,
    } = opts;
    let size = match (full, smoke) {
        (true, _) => Size::Full,
        (_, true) => Size::Smoke,
        _ => Size::Quick,
    };
    let opts = BenchOptions {
        only: only.iter().filter_map(|g| Group::parse(g)).collect(),
        producers,
        boots,
        null,
        upstream,
        ..BenchOptions::new(vm.kernel()?, vm.options(timeout), size)
    };
    if let Some(base) = against {
        return ab(&opts, &base, threshold, events);
    }
    let (report, dir) = bpfvm_host::flows::bench::bench_vm(&opts, events)?;
    if report.params.upstream {
        // The table a kernel developer asked for with --upstream, also report.md's last section.
        use bpfvm_host::results::bench::{figures::figures, side};
        outln!("{}", side::render(&report, &figures(&report)));
    }
    outln!("report: {}", dir.join("report.md").display());
    Ok(ExitCode::from(report.status().code()))
}

/// `--against BASE`: both kernels benchmarked, then compared row by row.
fn ab(opts: &BenchOptions, base: &str, threshold: f64, events: &Events) -> Result<ExitCode> {
    let against = bpfvm_host::kernel::choice::against(base, &opts.kernel)?;
    let ab = bpfvm_host::flows::bench::ab::ab(opts, &against, base, threshold, events)?;
    outln!("{}", ab.markdown);
    outln!(
        "A/B report: {} (A's and B's own reports in {}/A and /B)",
        ab.path.display(),
        ab.path.parent().unwrap_or(&ab.path).display()
    );
    // A row that changed beyond the threshold, either way, is the verdict an A/B exists for:
    // exit 1, so that `git bisect run` finds the commit that changed a row's cost.
    if ab.status == Status::Stopped {
        errln!(
            "error: kernel A ({base}) failed its own boots (see the problems above): an A/B \
             judges B only against a good base, so nothing is judged (exit status {})",
            ab.status.code()
        );
    }
    Ok(ExitCode::from(ab.status.code()))
}

/// The benchmark groups `--only` accepts (one list: `bpfvm_host::flows::bench::Group`).
fn group_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(Group::ALL.map(|g| g.name()))
}
