//! `--against BASE` (`cargo xtask vm-test`, `bpfvm test`): what a change did to the suite,
//! judged test by test against the base (docs/change.md).
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Result};
use bpfvm_host::flows::change::cost::Bench;
use bpfvm_host::flows::change::{self, Against};
use bpfvm_host::flows::run::TestOptions;
use bpfvm_host::kernel::choice::KernelChoice;
use bpfvm_host::results::change::{render, Change, MARKDOWN};
use bpfvm_host::support::output::Events;
use clap::Args;

use crate::VmArgs;

#[derive(Args, Debug, Clone)]
pub struct AgainstArgs {
    /// Compare with BASE, a ref of the repository the tests are in (this one for vm-test, the
    /// crate's for bpfvm test): the tests at BASE (built in their own git worktree, their
    /// report cached) run on the same kernels; with --kernel-tree, a ref of the tree: the same
    /// tests on the kernel built from BASE (in its own checkout and slot, as bench-vm
    /// --against builds it; for selftests, each side its own commit's selftests and veristat
    /// over every BPF object), and each test is named a regression (confirmed
    /// by reruns), fixed, still failing, flaky, new, removed or unchanged. Writes
    /// change/{change.md,change.json,junit.xml} beside the reports (target/vm-test/change/,
    /// target/selftests/change/, <target>/bpfvm-test/change/). Exits 0 without a regression,
    /// 1 with one, 125 when head cannot be built, 255 when the base cannot be judged
    /// (docs/change.md).
    #[arg(long, value_name = "BASE")]
    pub against: Option<String>,
    /// With --against: how many times a test failing at head runs again at head, each in a
    /// fresh boot, and then at the base.
    #[arg(long, value_name = "N", default_value_t = 2, requires = "against")]
    pub reruns: u32,
    /// With --against: a program's processed insns or states growing by more than PCT percent
    /// on a kernel fails the change too (without it only a verdict success -> rejected
    /// fails); every change is listed either way.
    #[arg(long, value_name = "PCT", requires = "against")]
    pub verifier_threshold: Option<f64>,
    /// With --kernel-tree DIR --against REF: after the verdict, benchmark both kernels as
    /// `cargo xtask bench-vm --kernel-tree DIR --against REF` does (SIZE: smoke, quick or
    /// full, as bench-vm's; quick when left out), on the builds the verdict made, and join its
    /// rows to change.md and change.json. A row changed beyond --bench-threshold either way,
    /// or head's own bench boots failing, exits 1; the base's failing, 255 (docs/change.md).
    #[arg(long, value_name = "SIZE", num_args = 0..=1, default_missing_value = "quick",
          value_parser = clap::builder::PossibleValuesParser::new(["smoke", "quick", "full"]))]
    pub bench: Option<String>,
    /// With --bench: the change in percent, either way, a row's whole interval must exceed to
    /// count (bench-vm --against's --threshold).
    #[arg(long, value_name = "PCT", default_value_t = 1.0, requires = "bench")]
    pub bench_threshold: f64,
}

impl AgainstArgs {
    /// What `--against` asks, if given; refused beside what it cannot compare. With
    /// `--kernel-tree`, BASE is a ref of the tree (the kernel changes): only commands that
    /// compare kernels (`kernel_change`: vm-test, selftests) take it.
    pub fn parse(&self, vm: &VmArgs, kernel_change: bool) -> Result<Option<Against>> {
        if self.bench.is_some() && (self.against.is_none() || vm.kernel_tree.is_none()) {
            bail!(
                "--bench measures what a kernel change costs, so it needs the two kernels: give \
                 --kernel-tree DIR --against REF (REF a ref of the tree); for one kernel's costs \
                 run `cargo xtask bench-vm`, for two kernels `bench-vm --kernel-tree DIR \
                 --against BASE`"
            );
        }
        let Some(base) = &self.against else {
            return Ok(None);
        };
        if vm.kernel_tree.is_some() && !kernel_change {
            bail!(
                "--against beside --kernel-tree (a kernel change, BASE a ref of the tree) \
                 compares this repository's suite (`cargo xtask vm-test`) or the kernel's \
                 selftests (`cargo xtask selftests`), not a crate's tests: compare the crate's \
                 tests on a pin or an image"
            );
        }
        if let Some(t) = self.verifier_threshold {
            if !(t.is_finite() && t >= 0.0) {
                bail!("--verifier-threshold {t}: give a percent, 0 or more");
            }
        }
        let bench = match &self.bench {
            Some(size) => {
                let t = self.bench_threshold;
                if !(t.is_finite() && t > 0.0) {
                    bail!(
                        "--bench-threshold {t}: give a percent above 0, e.g. --bench-threshold 1"
                    );
                }
                Some(Bench {
                    size: size.parse().map_err(anyhow::Error::msg)?,
                    threshold_pct: self.bench_threshold,
                })
            }
            None => None,
        };
        Ok(Some(Against {
            base: base.clone(),
            reruns: self.reruns,
            verifier_threshold_pct: self.verifier_threshold,
            bench,
        }))
    }
}

/// `vm-test --against`: the comparison, its account on the terminal, its exit status.
pub fn vm_test(
    kernels: &[KernelChoice],
    opts: &TestOptions,
    against: &Against,
    events: &Events,
) -> Result<ExitCode> {
    if opts.piece.is_some() {
        bail!("--against compares whole runs: leave out --piece (and --jobs)");
    }
    let (change, dir) = match kernels {
        // The kernel changes: BASE is a ref of the tree, the suite the same on both sides.
        [KernelChoice::Tree { dir, kconfig }] => {
            change::tree::vm_test_tree_against(dir, kconfig, opts, against, events)?
        }
        _ => change::vm_test::vm_test_against(kernels, opts, against, events)?,
    };
    Ok(show(&change, &dir))
}

/// The change's account on the terminal, and its exit status.
pub fn show(change: &Change, dir: &Path) -> ExitCode {
    bpfvm_host::ui::print_stdout(&render::brief(change));
    bpfvm_host::ui::print_stdout(&format!("change: {}", dir.join(MARKDOWN).display()));
    ExitCode::from(change.exit_status)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use bpfvm_host::flows::bench::Size;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        vm: VmArgs,
        #[command(flatten)]
        against: AgainstArgs,
    }

    fn parse(args: &[&str]) -> Result<Option<Against>> {
        let cli = Cli::try_parse_from([&["t"], args].concat()).unwrap();
        cli.against.parse(&cli.vm, false)
    }

    #[test]
    fn against_takes_a_ref_and_refuses_a_kernel_change_and_a_bad_threshold() {
        assert!(parse(&[]).unwrap().is_none());
        let a = parse(&["--against", "main", "--verifier-threshold", "5"]).unwrap();
        let a = a.unwrap();
        assert_eq!((a.base.as_str(), a.reruns), ("main", 2));
        assert_eq!(a.verifier_threshold_pct, Some(5.0));
        let tree = ["--against", "v6.12", "--kernel-tree", "/src/linux"];
        let e = parse(&tree).unwrap_err().to_string();
        assert!(e.contains("not a crate's tests"), "{e}");
        let cli = Cli::try_parse_from([&["t"], &tree[..]].concat()).unwrap();
        let a = cli.against.parse(&cli.vm, true).unwrap().unwrap();
        assert_eq!(a.base, "v6.12");
        let e = parse(&["--against", "main", "--verifier-threshold=-1"]).unwrap_err();
        assert!(e.to_string().contains("give a percent, 0 or more"), "{e}");
    }

    /// `--bench` alone is bench-vm's default size, quick; a size and a threshold pass through;
    /// without `--kernel-tree` and `--against` it is refused.
    #[test]
    fn bench_takes_a_size_and_a_threshold_beside_a_kernel_change() {
        let tree = ["--kernel-tree", "/src/linux", "--against", "v6.12"];
        let bench = |extra: &[&str]| {
            let cli = Cli::try_parse_from([&["t"], &tree[..], extra].concat()).unwrap();
            cli.against.parse(&cli.vm, true).unwrap().unwrap().bench
        };
        assert_eq!(bench(&[]), None);
        let quick = bench(&["--bench"]).unwrap();
        assert_eq!((quick.size, quick.threshold_pct), (Size::Quick, 1.0));
        let smoke = bench(&["--bench", "smoke", "--bench-threshold", "3"]).unwrap();
        assert_eq!((smoke.size, smoke.threshold_pct), (Size::Smoke, 3.0));
        assert_eq!(bench(&["--bench=full"]).unwrap().size, Size::Full);
        for args in [&["--bench"][..], &["--against", "main", "--bench"]] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains("give --kernel-tree DIR --against REF"), "{e}");
        }
    }
}
