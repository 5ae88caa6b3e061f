//! Reads the guest's files in the shared directory: libtest's JSON events, the test lists, exit
//! statuses, skip records and probe answers. Every read is bounded (`guest_files`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::Deserialize;

use bpfvm_common::protocol::SkipRecord;

use super::model::{Outcome, TestResult};
use crate::kernel::expect::Probe;
use crate::machine::guest::files;
use crate::support::guest_files;

/// A line of libtest's `--format json` output that this module cares about.
#[derive(Deserialize)]
pub(super) struct Event {
    #[serde(rename = "type")]
    kind: String,
    event: String,
    name: Option<String>,
    exec_time: Option<f64>,
    stdout: Option<String>,
}

/// How a test ended, from one line of libtest's JSON output: the test's display name and the
/// event (`ok`, `failed`, `ignored`); `None` for other lines.
pub fn test_finished(line: &str) -> Option<(String, String)> {
    let ev = serde_json::from_str::<Event>(line).ok()?;
    let finished = ev.kind == "test" && ["ok", "failed", "ignored"].contains(&ev.event.as_str());
    Some((display_name(&ev.name?), ev.event)).filter(|_| finished)
}

/// The libtest names of the tests libtest reported `ignored` in its JSON events.
pub fn ignored_tests(jsonl: &str) -> Vec<String> {
    jsonl
        .lines()
        .filter_map(|l| serde_json::from_str::<Event>(l).ok())
        .filter(|ev| ev.kind == "test" && ev.event == "ignored")
        .filter_map(|ev| ev.name)
        .collect()
}

/// Test names as users see them: without the crate's `tests::` module prefix.
pub(crate) fn display_name(libtest_name: &str) -> String {
    libtest_name
        .strip_prefix("tests::")
        .unwrap_or(libtest_name)
        .to_string()
}

/// What one test binary left in the shared directory.
#[derive(Debug, Clone, Default)]
pub struct BinaryOutput {
    /// The test target's name (`bpfvm_tests`).
    pub name: String,
    /// `--list --format terse` output: every test the run should report. `None` if missing.
    pub list: Option<String>,
    /// libtest's JSON events.
    pub jsonl: String,
    /// The exit status as the shell saw it (128 + N for signal N); `None` if never written.
    pub rc: Option<i32>,
    /// The last lines of its stderr, joined with " | ".
    pub stderr_tail: String,
}

pub(super) use crate::support::shell::status_words;

/// The test names of libtest's `--list --format terse` output (`name: test` lines).
pub fn listed(list: &str) -> Vec<String> {
    list.lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_string)
        .collect()
}

pub(crate) fn failed(name: String, reason: String) -> TestResult {
    TestResult {
        name,
        outcome: Outcome::Fail,
        reason: Some(reason),
        duration_ms: 0,
        kernel_splats: vec![],
    }
}

/// Reads one binary's JSON events into results, and accounts for how it ended: a test that
/// started but never finished was running when the process died (or the VM did: `vm_ending`);
/// a listed test with no result was never reached; a non-zero exit with no failing test, or no
/// list, fails an entry named after the binary.
pub fn parse_binary(out: &BinaryOutput, vm_ending: &str) -> Vec<TestResult> {
    let mut started: Vec<String> = Vec::new();
    let mut results = Vec::new();
    for line in out.jsonl.lines() {
        let Ok(ev) = serde_json::from_str::<Event>(line) else {
            continue;
        };
        let (true, Some(name)) = (ev.kind == "test", ev.name) else {
            continue;
        };
        let duration_ms = (ev.exec_time.unwrap_or(0.0) * 1000.0).round() as u64;
        let (outcome, reason) = match ev.event.as_str() {
            "started" => {
                started.push(name);
                continue;
            }
            "ok" => (Outcome::Pass, None),
            "failed" => (Outcome::Fail, Some(failure_reason(ev.stdout.as_deref()))),
            "ignored" => (Outcome::Skip, Some("#[ignore]d".to_string())),
            _ => continue,
        };
        started.retain(|s| *s != name);
        results.push(TestResult {
            name: display_name(&name),
            outcome,
            reason,
            duration_ms,
            kernel_splats: vec![],
        });
    }
    let death = match out.rc {
        Some(rc) => format!("test process died ({})", status_words(rc)),
        None => format!("test process never finished: {vm_ending}"),
    };
    let stderr = if out.stderr_tail.is_empty() {
        String::new()
    } else {
        format!("; stderr: {}", out.stderr_tail)
    };
    for name in &started {
        results.push(failed(
            display_name(name),
            format!("{death} while this test ran{stderr}"),
        ));
    }
    for name in listed(out.list.as_deref().unwrap_or("")) {
        let shown = display_name(&name);
        if !started.contains(&name) && !results.iter().any(|r| r.name == shown) {
            results.push(failed(
                shown,
                format!("not run: the {death} before reaching it"),
            ));
        }
    }
    let binary = format!("binary:{}", out.name);
    if out.list.is_none() {
        let why = match out.rc {
            None => format!("never ran: {vm_ending}"),
            Some(_) => format!("`{} --list` failed{stderr}", out.name),
        };
        results.push(failed(binary.clone(), format!("no test list: {why}")));
    }
    let any_failed = results.iter().any(|r| r.outcome == Outcome::Fail);
    if out.rc != Some(0) && !any_failed {
        results.push(failed(
            binary,
            format!("{death} with no failing test{stderr}"),
        ));
    }
    results
}

/// The panic message of a failed test: from "panicked at" to the backtrace.
pub(super) fn failure_reason(stdout: Option<&str>) -> String {
    let out = stdout.unwrap_or("");
    let from = out
        .find("panicked at")
        .map_or(0, |i| out[..i].rfind('\n').map_or(0, |nl| nl + 1));
    let msg: Vec<&str> = out[from..]
        .lines()
        .take_while(|l| !l.starts_with("stack backtrace:") && !l.starts_with("note: "))
        .collect();
    let msg = msg.join("\n").trim().to_string();
    if msg.is_empty() {
        "failed without a panic message".into()
    } else {
        msg
    }
}

pub(super) fn skip_records(skips_jsonl: &str) -> impl Iterator<Item = SkipRecord> + '_ {
    skips_jsonl
        .lines()
        .filter_map(|l| serde_json::from_str::<SkipRecord>(l).ok())
}

/// Reads a small text file the guest wrote, trimmed; `None` if it is missing or empty.
pub fn read_fact(dir: &Path, name: &str) -> Option<String> {
    let s = guest_files::read(&dir.join(name)).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The last lines of a file the guest wrote, on one line.
pub(super) fn tail_of(dir: &Path, name: &str) -> String {
    let text = read_fact(dir, name).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(5).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// Reads what binary `name` left in the shared directory.
pub fn read_binary(dir: &Path, name: &str) -> BinaryOutput {
    BinaryOutput {
        name: name.to_string(),
        list: guest_files::read(&dir.join(files::list(name))).ok(),
        jsonl: guest_files::read(&dir.join(format!("{name}.jsonl"))).unwrap_or_default(),
        rc: read_fact(dir, &format!("{name}.rc")).and_then(|s| s.parse().ok()),
        stderr_tail: tail_of(dir, &format!("{name}.stderr")),
    }
}

/// Reads `features.json` as the probe binary wrote it; an error names what is wrong with it.
pub fn read_probes(dir: &Path) -> Result<BTreeMap<String, Probe>, String> {
    let path = dir.join(files::FEATURES);
    let text = guest_files::read(&path)
        .map_err(|e| format!("the feature probe wrote no {}: {e}", files::FEATURES))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not valid: {e}", files::FEATURES))
}
