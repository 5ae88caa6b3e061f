//! Everything that crosses the VM boundary between the host runner (`vm/`) and the guest code
//! (`tests/`): the environment the guest script sets, the files the guest writes into the
//! shared directory, the markers around the script's output, and the records inside those
//! files. Both sides use these definitions, so a renamed file or field cannot drift apart.
extern crate std;

use serde::{Deserialize, Serialize};
use std::string::String;

/// The shared directory the guest writes its results into (set by the guest script).
pub const RESULTS_ENV: &str = "BPFVM_RESULTS";
/// The kernel's BTF copied where aya reads it (`vm::guest`, `tests::object`).
pub const KERNEL_BTF_ENV: &str = "BPFVM_KERNEL_BTF";
/// The path of a `features.json` the probe binary wrote in this boot (`vm-test`'s guest script
/// sets it when the probe exited 0). The tests then take its answers instead of probing the
/// same kernel again (the inlining probe alone reads `/proc/kallsyms` and loads an object), and
/// the skips agree with the features the report shows by construction.
pub const FEATURES_ENV: &str = "BPFVM_FEATURES";
/// The release (`uname -r`) the host booted, which the guest's smoke test checks.
pub const EXPECT_RELEASE_ENV: &str = "BPFVM_EXPECT_RELEASE";

/// Printed by the guest script first: console lines before it are boot chatter.
pub const START_MARKER: &str = "bpfvm: guest script started";
/// Printed by the guest script last, after its exit status is written.
pub const END_MARKER: &str = "bpfvm: guest script finished";

/// Begins a test's failure message when the test could not judge the kernel: what its checks
/// rest on did not happen, for a reason that is not the kernel's (the host never ran two guest
/// threads at once). A run whose only failures say so judged nothing (exit 255), never the
/// kernel bad.
pub const NOT_JUDGED: &str = "bpfvm: not judged:";

/// Files the guest writes into the shared directory.
pub mod files {
    extern crate std;
    use std::format;
    use std::string::String;

    /// The guest script's exit status: written last, so the host knows the script finished.
    pub const STATUS: &str = "exit-status";
    pub const RELEASE: &str = "uname-r";
    pub const CMDLINE: &str = "cmdline";
    pub const SPECTRE_V2: &str = "spectre_v2";
    /// The probes' answers: a JSON object of feature name to [`Probe`](super::Probe).
    pub const FEATURES: &str = "features.json";
    /// The feature probe's exit status and stderr (not `probe.*`: the probe binary's own test
    /// harness is a test binary named `probe`).
    pub const PROBE_RC: &str = "features.rc";
    pub const PROBE_STDERR: &str = "features.stderr";
    /// One [`SkipRecord`](super::SkipRecord) per line.
    pub const SKIPS: &str = "skips.jsonl";
    /// The kernel log of the whole guest script, with its markers (`vm::health`).
    pub const KERNEL_LOG: &str = "kernel.log";
    /// The verifier's statistics of every program of every object: a JSON array of
    /// [`ProgStats`](crate::verifier::ProgStats), and the `verifier` binary's exit status and
    /// stderr.
    pub const VERIFIER: &str = "verifier.json";
    pub const VERIFIER_RC: &str = "verifier.rc";
    pub const VERIFIER_STDERR: &str = "verifier.stderr";

    /// Where test binary `name` lists its tests (`--list --format terse`).
    pub fn list(name: &str) -> String {
        format!("{name}.list")
    }
}

/// One probe's answer in `features.json`: `{"answer": "present"}`,
/// `{"answer": "absent", "detail": "..."}` or `{"answer": "error", "detail": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", content = "detail", rename_all = "lowercase")]
pub enum Probe {
    Present,
    /// The kernel's documented answer for a missing feature, with what it said.
    Absent(String),
    /// Anything else: the probe itself is broken, or the kernel regressed.
    Error(String),
}

impl Probe {
    /// What the probe said, for messages.
    pub fn describe(&self) -> String {
        match self {
            Probe::Present => "present".into(),
            Probe::Absent(why) => std::format!("absent ({why})"),
            Probe::Error(e) => std::format!("error ({e})"),
        }
    }
}

/// A line of `skips.jsonl`: a test that skipped itself, and the feature it lacked if the skip
/// came from `require!` (the host fails the skip when the kernel should have that feature).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkipRecord {
    /// libtest's name of the test (its thread's name).
    pub test: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON both sides have always written: a change here breaks reading older reports'
    /// guest files and must be deliberate.
    #[test]
    fn records_keep_their_json_shape() {
        let p = Probe::Absent("EINVAL".into());
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"answer":"absent","detail":"EINVAL"}"#
        );
        assert_eq!(
            serde_json::to_string(&Probe::Present).unwrap(),
            r#"{"answer":"present"}"#
        );
        let s = SkipRecord {
            test: "tests::a".into(),
            reason: "no".into(),
            feature: None,
        };
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"test":"tests::a","reason":"no"}"#
        );
    }
}
