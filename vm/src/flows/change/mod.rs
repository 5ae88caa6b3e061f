//! `--against BASE`: a suite at head and at BASE on the same kernels, every test classified by
//! `results::change` with the reruns it asks for, and `change.md`, `change.json` and
//! `junit.xml` written. One flow ([`compare`]) for every suite; what differs is how each side
//! runs ([`Suite`]): this repository's `vm-test` ([`vm_test`]) or a user's crate under
//! `bpfvm test` ([`crate_test`]), or the same suite on a kernel tree and on a ref of it
//! ([`tree`]), or a tree's own selftests at head and at a ref ([`selftests`]).
//!
//! Head runs here; its reruns are runs filtered to one test, each in a fresh boot, while
//! head's whole run waits aside and goes back where it was at the end. The base runs in its
//! own worktree and target directory ([`base`]); a tree's base in its own checkout and build
//! slot ([`tree`]). With `--bench`, a kernel change's two kernels are benchmarked after the
//! verdict, as `bench-vm --against` benchmarks them ([`cost`]).
pub mod base;
pub mod cost;
pub mod crate_test;
pub mod selftests;
pub mod tree;
pub mod vm_test;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::kernel::choice::KernelChoice;
use crate::results::change::render;
use crate::results::change::verifier::{self, ProgChange};
use crate::results::change::{
    classify, Category, Change, KernelChange, Next, Revision, Run, Side, TestChange,
};
use crate::results::report::{Outcome, Report, VmEnding};
use crate::support::output::Events;
use crate::support::status::Status;

/// What `--against` asks.
#[derive(Debug, Clone)]
pub struct Against {
    /// The base: a ref of the repository the suite is in.
    pub base: String,
    /// How many times a head failure runs again at head, then at base (`--reruns`).
    pub reruns: u32,
    /// `--verifier-threshold`: the percent a count may grow before it fails the change.
    pub verifier_threshold_pct: Option<f64>,
    /// `--bench`: the kernels' A/B after the verdict (a kernel change only).
    pub bench: Option<cost::Bench>,
}

/// What differs between the suites `--against` compares (this repository's, a user's crate):
/// how each side runs on a kernel. The rest, the classification and the files, is shared.
pub trait Suite {
    /// Where the change's files go.
    fn out(&self) -> PathBuf;
    /// Head on `kernel`: the whole run (`test` is `None`), or a rerun of one test in a fresh
    /// boot; its report and the directory it wrote.
    fn head(
        &self,
        kernel: &KernelChoice,
        test: Option<&str>,
        events: &Events,
    ) -> Result<(Report, PathBuf)>;
    /// Why head's whole run failed, and the status it makes: 125 (untestable) when head
    /// cannot be built, else stopped.
    fn head_error(
        &self,
        kernel: &KernelChoice,
        e: anyhow::Error,
        events: &Events,
    ) -> (Status, String);
    /// The base (`commit`) on `kernel` (`label`), whole or one test, in its own worktree and
    /// target directory ([`base::run_in_worktree`]).
    fn base(
        &self,
        commit: &str,
        kernel: &KernelChoice,
        label: &str,
        test: Option<&str>,
        events: &Events,
    ) -> Result<Report>;
    /// What selects the tests besides the kernel, for the base's cache ([`base::scope`]).
    fn scope(&self) -> String;
    /// Whether the runs report the verifier's statistics (a missing side is then warned of).
    fn verifier(&self) -> bool;
    /// The row of `name` in a rerun's `report`, as (outcome, reason); `None` when the rerun
    /// judged nothing of it. Its own row, unless the suite reports a passing test otherwise.
    fn rerun_row(&self, report: &Report, name: &str) -> Option<(Outcome, Option<String>)> {
        let t = report.tests.iter().find(|t| t.name == name)?;
        Some((t.outcome, t.reason.clone()))
    }
    /// A kernel change's two kernels (head, and the base at `base_commit`), for `--bench`;
    /// `None` where the change is the suite's, on the same kernels.
    fn kernels(&self, _base_commit: &str) -> Option<cost::Kernels> {
        None
    }
}

/// Compares head against the base on every kernel of `kernels`; returns the change and the
/// directory its files are in.
pub fn compare(
    suite: &dyn Suite,
    kernels: &[KernelChoice],
    base: Revision,
    head: Revision,
    against: &Against,
    events: &Events,
) -> Result<(Change, PathBuf)> {
    let mut change = Change {
        base,
        head,
        reruns: against.reruns,
        kernels: vec![],
        tests: vec![],
        verifier: vec![],
        verifier_threshold_pct: against.verifier_threshold_pct,
        cost: vec![],
        status: Status::Good,
        exit_status: 0,
    };
    for kernel in kernels {
        let name = kernel.shown();
        if crate::support::proc::interrupted() {
            events.warn(format!("interrupted: kernel {name} and later not compared"));
            break;
        }
        events.step(format!(
            "=== kernel {name}: head against {} ===",
            against.base
        ));
        let mut k = Kernel {
            suite,
            kernel,
            against,
            base: &change.base,
            events,
            change: KernelChange {
                kernel: name,
                status: Status::Good,
                problem: None,
                base_cached: false,
            },
            tests: vec![],
            verifier: vec![],
        };
        k.compare();
        change.kernels.push(k.change);
        change.tests.extend(k.tests);
        change.verifier.extend(k.verifier);
    }
    change
        .tests
        .sort_by(|a, b| (a.category, &a.kernel, &a.test).cmp(&(b.category, &b.kernel, &b.test)));
    if let Some(bench) = against.bench {
        change.cost = cost::measure(suite, &change, bench, events);
    }
    change.judge();
    let dir = suite.out();
    let md = render::write(&change, &dir)?;
    render::step_summary(&md).context("appending to $GITHUB_STEP_SUMMARY")?;
    Ok((change, dir))
}

/// One kernel's comparison.
struct Kernel<'a> {
    suite: &'a dyn Suite,
    kernel: &'a KernelChoice,
    against: &'a Against,
    base: &'a Revision,
    events: &'a Events,
    change: KernelChange,
    tests: Vec<TestChange>,
    verifier: Vec<ProgChange>,
}

impl Kernel<'_> {
    fn problem(&mut self, status: Status, why: String) {
        self.events
            .warn(format!("kernel {}: {why}", self.change.kernel));
        self.change.status = Status::combine([self.change.status, status]);
        let all = match self.change.problem.take() {
            Some(before) => format!("{before}; {why}"),
            None => why,
        };
        self.change.problem = Some(all);
    }

    fn base_not_judged(&mut self, what: &str, e: &anyhow::Error) {
        let why = format!(
            "the base {} ({}) cannot be judged: {what}: {e:#}",
            self.base.name,
            short(&self.base.commit)
        );
        self.problem(Status::Stopped, why);
    }

    fn compare(&mut self) {
        let (head, dir) = match self.suite.head(self.kernel, None, self.events) {
            Ok(x) => x,
            Err(e) => {
                let (status, why) = self.suite.head_error(self.kernel, e, self.events);
                return self.problem(status, why);
            }
        };
        if let VmEnding::Failed(why) = &head.vm.ending {
            return self.problem(
                Status::Stopped,
                format!("head cannot be judged: its VM did not run the suite to its end: {why}"),
            );
        }
        let label = dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        // Head's whole run waits aside while its reruns write where it was.
        let aside = self.suite.out().join(&label).join("head");
        if let Err(e) = move_dir(&dir, &aside) {
            return self.problem(Status::Stopped, format!("{e:#}"));
        }
        self.with_head(&head, &label);
        if let Err(e) = move_dir(&aside, &dir) {
            self.problem(
                Status::Stopped,
                format!("head's report not put back: {e:#}"),
            );
        }
        // Only the kernel's directory the run aside was in, now empty.
        let _ = std::fs::remove_dir(aside.parent().expect("head's run is in a directory"));
    }

    fn with_head(&mut self, head: &Report, label: &str) {
        let scope = self.suite.scope();
        let whole = base::whole(
            &self.base.commit,
            self.kernel,
            label,
            &scope,
            self.events,
            || {
                self.suite
                    .base(&self.base.commit, self.kernel, label, None, self.events)
            },
        );
        let base = match whole {
            Ok((report, cached)) => {
                self.change.base_cached = cached;
                report
            }
            Err(e) => return self.base_not_judged("its whole run", &e),
        };
        let mut names: Vec<&str> = head.tests.iter().map(|t| t.name.as_str()).collect();
        for t in &base.tests {
            if !names.contains(&t.name.as_str()) {
                names.push(&t.name);
            }
        }
        for name in names {
            if let Some(t) = self.classify(name, &base, head, label) {
                self.tests.push(t);
            }
        }
        if !self.suite.verifier() {
            // Not asked for (`bpfvm test` without `--verifier-stats`): nothing to compare.
        } else if base.verifier.is_empty() || head.verifier.is_empty() {
            self.events.warn(format!(
                "kernel {}: no verifier statistics at {}: no verifier diff",
                self.change.kernel,
                if head.verifier.is_empty() {
                    "head"
                } else {
                    "the base"
                }
            ));
        } else {
            let threshold = self.against.verifier_threshold_pct;
            let diff = verifier::diff(
                &self.change.kernel,
                &base.verifier,
                &head.verifier,
                threshold,
            );
            self.verifier.extend(diff);
        }
        if self
            .tests
            .iter()
            .any(|t| t.category == Category::Regression)
            || self.verifier.iter().any(|p| p.regression.is_some())
        {
            self.change.status = Status::combine([self.change.status, Status::Bad]);
        }
    }

    /// One test: its whole runs' outcomes, then the reruns `classify` asks for. `None` when a
    /// rerun could not judge it (the kernel's problem says which).
    fn classify(
        &mut self,
        name: &str,
        base: &Report,
        head: &Report,
        label: &str,
    ) -> Option<TestChange> {
        let first = |r: &Report, side| {
            let t = r.tests.iter().find(|t| t.name == name)?;
            Some(Run {
                side,
                rerun: false,
                outcome: t.outcome,
                reason: t.reason.clone(),
            })
        };
        let (b, h) = (first(base, Side::Base), first(head, Side::Head));
        let (bo, ho) = (b.as_ref().map(|r| r.outcome), h.as_ref().map(|r| r.outcome));
        let mut runs: Vec<Run> = b.into_iter().chain(h).collect();
        let (mut head_reruns, mut base_reruns) = (vec![], vec![]);
        let n = self.against.reruns as usize;
        let category = loop {
            let side = match classify(bo, ho, &head_reruns, &base_reruns, n) {
                Next::Done(c) => break c,
                Next::RerunHead => Side::Head,
                Next::RerunBase => Side::Base,
            };
            let rerun = match side {
                Side::Head => self.rerun_head(name),
                Side::Base => self.rerun_base(name, label),
            };
            let run = match rerun {
                Ok(run) => run,
                Err(e) if side == Side::Base => {
                    self.base_not_judged(&format!("its rerun of {name}"), &e);
                    return None;
                }
                Err(e) => {
                    let why = format!("head's rerun of {name} could not judge it: {e:#}");
                    self.problem(Status::Stopped, why);
                    return None;
                }
            };
            match side {
                Side::Head => head_reruns.push(run.outcome),
                Side::Base => base_reruns.push(run.outcome),
            }
            runs.push(run);
        };
        Some(TestChange {
            kernel: self.change.kernel.clone(),
            test: name.to_string(),
            category,
            runs,
        })
    }

    fn rerun_head(&self, name: &str) -> Result<Run> {
        self.events
            .step(format!("rerunning {name} at head (a fresh boot)"));
        let (report, _) = self.suite.head(self.kernel, Some(name), self.events)?;
        self.outcome_of(&report, name, Side::Head)
    }

    fn rerun_base(&self, name: &str, label: &str) -> Result<Run> {
        self.events
            .step(format!("rerunning {name} at the base (a fresh boot)"));
        let report = self.suite.base(
            &self.base.commit,
            self.kernel,
            label,
            Some(name),
            self.events,
        )?;
        self.outcome_of(&report, name, Side::Base)
    }

    /// The rerun of `name` in `report`; a rerun that did not report it judged nothing.
    fn outcome_of(&self, report: &Report, name: &str, side: Side) -> Result<Run> {
        let (outcome, reason) = self.suite.rerun_row(report, name).with_context(|| {
            format!(
                "the rerun filtered to it did not report it ({})",
                report.why_failed().unwrap_or_else(|| "no failure".into())
            )
        })?;
        Ok(Run {
            side,
            rerun: true,
            outcome,
            reason,
        })
    }
}

/// A tree's base: the commit `commit` of the tree `dir`, checked out under the cache's
/// `tree-refs/` and built in its own slot, never the user's working tree.
fn tree_ref(dir: &Path, commit: &str, kconfig: &[PathBuf]) -> KernelChoice {
    KernelChoice::TreeRef {
        dir: dir.to_path_buf(),
        rev: commit.to_string(),
        kconfig: kconfig.to_vec(),
    }
}

/// The base's report, once its VM ran `what` to its end. A whole run's directory is kept
/// beside head's, at `keep`; a rerun's (no `keep`) is replaced when head's whole run goes back.
fn base_ran((report, dir): (Report, PathBuf), what: &str, keep: Option<PathBuf>) -> Result<Report> {
    if let VmEnding::Failed(why) = &report.vm.ending {
        bail!("its VM did not run {what}: {why}");
    }
    if let Some(keep) = keep {
        move_dir(&dir, &keep)?;
    }
    Ok(report)
}

/// Renames `from` to `to`, replacing what `to` held.
fn move_dir(from: &Path, to: &Path) -> Result<()> {
    if to.exists() {
        std::fs::remove_dir_all(to).with_context(|| format!("removing {}", to.display()))?;
    }
    std::fs::create_dir_all(to.parent().expect("a directory in a directory"))?;
    std::fs::rename(from, to)
        .with_context(|| format!("moving {} to {}", from.display(), to.display()))
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}
