//! `cargo xtask mutants`: shows that the batch tests catch a wrong batch wrapper. It plants each
//! defect issue 25 names in `tests/src/maps/batch.rs` of a throw-away git worktree of `HEAD`
//! (never the real tree; uncommitted changes are not in it), runs `vm-test --filter batch` there
//! on one kernel (one guest build and boot per mutant), and names the tests that failed. An
//! unmutated run goes first: if it fails, no mutant's failure would mean anything. A mutant no
//! test catches, or one that no longer applies to the wrapper, fails the run.
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use xshell::{cmd, Shell};

use bpfvm_host::output::Events;
use bpfvm_host::paths::{target_dir, workspace_root};

/// The file every mutant edits.
const WRAPPER: &str = "tests/src/maps/batch.rs";

/// One planted defect: text replacements, each of which must match the wrapper exactly once.
pub(crate) struct Mutant {
    pub(crate) name: &'static str,
    pub(crate) what: &'static str,
    edits: &'static [(&'static str, &'static str)],
}

pub(crate) const MUTANTS: &[Mutant] = &[
    Mutant {
        name: "drop_last_batch",
        what: "the batch that ends with ENOENT loses its entries",
        edits: &[(
            "        let got = copied(count, got)?;\n",
            "        let got = copied(count, got)?;\n        let got = if end { 0 } else { got };\n",
        )],
    },
    Mutant {
        name: "clamp_count",
        what: "a kernel count above the request is clamped to it",
        edits: &[(
            "    if reported > requested {\n        return Err(BatchError::Overreported {\n            requested,\n            reported,\n        });\n    }\n    Ok(reported as usize)",
            "    Ok(reported.min(requested) as usize)",
        )],
    },
    Mutant {
        name: "inflate_count",
        what: "one entry more than the kernel copied",
        edits: &[("    Ok(reported as usize)\n", "    Ok(reported as usize + 1)\n")],
    },
    Mutant {
        name: "retry_enospc_after_partial_copy",
        what: "a short batch is taken for ENOSPC and retried from the old token",
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
    },
    Mutant {
        name: "stride_by_online_cpus",
        what: "per-CPU values laid out by the online CPU count",
        edits: &[(
            "            features::possible_cpus()?,",
            "            aya::util::online_cpus().map_err(|(_, e)| e)?.len(),",
        )],
    },
    Mutant {
        name: "zero_token_after_nothing_copied",
        what: "a call that copied nothing returns a zero token",
        edits: &[(
            "        } else if got == 0 {\n            // Nothing copied: the kernel wrote no out_batch, so the position has not moved.\n            from.cloned()\n        } else {",
            "        } else {",
        )],
    },
];

/// What one run (the unmutated baseline or a mutant) gave.
pub(crate) struct Outcome {
    pub(crate) name: &'static str,
    /// The tests that failed (or died, or were not run).
    pub(crate) failed: Vec<String>,
    /// Why the run judged nothing (no report: a build or boot failure).
    pub(crate) error: Option<String>,
    pub(crate) elapsed: Duration,
}

impl Outcome {
    fn caught(&self) -> bool {
        self.error.is_none() && !self.failed.is_empty()
    }
}

/// Plant each batch wrapper defect of issue 25 in a throw-away worktree of HEAD and run
/// `vm-test --filter batch` on it; prints which test caught each. Non-zero exit when a
/// mutant survives.
#[derive(Args)]
pub(crate) struct Options {
    #[arg(long, default_value = "6.1")]
    kernel: String,
}

/// Runs the baseline and every mutant, prints the table; fails if a mutant survived.
pub(crate) fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    let outcomes = run_all(&opts.kernel, events)?;
    outln!("{}", table(&outcomes));
    Ok(crate::exit_if(all_caught(&outcomes)))
}

/// Runs the baseline and every mutant on `kernel`; returns their outcomes, baseline first.
fn run_all(kernel: &str, events: &Events) -> Result<Vec<Outcome>> {
    let base = target_dir().join("mutants");
    let tree = Worktree::add(&base.join("tree"))?;
    // A target directory of its own: the mutants' guest builds and reports stay out of the
    // caller's, and survive between runs so only the test crate rebuilds.
    let target = base.join("target");
    let mut outcomes = Vec::new();
    let baseline = vm_test(&tree.path, &target, kernel, "baseline", events)?;
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
    for m in MUTANTS {
        events.step(format!("mutant {}: {}", m.name, m.what));
        tree.reset()?;
        plant(&tree.path.join(WRAPPER), m)?;
        outcomes.push(vm_test(&tree.path, &target, kernel, m.name, events)?);
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
            (None, _) => {
                let shown: Vec<&str> = o.failed.iter().take(3).map(String::as_str).collect();
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
                "mutant {}: the text it replaces occurs {n} times in {WRAPPER} (expected once); \
                 the wrapper changed: update the mutant in xtask/src/mutants.rs\n{find}",
                m.name
            );
        }
        text = text.replacen(find, replace, 1);
    }
    std::fs::write(file, text).with_context(|| format!("write {}", file.display()))
}

/// `cargo xtask vm-test --kernel K --filter batch` in `tree`; reads the failing tests from its
/// report.
fn vm_test(
    tree: &Path,
    target: &Path,
    kernel: &str,
    name: &'static str,
    events: &Events,
) -> Result<Outcome> {
    let report = target.join("vm-test").join(kernel).join("report.json");
    let _ = std::fs::remove_file(&report);
    let sh = Shell::new()?;
    sh.change_dir(tree);
    let start = Instant::now();
    let run = cmd!(sh, "cargo xtask vm-test --kernel {kernel} --filter batch")
        .env("CARGO_TARGET_DIR", target)
        .ignore_status()
        .quiet()
        .output()
        .context("run cargo xtask vm-test in the mutant's worktree")?;
    let elapsed = start.elapsed();
    let (failed, error) = match failed_tests(&report) {
        Ok(failed) => (failed, None),
        Err(e) => {
            let stderr = String::from_utf8_lossy(&run.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            (
                vec![],
                Some(format!("{e:#}; {}", last.unwrap_or("no output"))),
            )
        }
    };
    events.note(format!(
        "{name}: {} failing tests in {:.0} s",
        failed.len(),
        elapsed.as_secs_f64()
    ));
    Ok(Outcome {
        name,
        failed,
        error,
        elapsed,
    })
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

    /// Every mutant still applies to the wrapper as committed, and changes it.
    #[test]
    fn every_mutant_applies_to_the_wrapper() {
        let path = workspace_root().join(WRAPPER);
        let original = std::fs::read_to_string(&path).unwrap();
        for m in MUTANTS {
            let dir = tempfile::tempdir().unwrap();
            let copy = dir.path().join("batch.rs");
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
