//! `selftests --kernel-tree DIR --against REF`: the kernel changes, and so do its selftests.
//! Head is the tree as it is (as a plain `selftests --kernel-tree DIR` builds and runs it);
//! the base is REF's commit of the tree, checked out under the cache's `tree-refs/`, its
//! kernel built in its own slot as `vm-test --kernel-tree --against` builds it, and its own
//! selftests built from that checkout: each side runs its own commit's tests, so a test only
//! at head is new. Each whole run also runs upstream `veristat` over every BPF object of its
//! side's build on its side's kernel; the two CSVs are compared as the suite's verifier
//! statistics are ([`super::compare`]).
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use super::{base, compare, tree, Against, Suite};
use crate::flows::selftests::{self, Options};
use crate::kernel::choice::KernelChoice;
use crate::results::change::Change;
use crate::results::report::Outcome;
use crate::results::report::Report;
use crate::results::upstream::{TEST_MAPS, TEST_PROGS, TEST_VERIFIER};
use crate::support::output::Events;
use crate::support::paths::target_dir;
use crate::support::status::Status;

/// Where the change's files go: `target/selftests/change/`.
pub const DIR: &str = "selftests/change";

/// Compares the selftests of the tree `opts.kernel` (a `--kernel-tree`) as it is against its
/// commit `against.base`; returns the change and the directory its files are in.
pub fn selftests_tree_against(
    opts: &Options,
    against: &Against,
    events: &Events,
) -> Result<(Change, PathBuf)> {
    crate::domain::options::check(&opts.vm)?;
    let KernelChoice::Tree { dir, kconfig } = &opts.kernel else {
        bail!(
            "selftests --against compares a kernel tree with a ref of it: give --kernel-tree DIR \
             (a pin's selftests are pinned: nothing to compare)"
        );
    };
    if opts.piece.is_some() || opts.bless {
        bail!("--against compares whole runs: leave out --piece and --bless");
    }
    let (base, head) = tree::revisions(dir, &against.base)?;
    let suite = SelftestsChange { opts, dir, kconfig };
    compare(
        &suite,
        std::slice::from_ref(&opts.kernel),
        base,
        head,
        against,
        events,
    )
}

struct SelftestsChange<'a> {
    opts: &'a Options,
    dir: &'a Path,
    kconfig: &'a [PathBuf],
}

impl SelftestsChange<'_> {
    /// The run on `kernel`: whole (with veristat), or one test again in its own boots.
    fn on(&self, kernel: KernelChoice, test: Option<&str>) -> Result<Options> {
        let mut opts = Options {
            kernel,
            veristat: test.is_none(),
            ..self.opts.clone()
        };
        match test.map(rerun).transpose()? {
            None => {}
            Some(Rerun::Pattern(p)) => opts.pattern = Some(p),
            Some(Rerun::Unit(u)) => opts.unit = Some(u.into()),
        }
        Ok(opts)
    }
}

/// How a row of the report runs again alone.
#[derive(Debug, PartialEq, Eq)]
enum Rerun {
    /// test_progs' `-t` of a test or subtest (`test_progs/TEST[/SUBTEST]`).
    Pattern(String),
    /// The whole `test_verifier` or `test_maps`, for one of its rows: no `-t` selects them.
    Unit(&'static str),
}

fn rerun(name: &str) -> Result<Rerun> {
    let (binary, rest) = name.split_once('/').unwrap_or((name, ""));
    match binary {
        TEST_PROGS if !rest.is_empty() => Ok(Rerun::Pattern(rest.to_string())),
        TEST_VERIFIER => Ok(Rerun::Unit(TEST_VERIFIER)),
        TEST_MAPS => Ok(Rerun::Unit(TEST_MAPS)),
        _ => bail!(
            "{name} is not a row of test_progs, test_verifier or test_maps: it cannot run \
             again alone"
        ),
    }
}

impl Suite for SelftestsChange<'_> {
    fn out(&self) -> PathBuf {
        target_dir().join(DIR)
    }

    fn head(
        &self,
        kernel: &KernelChoice,
        test: Option<&str>,
        events: &Events,
    ) -> Result<(Report, PathBuf)> {
        selftests::selftests(&self.on(kernel.clone(), test)?, events)
    }

    fn head_error(
        &self,
        _kernel: &KernelChoice,
        e: anyhow::Error,
        _events: &Events,
    ) -> (Status, String) {
        // The tree's kernel or its selftests not building is untestable (`Untestable`, from
        // the kernel's make or `build::not_built`); anything else stops.
        match Status::of_error(&e) {
            Status::Untestable => (Status::Untestable, format!("head cannot be built: {e:#}")),
            _ => (Status::Stopped, format!("head cannot be judged: {e:#}")),
        }
    }

    fn base(
        &self,
        commit: &str,
        _kernel: &KernelChoice,
        label: &str,
        test: Option<&str>,
        events: &Events,
    ) -> Result<Report> {
        let kernel = super::tree_ref(self.dir, commit, self.kconfig);
        // The base's whole run is kept beside head's (its directory is head's name: the same
        // release).
        let keep = test.is_none().then(|| self.out().join(label).join("base"));
        let run = selftests::selftests(&self.on(kernel, test)?, events)?;
        super::base_ran(run, "the selftests to their end", keep)
    }

    fn verifier(&self) -> bool {
        true
    }

    fn kernels(&self, base_commit: &str) -> Option<super::cost::Kernels> {
        Some(super::cost::Kernels {
            head: self.opts.kernel.clone(),
            base: super::tree_ref(self.dir, base_commit, self.kconfig),
            vm: self.opts.vm.clone(),
        })
    }

    /// test_verifier reports only the cases that did not pass: a case without a row in a rerun
    /// whose `test_verifier` passed passed too. Any other row is its own.
    fn rerun_row(&self, report: &Report, name: &str) -> Option<(Outcome, Option<String>)> {
        let row = |n: &str| report.tests.iter().find(|t| t.name == n);
        if let Some(t) = row(name) {
            return Some((t.outcome, t.reason.clone()));
        }
        let case = name.strip_prefix(TEST_VERIFIER)?.starts_with('/');
        let whole = row(TEST_VERIFIER)?;
        (case && whole.outcome == Outcome::Pass).then(|| {
            let why = format!("no row of its own: {TEST_VERIFIER} passed every case");
            (Outcome::Pass, Some(why))
        })
    }

    fn scope(&self) -> String {
        // The base's tests are its commit's (in the cache's path); what else selects them.
        let mut parts = vec!["selftests with veristat".to_string()];
        if let Some(p) = &self.opts.pattern {
            parts.push(format!("pattern {p}"));
        }
        if self.opts.maps {
            parts.push("maps".into());
        }
        for f in self.kconfig.iter().chain(&self.opts.denylists) {
            parts.push(format!(
                "file {}",
                hex_of(&std::fs::read(f).unwrap_or_default())
            ));
        }
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        base::scope(&parts)
    }
}

fn hex_of(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::options::VmOptions;
    use crate::results::report::TestResult;
    use crate::support::status::Untestable;

    fn opts(dir: &Path) -> Options {
        Options {
            kernel: KernelChoice::Tree {
                dir: dir.to_path_buf(),
                kconfig: vec![],
            },
            vm: VmOptions::new(Duration::from_secs(60)),
            pattern: None,
            maps: false,
            clang: None,
            bless: false,
            piece: None,
            denylists: vec![],
            veristat: false,
            unit: None,
        }
    }

    /// A test_progs test or subtest runs again by its own `-t`; a test_verifier or test_maps
    /// row by its binary alone; a boot's own row cannot run again.
    #[test]
    fn a_rerun_selects_its_test_alone() {
        let pattern = |p: &str| Rerun::Pattern(p.into());
        assert_eq!(
            rerun("test_progs/bloom_filter_map").unwrap(),
            pattern("bloom_filter_map")
        );
        assert_eq!(
            rerun("test_progs/bpf_loop/check_invalid_flags").unwrap(),
            pattern("bpf_loop/check_invalid_flags")
        );
        let verifier = rerun("test_verifier/#3/u check with invalid reg offset 0").unwrap();
        assert_eq!(verifier, Rerun::Unit("test_verifier"));
        assert_eq!(
            rerun("test_verifier").unwrap(),
            Rerun::Unit("test_verifier")
        );
        assert_eq!(
            rerun("test_maps/map_in_map").unwrap(),
            Rerun::Unit("test_maps")
        );
        for name in ["test_progs", "guest:dmesg", "boot 2: test_progs/x"] {
            let e = rerun(name).unwrap_err().to_string();
            assert!(e.contains("cannot run again alone"), "{name}: {e}");
        }
    }

    /// A rerun of test_verifier reports the cases that did not pass: one absent passed when
    /// test_verifier did; when it did not, the case was not judged. Other rows are their own.
    #[test]
    fn a_test_verifier_case_without_a_row_passed_when_test_verifier_did() {
        let d = tempfile::tempdir().unwrap();
        let o = opts(d.path());
        let suite = SelftestsChange {
            opts: &o,
            dir: d.path(),
            kconfig: &[],
        };
        let row = |name: &str, outcome| TestResult {
            name: name.into(),
            outcome,
            reason: None,
            duration_ms: 0,
            kernel_splats: vec![],
        };
        let recorded: Report =
            serde_json::from_str(include_str!("../../../tests/data/boot-report-6.1.json")).unwrap();
        let report = |tests| Report {
            tests,
            ..recorded.clone()
        };
        let case = "test_verifier/#3/u check with invalid reg offset 0";
        let passed = report(vec![row(TEST_VERIFIER, Outcome::Pass)]);
        let (outcome, why) = suite.rerun_row(&passed, case).unwrap();
        assert_eq!(outcome, Outcome::Pass);
        assert!(why.unwrap().contains("test_verifier passed every case"));
        let other_failed = report(vec![
            row("test_verifier/#9/p other", Outcome::Fail),
            row(TEST_VERIFIER, Outcome::Fail),
        ]);
        assert!(suite.rerun_row(&other_failed, case).is_none());
        let own = report(vec![
            row(case, Outcome::Fail),
            row(TEST_VERIFIER, Outcome::Fail),
        ]);
        assert_eq!(suite.rerun_row(&own, case).unwrap().0, Outcome::Fail);
        // A test_progs test is always its own row.
        assert!(suite.rerun_row(&passed, "test_progs/bpf_loop").is_none());
    }

    /// The whole runs run veristat, the reruns do not; a rerun's pattern is its test's.
    #[test]
    fn whole_runs_run_veristat_and_reruns_their_test() {
        let d = tempfile::tempdir().unwrap();
        let o = Options {
            pattern: Some("bloom,bpf_loop".into()),
            ..opts(d.path())
        };
        let suite = SelftestsChange {
            opts: &o,
            dir: d.path(),
            kconfig: &[],
        };
        let whole = suite.on(o.kernel.clone(), None).unwrap();
        assert!(whole.veristat);
        assert_eq!(whole.pattern.as_deref(), Some("bloom,bpf_loop"));
        let rerun = suite
            .on(o.kernel.clone(), Some("test_progs/bpf_loop/check_stack"))
            .unwrap();
        assert!(!rerun.veristat);
        assert_eq!(rerun.pattern.as_deref(), Some("bpf_loop/check_stack"));
        assert_eq!(rerun.unit, None);
        let case = suite
            .on(o.kernel.clone(), Some("test_verifier/#1/p x"))
            .unwrap();
        assert_eq!(case.unit.as_deref(), Some("test_verifier"));
        assert!(!case.veristat);
    }

    /// The base's cached report is only reused for the same pattern, fragments and deny lists.
    #[test]
    fn the_base_report_is_cached_apart_by_pattern_and_files() {
        let d = tempfile::tempdir().unwrap();
        let frag = d.path().join("my.config");
        std::fs::write(&frag, "CONFIG_X=y\n").unwrap();
        let scope = |pattern: Option<&str>, kconfig: &[PathBuf], deny: &[PathBuf]| {
            let o = Options {
                pattern: pattern.map(String::from),
                denylists: deny.to_vec(),
                ..opts(d.path())
            };
            SelftestsChange {
                opts: &o,
                dir: d.path(),
                kconfig,
            }
            .scope()
        };
        let plain = scope(None, &[], &[]);
        assert_eq!(plain, scope(None, &[], &[]));
        assert_ne!(plain, "all", "never a vm-test scope");
        assert_ne!(plain, scope(Some("bloom"), &[], &[]));
        let f = std::slice::from_ref(&frag);
        assert_ne!(plain, scope(None, f, &[]));
        assert_ne!(plain, scope(None, &[], f));
        let with = scope(None, f, &[]);
        std::fs::write(&frag, "CONFIG_X=n\n").unwrap();
        assert_ne!(with, scope(None, f, &[]));
    }

    /// A tree or selftests that do not build at head are untestable (125); anything else stops.
    #[test]
    fn a_head_that_does_not_build_is_untestable() {
        let d = tempfile::tempdir().unwrap();
        let o = opts(d.path());
        let suite = SelftestsChange {
            opts: &o,
            dir: d.path(),
            kconfig: &[],
        };
        let e = anyhow::Error::new(Untestable("the selftests did not build".into()))
            .context("building");
        let (status, why) = suite.head_error(&o.kernel, e, &Events::silent());
        assert_eq!(status, Status::Untestable);
        assert!(why.starts_with("head cannot be built: "), "{why}");
        let (status, why) =
            suite.head_error(&o.kernel, anyhow::anyhow!("qemu died"), &Events::silent());
        assert_eq!(status, Status::Stopped);
        assert!(why.starts_with("head cannot be judged: "), "{why}");
    }

    /// Only a tree is compared with a ref of it; whole runs only.
    #[test]
    fn a_pin_a_piece_and_bless_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let against = Against {
            base: "HEAD~1".into(),
            reruns: 2,
            verifier_threshold_pct: None,
            bench: None,
        };
        let pin = Options {
            kernel: KernelChoice::Pin(crate::kernel::pins::resolve("6.12").unwrap()),
            ..opts(d.path())
        };
        let e = selftests_tree_against(&pin, &against, &Events::silent()).unwrap_err();
        assert!(e.to_string().contains("give --kernel-tree DIR"), "{e}");
        let bless = Options {
            bless: true,
            ..opts(d.path())
        };
        let e = selftests_tree_against(&bless, &against, &Events::silent()).unwrap_err();
        assert!(
            e.to_string().contains("leave out --piece and --bless"),
            "{e}"
        );
    }
}
