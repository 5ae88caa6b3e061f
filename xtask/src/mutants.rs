//! `cargo xtask mutants`: shows that the verdicts catch planted defects. It plants each defect
//! the batch wrapper once had or could have in `tests/src/maps/batch.rs` of a throw-away git worktree of `HEAD` (never the
//! real tree; uncommitted changes are not in it) and runs `vm-test --filter batch` there on one
//! kernel (one guest build and boot per mutant), naming the tests that failed; then the three
//! losses the verdicts once let through: a test module switched off (`vm-test` must name the missing tests),
//! a WARN after 20,000 kernel log records (`vm-run` must exit non-zero) and a broken bloom
//! probe under `bench-vm` (it must fail). An unmutated batch run goes first: if it fails, no
//! mutant's failure would mean anything. A mutant nothing catches, or one that no longer applies
//! to its file, fails the run.
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use xshell::{cmd, Shell};

use bpfvm_host::support::output::Events;
use bpfvm_host::support::paths::{target_dir, workspace_root};

/// The file the batch mutants edit.
const WRAPPER: &str = "tests/src/maps/batch.rs";

/// One planted defect: text replacements in `file`, each of which must match exactly once,
/// the run that must catch it, and what that run must name: a caught mutant is a run that
/// judged the kernel bad (exit status 1, never a build that failed or a VM that crashed) and
/// named this among its failures.
pub(crate) struct Mutant {
    pub(crate) name: &'static str,
    pub(crate) what: &'static str,
    file: &'static str,
    edits: &'static [(&'static str, &'static str)],
    check: Check,
    must_name: &'static str,
}

/// The run a mutant must fail.
#[derive(Clone, Copy)]
enum Check {
    /// `vm-test --filter F`: caught when a test (or a `guest:` entry) fails in its report.
    VmTest(&'static str),
    /// `vm-run --append printk.devkmsg=on -- sh -c SCRIPT`: caught when it exits non-zero.
    VmRun(&'static str),
    /// `bench-vm --smoke --only GROUP`: caught when it exits non-zero.
    BenchSmoke(&'static str),
}

/// 20,000 lines to /dev/kmsg, then a WARN-shaped block: past the old 8,192-record copy.
const FLOOD_THEN_WARN: &str = "i=0; while [ $i -lt 20000 ]; do echo \"flood $i\" > /dev/kmsg; \
    i=$((i+1)); done; for l in '------------[ cut here ]------------' \
    'WARNING: CPU: 0 PID: 1 at kernel/bpf/syscall.c:512 planted_after_a_flood+0x1/0x2' \
    '---[ end trace 0000000000000000 ]---'; do echo \"$l\" > /dev/kmsg; done";

pub(crate) const MUTANTS: &[Mutant] = &[
    Mutant {
        name: "drop_last_batch",
        what: "the batch that ends with ENOENT loses its entries",
        file: WRAPPER,
        edits: &[(
            "        let got = copied(count, got)?;\n",
            "        let got = copied(count, got)?;\n        let got = if end { 0 } else { got };\n",
        )],
        check: Check::VmTest("batch"),
        must_name: "batch::",
    },
    Mutant {
        name: "clamp_count",
        what: "a kernel count above the request is clamped to it",
        file: WRAPPER,
        edits: &[(
            "    if reported > requested {\n        return Err(BatchError::Overreported {\n            requested,\n            reported,\n        });\n    }\n    Ok(reported as usize)",
            "    Ok(reported.min(requested) as usize)",
        )],
        check: Check::VmTest("batch"),
        must_name: "batch::",
    },
    Mutant {
        name: "inflate_count",
        what: "one entry more than the kernel copied",
        file: WRAPPER,
        edits: &[("    Ok(reported as usize)\n", "    Ok(reported as usize + 1)\n")],
        check: Check::VmTest("batch"),
        must_name: "batch::",
    },
    Mutant {
        name: "retry_enospc_after_partial_copy",
        what: "a short batch is taken for ENOSPC and retried from the old token",
        file: WRAPPER,
        edits: &[
            (
                "        let got = copied(count, got)?;\n",
                "        let got = copied(count, got)?;\n        if !end && got > 0 && got < n {\n            return Err(BatchError::NoSpace { processed: got as u32 });\n        }\n",
            ),
            (
                "Err(BatchError::NoSpace { processed: 0 }) => {",
                "Err(BatchError::NoSpace { .. }) => {",
            ),
        ],
        check: Check::VmTest("batch"),
        must_name: "batch::",
    },
    Mutant {
        name: "stride_by_online_cpus",
        what: "per-CPU values laid out by the online CPU count",
        file: WRAPPER,
        edits: &[(
            "            features::possible_cpus()?,",
            "            aya::util::online_cpus().map_err(|(_, e)| e)?.len(),",
        )],
        check: Check::VmTest("batch"),
        must_name: "batch::",
    },
    Mutant {
        name: "zero_token_after_nothing_copied",
        what: "a call that copied nothing returns a zero token",
        file: WRAPPER,
        edits: &[(
            "        } else if got == 0 {\n            // Nothing copied: the kernel wrote no out_batch, so the position has not moved.\n            from.cloned()\n        } else {",
            "        } else {",
        )],
        check: Check::VmTest("batch"),
        must_name: "batch::",
    },
    Mutant {
        name: "module_switched_off",
        what: "the bpf_loop test module is compiled out (#[cfg(any())])",
        file: "tests/src/tests/mod.rs",
        edits: &[("\nmod bpf_loop;\n", "\n#[cfg(any())]\nmod bpf_loop;\n")],
        check: Check::VmTest("bpf_loop"),
        must_name: "guest:inventory",
    },
    Mutant {
        name: "ignored_test",
        what: "a bpf_loop test switched off with #[ignore]",
        file: "tests/src/tests/bpf_loop.rs",
        edits: &[(
            "#[test]\nfn constant_zero_flags_are_inlined()",
            "#[test]\n#[ignore]\nfn constant_zero_flags_are_inlined()",
        )],
        check: Check::VmTest("bpf_loop"),
        must_name: "bpf_loop::constant_zero_flags_are_inlined",
    },
    Mutant {
        name: "warn_after_20000_records",
        what: "a WARN logged after 20,000 kernel log records",
        file: "",
        edits: &[],
        check: Check::VmRun(FLOOD_THEN_WARN),
        must_name: "planted_after_a_flood",
    },
    Mutant {
        name: "broken_bloom_probe",
        what: "the bloom filter probe creates its map with value_size 0 (EINVAL)",
        file: "tests/src/features.rs",
        edits: &[(
            "bpf_map_type::BPF_MAP_TYPE_BLOOM_FILTER as u32,\n                0,\n                4,\n",
            "bpf_map_type::BPF_MAP_TYPE_BLOOM_FILTER as u32,\n                0,\n                0,\n",
        )],
        check: Check::BenchSmoke("bloom"),
        must_name: "should have bloom_filter_map",
    },
    Mutant {
        name: "erring_inlining_probe",
        what: "the bpf_loop inlining probe errs on a kernel that has the helper",
        file: "tests/src/features.rs",
        edits: &[(
            "        Probe::Present => {}\n        Probe::Absent(why) => return Probe::Absent(format!(\"no bpf_loop helper: {why}\")),",
            "        Probe::Present => return Probe::Error(\"planted: the probe errs\".into()),\n        Probe::Absent(why) => return Probe::Absent(format!(\"no bpf_loop helper: {why}\")),",
        )],
        check: Check::BenchSmoke("bpf_loop"),
        must_name: "the bpf_loop inlining probe failed",
    },
];

/// What one run (the unmutated baseline or a mutant) gave.
pub(crate) struct Outcome {
    pub(crate) name: &'static str,
    /// The text that must appear among the failures (empty for the baseline).
    pub(crate) must_name: &'static str,
    /// The tests that failed (or died, or were not run).
    pub(crate) failed: Vec<String>,
    /// Why the run judged nothing (no report: a build or boot failure).
    pub(crate) error: Option<String>,
    pub(crate) elapsed: Duration,
}

impl Outcome {
    /// Judged bad, naming what it must: a run that judged nothing (the plant did not build,
    /// qemu crashed: `error`) or that failed for another reason caught nothing.
    fn caught(&self) -> bool {
        self.error.is_none() && self.failed.iter().any(|f| f.contains(self.must_name))
    }
}

/// Plant each defect (the batch wrapper's, and three losses the verdicts once let through) in a throw-away
/// worktree of HEAD and run what must catch it; prints what caught each. Non-zero exit when a
/// mutant survives.
#[derive(Args)]
pub(crate) struct Options {
    #[arg(long, default_value = "6.1")]
    kernel: String,
    /// Only these mutants (repeatable; the baseline always runs).
    #[arg(long, value_name = "NAME")]
    only: Vec<String>,
}

/// Runs the baseline and every mutant, prints the table; fails if a mutant survived.
pub(crate) fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    if let Some(bad) = opts
        .only
        .iter()
        .find(|n| !MUTANTS.iter().any(|m| m.name == *n))
    {
        let names: Vec<&str> = MUTANTS.iter().map(|m| m.name).collect();
        bail!(
            "--only {bad}: no such mutant; the mutants are {}",
            names.join(", ")
        );
    }
    let outcomes = run_all(&opts.kernel, &opts.only, events)?;
    outln!("{}", table(&outcomes));
    Ok(bpfvm::exit_if(all_caught(&outcomes)))
}

/// Runs the baseline and every mutant (or those `only` names) on `kernel`; returns their
/// outcomes, baseline first.
fn run_all(kernel: &str, only: &[String], events: &Events) -> Result<Vec<Outcome>> {
    let base = target_dir().join("mutants");
    let tree = Worktree::add(&base.join("tree"))?;
    // A target directory of its own: the mutants' guest builds and reports stay out of the
    // caller's, and survive between runs so only the test crate rebuilds.
    let target = base.join("target");
    let mut outcomes = Vec::new();
    let baseline = run_check(
        &tree.path,
        &target,
        kernel,
        "baseline",
        Check::VmTest("batch"),
        "",
        events,
    )?;
    if !baseline.failed.is_empty() || baseline.error.is_some() {
        bail!(
            "the unmutated batch tests fail on {kernel} ({}); fix them before mutating",
            baseline
                .error
                .clone()
                .unwrap_or_else(|| baseline.failed.join(", "))
        );
    }
    outcomes.push(baseline);
    for m in MUTANTS
        .iter()
        .filter(|m| only.is_empty() || only.iter().any(|n| n == m.name))
    {
        events.step(format!("mutant {}: {}", m.name, m.what));
        tree.reset()?;
        if !m.edits.is_empty() {
            plant(&tree.path.join(m.file), m)?;
        }
        outcomes.push(run_check(
            &tree.path,
            &target,
            kernel,
            m.name,
            m.check,
            m.must_name,
            events,
        )?);
    }
    Ok(outcomes)
}

/// Whether every mutant was caught (the baseline is the first outcome).
fn all_caught(outcomes: &[Outcome]) -> bool {
    outcomes.iter().skip(1).all(Outcome::caught)
}

/// The closing table: each run, its time, and the tests that caught it.
fn table(outcomes: &[Outcome]) -> String {
    let mut out = String::from("| mutant | time | caught by |\n| --- | --- | --- |\n");
    for (i, o) in outcomes.iter().enumerate() {
        let verdict = match (&o.error, i) {
            (Some(e), _) => format!("NOT JUDGED: {e}"),
            (None, 0) => "(baseline: every batch test passed)".to_string(),
            (None, _) if o.failed.is_empty() => "SURVIVED: no test failed".to_string(),
            (None, _) if !o.caught() => format!(
                "SURVIVED: nothing named `{}` failed ({})",
                o.must_name,
                o.failed.join(", ")
            ),
            (None, _) => {
                // What it had to name first.
                let mut failed: Vec<&str> = o.failed.iter().map(String::as_str).collect();
                failed.sort_by_key(|f| !f.contains(o.must_name));
                let shown: Vec<&str> = failed.iter().take(3).copied().collect();
                let more = o.failed.len().saturating_sub(shown.len());
                let tail = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                format!("{}{tail}", shown.join(", "))
            }
        };
        out.push_str(&format!(
            "| {} | {:.0} s | {verdict} |\n",
            o.name,
            o.elapsed.as_secs_f64()
        ));
    }
    out
}

/// Applies every edit of `m` to `file`; an edit whose text is not there exactly once means
/// the wrapper changed under the mutant.
fn plant(file: &Path, m: &Mutant) -> Result<()> {
    let mut text =
        std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?;
    for (find, replace) in m.edits {
        let n = text.matches(find).count();
        if n != 1 {
            bail!(
                "mutant {}: the text it replaces occurs {n} times in {} (expected once); \
                 the file changed: update the mutant in xtask/src/mutants.rs\n{find}",
                m.name,
                m.file
            );
        }
        text = text.replacen(find, replace, 1);
    }
    std::fs::write(file, text).with_context(|| format!("write {}", file.display()))
}

/// Runs `check` in `tree` on `kernel`: for `vm-test`, the failing tests from its report; for
/// `vm-run` and `bench-vm`, the lines of its stderr that say why it failed. Only exit status 1
/// is a verdict (docs/exit-status.md): any other non-zero status judged nothing.
fn run_check(
    tree: &Path,
    target: &Path,
    kernel: &str,
    name: &'static str,
    check: Check,
    must_name: &'static str,
    events: &Events,
) -> Result<Outcome> {
    let report = target.join("vm-test").join(kernel).join("report.json");
    let _ = std::fs::remove_file(&report);
    let sh = Shell::new()?;
    sh.change_dir(tree);
    let start = Instant::now();
    let command = match check {
        Check::VmTest(filter) => cmd!(
            sh,
            "cargo xtask vm-test --kernel {kernel} --filter {filter}"
        ),
        Check::VmRun(script) => cmd!(
            sh,
            "cargo xtask vm-run --kernel {kernel} --append printk.devkmsg=on -- sh -c {script}"
        ),
        Check::BenchSmoke(group) => {
            cmd!(
                sh,
                "cargo xtask bench-vm --smoke --kernel {kernel} --only {group}"
            )
        }
    };
    let run = command
        .env("CARGO_TARGET_DIR", target)
        .ignore_status()
        .quiet()
        .output()
        .context("run cargo xtask in the mutant's worktree")?;
    let elapsed = start.elapsed();
    let stderr = String::from_utf8_lossy(&run.stderr);
    let code = run.status.code();
    let (failed, error) = match check {
        _ if !matches!(code, Some(0) | Some(1)) => {
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            (
                vec![],
                Some(format!(
                    "exit status {}, not a verdict: {}",
                    code.map_or("none (a signal)".to_string(), |c| c.to_string()),
                    last.unwrap_or("no output")
                )),
            )
        }
        Check::VmTest(_) => match failed_tests(&report) {
            Ok(failed) => (failed, None),
            Err(e) => {
                let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
                (
                    vec![],
                    Some(format!("{e:#}; {}", last.unwrap_or("no output"))),
                )
            }
        },
        Check::VmRun(_) | Check::BenchSmoke(_) if run.status.success() => (vec![], None),
        Check::VmRun(_) | Check::BenchSmoke(_) => (failure_lines(&stderr, must_name), None),
    };
    events.note(format!(
        "{name}: {} failures in {:.0} s",
        failed.len(),
        elapsed.as_secs_f64()
    ));
    Ok(Outcome {
        name,
        must_name,
        failed,
        error,
        elapsed,
    })
}

/// The warning and error lines of a run's stderr and those naming `must_name` (a splat's
/// lines follow its warning), each cut to 200 characters (at least one).
fn failure_lines(stderr: &str, must_name: &str) -> Vec<String> {
    let mut lines: Vec<String> = stderr
        .lines()
        .filter(|l| l.starts_with("warning:") || l.starts_with("error:") || l.contains(must_name))
        .map(|l| l.chars().take(200).collect())
        .collect();
    if lines.is_empty() {
        lines.push("exited non-zero".into());
    }
    lines
}

/// The tests of a vm-test report whose outcome is neither pass nor skip: the failed ones
/// first, then those that died or never ran (after a test process died), each with its outcome.
fn failed_tests(report: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(report)
        .with_context(|| format!("no report at {}", report.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parse {}", report.display()))?;
    let tests = json["tests"]
        .as_array()
        .with_context(|| format!("{} has no tests list", report.display()))?;
    let mut failed: Vec<(bool, String)> = tests
        .iter()
        .filter_map(|t| {
            let outcome = t["outcome"].as_str().unwrap_or("unknown");
            let name = t["name"].as_str()?;
            (!matches!(outcome, "pass" | "skip"))
                .then(|| (outcome != "fail", format!("{name} ({outcome})")))
        })
        .collect();
    failed.sort();
    Ok(failed.into_iter().map(|(_, name)| name).collect())
}

/// A detached git worktree of `HEAD`, removed on drop.
struct Worktree {
    path: PathBuf,
}

impl Worktree {
    fn add(path: &Path) -> Result<Self> {
        let sh = Shell::new()?;
        sh.change_dir(workspace_root());
        if path.exists() {
            // Left by an interrupted run.
            if cmd!(sh, "git worktree remove --force {path}")
                .quiet()
                .run()
                .is_err()
            {
                std::fs::remove_dir_all(path)
                    .with_context(|| format!("remove the old worktree {}", path.display()))?;
            }
            cmd!(sh, "git worktree prune").quiet().run()?;
        }
        cmd!(sh, "git worktree add --detach {path} HEAD")
            .quiet()
            .run()
            .context("git worktree add for the mutants")?;
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    /// Undoes the last mutant.
    fn reset(&self) -> Result<()> {
        let sh = Shell::new()?;
        sh.change_dir(&self.path);
        cmd!(sh, "git checkout -- .")
            .quiet()
            .run()
            .context("reset the mutants' worktree")
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        if let Ok(sh) = Shell::new() {
            sh.change_dir(workspace_root());
            let path = &self.path;
            let _ = cmd!(sh, "git worktree remove --force {path}").quiet().run();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plant that did not build or a VM that crashed (no verdict), and a failure that does
    /// not name what the plant breaks, catch nothing.
    #[test]
    fn a_mutant_is_caught_only_by_a_verdict_naming_what_it_must() {
        let outcome = |failed: &[&str], error: Option<&str>| Outcome {
            name: "m",
            must_name: "guest:inventory",
            failed: failed.iter().map(|f| f.to_string()).collect(),
            error: error.map(str::to_string),
            elapsed: Duration::ZERO,
        };
        assert!(outcome(&["guest:inventory (fail)"], None).caught());
        assert!(
            !outcome(&["bloom_filter::x (fail)"], None).caught(),
            "another failure"
        );
        let crashed = outcome(&[], Some("exit status 255, not a verdict: qemu crashed"));
        assert!(!crashed.caught(), "a run that judged nothing");
        assert!(!outcome(&[], None).caught());
        assert!(table(&[outcome(&[], None), outcome(&["x (fail)"], None)])
            .contains("SURVIVED: nothing named `guest:inventory` failed (x (fail))"));
    }

    /// Every mutant still applies to its file as committed, and changes it.
    #[test]
    fn every_mutant_applies_to_its_file() {
        for m in MUTANTS.iter().filter(|m| !m.edits.is_empty()) {
            let original = std::fs::read_to_string(workspace_root().join(m.file)).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let copy = dir.path().join("file.rs");
            std::fs::write(&copy, &original).unwrap();
            plant(&copy, m).unwrap_or_else(|e| panic!("{e:#}"));
            assert_ne!(
                std::fs::read_to_string(&copy).unwrap(),
                original,
                "{}",
                m.name
            );
        }
    }

    #[test]
    fn a_mutant_that_no_longer_applies_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("batch.rs");
        std::fs::write(&copy, "fn main() {}\n").unwrap();
        let e = plant(&copy, &MUTANTS[0]).unwrap_err().to_string();
        assert!(
            e.contains("drop_last_batch") && e.contains("0 times"),
            "{e}"
        );
    }
}
