//! `change.json`'s shape: the two revisions, every classified test with all its runs, the
//! verifier's changes, and the exit status they make.
use serde::{Deserialize, Serialize};

use crate::results::report::Outcome;
use crate::support::status::Status;

/// Where the files of a comparison go, under the target directory: `change.md`, `change.json`,
/// `junit.xml` (the workflow reads the first two from here).
pub const DIR: &str = "vm-test/change";
pub const MARKDOWN: &str = "change.md";
pub const JSON: &str = "change.json";
pub const JUNIT: &str = "junit.xml";

/// What a test became between the base and head, on one kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Failed at head every time, passed at base every time: the change broke it.
    Regression,
    /// Failed at base, passes at head.
    Fixed,
    /// Failed at head and at base every time: not the change's doing.
    StillFailing,
    /// Passed and failed on one side: no verdict on the change.
    Flaky,
    /// Only head has it.
    New,
    /// Only the base has it.
    Removed,
    /// The same outcome on both sides (pass or skip).
    Unchanged,
}

impl Category {
    /// Every category, in the order the report shows them.
    pub const ALL: [Category; 7] = [
        Category::Regression,
        Category::Fixed,
        Category::StillFailing,
        Category::Flaky,
        Category::New,
        Category::Removed,
        Category::Unchanged,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Category::Regression => "regression",
            Category::Fixed => "fixed",
            Category::StillFailing => "still failing",
            Category::Flaky => "flaky",
            Category::New => "new",
            Category::Removed => "removed",
            Category::Unchanged => "unchanged",
        }
    }
}

/// Which revision a run ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Base,
    Head,
}

/// One run of one test: the side, whether it was a rerun (each in a fresh boot, filtered to the
/// test), its outcome and the reason it gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub side: Side,
    pub rerun: bool,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One test on one kernel: its category and every run that decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestChange {
    pub kernel: String,
    pub test: String,
    pub category: Category,
    pub runs: Vec<Run>,
}

impl TestChange {
    /// The outcomes of one side's runs: the first run, then the reruns.
    pub fn outcomes(&self, side: Side) -> Vec<Outcome> {
        let of = self.runs.iter().filter(|r| r.side == side);
        of.map(|r| r.outcome).collect()
    }
}

/// A revision compared: the ref as given and the commit it named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    pub name: String,
    pub commit: String,
}

/// What a kernel's comparison established, and where its base report came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelChange {
    pub kernel: String,
    /// The kernel's status for the change (`support::status`): bad on a regression, stopped when
    /// the base cannot be judged, untestable when head cannot be built.
    pub status: Status,
    /// Why the kernel could not be judged, naming the side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The base's whole report was the cached one of an earlier comparison.
    pub base_cached: bool,
}

/// `change.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub base: Revision,
    pub head: Revision,
    /// How many times a head failure is run again at head, and then at base (`--reruns`).
    pub reruns: u32,
    pub kernels: Vec<KernelChange>,
    /// Every test of every kernel, regressions first.
    pub tests: Vec<TestChange>,
    /// Every program whose verifier statistics changed, per kernel.
    pub verifier: Vec<super::verifier::ProgChange>,
    /// The percent a processed-insns or states count may grow before it fails the change
    /// (`--verifier-threshold`); absent: only a verdict success -> rejected fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifier_threshold_pct: Option<f64>,
    /// With `--bench`: each kernel change's A/B, as `bench-vm --against` judges it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cost: Vec<super::cost::Cost>,
    pub status: Status,
    /// The command's exit status: 0 no regression, 1 a confirmed regression, 125 head cannot be
    /// built, 255 the base cannot be judged.
    pub exit_status: u8,
}

impl Change {
    /// The tests of `category`, in the report's order.
    pub fn of(&self, category: Category) -> impl Iterator<Item = &TestChange> {
        self.tests.iter().filter(move |t| t.category == category)
    }

    /// The count per category, in [`Category::ALL`]'s order.
    pub fn counts(&self) -> Vec<(Category, usize)> {
        Category::ALL.map(|c| (c, self.of(c).count())).to_vec()
    }

    /// The change's status: a regression (of a test, a verifier verdict or a cost: a row
    /// changed, or head's own bench boots failed) is bad; else the worst of the kernels' and
    /// the costs' (a base that cannot be judged stops, a head that cannot be built is
    /// untestable).
    pub fn judge(&mut self) {
        let regressed = self.of(Category::Regression).next().is_some()
            || self.verifier.iter().any(|p| p.regression.is_some())
            || self.cost.iter().any(|c| c.status == Status::Bad);
        let kernels = self.kernels.iter().map(|k| k.status);
        let costs = self.cost.iter().map(|c| c.status);
        let status = if regressed {
            Status::Bad
        } else {
            Status::combine(kernels.chain(costs).filter(|s| *s != Status::Bad))
        };
        self.status = status;
        self.exit_status = status.code();
    }
}
