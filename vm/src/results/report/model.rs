//! The report's data: what `report.json` holds, one `Report` per kernel.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::domain::arch::Arch;
use crate::kernel::expect::{Expectation, Mismatch, Probe};
use crate::machine::accel::Accel;
use crate::machine::vng::{Ending, FailedBoot, RunOutcome};
use crate::results::health::Judged;
use crate::support::status::Status;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Pass,
    Fail,
    Skip,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestResult {
    pub name: String,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub duration_ms: u64,
    /// The kernel splats logged while this test ran (JUnit `system-err`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_splats: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KernelInfo {
    /// The pin's version (`6.1`, `6.12-arm64` for another architecture's) or the path of a
    /// custom image.
    pub version: String,
    /// The kernel's architecture (reports written before `--arch` are x86_64's).
    #[serde(default = "x86_64")]
    pub arch: Arch,
    /// What the pin promises, if it is a pin.
    pub pinned_release: Option<String>,
    /// `uname -r` as the guest reported it.
    pub release: Option<String>,
    /// The source tree the kernel was built from (`--kernel-tree`): its commit, dirty state
    /// and config hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<crate::kernel::source_tree::TreeInfo>,
}

fn x86_64() -> Arch {
    Arch::X86_64
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccelInfo {
    pub name: String,
    pub reason: String,
    /// Under TCG, how the vCPUs were threaded (`tcg_thread`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcg_thread: Option<crate::machine::tcg_thread::Threading>,
}

impl AccelInfo {
    /// The reason, and under TCG the threading.
    pub fn why(&self) -> String {
        match &self.tcg_thread {
            Some(t) => format!("{}; {}", self.reason, t.describe()),
            None => self.reason.clone(),
        }
    }
}

impl From<&Accel> for AccelInfo {
    fn from(a: &Accel) -> Self {
        Self {
            name: a.kind.name().to_string(),
            reason: a.reason.clone(),
            tcg_thread: a.tcg_thread.clone(),
        }
    }
}

/// `target/vm-test/<kernel>/report.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub kernel: KernelInfo,
    pub accel: AccelInfo,
    pub cmdline: Option<String>,
    pub spectre_v2: Option<String>,
    /// Probe results: feature name -> present in this kernel.
    pub features: BTreeMap<String, bool>,
    /// Each probe's whole answer (present, absent or error, with the kernel's reason).
    #[serde(default)]
    pub probes: BTreeMap<String, Probe>,
    /// The features this kernel must have (see `vm::expect`); none when the run never booted.
    #[serde(default)]
    pub expected_features: Option<Expectation>,
    /// Expected features the probes did not find: each also fails the run.
    #[serde(default)]
    pub feature_mismatches: Vec<Mismatch>,
    /// The splats in the kernel log (`vm::health`), allowed or not; the log itself is
    /// `kernel.log` beside this report.
    #[serde(default)]
    pub kernel_splats: Vec<Judged>,
    /// How the VM ended ("exited" or why not), and its wall time.
    pub vm: VmInfo,
    /// Where the run's wall time went.
    pub timings: Timings,
    pub tests: Vec<TestResult>,
    pub summary: Summary,
    /// What the verifier thought of every program of every object (`vm::verifier`); also
    /// `verifier.json` and `verifier.csv` beside this report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verifier: Vec<bpfvm_common::verifier::ProgStats>,
    /// What the kernel's own selftests were built from and with (`selftests` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selftests: Option<SelftestsInfo>,
    /// What the run established about the kernel, the command's exit status
    /// (`support::status`): absent in reports of earlier versions, where it follows `ok()`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// The guest steps (`probe`, `verifier`) whose answers a passing run with the same
    /// binaries on the same kernel gave (`results::reuse`) rather than this boot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reused: Vec<String>,
    /// The piece of a plan this run was (`--piece`, `results::plan`): absent for a whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub piece: Option<PieceInfo>,
}

/// Which plan and piece a run was, and the inputs the merge checks every piece agrees on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PieceInfo {
    /// The plan's hash (`results::plan::KernelPlan::hash`).
    pub plan: String,
    /// `I/N`.
    pub piece: String,
    /// The checkout's commit (`git rev-parse HEAD`, `-dirty` when it has changes), if a
    /// checkout.
    pub commit: Option<String>,
    /// The report names of the tests the piece was given.
    pub tests: Vec<String>,
}

/// How `selftests` built the kernel's BPF selftests.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SelftestsInfo {
    /// The Debian source package (name, version, sha256) or the tree.
    pub source: String,
    /// When the source is not the kernel's exact version: which it is, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The clang's `--version` line.
    pub clang: String,
    /// make's `OUTPUT`, in the cache.
    pub build_dir: String,
    /// Whether a complete build was reused without make.
    pub build_cached: bool,
    pub build_s: f64,
}

/// Seconds per phase of a run; a phase the run did not reach is absent.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timings {
    /// Provisioning check, kernel fetch, accelerator probe.
    pub prepare_s: Option<f64>,
    /// BPF objects and guest test binaries.
    pub build_s: Option<f64>,
    /// vng start to the guest script's first line.
    pub boot_s: Option<f64>,
    /// The guest script: feature probes and every test binary.
    pub tests_s: Option<f64>,
    /// The guest script's end to vng's exit.
    pub shutdown_s: Option<f64>,
    /// The host's steps before the boot (within `prepare` and `build`), as the run named them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_steps: Vec<Span>,
    /// The guest's side as its kernel timed it: `kernel boot` from the kernel's start to the
    /// guest script's first phase, then each phase of the script until the next.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guest_phases: Vec<Span>,
    /// vng's exit to the report written: reading and judging the guest's files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_s: Option<f64>,
    /// The run's start to the report written: the phases above add up to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<f64>,
}

/// A named stretch of a run, in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Span {
    pub name: String,
    pub s: f64,
}

impl Timings {
    /// The phases of a run: `prepare` and `build` timed by the caller, the rest by the VM.
    pub fn of(prepare: std::time::Duration, build: std::time::Duration, vm: &RunOutcome) -> Self {
        Self {
            prepare_s: Some(prepare.as_secs_f64()),
            build_s: Some(build.as_secs_f64()),
            boot_s: vm.boot.map(|d| d.as_secs_f64()),
            tests_s: vm.guest.map(|d| d.as_secs_f64()),
            shutdown_s: vm.shutdown().map(|d| d.as_secs_f64()),
            ..Self::default()
        }
    }

    /// The guest's phases from its `phase` markers' kernel times (`health::log::phase_times`):
    /// the kernel's boot until the first, each phase until the next; the last marker (`end`)
    /// only ends the phase before it.
    pub fn guest_phases(markers: &[(String, u64)]) -> Vec<Span> {
        let Some((_, first)) = markers.first() else {
            return vec![];
        };
        let seconds = |usec: u64| usec as f64 / 1e6;
        let boot = Span {
            name: "kernel boot".into(),
            s: seconds(*first),
        };
        let phases = markers.windows(2).map(|w| Span {
            name: w[0].0.clone(),
            s: seconds(w[1].1.saturating_sub(w[0].1)),
        });
        std::iter::once(boot).chain(phases).collect()
    }

    /// "build 12.0 s, boot 6.1 s, ..." for the phases that ran.
    pub fn describe(&self) -> String {
        let mut line = [
            ("prepare", self.prepare_s),
            ("build", self.build_s),
            ("boot", self.boot_s),
            ("tests", self.tests_s),
            ("shutdown", self.shutdown_s),
            ("report", self.report_s),
        ]
        .iter()
        .filter_map(|(name, t)| t.map(|t| format!("{name} {t:.1} s")))
        .collect::<Vec<_>>()
        .join(", ");
        if let Some(wall) = self.wall_s {
            line += &format!(" (wall {wall:.1} s)");
        }
        let spans = |spans: &[Span]| {
            let each: Vec<String> = spans
                .iter()
                .map(|p| format!("{} {:.1} s", p.name, p.s))
                .collect();
            each.join(", ")
        };
        if !self.host_steps.is_empty() {
            line += &format!("\n  host, before the boot: {}", spans(&self.host_steps));
        }
        if !self.guest_phases.is_empty() {
            line += &format!(
                "\n  guest, by its kernel's clock: {}",
                spans(&self.guest_phases)
            );
        }
        line
    }
}

/// How the VM ended, as `report.json` says it: `"exited"` (the guest script ran to its end
/// and exited 0), or why not in one line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum VmEnding {
    Exited,
    Failed(String),
}

impl From<String> for VmEnding {
    fn from(s: String) -> Self {
        if s == "exited" {
            VmEnding::Exited
        } else {
            VmEnding::Failed(s)
        }
    }
}

impl From<VmEnding> for String {
    fn from(e: VmEnding) -> Self {
        e.to_string()
    }
}

impl std::fmt::Display for VmEnding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VmEnding::Exited => f.write_str("exited"),
            VmEnding::Failed(why) => f.write_str(why),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VmInfo {
    pub ending: VmEnding,
    pub wall_time_s: f64,
    /// Set when the VM died: the console's last lines.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub console_tail: Vec<String>,
    /// Boots that failed before the guest script started and were retried (TCG only).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub retries: Vec<FailedBoot>,
    /// Whether `vm-test` booted its guest or used a kept one (`cargo xtask vm-guest`), and why.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub guest: Option<GuestUse>,
}

/// How a run got its guest: `booted` or `reused` (a kept guest, docs/warm-guest.md), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestUse {
    pub how: String,
    pub why: String,
}

impl VmInfo {
    /// How the VM of `vm` ended: `exited` when the guest script exited 0, else the diagnosis'
    /// first line with the console tail.
    pub fn of(vm: &RunOutcome) -> Self {
        let ok = vm.ending == Ending::Exited(0);
        Self {
            ending: if ok {
                VmEnding::Exited
            } else {
                VmEnding::Failed(vm.diagnosis().lines().next().unwrap_or("").to_string())
            },
            wall_time_s: vm.elapsed.as_secs_f64(),
            console_tail: if ok { vec![] } else { vm.console_tail.clone() },
            retries: vm.retries.clone(),
            guest: None,
        }
    }
}

impl Report {
    /// The report of a kernel whose run could not start (fetch or build failed).
    /// The exit status this report stands for (see [`Report::status`]'s field).
    pub fn status(&self) -> Status {
        self.status
            .unwrap_or(if self.ok() { Status::Good } else { Status::Bad })
    }

    /// A kernel that never booted: `e` says why, and how that counts (`Status::of_error`).
    pub fn not_run_because(version: &str, e: &anyhow::Error) -> Self {
        let mut r = Self::not_run(version, &format!("{e:#}"));
        r.status = Some(Status::of_error(e));
        r
    }

    pub fn not_run(version: &str, why: &str) -> Self {
        Self {
            kernel: KernelInfo {
                version: version.to_string(),
                arch: Arch::X86_64,
                pinned_release: None,
                tree: None,
                release: None,
            },
            accel: AccelInfo {
                name: "none".into(),
                reason: "not booted".into(),
                tcg_thread: None,
            },
            cmdline: None,
            spectre_v2: None,
            features: BTreeMap::new(),
            probes: BTreeMap::new(),
            expected_features: None,
            feature_mismatches: vec![],
            kernel_splats: vec![],
            vm: VmInfo {
                ending: VmEnding::Failed(format!("not run: {why}")),
                wall_time_s: 0.0,
                console_tail: vec![],
                retries: vec![],
                guest: None,
            },
            timings: Timings::default(),
            tests: vec![],
            summary: Summary::default(),
            verifier: vec![],
            selftests: None,
            status: None,
            reused: vec![],
            piece: None,
        }
    }

    /// The run failed only by tests that could not judge the kernel (their failure says
    /// `protocol::NOT_JUDGED`), in a VM that ended normally: nothing was judged. Any other
    /// failure (a splat's `kernel:` entry, another test) is evidence against the kernel.
    pub fn only_not_judged(&self) -> bool {
        self.vm.ending == VmEnding::Exited
            && self.feature_mismatches.is_empty()
            && only_not_judged(&self.tests)
    }

    /// Failed entries (tests, probes, binaries), or a VM that did not end normally, make the
    /// run fail; so does a run where no test ran.
    pub fn ok(&self) -> bool {
        self.why_failed().is_none()
    }

    /// Why this run failed, in one line; `None` when it passed.
    pub fn why_failed(&self) -> Option<String> {
        if let VmEnding::Failed(ending) = &self.vm.ending {
            let retried = match self.vm.retries.len() {
                0 => String::new(),
                n => format!(
                    " (after {n} failed boot{} retried)",
                    if n == 1 { "" } else { "s" }
                ),
            };
            return Some(format!("{ending}{retried}"));
        }
        if self.summary.failed > 0 {
            let failed: Vec<&str> = self
                .tests
                .iter()
                .filter(|t| t.outcome == Outcome::Fail)
                .map(|t| t.name.as_str())
                .collect();
            let more = failed.len().saturating_sub(3);
            return Some(format!(
                "{} test{} failed: {}{}",
                failed.len(),
                if failed.len() == 1 { "" } else { "s" },
                failed[..failed.len().min(3)].join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        (self.summary.passed + self.summary.skipped == 0).then(|| "no test ran".to_string())
    }
}

/// Some of `entries` failed, and every one that did could not judge the kernel (its failure
/// says `protocol::NOT_JUDGED`: a stall report under TCG, `Health::under_tcg`): in a run that
/// ended normally, what decides that it judged nothing, for a test run
/// (`Report::only_not_judged`) and a command's (`bpfvm::command_code`) alike.
pub fn only_not_judged<'a>(entries: impl IntoIterator<Item = &'a TestResult>) -> bool {
    let mut failed = entries
        .into_iter()
        .filter(|t| t.outcome == Outcome::Fail)
        .peekable();
    let not_judged = |t: &TestResult| {
        t.reason
            .as_deref()
            .is_some_and(|r| r.contains(bpfvm_common::protocol::NOT_JUDGED))
    };
    failed.peek().is_some() && failed.all(not_judged)
}

pub fn summarize(tests: &[TestResult]) -> Summary {
    let count = |o| tests.iter().filter(|t| t.outcome == o).count();
    Summary {
        passed: count(Outcome::Pass),
        failed: count(Outcome::Fail),
        skipped: count(Outcome::Skip),
    }
}

/// Every test name in `reports`, sorted, each once: the rows of a matrix.
pub fn test_names(reports: &[Report]) -> Vec<&str> {
    let mut names: Vec<&str> = reports
        .iter()
        .flat_map(|r| r.tests.iter().map(|t| t.name.as_str()))
        .collect();
    names.sort();
    names.dedup();
    names
}
