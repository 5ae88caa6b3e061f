//! report.json as a tool's structured content: its stable fields (docs/reports.md) as types
//! with a JSON schema, the tools' output schema. The rest of the file (features, probes,
//! verifier counts) stays in report.json, which the result names as a resource.
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The fields of a run's report.json an agent reads (docs/reports.md).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(super) struct Report {
    pub(super) kernel: Kernel,
    pub(super) accel: Accel,
    /// good (exit 0), bad (1), untestable (125) or stopped (255): docs/exit-status.md.
    pub(super) status: Option<String>,
    pub(super) summary: Summary,
    pub(super) tests: Vec<Test>,
    /// Every splat the kernel logged, with the tests running then.
    #[serde(default)]
    pub(super) kernel_splats: Vec<Splat>,
    pub(super) vm: Vm,
    /// Where the time went: prepare, build, boot, tests, shutdown, report, wall (seconds).
    #[serde(default)]
    pub(super) timings: Timings,
    /// The selftests build, in a selftests report.
    #[serde(default)]
    pub(super) selftests: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(super) struct Kernel {
    /// The pin's version, or the path of a kernel image.
    pub(super) version: String,
    pub(super) pinned_release: Option<String>,
    /// `uname -r` as the guest reported it.
    pub(super) release: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(super) struct Accel {
    /// kvm or tcg.
    pub(super) name: String,
    pub(super) reason: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub(super) struct Summary {
    pub(super) passed: usize,
    pub(super) failed: usize,
    pub(super) skipped: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(super) struct Test {
    pub(super) name: String,
    /// pass, fail or skip.
    pub(super) outcome: String,
    pub(super) reason: Option<String>,
    pub(super) duration_ms: u64,
    /// The kernel splats logged while this test ran.
    #[serde(default)]
    pub(super) kernel_splats: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(super) struct Splat {
    /// warning, bug, oops, lockdep, rcu, soft-lockup, hung-task, kasan, ubsan, verifier-bug,
    /// refcount or taint.
    pub(super) kind: String,
    /// boot, probe, tests, shutdown...
    pub(super) phase: String,
    /// The tests running when it was logged.
    pub(super) running: Vec<String>,
    pub(super) text: String,
    /// The allow list's reason, when an entry allows it.
    pub(super) allowed: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(super) struct Vm {
    /// `exited`, or why the VM ended otherwise.
    pub(super) ending: String,
    pub(super) wall_time_s: f64,
    /// Whether the run booted or used a kept guest, and why.
    pub(super) guest: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub(super) struct Timings {
    pub(super) prepare_s: Option<f64>,
    pub(super) build_s: Option<f64>,
    pub(super) boot_s: Option<f64>,
    pub(super) tests_s: Option<f64>,
    pub(super) shutdown_s: Option<f64>,
    pub(super) wall_s: Option<f64>,
}

impl Report {
    pub(super) fn read(path: &Path) -> Result<Report, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a report bpfvm reads: {e}", path.display()))
    }

    /// Why the run failed, as the terminal's `kernel X FAILED:` line says it: its failing
    /// entries, at most five named.
    pub(super) fn why_failed(&self) -> Option<String> {
        let failed: Vec<_> = self.tests.iter().filter(|t| t.outcome == "fail").collect();
        if failed.is_empty() {
            return None;
        }
        let named: Vec<String> = failed
            .iter()
            .take(5)
            .map(|t| match &t.reason {
                Some(r) => format!("{} ({})", t.name, first_line(r)),
                None => t.name.clone(),
            })
            .collect();
        let more = failed.len().saturating_sub(named.len());
        Some(format!(
            "{} failed: {}{}",
            failed.len(),
            named.join("; "),
            if more > 0 {
                format!("; and {more} more")
            } else {
                String::new()
            }
        ))
    }

    /// The row of `test`: its exact name, else the one row whose name holds it.
    pub(super) fn find(&self, test: &str) -> Result<&Test, String> {
        if let Some(t) = self.tests.iter().find(|t| t.name == test) {
            return Ok(t);
        }
        let like: Vec<&Test> = self
            .tests
            .iter()
            .filter(|t| t.name.contains(test))
            .collect();
        match like.as_slice() {
            [one] => Ok(one),
            [] => Err(format!(
                "no test named {test:?} in this report ({} tests); the `tests` rows of the run's \
                 report name them",
                self.tests.len()
            )),
            many => Err(format!(
                "{} tests' names hold {test:?}; give one of: {}",
                many.len(),
                many.iter()
                    .take(20)
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// The splats blamed on `test`: those logged while it ran.
    pub(super) fn splats_of(&self, test: &str) -> Vec<Splat> {
        self.kernel_splats
            .iter()
            .filter(|s| s.running.iter().any(|r| r == test))
            .cloned()
            .collect()
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bpfvm_host::results::report as m;

    /// The report bpfvm writes (its own type, serialized) reads back as the tool's result:
    /// the output schema's fields are those of report.json.
    #[test]
    fn a_report_bpfvm_writes_reads_as_the_tools_result() {
        let report = m::Report {
            kernel: m::KernelInfo {
                version: "6.1".into(),
                arch: bpfvm_host::domain::arch::Arch::X86_64,
                pinned_release: Some("6.1.0-57-cloud-amd64".into()),
                release: Some("6.1.0-57-cloud-amd64".into()),
                tree: None,
            },
            accel: m::AccelInfo {
                name: "tcg".into(),
                reason: "KVM not usable".into(),
                tcg_thread: None,
            },
            cmdline: None,
            spectre_v2: None,
            features: Default::default(),
            probes: Default::default(),
            expected_features: None,
            feature_mismatches: vec![],
            kernel_splats: vec![],
            vm: m::VmInfo {
                ending: m::VmEnding::Exited,
                wall_time_s: 12.5,
                console_tail: vec![],
                retries: vec![],
                guest: None,
            },
            timings: Default::default(),
            tests: vec![
                m::TestResult {
                    name: "maps::a".into(),
                    outcome: m::Outcome::Pass,
                    reason: None,
                    duration_ms: 3,
                    kernel_splats: vec![],
                },
                m::TestResult {
                    name: "maps::b".into(),
                    outcome: m::Outcome::Fail,
                    reason: Some("assertion failed\nmore".into()),
                    duration_ms: 4,
                    kernel_splats: vec!["WARNING: at x".into()],
                },
            ],
            summary: m::Summary {
                passed: 1,
                failed: 1,
                skipped: 0,
            },
            verifier: vec![],
            selftests: None,
            status: Some(bpfvm_host::support::status::Status::Bad),
            reused: vec![],
            piece: None,
        };
        let json = serde_json::to_string(&report).unwrap();
        let r: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(r.status.as_deref(), Some("bad"));
        assert_eq!(r.vm.ending, "exited");
        assert_eq!(r.tests[1].outcome, "fail");
        assert_eq!(r.tests[1].kernel_splats, ["WARNING: at x"]);
        assert_eq!(
            r.why_failed().unwrap(),
            "1 failed: maps::b (assertion failed)"
        );
        assert_eq!(r.find("maps::b").unwrap().duration_ms, 4);
        assert!(r.find("maps::").unwrap_err().contains("2 tests"));
        assert!(r.find("nope").unwrap_err().contains("no test named"));
    }
}
