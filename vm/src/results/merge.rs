//! The pieces of a plan (`results::plan`), run on several machines, put back together into
//! one report per kernel, checked so that nothing is lost on the way: every piece of every
//! kernel's plan there exactly once, cut by the same plan from the same commit, on the same
//! kernel release, and every test of the plan run in exactly one piece. What does not hold is
//! a failing `merge:` entry naming the piece or test, and the merged run could not judge the
//! kernel whole (`Status::Stopped`) unless a piece found it bad. docs/pieces.md.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::results::plan::{cost_unit, KernelPlan, Kind};
use crate::results::report::{
    failed, is_test, summarize, Outcome, PieceInfo, Report, TestResult, Timings, VmEnding,
};
use crate::support::status::Status;

/// A piece's report as found, and where.
#[derive(Debug, Clone)]
pub struct Found {
    pub path: PathBuf,
    pub report: Report,
}

/// Every `report.json` under `dirs` (the pieces' artifacts, downloaded), sorted by path; the
/// guest's own files (`guest/`) are not looked into.
pub fn find(dirs: &[PathBuf]) -> Result<Vec<Found>> {
    let mut found = Vec::new();
    for dir in dirs {
        if !dir.is_dir() {
            anyhow::bail!(
                "{} is not a directory: give the directories the pieces' report artifacts \
                 were downloaded into",
                dir.display()
            );
        }
        walk(dir, &mut found)?;
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

fn walk(dir: &Path, found: &mut Vec<Found>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("read {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    entries.sort();
    // A run's directory: its report, and below it the run's own files (`guest/`, and a
    // selftests run's `boots/N/report.json`, each boot's part of that report), not pieces.
    let report = dir.join("report.json");
    if entries.contains(&report) {
        let text = std::fs::read_to_string(&report)
            .with_context(|| format!("read {}", report.display()))?;
        let parsed = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a report", report.display()))?;
        found.push(Found {
            path: report,
            report: parsed,
        });
        return Ok(());
    }
    for path in entries.into_iter().filter(|p| p.is_dir()) {
        walk(&path, found)?;
    }
    Ok(())
}

/// The merged run: one report per kernel of `plans`, and every problem found, each naming
/// the piece or test.
#[derive(Debug)]
pub struct Merged {
    pub reports: Vec<Report>,
    pub problems: Vec<String>,
}

impl Merged {
    /// The status of the run as a whole (`support::status`).
    pub fn status(&self) -> Status {
        let stopped = (!self.problems.is_empty()).then_some(Status::Stopped);
        Status::combine(self.reports.iter().map(Report::status).chain(stopped))
    }
}

/// Merges `found` into one report per kernel of `plans`, the plans this run was cut into (the
/// merge cuts them again from the same inputs); `commit` is the merge's own checkout's, which
/// every piece must have run.
pub fn merge(plans: &[KernelPlan], found: Vec<Found>, commit: Option<&str>) -> Merged {
    let mut problems = Vec::new();
    let mut by_plan: BTreeMap<&str, Vec<Found>> = BTreeMap::new();
    for f in found {
        let Some(piece) = &f.report.piece else {
            problems.push(format!(
                "{} is not a piece's report (it ran without --piece): give only the pieces' \
                 artifacts",
                f.path.display()
            ));
            continue;
        };
        match plans.iter().find(|p| p.hash == piece.plan) {
            Some(plan) => by_plan.entry(plan.hash.as_str()).or_default().push(f),
            None => problems.push(format!(
                "piece {} in {} was cut by another plan ({}, this run's: {}): its inventory, \
                 cost file or piece count differs; run it again from this run's plan",
                piece.piece,
                f.path.display(),
                piece.plan,
                plans
                    .iter()
                    .map(|p| format!("{} for {}", p.hash, p.kernel))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
    // A report that belongs to no kernel's plan is a problem of every kernel's verdict.
    let foreign = problems.clone();
    let mut reports = Vec::new();
    for plan in plans {
        let pieces = by_plan.remove(plan.hash.as_str()).unwrap_or_default();
        let (report, own) = merge_kernel(plan, pieces, commit, &foreign);
        problems.extend(own);
        reports.extend(report);
    }
    Merged { reports, problems }
}

/// One kernel's pieces merged, and what is wrong with them (each, after the run's `foreign`
/// ones, a failing `merge:` entry of the report); no report when no piece is there.
fn merge_kernel(
    plan: &KernelPlan,
    pieces: Vec<Found>,
    commit: Option<&str>,
    foreign: &[String],
) -> (Option<Report>, Vec<String>) {
    let kernel = format!("kernel {} ({})", plan.kernel, plan.arch);
    let info = |f: &Found| f.report.piece.clone().expect("grouped by their piece");
    let (unique, mut problems) = one_each(&kernel, plan, pieces);
    let Some(first) = unique.first() else {
        return (None, problems);
    };
    let first_release = (
        first.report.kernel.release.clone(),
        first.report.kernel.pinned_release.clone(),
    );
    let expected_commit = commit
        .map(str::to_string)
        .or_else(|| info(first).commit.clone());
    for f in &unique {
        let i = info(f);
        if i.commit != expected_commit {
            problems.push(format!(
                "{kernel}: piece {} ran commit {}, not {} ({}): run every piece from the \
                 merge's commit",
                i.piece,
                i.commit.as_deref().unwrap_or("none"),
                expected_commit.as_deref().unwrap_or("none"),
                f.path.display()
            ));
        }
        let release = (
            f.report.kernel.release.clone(),
            f.report.kernel.pinned_release.clone(),
        );
        if release != first_release {
            problems.push(format!(
                "{kernel}: piece {} booted {:?} (pin {:?}), piece {} {:?} (pin {:?})",
                i.piece,
                release.0,
                release.1,
                info(first).piece,
                first_release.0,
                first_release.1
            ));
        }
        let given = plan
            .pieces
            .iter()
            .find(|p| p.id.to_string() == i.piece)
            .map(|p| p.names());
        if given.as_ref() != Some(&i.tests) {
            problems.push(format!(
                "{kernel}: piece {} was given other tests than the plan gives it ({})",
                i.piece,
                f.path.display()
            ));
        }
    }
    problems.extend(check_tests(&kernel, plan, &unique));
    let mut report = combine(plan, &unique, expected_commit);
    for p in foreign.iter().chain(&problems) {
        report.tests.push(failed("merge:pieces".into(), p.clone()));
    }
    report.summary = summarize(&report.tests);
    let stopped = !(foreign.is_empty() && problems.is_empty());
    report.status = Some(Status::combine(
        unique
            .iter()
            .map(|f| f.report.status())
            .chain(stopped.then_some(Status::Stopped)),
    ));
    (Some(report), problems)
}

/// Each piece of `kernel`'s plan once, in the plan's order, and what is wrong: a piece there
/// twice (the first kept) or not at all.
fn one_each(kernel: &str, plan: &KernelPlan, mut pieces: Vec<Found>) -> (Vec<Found>, Vec<String>) {
    let info = |f: &Found| f.report.piece.clone().expect("grouped by their piece");
    pieces.sort_by_key(|f| piece_index(&info(f).piece));
    let mut problems = Vec::new();
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut unique = Vec::new();
    for f in pieces {
        let id = info(&f).piece;
        match seen.get(&id) {
            Some(first) => problems.push(format!(
                "{kernel}: piece {id} is there twice ({} and {}): give each piece's artifact once",
                first.display(),
                f.path.display()
            )),
            None => {
                seen.insert(id, f.path.clone());
                unique.push(f);
            }
        }
    }
    for p in &plan.pieces {
        if !seen.contains_key(&p.id.to_string()) {
            problems.push(format!(
                "{kernel}: piece {} has no report (its job failed before writing one, or its \
                 artifact was not downloaded): its {} tests did not run",
                p.id,
                p.tests.len()
            ));
        }
    }
    (unique, problems)
}

fn piece_index(id: &str) -> usize {
    id.split('/')
        .next()
        .and_then(|i| i.parse().ok())
        .unwrap_or(0)
}

/// Every test of the plan ran in exactly one piece, its own; none ran that the plan lacks. A
/// row counts as its plan's unit (a `test_progs` subtest as its test), but for the row of a
/// unit no boot ran (`upstream::not_run`); the selftests' rows of other binaries
/// (`test_maps`, `test_verifier`) are not in a plan and not checked here.
fn check_tests(kernel: &str, plan: &KernelPlan, pieces: &[Found]) -> Vec<String> {
    let mut ran: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let present: BTreeSet<String> = pieces
        .iter()
        .filter_map(|f| f.report.piece.as_ref().map(|p| p.piece.clone()))
        .collect();
    let planned = |unit: &str| {
        plan.kind != Kind::Selftests
            || unit.starts_with("test_progs/")
            || unit == crate::results::upstream::TEST_VERIFIER
    };
    for f in pieces {
        let id = f.report.piece.as_ref().map_or("", |p| p.piece.as_str());
        let units: BTreeSet<String> = f
            .report
            .tests
            .iter()
            .filter(|t| !crate::results::upstream::not_run(t))
            .filter_map(|t| cost_unit(plan.kind, &t.name))
            .filter(|u| planned(u))
            .collect();
        for u in units {
            ran.entry(u).or_default().push(id);
        }
    }
    let mut problems = Vec::new();
    for p in &plan.pieces {
        let here = present.contains(&p.id.to_string());
        for name in p.names() {
            match ran.remove(name.as_str()) {
                // A missing piece is named once, not each of its tests.
                None if !here => {}
                None => problems.push(format!(
                    "{kernel}: test {name} of piece {} never ran (its report has no row for it, \
                     or one that says it was not run)",
                    p.id
                )),
                Some(ids) if ids.len() > 1 => problems.push(format!(
                    "{kernel}: test {name} ran {} times (pieces {})",
                    ids.len(),
                    ids.join(", ")
                )),
                Some(_) => {}
            }
        }
    }
    for (name, ids) in ran {
        problems.push(format!(
            "{kernel}: test {name} ran in piece {} but the plan has no such test",
            ids.join(", ")
        ));
    }
    problems
}

/// The pieces' reports as one: the first piece's facts (kernel, accelerator, probes), every
/// piece's tests and splats, its entries once (a failing one, with its piece, over passing
/// ones), and the VM's ending of the first piece whose VM failed.
fn combine(plan: &KernelPlan, pieces: &[Found], commit: Option<String>) -> Report {
    let mut report = pieces[0].report.clone();
    let mut tests: Vec<TestResult> = Vec::new();
    let mut entries: BTreeMap<String, TestResult> = BTreeMap::new();
    report.kernel_splats.clear();
    report.reused.clear();
    for f in pieces {
        let id = f.report.piece.as_ref().map_or("", |p| p.piece.as_str());
        for t in &f.report.tests {
            if is_test(&t.name) {
                if !tests.iter().any(|seen| seen.name == t.name) {
                    tests.push(t.clone());
                }
                continue;
            }
            let mut t = t.clone();
            if t.outcome == Outcome::Fail {
                t.reason = Some(format!("piece {id}: {}", t.reason.unwrap_or_default()));
            }
            match entries.get(&t.name) {
                Some(kept) if kept.outcome == Outcome::Fail || t.outcome != Outcome::Fail => {}
                _ => {
                    entries.insert(t.name.clone(), t);
                }
            }
        }
        report
            .kernel_splats
            .extend(f.report.kernel_splats.iter().cloned());
        for r in &f.report.reused {
            if !report.reused.contains(r) {
                report.reused.push(r.clone());
            }
        }
        if let (VmEnding::Exited, VmEnding::Failed(why)) = (&report.vm.ending, &f.report.vm.ending)
        {
            report.vm.ending = VmEnding::Failed(format!("piece {id}: {why}"));
            report.vm.console_tail = f.report.vm.console_tail.clone();
        }
        report.vm.wall_time_s = report.vm.wall_time_s.max(f.report.vm.wall_time_s);
    }
    tests.extend(entries.into_values());
    tests.sort_by(|a, b| a.name.cmp(&b.name));
    report.timings = Timings {
        wall_s: pieces
            .iter()
            .filter_map(|f| f.report.timings.wall_s)
            .reduce(f64::max),
        ..Timings::default()
    };
    report.tests = tests;
    report.piece = Some(PieceInfo {
        plan: plan.hash.clone(),
        piece: format!(
            "merged: {}",
            pieces
                .iter()
                .filter_map(|f| f.report.piece.as_ref().map(|p| p.piece.clone()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        commit,
        tests: plan.pieces.iter().flat_map(|p| p.names()).collect(),
    });
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::arch::Arch;
    use crate::results::costs::Costs;
    use crate::results::plan::{Inputs, Unit};
    use crate::results::report::TestResult;

    const COMMIT: &str = "86633b7";

    fn plan() -> KernelPlan {
        let inputs = Inputs {
            kind: Kind::Suite,
            root: PathBuf::from("/nowhere"),
            kernel: "6.1".into(),
            arch: Arch::X86_64,
            accel: "tcg".into(),
        };
        let units = ["a::one", "a::two", "b::three", "b::four"]
            .iter()
            .map(|n| Unit {
                binary: "bpfvm_tests".into(),
                test: format!("tests::{n}"),
                name: n.to_string(),
            })
            .collect();
        KernelPlan::cut(&inputs, units, &Costs::default(), 2).unwrap()
    }

    fn row(name: &str, outcome: Outcome) -> TestResult {
        TestResult {
            name: name.into(),
            outcome,
            reason: None,
            duration_ms: 10,
            kernel_splats: vec![],
        }
    }

    /// Piece `i` of `plan` as `vm-test --piece` reports it: its tests passed, the probe's
    /// entry, the status, the plan, the commit.
    fn piece(plan: &KernelPlan, i: usize) -> Found {
        let p = &plan.pieces[i - 1];
        let mut r = Report::not_run("6.1", "");
        r.vm.ending = VmEnding::Exited;
        r.kernel.release = Some("6.1.0-57-cloud-amd64".into());
        r.accel.name = "tcg".into();
        r.tests = p.names().iter().map(|n| row(n, Outcome::Pass)).collect();
        r.tests.push(row("feature:bloom_filter_map", Outcome::Pass));
        r.summary = summarize(&r.tests);
        r.status = Some(Status::Good);
        r.piece = Some(PieceInfo {
            plan: plan.hash.clone(),
            piece: p.id.to_string(),
            commit: Some(COMMIT.into()),
            tests: p.names(),
        });
        Found {
            path: PathBuf::from(format!("artifacts/piece-{i}/6.1/report.json")),
            report: r,
        }
    }

    fn merged(pieces: Vec<Found>) -> Merged {
        merge(&[plan()], pieces, Some(COMMIT))
    }

    #[test]
    fn two_pieces_merge_into_the_whole_run() {
        let p = plan();
        let m = merged(vec![piece(&p, 2), piece(&p, 1)]);
        assert!(m.problems.is_empty(), "{:?}", m.problems);
        assert_eq!(m.status(), Status::Good);
        let r = &m.reports[0];
        let names: Vec<&str> = r.tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "a::one",
                "a::two",
                "b::four",
                "b::three",
                "feature:bloom_filter_map"
            ],
            "every test once, the probe's entry once"
        );
        assert_eq!(r.summary.passed, 5);
        assert_eq!(r.piece.as_ref().unwrap().piece, "merged: 1/2, 2/2");
    }

    #[test]
    fn a_failed_test_in_one_piece_fails_the_merged_run() {
        let p = plan();
        let mut two = piece(&p, 2);
        two.report.tests[0].outcome = Outcome::Fail;
        two.report.status = Some(Status::Bad);
        let m = merged(vec![piece(&p, 1), two]);
        assert!(m.problems.is_empty());
        assert_eq!(m.status(), Status::Bad);
        assert_eq!(m.reports[0].summary.failed, 1);
    }

    fn problems(pieces: Vec<Found>) -> Vec<String> {
        let m = merged(pieces);
        assert_eq!(m.status(), Status::Stopped, "{:?}", m.problems);
        let entries: Vec<&str> = m.reports[0]
            .tests
            .iter()
            .filter(|t| t.name == "merge:pieces")
            .filter_map(|t| t.reason.as_deref())
            .collect();
        assert_eq!(
            entries, m.problems,
            "each problem is an entry of the report"
        );
        m.problems
    }

    #[test]
    fn a_piece_whose_report_is_missing_is_named() {
        let p = plan();
        let got = problems(vec![piece(&p, 1)]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with("kernel 6.1 (x86_64): piece 2/2 has no report"),
            "{got:?}"
        );
    }

    #[test]
    fn a_piece_run_twice_is_named_with_both_reports() {
        let p = plan();
        let mut again = piece(&p, 1);
        again.path = PathBuf::from("artifacts/piece-1-rerun/6.1/report.json");
        let got = problems(vec![piece(&p, 1), again, piece(&p, 2)]);
        assert_eq!(
            got,
            [
                "kernel 6.1 (x86_64): piece 1/2 is there twice (artifacts/piece-1/6.1/report.json \
              and artifacts/piece-1-rerun/6.1/report.json): give each piece's artifact once"
            ]
        );
    }

    #[test]
    fn a_piece_of_another_plan_is_named_and_its_own_piece_is_missing() {
        let p = plan();
        let mut other = piece(&p, 2);
        other.report.piece.as_mut().unwrap().plan = "0123456789abcdef".into();
        let got = problems(vec![piece(&p, 1), other]);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0].starts_with("piece 2/2 in artifacts/piece-2/6.1/report.json was cut by another plan (0123456789abcdef"),
            "{got:?}"
        );
        assert!(got[1].contains("piece 2/2 has no report"), "{got:?}");
    }

    #[test]
    fn a_test_dropped_from_a_piece_s_report_never_ran_by_name() {
        let p = plan();
        let mut one = piece(&p, 1);
        let dropped = one.report.tests.remove(0).name;
        let got = problems(vec![one, piece(&p, 2)]);
        assert_eq!(
            got,
            [format!(
                "kernel 6.1 (x86_64): test {dropped} of piece 1/2 never ran (its report has no \
                 row for it, or one that says it was not run)"
            )]
        );
    }

    /// A selftests unit no boot ran has a failing row that says so (`flows::selftests::boots`):
    /// it did not run.
    #[test]
    fn a_test_whose_row_says_it_was_not_run_never_ran() {
        let p = plan();
        let mut one = piece(&p, 1);
        let unrun = one.report.tests[0].name.clone();
        one.report.tests[0] = crate::results::report::failed(
            unrun.clone(),
            format!(
                "{}boot 1 started no unit (it ran none of them), so the run stopped",
                crate::results::upstream::NOT_RUN
            ),
        );
        one.report.status = Some(Status::Stopped);
        let got = problems(vec![one, piece(&p, 2)]);
        assert_eq!(
            got,
            [format!(
                "kernel 6.1 (x86_64): test {unrun} of piece 1/2 never ran (its report has no \
                 row for it, or one that says it was not run)"
            )]
        );
    }

    #[test]
    fn a_test_run_in_two_pieces_is_named() {
        let p = plan();
        let mut two = piece(&p, 2);
        let stray = p.pieces[0].names()[0].clone();
        two.report.tests.push(row(&stray, Outcome::Pass));
        let got = problems(vec![piece(&p, 1), two]);
        assert_eq!(
            got,
            [format!(
                "kernel 6.1 (x86_64): test {stray} ran 2 times (pieces 1/2, 2/2)"
            )]
        );
    }

    #[test]
    fn a_piece_from_another_commit_or_release_is_named() {
        let p = plan();
        let mut two = piece(&p, 2);
        two.report.piece.as_mut().unwrap().commit = Some("fedcba9".into());
        let got = problems(vec![piece(&p, 1), two]);
        assert_eq!(
            got,
            [
                "kernel 6.1 (x86_64): piece 2/2 ran commit fedcba9, not 86633b7 \
              (artifacts/piece-2/6.1/report.json): run every piece from the merge's commit"
            ]
        );
        let mut two = piece(&p, 2);
        two.report.kernel.release = Some("6.1.0-9-cloud-amd64".into());
        let got = problems(vec![piece(&p, 1), two]);
        assert!(
            got[0].contains("piece 2/2 booted Some(\"6.1.0-9-cloud-amd64\")"),
            "{got:?}"
        );
    }

    /// A `test_progs` test's subtests are rows of their test; `test_maps` is in no plan.
    #[test]
    fn a_selftests_piece_s_subtests_count_as_their_test() {
        let inputs = Inputs {
            kind: Kind::Selftests,
            root: PathBuf::from("/nowhere"),
            kernel: "6.1".into(),
            arch: Arch::X86_64,
            accel: "tcg".into(),
        };
        let units = ["a", "b"]
            .iter()
            .map(|n| Unit {
                binary: "test_progs".into(),
                test: n.to_string(),
                name: format!("test_progs/{n}"),
            })
            .collect();
        let plan = KernelPlan::cut(&inputs, units, &Costs::default(), 2).unwrap();
        let mut one = piece(&plan, 1);
        one.report
            .tests
            .push(row("test_progs/a/sub", Outcome::Pass));
        one.report.tests.push(row("test_maps", Outcome::Pass));
        let m = merge(
            std::slice::from_ref(&plan),
            vec![one, piece(&plan, 2)],
            Some(COMMIT),
        );
        assert!(m.problems.is_empty(), "{:?}", m.problems);
        let mut two = piece(&plan, 2);
        two.report.tests = vec![row("test_progs/b/sub", Outcome::Pass)];
        let m = merge(
            std::slice::from_ref(&plan),
            vec![piece(&plan, 1), two],
            Some(COMMIT),
        );
        assert!(
            m.problems.is_empty(),
            "a subtest's row is its test's: {:?}",
            m.problems
        );
    }

    #[test]
    fn a_whole_run_s_report_is_not_a_piece() {
        let p = plan();
        let mut whole = piece(&p, 2);
        whole.report.piece = None;
        let got = problems(vec![piece(&p, 1), whole]);
        assert!(got[0].contains("is not a piece's report"), "{got:?}");
    }

    /// A piece's directory is its report: its guest files and a selftests piece's boots
    /// (`boots/N/report.json`, reports without a piece) are the piece's own, not pieces.
    #[test]
    fn reports_are_found_under_artifact_directories_but_not_in_a_runs_own_files() {
        let p = plan();
        let d = tempfile::tempdir().unwrap();
        for i in [1, 2] {
            let dir = d.path().join(format!("piece-{i}/6.1.piece-{i}-of-2"));
            crate::results::report::write(&piece(&p, i).report, &dir).unwrap();
            std::fs::create_dir_all(dir.join("guest")).unwrap();
            std::fs::write(dir.join("guest/report.json"), "not JSON").unwrap();
            let mut boot = piece(&p, i).report;
            boot.piece = None;
            crate::results::report::write(&boot, &dir.join("boots/1")).unwrap();
        }
        let found = find(&[d.path().to_path_buf()]).unwrap();
        assert_eq!(found.len(), 2);
        let m = merge(&[p], found, Some(COMMIT));
        assert!(m.problems.is_empty(), "{:?}", m.problems);
        let e = find(&[d.path().join("absent")]).unwrap_err().to_string();
        assert!(e.contains("is not a directory"), "{e}");
    }

    /// A real 2-piece run of the suite on 6.1 (`ci/pieces-check.sh`), as recorded: the plan
    /// (`plan --tests`) and each piece's report, trimmed of the probes and verifier statistics.
    mod recorded {
        use super::*;

        const RUN_COMMIT: &str = "ae5526c67686753dde3828b5dc72a30c5147eda7";

        fn plan() -> KernelPlan {
            serde_json::from_str(include_str!("../../tests/data/plan-6.1-2.json")).unwrap()
        }

        fn piece(i: usize) -> Found {
            let text = match i {
                1 => include_str!("../../tests/data/piece-6.1-1-of-2.json"),
                _ => include_str!("../../tests/data/piece-6.1-2-of-2.json"),
            };
            Found {
                path: PathBuf::from(format!("artifacts/piece-6.1-{i}/report.json")),
                report: serde_json::from_str(text).unwrap(),
            }
        }

        fn merged(pieces: Vec<Found>) -> Merged {
            merge(&[plan()], pieces, Some(RUN_COMMIT))
        }

        #[test]
        fn the_recorded_pieces_merge_into_every_test_of_the_suite_once() {
            let m = merged(vec![piece(1), piece(2)]);
            assert!(m.problems.is_empty(), "{:?}", m.problems);
            assert_eq!(m.status(), Status::Good);
            let r = &m.reports[0];
            assert_eq!(r.summary.passed, 366, "{:?}", r.summary);
            let tests: BTreeSet<&str> = r
                .tests
                .iter()
                .filter(|t| is_test(&t.name))
                .map(|t| t.name.as_str())
                .collect();
            let planned: BTreeSet<String> = plan().pieces.iter().flat_map(|p| p.names()).collect();
            assert_eq!(tests.len(), 366);
            assert!(planned.iter().all(|n| tests.contains(n.as_str())));
        }

        /// Each plant fails the merge by name, with the status of a run that judged nothing.
        #[test]
        fn each_plant_on_the_recorded_pieces_is_named() {
            let one = |m: Merged| {
                assert_eq!(m.status(), Status::Stopped);
                m.problems
            };
            let removed = one(merged(vec![piece(1)]));
            assert!(
                removed[0].contains("piece 2/2 has no report"),
                "{removed:?}"
            );

            let mut again = piece(2);
            again.path = PathBuf::from("artifacts/piece-6.1-2-rerun/report.json");
            let twice = one(merged(vec![piece(1), piece(2), again]));
            assert!(twice[0].contains("piece 2/2 is there twice"), "{twice:?}");

            let mut other = piece(1);
            other.report.piece.as_mut().unwrap().plan = "64390a61306bcd69".into();
            let another = one(merged(vec![other, piece(2)]));
            assert!(
                another[0].starts_with("piece 1/2 in artifacts/piece-6.1-1/report.json was cut by another plan (64390a61306bcd69"),
                "{another:?}"
            );

            let mut dropped = piece(2);
            let gone = dropped.report.tests.remove(7).name;
            let never = one(merged(vec![piece(1), dropped]));
            assert_eq!(
                never,
                [format!(
                    "kernel 6.1 (x86_64): test {gone} of piece 2/2 never ran (its report has no \
                     row for it, or one that says it was not run)"
                )]
            );

            let commit = one(merge(&[plan()], vec![piece(1), piece(2)], Some("1d18eec")));
            assert_eq!(
                commit.len(),
                2,
                "both pieces ran another commit: {commit:?}"
            );
            assert!(commit[0].contains(&format!("piece 1/2 ran commit {RUN_COMMIT}, not 1d18eec")));
        }
    }
}
