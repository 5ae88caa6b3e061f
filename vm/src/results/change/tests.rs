use test_case::test_case;

use super::cost::Cost;
use super::render::{self, BUDGET, COMMENT_LIMIT};
use super::verifier::{self, ProgChange};
use super::*;
use crate::results::bench::compare;
use crate::results::bench::model::{BenchReport, Mode, Size};
use crate::results::report::Outcome::{self, Fail, Pass, Skip};
use crate::results::verifier::{ProgStats, Verdict};
use crate::support::status::Status;

/// Plays the flow's loop on one test: the whole runs' outcomes, then reruns drawn in order from
/// the scripts as `classify` asks for them. Returns the category, the runs made, and the exit
/// status of a change holding only this test.
fn decide(
    base: Option<Outcome>,
    head: Option<Outcome>,
    head_script: &[Outcome],
    base_script: &[Outcome],
    reruns: usize,
) -> (Category, usize, usize, u8) {
    let (mut h, mut b) = (vec![], vec![]);
    let category = loop {
        match classify(base, head, &h, &b, reruns) {
            Next::Done(c) => break c,
            Next::RerunHead => h.push(head_script[h.len()]),
            Next::RerunBase => b.push(base_script[b.len()]),
        }
    };
    let run = |side, rerun, outcome| Run {
        side,
        rerun,
        outcome,
        reason: None,
    };
    let mut runs: Vec<Run> = base
        .map(|o| run(Side::Base, false, o))
        .into_iter()
        .collect();
    runs.extend(head.map(|o| run(Side::Head, false, o)));
    runs.extend(h.iter().map(|o| run(Side::Head, true, *o)));
    runs.extend(b.iter().map(|o| run(Side::Base, true, *o)));
    let mut change = sample(vec![TestChange {
        kernel: "6.1".into(),
        test: "maps::t".into(),
        category,
        runs,
    }]);
    change.judge();
    (category, h.len(), b.len(), change.exit_status)
}

// (base, head, head reruns, base reruns) -> category, the reruns made at head and at base, exit.
#[test_case(Some(Pass), Some(Pass), &[], &[] => (Category::Unchanged, 0, 0, 0); "pass pass")]
#[test_case(Some(Skip), Some(Skip), &[], &[] => (Category::Unchanged, 0, 0, 0); "skip skip")]
#[test_case(Some(Pass), Some(Skip), &[], &[] => (Category::Unchanged, 0, 0, 0); "pass then skip")]
#[test_case(Some(Fail), Some(Pass), &[], &[] => (Category::Fixed, 0, 0, 0); "fixed")]
#[test_case(Some(Fail), Some(Skip), &[], &[] => (Category::Fixed, 0, 0, 0); "fail then skip")]
#[test_case(None, Some(Pass), &[], &[] => (Category::New, 0, 0, 0); "new passing")]
#[test_case(None, Some(Skip), &[], &[] => (Category::New, 0, 0, 0); "new skipped")]
#[test_case(Some(Pass), None, &[], &[] => (Category::Removed, 0, 0, 0); "removed")]
#[test_case(Some(Fail), None, &[], &[] => (Category::Removed, 0, 0, 0); "removed failing")]
#[test_case(Some(Pass), Some(Fail), &[Fail, Fail], &[Pass, Pass] => (Category::Regression, 2, 2, 1); "regression")]
#[test_case(Some(Skip), Some(Fail), &[Fail, Fail], &[Skip, Skip] => (Category::Regression, 2, 2, 1); "skipped at base")]
#[test_case(Some(Pass), Some(Fail), &[Pass], &[] => (Category::Flaky, 1, 0, 0); "passes in the first head rerun")]
#[test_case(Some(Pass), Some(Fail), &[Fail, Pass], &[] => (Category::Flaky, 2, 0, 0); "passes in the last head rerun")]
#[test_case(Some(Pass), Some(Fail), &[Fail, Skip], &[] => (Category::Flaky, 2, 0, 0); "skips in a head rerun")]
#[test_case(Some(Pass), Some(Fail), &[Fail, Fail], &[Pass, Fail] => (Category::Flaky, 2, 2, 0); "base mixed in its reruns")]
#[test_case(Some(Pass), Some(Fail), &[Fail, Fail], &[Fail] => (Category::Flaky, 2, 1, 0); "base rerun fails after its pass")]
#[test_case(Some(Fail), Some(Fail), &[Fail, Fail], &[Fail, Fail] => (Category::StillFailing, 2, 2, 0); "still failing")]
#[test_case(Some(Fail), Some(Fail), &[Fail, Fail], &[Pass] => (Category::Flaky, 2, 1, 0); "base failed then passed")]
#[test_case(Some(Fail), Some(Fail), &[Pass], &[] => (Category::Flaky, 1, 0, 0); "failing at both, head passes once")]
#[test_case(None, Some(Fail), &[Fail, Fail], &[] => (Category::Regression, 2, 0, 1); "new and failing every time")]
#[test_case(None, Some(Fail), &[Fail, Pass], &[] => (Category::Flaky, 2, 0, 0); "new and flaky")]
fn each_combination_of_outcomes_has_one_category_and_exit_status(
    base: Option<Outcome>,
    head: Option<Outcome>,
    head_script: &[Outcome],
    base_script: &[Outcome],
) -> (Category, usize, usize, u8) {
    decide(base, head, head_script, base_script, 2)
}

#[test_case(Some(Pass), Some(Fail), &[Fail, Fail, Fail], &[Pass, Pass, Pass] => (Category::Regression, 3, 3, 1); "three each")]
#[test_case(Some(Pass), Some(Fail), &[Fail, Fail, Pass], &[] => (Category::Flaky, 3, 0, 0); "the third head rerun passes")]
fn reruns_3(
    base: Option<Outcome>,
    head: Option<Outcome>,
    head_script: &[Outcome],
    base_script: &[Outcome],
) -> (Category, usize, usize, u8) {
    decide(base, head, head_script, base_script, 3)
}

#[test_case(Some(Pass), Some(Fail) => (Category::Regression, 0, 0, 1); "regression on one run each")]
#[test_case(Some(Fail), Some(Fail) => (Category::StillFailing, 0, 0, 0); "failing on one run each")]
fn no_reruns(base: Option<Outcome>, head: Option<Outcome>) -> (Category, usize, usize, u8) {
    decide(base, head, &[], &[], 0)
}

#[test]
fn a_kernel_the_base_cannot_judge_stops_unless_a_regression_is_confirmed_elsewhere() {
    let mut c = sample(vec![]);
    c.kernels.push(KernelChange {
        kernel: "6.12".into(),
        status: Status::Stopped,
        problem: Some("the base (main) did not build: error[E0425]".into()),
        base_cached: false,
    });
    c.judge();
    assert_eq!(c.exit_status, 255);
    let md = render::markdown(&c, BUDGET);
    assert!(md.contains("the base (main) did not build"), "{md}");
    c.kernels[1].status = Status::Untestable;
    c.judge();
    assert_eq!(c.exit_status, 125);
    c.tests.push(test("6.1", "x", Category::Regression));
    c.judge();
    assert_eq!(c.exit_status, 1);
}

fn sample(tests: Vec<TestChange>) -> Change {
    Change {
        base: Revision {
            name: "main".into(),
            commit: "a".repeat(40),
        },
        head: Revision {
            name: "HEAD".into(),
            commit: "b".repeat(40),
        },
        reruns: 2,
        kernels: vec![KernelChange {
            kernel: "6.1".into(),
            status: Status::Good,
            problem: None,
            base_cached: false,
        }],
        tests,
        verifier: vec![],
        verifier_threshold_pct: None,
        cost: vec![],
        status: Status::Good,
        exit_status: 0,
    }
}

fn test(kernel: &str, name: &str, category: Category) -> TestChange {
    let (h, b) = match category {
        Category::Regression => (Fail, Pass),
        Category::StillFailing => (Fail, Fail),
        Category::Fixed => (Pass, Fail),
        _ => (Pass, Pass),
    };
    let run = |side, outcome| Run {
        side,
        rerun: false,
        outcome,
        reason: (outcome == Fail).then(|| format!("assertion failed at {name}: <left> | right")),
    };
    TestChange {
        kernel: kernel.into(),
        test: name.into(),
        category,
        runs: vec![run(Side::Head, h), run(Side::Base, b)],
    }
}

#[test]
fn the_comment_puts_regressions_first_and_the_rest_collapsed() {
    let mut c = sample(vec![
        test("6.1", "maps::still", Category::StillFailing),
        test("6.1", "maps::broken", Category::Regression),
        test("6.1", "maps::same", Category::Unchanged),
    ]);
    c.judge();
    let md = render::markdown(&c, BUDGET);
    let regression = md.find("maps::broken").unwrap();
    let details = md.find("<details>").unwrap();
    assert!(regression < details, "{md}");
    assert!(md.contains("**1 regression** (exit status 1)"), "{md}");
    assert!(md.contains("Failing at base too (not blamed) (1)"), "{md}");
    // Guest text never breaks the table or opens HTML.
    assert!(md.contains("&lt;left&gt; \\| right"), "{md}");
    assert!(!md.contains("Cut to stay under"), "{md}");
}

/// `regressions` regressions on 6.1, 20000 flaky and 20000 unchanged tests on 6.12.
fn huge(regressions: usize) -> (Change, String) {
    huge_with(regressions, vec![])
}

/// [`huge`], with `cost` joined.
fn huge_with(regressions: usize, cost: Vec<Cost>) -> (Change, String) {
    let mut tests = vec![];
    for i in 0..regressions {
        tests.push(test(
            "6.1",
            &format!("maps::regressed_{i:05}"),
            Category::Regression,
        ));
    }
    for i in 0..20000 {
        tests.push(test(
            "6.12",
            &format!("maps::flaky_{i:05}"),
            Category::Flaky,
        ));
        tests.push(test(
            "6.12",
            &format!("maps::same_{i:05}"),
            Category::Unchanged,
        ));
    }
    let mut c = sample(tests);
    c.cost = cost;
    c.judge();
    let md = render::markdown(&c, BUDGET);
    assert!(
        md.chars().count() <= COMMENT_LIMIT,
        "{}",
        md.chars().count()
    );
    assert!(md.contains("change.json"));
    assert!(
        md.contains("of 20000 rows of Unchanged"),
        "{}",
        &md[md.len() - 500..]
    );
    (c, md)
}

#[test]
fn a_huge_change_keeps_every_regression_under_the_limit_and_says_what_was_cut() {
    let every =
        |md: &str, n: usize| (0..n).all(|i| md.contains(&format!("maps::regressed_{i:05}")));
    // Some hundred regressions keep their reasons, and some of the rest is shown.
    let (_, md) = huge(300);
    assert!(every(&md, 300));
    assert!(!md.contains("the regressions' reasons"));
    assert!(md.contains("Flaky (not blamed) (20000)"));
    // A thousand lose their reasons, then their table; every name stays.
    let (_, md) = huge(1000);
    assert!(every(&md, 1000));
    assert!(
        md.contains("the regressions' reasons"),
        "{}",
        &md[md.len() - 500..]
    );
    assert!(!md.contains("the regressions' table"));
    let (_, md) = huge(1500);
    assert!(every(&md, 1500));
    assert!(
        md.contains("the regressions' table"),
        "{}",
        &md[md.len() - 500..]
    );
    assert!(!md.contains("of 1500 regressions"));
    // Only names beyond the limit itself are cut, and said.
    let (_, md) = huge(3000);
    assert!(md.contains("regressions** (their names alone exceed the limit)"));
}

fn prog(name: &str, verdict: Verdict, insns: u64, jit: Option<u64>) -> ProgStats {
    let mut p = ProgStats::not_loaded("maps.o", name, String::new());
    p.verdict = verdict;
    p.reason = (verdict != Verdict::Success).then(|| "R1 invalid mem access".to_string());
    p.log.processed_insns = Some(insns);
    p.log.total_states = Some(insns / 10);
    p.log.peak_states = Some(insns / 20);
    p.jited_bytes = jit;
    p
}

#[test]
fn the_verifier_diff_lists_every_move_and_fails_a_lost_verdict_or_growth_beyond_the_threshold() {
    let base = [
        prog("same", Verdict::Success, 100, Some(50)),
        prog("grows", Verdict::Success, 100, Some(50)),
        prog("rejected", Verdict::Success, 100, Some(50)),
        prog("gone", Verdict::Success, 100, None),
    ];
    let head = [
        prog("same", Verdict::Success, 100, Some(50)),
        prog("grows", Verdict::Success, 150, Some(60)),
        prog("rejected", Verdict::Rejected, 20, None),
        prog("added", Verdict::Success, 10, None),
    ];
    let names = |d: &[ProgChange]| d.iter().map(|p| p.program.clone()).collect::<Vec<_>>();
    let d = verifier::diff("5.10", &base, &head, None);
    assert_eq!(
        names(&d),
        [
            "maps.o/added",
            "maps.o/gone",
            "maps.o/grows",
            "maps.o/rejected"
        ]
    );
    let failing: Vec<&ProgChange> = d.iter().filter(|p| p.regression.is_some()).collect();
    assert_eq!(failing.len(), 1);
    assert_eq!(
        failing[0].regression.as_deref(),
        Some("maps.o/rejected: success -> rejected (R1 invalid mem access)")
    );
    let d = verifier::diff("5.10", &base, &head, Some(10.0));
    let failing: Vec<&str> = d.iter().filter_map(|p| p.regression.as_deref()).collect();
    assert_eq!(failing.len(), 2, "{failing:?}");
    assert!(
        failing[0].contains("processed insns 100 -> 150"),
        "{failing:?}"
    );
    assert!(verifier::diff("5.10", &base, &head, Some(60.0))
        .iter()
        .all(|p| p.program != "maps.o/grows" || p.regression.is_none()));

    let mut c = sample(vec![]);
    c.verifier = verifier::diff("5.10", &base, &head, None);
    c.judge();
    assert_eq!(c.exit_status, 1);
    let md = render::markdown(&c, BUDGET);
    assert!(md.contains("### Verifier regressions"), "{md}");
    assert!(md.contains("**success → rejected**"), "{md}");
    assert!(md.contains("100 → 150 (+50 (+50.00%))"), "{md}");
    assert!(
        md.contains("- 5.10: maps.o/rejected: success -&gt; rejected"),
        "{md}"
    );
}

#[test]
fn junit_fails_only_regressions_and_json_round_trips() {
    let mut c = sample(vec![
        test("6.1", "maps::broken", Category::Regression),
        test("6.1", "maps::still", Category::StillFailing),
        test("6.1", "maps::flaky", Category::Flaky),
    ]);
    c.judge();
    let xml = render::junit(&c).unwrap();
    assert!(xml.contains("failures=\"1\""), "{xml}");
    assert!(xml.contains("regression: head FAIL; base pass"), "{xml}");
    let json = serde_json::to_string(&c).unwrap();
    assert!(json.contains("\"category\":\"still_failing\""), "{json}");
    let back: Change = serde_json::from_str(&json).unwrap();
    assert_eq!(back, c);
}

/// Two recorded `bench-vm --quick` runs of identical code on 6.1 under the instruction clock
/// (docs/benchmarks.md's runs B and C), as the base's (A) and head's (B) reports of an A/B.
fn icount_runs() -> (BenchReport, BenchReport) {
    let run = |json: &str| serde_json::from_str::<BenchReport>(json).unwrap();
    (
        run(include_str!(
            "../../../tests/data/bench-6.1-quick-icount-a.json"
        )),
        run(include_str!(
            "../../../tests/data/bench-6.1-quick-icount-b.json"
        )),
    )
}

/// The headline row `LOOKUP` in `mode` of `b` costs `by` times the instructions (its
/// throughput divided by it).
fn costlier(b: &mut BenchReport, mode: Mode, by: f64) {
    for run in b.runs.iter_mut().filter(|r| r.mode == mode) {
        for bloom in &mut run.results.bloom {
            let (k, n, v) = (bloom.hash_funcs, bloom.entries, bloom.value_size);
            if format!("bloom lookup k={k} entries={n} value={v}B") == LOOKUP {
                bloom.lookup.samples.iter_mut().for_each(|x| *x /= by);
                bloom.lookup.mean /= by;
            }
        }
    }
}

const LOOKUP: &str = "bloom lookup k=3 entries=50000 value=8B";

/// The A/B of `a` (base) and `b` (head) as a change's cost on kernel `tree-6.12`.
fn cost_of(a: &BenchReport, b: &BenchReport) -> Cost {
    let c = compare::compare(a, b, 1.0).unwrap();
    let report = std::path::Path::new("target/bench-vm/ab-x-vs-y/ab.md");
    Cost::of("tree-6.12", Size::Quick, (a, b), c, report)
}

fn with_cost(cost: Cost) -> Change {
    let mut c = sample(vec![test("tree-6.12", "maps::same", Category::Unchanged)]);
    c.kernels[0].kernel = "tree-6.12".into();
    c.cost = vec![cost];
    c.judge();
    c
}

/// Identical kernels: every row of the A/B is in change.md's cost section, base against head,
/// none changed, exit 0; change.md renders the same from change.json.
#[test]
fn the_cost_joins_every_row_of_the_ab_and_identical_kernels_pass() {
    let (a, b) = icount_runs();
    let c = with_cost(cost_of(&a, &b));
    assert_eq!(c.exit_status, 0);
    let rows = c.cost[0].compared.as_ref().unwrap().comparison.rows.len();
    assert!(rows >= 30, "{rows} rows");
    let md = render::markdown(&c, BUDGET);
    let section = &md[md
        .find("### Cost on tree-6.12 (`bench-vm --against`, quick)")
        .unwrap()..];
    assert!(
        section.contains("Cost verdict: no row changed beyond 1 % either way."),
        "{section}"
    );
    assert!(
        section.contains("figures are instruction counts"),
        "{section}"
    );
    let table_rows = section.lines().filter(|l| l.contains("(spectre_v2="));
    assert_eq!(table_rows.count(), rows, "{section}");
    assert!(
        section.contains("`target/bench-vm/ab-x-vs-y/ab.md`"),
        "{section}"
    );
    // merge --change renders again from change.json: the same comment (a float may lose its
    // last bit through JSON, never a shown digit).
    let json = serde_json::to_string(&c).unwrap();
    assert!(
        json.contains("\"cost\":[{\"kernel\":\"tree-6.12\""),
        "{json}"
    );
    let back: Change = serde_json::from_str(&json).unwrap();
    assert_eq!(render::markdown(&back, BUDGET), md);
}

/// A row 2 % costlier at head is bench-vm --against's change beyond 1 %: the change fails
/// (exit 1) naming it, in change.md and as a failing JUnit case; the other rows pass.
#[test]
fn a_row_changed_beyond_the_threshold_fails_the_change_as_the_ab_does() {
    let (a, mut b) = icount_runs();
    costlier(&mut b, Mode::Retpoline, 1.02);
    let cost = cost_of(&a, &b);
    assert_eq!(cost.status, Status::Bad);
    let c = with_cost(cost);
    assert_eq!(c.exit_status, 1);
    let row = format!("{LOOKUP} (spectre_v2=retpoline)");
    let md = render::markdown(&c, BUDGET);
    assert!(
        md.contains("Verdict: **1 regression** (exit status 1)"),
        "{md}"
    );
    assert!(
        md.contains("Cost verdict: **1 row changed beyond 1 %**"),
        "{md}"
    );
    assert!(md.contains(&format!("- {row}: +2.00 %")), "{md}");
    let xml = render::junit(&c).unwrap();
    assert!(xml.contains("failures=\"1\""), "{xml}");
    assert!(xml.contains(&format!("name=\"cost:{row}\"")), "{xml}");
    // 2 % cheaper fails too: the A/B's rule is either way.
    let (a, mut b) = icount_runs();
    costlier(&mut b, Mode::Off, 1.0 / 1.02);
    assert_eq!(with_cost(cost_of(&a, &b)).exit_status, 1);
}

/// The base failing its own boots judges nothing (255), as bench-vm --against says; head's own
/// boots failing is head's (1); an A/B that did not run is its status, named; a regression of
/// a test still wins over a cost not judged.
#[test]
fn a_cost_is_judged_as_bench_vm_against_judges_its_two_sides() {
    let invalid = |r: &mut BenchReport| {
        r.runs[0].valid = false;
        r.runs[0].invalid_reason = Some("kernel:warning: kernel warning during bench".into());
    };
    let (mut a, b) = icount_runs();
    invalid(&mut a);
    let c = with_cost(cost_of(&a, &b));
    assert_eq!(c.exit_status, 255);
    let md = render::markdown(&c, BUDGET);
    assert!(md.contains("Cost verdict: **not judged**"), "{md}");
    assert!(md.contains("the base's own bench boots failed"), "{md}");
    let (a, mut b) = icount_runs();
    invalid(&mut b);
    let c = with_cost(cost_of(&a, &b));
    assert_eq!(c.exit_status, 1);
    let md = render::markdown(&c, BUDGET);
    assert!(md.contains("**head's own bench boots failed**"), "{md}");
    assert!(
        md.contains("the A/B cannot vouch for head: B: boot 1"),
        "{md}"
    );

    let why = "the A/B did not end: qemu crashed".to_string();
    let not_run = Cost::not_judged("tree-6.12", Size::Quick, 1.0, Status::Stopped, why);
    let mut c = with_cost(not_run);
    assert_eq!(c.exit_status, 255);
    let md = render::markdown(&c, BUDGET);
    assert!(
        md.contains("Not judged: the A/B did not end: qemu crashed"),
        "{md}"
    );
    let xml = render::junit(&c).unwrap();
    assert!(xml.contains("name=\"cost:tree-6.12\""), "{xml}");
    c.tests
        .push(test("tree-6.12", "maps::broken", Category::Regression));
    c.judge();
    assert_eq!(c.exit_status, 1);
}

/// Over the comment limit, the cost rows within the threshold go (said), the row that changed
/// stays in the table and the list, even when regressions' names alone overflow it.
#[test]
fn a_huge_change_keeps_the_cost_rows_that_changed() {
    let (a, mut b) = icount_runs();
    costlier(&mut b, Mode::Retpoline, 1.02);
    let row = format!("{LOOKUP} (spectre_v2=retpoline)");
    let kept = |md: &str| {
        md.contains(&format!("- {row}: +2.00 %"))
            && md.lines().any(|l| l.starts_with(&format!("| {row} |")))
    };
    let (_, md) = huge_with(300, vec![cost_of(&a, &b)]);
    assert!(kept(&md), "{md}");
    assert!(
        md.contains(&format!("| {LOOKUP} (spectre_v2=off) |")),
        "all rows fit"
    );
    let (_, md) = huge_with(1500, vec![cost_of(&a, &b)]);
    assert!(kept(&md));
    assert!(!md.contains(&format!("| {LOOKUP} (spectre_v2=off) |")));
    assert!(
        md.contains("cost rows within the threshold"),
        "{}",
        &md[md.len() - 600..]
    );
    let (_, md) = huge_with(3000, vec![cost_of(&a, &b)]);
    assert!(md.contains("regressions** (their names alone exceed the limit)"));
    assert!(kept(&md));
}
