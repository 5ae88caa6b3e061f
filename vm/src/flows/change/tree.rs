//! `vm-test --kernel-tree DIR --against REF`: the kernel changes, the suite does not. Both
//! sides run this checkout's suite; head on the tree as it is, the base on REF's commit of the
//! tree, checked out under the cache's `tree-refs/` and built in its own slot exactly as
//! `bench-vm --against REF` builds it (`KernelChoice::TreeRef`): never the user's working tree.
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{base, compare, vm_test, Against, Suite};
use crate::flows::run::{self, TestOptions};
use crate::kernel::choice::KernelChoice;
use crate::kernel::source_tree;
use crate::results::change::{Change, Revision, DIR};
use crate::results::report::Report;
use crate::support::output::Events;
use crate::support::paths::{target_dir, workspace_root};
use crate::support::status::Status;

/// Compares the tree `dir` as it is against its commit `against.base`, the suite the same on
/// both sides; returns the change and the directory its files are in.
pub fn vm_test_tree_against(
    dir: &Path,
    kconfig: &[PathBuf],
    opts: &TestOptions,
    against: &Against,
    events: &Events,
) -> Result<(Change, PathBuf)> {
    crate::domain::options::check(&opts.vm)?;
    let (base, head) = revisions(dir, &against.base)?;
    let head_kernel = KernelChoice::Tree {
        dir: dir.to_path_buf(),
        kconfig: kconfig.to_vec(),
    };
    let suite = TreeChange {
        opts,
        dir,
        kconfig,
        suite: suite_state(&workspace_root())?,
    };
    compare(&suite, &[head_kernel], base, head, against, events)
}

/// The base `rev` and HEAD of the kernel tree `dir`.
pub fn revisions(dir: &Path, rev: &str) -> Result<(Revision, Revision)> {
    let base = Revision {
        name: rev.to_string(),
        commit: source_tree::verify_rev(dir, rev).map_err(|_| {
            anyhow::anyhow!(
                "--against {rev}: not a commit of the kernel tree {}; beside --kernel-tree, BASE \
                 is a branch, tag or commit of the tree (`git fetch` it first if it is a \
                 remote's), never a pin or another tree",
                dir.display()
            )
        })?,
    };
    let head = Revision {
        name: "HEAD".into(),
        commit: crate::results::plan::commit(dir).ok_or_else(|| {
            anyhow::anyhow!(
                "--against {rev}: {} is not a git repository: BASE is a ref of the tree",
                dir.display()
            )
        })?,
    };
    Ok((base, head))
}

/// What the suite is at (its commit, and a hash of `git diff HEAD` when the checkout is
/// dirty): the base's cached report is only good for the same suite.
fn suite_state(root: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let head = base::git(root, &["rev-parse", "HEAD"])?;
    let diff = base::git(root, &["diff", "HEAD", "--no-ext-diff", "--no-textconv"])?;
    if diff.is_empty() {
        return Ok(head);
    }
    Ok(format!(
        "{head}-dirty-{}",
        &hex::encode(Sha256::digest(diff))[..16]
    ))
}

struct TreeChange<'a> {
    opts: &'a TestOptions,
    dir: &'a Path,
    kconfig: &'a [PathBuf],
    suite: String,
}

impl TreeChange<'_> {
    fn on(&self, kernel: KernelChoice, test: Option<&str>) -> TestOptions {
        let mut opts = TestOptions {
            kernel,
            piece: None,
            ..self.opts.clone()
        };
        if let Some(t) = test {
            opts.filter = Some(t.to_string());
            opts.fresh = true;
        }
        opts
    }
}

impl Suite for TreeChange<'_> {
    fn out(&self) -> PathBuf {
        target_dir().join(DIR)
    }

    fn head(
        &self,
        kernel: &KernelChoice,
        test: Option<&str>,
        events: &Events,
    ) -> Result<(Report, PathBuf)> {
        run::vm_test(&self.on(kernel.clone(), test), events)
    }

    fn head_error(
        &self,
        kernel: &KernelChoice,
        e: anyhow::Error,
        events: &Events,
    ) -> (Status, String) {
        // The tree not building (or losing an option the suite needs) is what makes head
        // untestable here; anything else is told apart as vm-test's head is.
        if Status::of_error(&e) == Status::Untestable {
            return (Status::Untestable, format!("head cannot be built: {e:#}"));
        }
        vm_test::head_error(&self.on(kernel.clone(), None), e, events)
    }

    fn base(
        &self,
        commit: &str,
        _kernel: &KernelChoice,
        label: &str,
        test: Option<&str>,
        events: &Events,
    ) -> Result<Report> {
        let mut opts = self.on(super::tree_ref(self.dir, commit, self.kconfig), test);
        // A kept guest runs head's kernel, never the base's.
        opts.fresh = true;
        let keep = test.is_none().then(|| self.out().join(label).join("base"));
        super::base_ran(run::vm_test(&opts, events)?, "the suite to its end", keep)
    }

    fn verifier(&self) -> bool {
        true
    }

    fn kernels(&self, base_commit: &str) -> Option<super::cost::Kernels> {
        Some(super::cost::Kernels {
            head: KernelChoice::Tree {
                dir: self.dir.to_path_buf(),
                kconfig: self.kconfig.to_vec(),
            },
            base: super::tree_ref(self.dir, base_commit, self.kconfig),
            vm: self.opts.vm.clone(),
        })
    }

    fn scope(&self) -> String {
        let mut parts = vec![format!("suite {}", self.suite)];
        if let Some(f) = &self.opts.filter {
            parts.push(format!("filter {f}"));
        }
        for k in self.kconfig {
            let text = std::fs::read(k).unwrap_or_default();
            parts.push(format!("kconfig {}", hex_of(&text)));
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
    use std::process::Command;
    use std::time::Duration;

    use super::*;
    use crate::domain::options::VmOptions;
    use crate::support::status::Untestable;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
            .arg(dir)
            .args(args)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    fn opts(dir: &Path) -> TestOptions {
        TestOptions {
            kernel: KernelChoice::Tree {
                dir: dir.to_path_buf(),
                kconfig: vec![],
            },
            vm: VmOptions::new(Duration::from_secs(60)),
            filter: None,
            piece: None,
            fresh: false,
        }
    }

    /// BASE is a commit of the tree (never of this repository); head is the tree's HEAD, and
    /// says when its work tree is dirty (its build is of what is there, not of the commit).
    #[test]
    fn the_base_is_a_commit_of_the_tree_and_head_its_state() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("Makefile"), "VERSION = 6\n").unwrap();
        git(d.path(), &["init", "-q"]);
        git(d.path(), &["add", "."]);
        git(d.path(), &["commit", "-q", "-m", "base"]);
        std::fs::write(d.path().join("Makefile"), "VERSION = 7\n").unwrap();
        git(d.path(), &["commit", "-q", "-am", "head"]);
        let (base, head) = revisions(d.path(), "HEAD~1").unwrap();
        assert_eq!(base.name, "HEAD~1");
        assert_ne!(base.commit, head.commit);
        assert_eq!(head.commit.len(), 40, "{}", head.commit);
        std::fs::write(d.path().join("Makefile"), "VERSION = 8\n").unwrap();
        let (_, dirty) = revisions(d.path(), "HEAD~1").unwrap();
        assert_eq!(dirty.commit, format!("{}-dirty", head.commit));
        let e = format!("{:#}", revisions(d.path(), "no-such-ref").unwrap_err());
        assert!(e.contains("not a commit of the kernel tree"), "{e}");
        assert!(e.contains("never a pin"), "{e}");
    }

    /// The base's cached report is only reused for the same suite, filter and fragments.
    #[test]
    fn the_base_report_is_cached_apart_by_suite_filter_and_fragments() {
        let d = tempfile::tempdir().unwrap();
        let frag = d.path().join("my.config");
        std::fs::write(&frag, "CONFIG_X=y\n").unwrap();
        let o = opts(d.path());
        let scope = |suite: &str, filter: Option<&str>, kconfig: &[PathBuf]| {
            let opts = TestOptions {
                filter: filter.map(String::from),
                ..o.clone()
            };
            TreeChange {
                opts: &opts,
                dir: d.path(),
                kconfig,
                suite: suite.into(),
            }
            .scope()
        };
        let plain = scope("a", None, &[]);
        assert_eq!(plain, scope("a", None, &[]));
        assert_ne!(plain, scope("b", None, &[]));
        assert_ne!(plain, scope("a", Some("bloom"), &[]));
        let with = scope("a", None, std::slice::from_ref(&frag));
        assert_ne!(plain, with);
        std::fs::write(&frag, "CONFIG_X=n\n").unwrap();
        assert_ne!(with, scope("a", None, std::slice::from_ref(&frag)));
    }

    /// A head whose tree does not build is untestable (125), said so: nothing is rebuilt to
    /// tell.
    #[test]
    fn a_head_tree_that_does_not_build_is_untestable() {
        let d = tempfile::tempdir().unwrap();
        let o = opts(d.path());
        let suite = TreeChange {
            opts: &o,
            dir: d.path(),
            kconfig: &[],
            suite: "a".into(),
        };
        let e = anyhow::Error::new(Untestable("`make bzImage` failed".into()))
            .context("building the kernel");
        let (status, why) = suite.head_error(&o.kernel, e, &Events::silent());
        assert_eq!(status, Status::Untestable);
        assert!(why.starts_with("head cannot be built: "), "{why}");
        assert!(why.contains("`make bzImage` failed"), "{why}");
    }

    /// `--bench` benchmarks the verdict's own two kernels: the tree and the base commit's
    /// checkout, with the same fragments (so the slots the verdict built are the ones booted);
    /// when the verdict could not judge both, it runs nothing and says so, and the change keeps
    /// the verdict's status.
    #[test]
    fn the_cost_is_of_the_verdicts_kernels_and_not_run_when_they_were_not_judged() {
        use crate::flows::bench::Size;
        use crate::results::change::KernelChange;
        let d = tempfile::tempdir().unwrap();
        let frag = d.path().join("my.config");
        let o = opts(d.path());
        let suite = TreeChange {
            opts: &o,
            dir: d.path(),
            kconfig: std::slice::from_ref(&frag),
            suite: "a".into(),
        };
        let k = suite.kernels(&"c".repeat(40)).unwrap();
        let tree = |kernel: &KernelChoice| match kernel {
            KernelChoice::Tree { dir, kconfig } => (dir.clone(), kconfig.clone(), None),
            KernelChoice::TreeRef { dir, rev, kconfig } => {
                (dir.clone(), kconfig.clone(), Some(rev.clone()))
            }
            other => panic!("{other:?}"),
        };
        let frags = vec![frag.clone()];
        assert_eq!(tree(&k.head), (d.path().to_path_buf(), frags.clone(), None));
        let base = (d.path().to_path_buf(), frags, Some("c".repeat(40)));
        assert_eq!(tree(&k.base), base);

        let revision = |c: &str| Revision {
            name: c.into(),
            commit: c.repeat(40),
        };
        let bench = super::super::cost::Bench {
            size: Size::Smoke,
            threshold_pct: 1.0,
        };
        for status in [Status::Untestable, Status::Stopped] {
            let mut change = Change {
                base: revision("c"),
                head: revision("d"),
                reruns: 2,
                kernels: vec![KernelChange {
                    kernel: "tree-6.12".into(),
                    status,
                    problem: Some("head cannot be built".into()),
                    base_cached: false,
                }],
                tests: vec![],
                verifier: vec![],
                verifier_threshold_pct: None,
                cost: vec![],
                status: Status::Good,
                exit_status: 0,
            };
            change.cost = super::super::cost::measure(&suite, &change, bench, &Events::silent());
            let cost = &change.cost[0];
            assert_eq!((cost.status, cost.compared.is_none()), (status, true));
            assert!(cost.problem.as_deref().unwrap().starts_with("not run: "));
            change.judge();
            assert_eq!(change.exit_status, status.code());
        }
    }

    #[test]
    fn the_suite_state_names_the_commit_and_a_dirty_diff() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), "1\n").unwrap();
        git(d.path(), &["init", "-q"]);
        git(d.path(), &["add", "."]);
        git(d.path(), &["commit", "-q", "-m", "one"]);
        let clean = suite_state(d.path()).unwrap();
        assert_eq!(clean.len(), 40, "{clean}");
        std::fs::write(d.path().join("f"), "2\n").unwrap();
        let a = suite_state(d.path()).unwrap();
        std::fs::write(d.path().join("f"), "3\n").unwrap();
        let b = suite_state(d.path()).unwrap();
        assert!(a.starts_with(&format!("{clean}-dirty-")), "{a}");
        assert_ne!(a, b, "two dirty states are two suites");
    }
}
