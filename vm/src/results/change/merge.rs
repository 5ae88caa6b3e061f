//! The change verdicts of a matrix's jobs (one `--against` run per kernel, each its own
//! `change.json`) merged into one: the same two revisions and options in every job, each
//! kernel judged by exactly one job, and a kernel the list expects that no job judged made a
//! kernel that could not be judged (exit 255), never a pass.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::model::{Change, KernelChange, JSON};
use crate::support::status::Status;

/// One job's `change.json` and where it was found.
#[derive(Debug, Clone)]
pub struct Job {
    pub path: PathBuf,
    pub change: Change,
}

/// Every `change.json` under `dirs` (download-artifact's layouts: one artifact in the path
/// itself, several each in a directory of its name), sorted by path.
pub fn find(dirs: &[PathBuf]) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    for dir in dirs {
        if !dir.is_dir() {
            bail!(
                "{} is not a directory: give the directories the jobs' change artifacts were \
                 downloaded into",
                dir.display()
            );
        }
        walk(dir, &mut jobs)?;
    }
    jobs.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(jobs)
}

fn walk(dir: &Path, jobs: &mut Vec<Job>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("read {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(&path, jobs)?;
        } else if path.file_name().is_some_and(|n| n == JSON) {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("read {}", path.display()))?;
            let change = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a change.json", path.display()))?;
            jobs.push(Job { path, change });
        }
    }
    Ok(())
}

/// The jobs' changes as one, its kernels in `expected`'s order (the `--kernel` list the
/// matrix ran). Refused (an error naming both jobs) when two jobs compared other revisions or
/// with other options, or judged the same (test, kernel); refused too for a kernel the list
/// does not have. A kernel of the list no job judged is in the merge as one that could not be
/// judged, named.
pub fn merge(expected: &[String], jobs: &[Job]) -> Result<Change> {
    let Some(first) = jobs.first() else {
        bail!("no change.json under the directories given: no job's verdict to merge");
    };
    agree(first, &jobs[1..])?;
    judged_once(expected, jobs)?;
    let mut change = Change {
        kernels: vec![],
        tests: vec![],
        verifier: vec![],
        cost: vec![],
        status: Status::Good,
        exit_status: 0,
        ..first.change.clone()
    };
    for kernel in expected {
        let job = jobs
            .iter()
            .find(|j| j.change.kernels.iter().any(|k| &k.kernel == kernel));
        let Some(job) = job else {
            change.kernels.push(KernelChange {
                kernel: kernel.clone(),
                status: Status::Stopped,
                problem: Some(
                    "no job's change.json judged it: its job failed before writing one, or its \
                     artifact was not downloaded"
                        .into(),
                ),
                base_cached: false,
            });
            continue;
        };
        let of = |k: &String| k == kernel;
        let c = &job.change;
        change
            .kernels
            .extend(c.kernels.iter().filter(|k| of(&k.kernel)).cloned());
        change
            .tests
            .extend(c.tests.iter().filter(|t| of(&t.kernel)).cloned());
        change
            .verifier
            .extend(c.verifier.iter().filter(|p| of(&p.kernel)).cloned());
        change
            .cost
            .extend(c.cost.iter().filter(|x| of(&x.kernel)).cloned());
    }
    change
        .tests
        .sort_by(|a, b| (a.category, &a.kernel, &a.test).cmp(&(b.category, &b.kernel, &b.test)));
    change.judge();
    Ok(change)
}

/// Refused unless every job compared the same revisions with the same options as `first`.
fn agree(first: &Job, jobs: &[Job]) -> Result<()> {
    for job in jobs {
        let (a, b) = (&first.change, &job.change);
        let differ = |what: &str, x: &str, y: &str| {
            anyhow::anyhow!(
                "{} and {} compared different {what} ({x} and {y}): their verdicts are not one \
                 change's",
                first.path.display(),
                job.path.display()
            )
        };
        if a.base.commit != b.base.commit {
            return Err(differ("bases", &a.base.commit, &b.base.commit));
        }
        if a.head.commit != b.head.commit {
            return Err(differ("heads", &a.head.commit, &b.head.commit));
        }
        if a.reruns != b.reruns {
            let (x, y) = (a.reruns.to_string(), b.reruns.to_string());
            return Err(differ("--reruns", &x, &y));
        }
        if a.verifier_threshold_pct != b.verifier_threshold_pct {
            let pct = |p: Option<f64>| p.map_or("none".into(), |p| format!("{p}%"));
            let (x, y) = (pct(a.verifier_threshold_pct), pct(b.verifier_threshold_pct));
            return Err(differ("--verifier-threshold", &x, &y));
        }
    }
    Ok(())
}

/// Refused when two jobs judged the same kernel or (test, kernel), or a job judged a kernel
/// `expected` does not have.
fn judged_once(expected: &[String], jobs: &[Job]) -> Result<()> {
    // Who judged each (test, kernel) and each kernel: a second judge is refused.
    let mut judged: std::collections::HashMap<(&str, &str), &Path> = Default::default();
    for job in jobs {
        let kernels = job.change.kernels.iter().map(|k| (k.kernel.as_str(), ""));
        let tests = job.change.tests.iter();
        let tests = tests.map(|t| (t.kernel.as_str(), t.test.as_str()));
        for (kernel, test) in kernels.chain(tests) {
            if let Some(other) = judged.insert((kernel, test), &job.path) {
                if other == job.path {
                    bail!("{} judged {test} on {kernel} twice", job.path.display());
                }
                let what = if test.is_empty() {
                    format!("kernel {kernel}")
                } else {
                    format!("{test} on kernel {kernel}")
                };
                bail!(
                    "{} and {} both judged {what}: one job per kernel (a job judged twice, or \
                     two artifacts of one job were downloaded)",
                    other.display(),
                    job.path.display()
                );
            }
        }
        for k in &job.change.kernels {
            if !expected.contains(&k.kernel) {
                bail!(
                    "{} judged kernel {}, which the kernel list ({}) does not have",
                    job.path.display(),
                    k.kernel,
                    expected.join(",")
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use test_case::test_case;

    use super::*;
    use crate::results::change::{render, Category, Side};
    use crate::results::report::Outcome;

    /// Two jobs of a kernel matrix, `vm-test --kernel 6.1` (and `6.12`) `--filter
    /// maps::batch::unit --against` a base of the same commit, `--reruns 1`: written in
    /// change.json's shape from the inventory's 8 `maps::batch::unit` tests, each unchanged.
    fn job(kernel: &str) -> Job {
        let text = match kernel {
            "6.1" => include_str!("../../../tests/data/change-6.1.json"),
            _ => include_str!("../../../tests/data/change-6.12.json"),
        };
        Job {
            path: PathBuf::from(format!("artifacts/change-{kernel}/change.json")),
            change: serde_json::from_str(text).unwrap(),
        }
    }

    fn both() -> Vec<Job> {
        vec![job("6.1"), job("6.12")]
    }

    fn kernels() -> Vec<String> {
        vec!["6.1".into(), "6.12".into()]
    }

    #[test]
    fn the_jobs_of_a_kernel_matrix_make_one_verdict() {
        let jobs = both();
        let m = merge(&kernels(), &jobs).unwrap();
        let names: Vec<&str> = m.kernels.iter().map(|k| k.kernel.as_str()).collect();
        assert_eq!(names, ["6.1", "6.12"]);
        let each: usize = jobs.iter().map(|j| j.change.tests.len()).sum();
        assert!(each > 0);
        assert_eq!(m.tests.len(), each);
        assert_eq!((m.status, m.exit_status), (Status::Good, 0));
        assert_eq!(m.base, jobs[0].change.base);
        let md = render::markdown(&m, render::BUDGET);
        assert!(md.contains("6.12"), "{md}");
    }

    /// Two real jobs, recorded: on a scratch branch of this repository, `vm-test --kernel 6.1`
    /// (and `6.12`) `--filter smoke --against` its base, where `smoke::bpf_jit_is_enabled`
    /// fails at base and head, `smoke::hash_map_insert_lookup_remove_through_aya` fails at head
    /// on 6.12 only, and two BPF programs grew. 6.1's job exited 0, 6.12's 1.
    fn recorded(kernel: &str) -> Job {
        let text = match kernel {
            "6.1" => include_str!("../../../tests/data/change-plants-6.1.json"),
            _ => include_str!("../../../tests/data/change-plants-6.12.json"),
        };
        Job {
            path: PathBuf::from(format!("artifacts/change-{kernel}/change.json")),
            change: serde_json::from_str(text).unwrap(),
        }
    }

    #[test]
    fn recorded_jobs_merge_to_the_one_kernels_regression_and_blame_no_old_failure() {
        let jobs = [recorded("6.1"), recorded("6.12")];
        assert_eq!(
            [jobs[0].change.exit_status, jobs[1].change.exit_status],
            [0, 1]
        );
        let m = merge(&kernels(), &jobs).unwrap();
        assert_eq!((m.status, m.exit_status), (Status::Bad, 1));
        let named = |c: Category| -> Vec<(&str, &str)> {
            m.of(c)
                .map(|t| (t.kernel.as_str(), t.test.as_str()))
                .collect()
        };
        let hash_map = "smoke::hash_map_insert_lookup_remove_through_aya";
        assert_eq!(named(Category::Regression), [("6.12", hash_map)]);
        let jit = "smoke::bpf_jit_is_enabled";
        assert_eq!(named(Category::StillFailing), [("6.1", jit), ("6.12", jit)]);
        assert_eq!(m.tests[0].test, hash_map, "regressions first");
        // Every run of the regression: head's run and two reruns failed, base's three passed.
        let regression = &m.tests[0];
        assert_eq!(regression.outcomes(Side::Head), [Outcome::Fail; 3]);
        assert_eq!(regression.outcomes(Side::Base), [Outcome::Pass; 3]);
        // The programs that grew, on both kernels, listed and not failing the change.
        let progs: Vec<(&str, &str)> = m
            .verifier
            .iter()
            .map(|v| (v.kernel.as_str(), v.program.as_str()))
            .collect();
        for k in ["6.1", "6.12"] {
            assert!(progs.contains(&(k, "smoke/smoke")), "{progs:?}");
        }
        assert!(m.verifier.iter().all(|v| v.regression.is_none()));
        let md = render::markdown(&m, render::BUDGET);
        let regressions = md.find(hash_map).unwrap();
        assert!(regressions < md.find(jit).unwrap(), "{md}");
        let junit = render::junit(&m).unwrap();
        assert_eq!(junit.matches("<failure").count(), 1, "{junit}");
    }

    /// The merged status is the change's rule over every job's kernels and tests: a
    /// regression in one job is 1 even beside a kernel another job could not judge.
    #[test_case(&[], &[] => 0; "every kernel good")]
    #[test_case(&["6.12"], &[] => 1; "a regression on one kernel")]
    #[test_case(&[], &["6.1"] => 255; "a kernel whose base could not be judged")]
    #[test_case(&["6.12"], &["6.1"] => 1; "a regression beats a kernel not judged")]
    fn the_merged_exit_status(regressed: &[&str], stopped: &[&str]) -> u8 {
        let mut jobs = both();
        for j in &mut jobs {
            let c = &mut j.change;
            for t in c
                .tests
                .iter_mut()
                .filter(|t| regressed.contains(&t.kernel.as_str()))
            {
                t.category = Category::Regression;
            }
            for k in c
                .kernels
                .iter_mut()
                .filter(|k| stopped.contains(&k.kernel.as_str()))
            {
                k.status = Status::Stopped;
                k.problem = Some("the base cannot be judged".into());
            }
            c.judge();
        }
        let m = merge(&kernels(), &jobs).unwrap();
        if !regressed.is_empty() {
            let first = &m.tests[0];
            assert_eq!(
                (first.category, first.kernel.as_str()),
                (Category::Regression, "6.12")
            );
        }
        m.exit_status
    }

    #[test]
    fn a_job_missing_from_the_set_is_named_and_exits_255() {
        let m = merge(&kernels(), &[job("6.1")]).unwrap();
        assert_eq!((m.status, m.exit_status), (Status::Stopped, 255));
        let k = &m.kernels[1];
        assert_eq!((k.kernel.as_str(), k.status), ("6.12", Status::Stopped));
        let why = k.problem.as_deref().unwrap();
        assert!(why.contains("no job's change.json judged it"), "{why}");
        assert!(m.tests.iter().all(|t| t.kernel == "6.1"));
        let md = render::markdown(&m, render::BUDGET);
        assert!(md.contains("no job's change.json judged it"), "{md}");
    }

    fn refusal(jobs: &[Job]) -> String {
        let e = merge(&kernels(), jobs).unwrap_err();
        format!("{e:#}")
    }

    #[test]
    fn two_jobs_that_judged_the_same_kernel_or_test_are_refused() {
        let mut again = job("6.1");
        again.path = PathBuf::from("artifacts/change-6.1-retry/change.json");
        let e = refusal(&[job("6.1"), job("6.12"), again]);
        assert!(e.contains("both judged kernel 6.1"), "{e}");
        assert!(e.contains("change-6.1/change.json"), "{e}");
        assert!(e.contains("change-6.1-retry/change.json"), "{e}");
        // One test of 6.1 judged by 6.12's job too.
        let mut other = job("6.12");
        let mut t = job("6.1").change.tests[0].clone();
        let name = t.test.clone();
        t.runs.clear();
        other.change.tests.push(t);
        let e = refusal(&[job("6.1"), other]);
        assert!(
            e.contains(&format!("both judged {name} on kernel 6.1")),
            "{e}"
        );
    }

    #[test_case(|c| c.base.commit = "0".repeat(40), "different bases"; "another base")]
    #[test_case(|c| c.head.commit += "-dirty", "different heads"; "another head")]
    #[test_case(|c| c.reruns += 1, "different --reruns"; "other reruns")]
    #[test_case(|c| c.verifier_threshold_pct = Some(5.0), "different --verifier-threshold";
                "another threshold")]
    fn jobs_of_other_revisions_or_options_are_refused_naming_both(
        edit: fn(&mut Change),
        says: &str,
    ) {
        let mut other = job("6.12");
        edit(&mut other.change);
        let e = refusal(&[job("6.1"), other.clone()]);
        assert!(e.contains(says), "{e}");
        assert!(e.contains("artifacts/change-6.1/change.json"), "{e}");
        assert!(e.contains("artifacts/change-6.12/change.json"), "{e}");
    }

    #[test]
    fn a_kernel_outside_the_list_and_no_job_at_all_are_refused() {
        let e = merge(&["6.1".to_string()], &both())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("judged kernel 6.12, which the kernel list (6.1)"),
            "{e}"
        );
        let e = merge(&kernels(), &[]).unwrap_err().to_string();
        assert!(e.contains("no change.json"), "{e}");
    }

    #[test]
    fn change_files_are_found_in_artifact_directories() {
        let d = tempfile::tempdir().unwrap();
        for j in both() {
            let dir = d
                .path()
                .join(format!("vm-test-change-{}", j.change.kernels[0].kernel));
            render::write(&j.change, &dir).unwrap();
        }
        let found = find(&[d.path().to_path_buf()]).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(merge(&kernels(), &found).unwrap().exit_status, 0);
        let e = find(&[d.path().join("absent")]).unwrap_err().to_string();
        assert!(e.contains("is not a directory"), "{e}");
    }
}
