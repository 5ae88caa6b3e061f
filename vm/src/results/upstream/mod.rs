//! The kernel's own BPF selftests (`tools/testing/selftests/bpf`) judged like the suite's tests:
//! what `test_progs` and `test_maps` printed in the guest, turned into report rows, with the
//! pin's known failures (`known`) and its inventory of `test_progs`' tests applied.
//!
//! The guest runs `test_progs -a NAME` once per test of its `-l` list (`flows::selftests`),
//! between `bpfvm-selftest start NAME` and `bpfvm-selftest end NAME RC` lines of
//! [`TEST_PROGS_OUT`], so each test's own output and status are apart, and its kernel log
//! markers (`test_progs/NAME`) blame a splat on it. The rows come from `test_progs`' result
//! lines (`print_test_result` and `print_subtest_name` in tools/testing/selftests/bpf/
//! test_progs.c): `#N NAME:OK|SKIP|FAIL` for a test, `#N/M NAME/SUB:...` for a subtest.
use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::results::inventory::Inventory;
use crate::results::report::{failed, Outcome, TestResult};
use crate::support::guest_files;

mod known;
pub use known::{Known, KnownFailure, Said};

/// Every unit's output, between the start and end lines.
pub const TEST_PROGS_OUT: &str = "test_progs.out";
/// What `insmod bpf_testmod.ko` said, and its status on the last line.
pub const TESTMOD: &str = "bpf_testmod.insmod";

/// The line before each unit's output: `bpfvm-selftest start UNIT`.
pub const START: &str = "bpfvm-selftest start ";
/// The line after it: `bpfvm-selftest end UNIT RC`.
pub const END: &str = "bpfvm-selftest end ";
/// The line of the first unit a boot left for the next one (its time budget was spent).
pub const DEFER: &str = "bpfvm-selftest defer ";

/// How the row of a unit no boot ran begins (`flows::selftests::boots`): it failed, and
/// nothing of it was judged.
pub const NOT_RUN: &str = "not run: ";

/// Whether row `t` is of a unit no boot ran ([`NOT_RUN`]).
pub fn not_run(t: &TestResult) -> bool {
    t.outcome == Outcome::Fail && t.reason.as_deref().is_some_and(|r| r.starts_with(NOT_RUN))
}

/// Report rows of `test_progs` are `test_progs/<test>[/<subtest>]`.
pub const TEST_PROGS: &str = "test_progs";
/// `test_maps` is one row (one process runs every map test; a splat cannot be told apart
/// between them), plus a row per `NAME:PASS` line it printed.
pub const TEST_MAPS: &str = "test_maps";
/// `test_verifier` is one row, plus a row per case it printed (`#N/p DESCR` or `#N/u`).
pub const TEST_VERIFIER: &str = "test_verifier";

/// After it, test_progs 6.x prints every failed test's log and result lines again
/// (`dump_test_log` from `print_all_error_logs` or main, test_progs.c): not new rows.
const ALL_ERROR_LOGS: &str = "All error logs:";

/// How many lines of a test's output a failing row quotes.
const QUOTED: usize = 4;

/// One unit's run (`test_progs -a NAME`, `test_verifier`, `test_maps`): its output and exit
/// status (`None`: no end line, the VM ended while it ran).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRun {
    pub name: String,
    pub output: Vec<String>,
    pub rc: Option<i32>,
}

/// Splits [`TEST_PROGS_OUT`] into its runs, in order.
pub fn split_runs(text: &str) -> Vec<TestRun> {
    let mut runs: Vec<TestRun> = Vec::new();
    let mut open = false;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix(START) {
            runs.push(TestRun {
                name: name.trim().to_string(),
                output: vec![],
                rc: None,
            });
            open = true;
        } else if let Some(rest) = line.strip_prefix(END) {
            if let (Some(run), Some((_, rc))) = (runs.last_mut(), rest.trim().rsplit_once(' ')) {
                run.rc = rc.parse().ok();
            }
            open = false;
        } else if open {
            if let Some(run) = runs.last_mut() {
                run.output.push(line.to_string());
            }
        }
    }
    runs
}

/// A result line (`print_test_name`, `print_subtest_name`: `test_result` is OK, SKIP or FAIL;
/// a test with a skipped subtest is SKIP): the test or `test/subtest` name and its result.
fn result_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix('#')?;
    let (num, rest) = rest.split_once(char::is_whitespace)?;
    if !num
        .split('/')
        .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    // 6.x passes a test with some subtests skipped as `NAME:OK (SKIP: N/M)`
    // (`print_test_result` in test_progs.c).
    let rest = rest.trim_start();
    let rest = match rest.rsplit_once(" (SKIP: ") {
        Some((head, counts)) if counts.ends_with(')') && head.ends_with(":OK") => head,
        _ => rest,
    };
    let (name, result) = rest.rsplit_once(':')?;
    ["OK", "SKIP", "FAIL"]
        .contains(&result)
        .then_some((name, result))
}

/// The rows of one run: a row per result line (`test_progs/NAME`, `test_progs/NAME/SUB`), a
/// failing row quoting the test's last output lines; a test that printed no result for itself
/// (it crashed, or the VM ended) or whose status says it failed fails by name.
pub fn judge_run(run: &TestRun) -> Vec<TestResult> {
    let mut rows = Vec::new();
    let mut log: Vec<&str> = Vec::new();
    let mut own = false;
    // Failed checks outside every failing subtest: the test's own (`mark_own_failure`).
    let mut outside: Vec<&str> = Vec::new();
    let mut counts = [0usize; 3];
    for line in &run.output {
        // Later test_progs repeat the failed tests' logs and result lines after this line.
        if line.trim() == ALL_ERROR_LOGS {
            break;
        }
        let Some((name, result)) = result_line(line) else {
            if !line.trim().is_empty() {
                log.push(line);
            }
            continue;
        };
        let row_name = format!("{TEST_PROGS}/{name}");
        own |= row_name == run.name;
        let checks: Vec<&str> = log.iter().copied().filter(|l| is_check(l)).collect();
        // As test_progs counts them for its `Summary:` line (`summary_mismatch`): tests that
        // passed or skipped, subtests that passed, tests that failed.
        match (row_name == run.name, result) {
            (true, "FAIL") => counts[2] += 1,
            (true, _) => counts[0] += 1,
            (false, "OK") => counts[1] += 1,
            _ => {}
        }
        if row_name != run.name && result != "FAIL" {
            outside.extend(&checks);
        }
        if row_name == run.name {
            outside.extend(&checks);
        }
        rows.push(match result {
            "OK" => pass(row_name),
            "SKIP" => TestResult {
                outcome: Outcome::Skip,
                reason: Some(
                    "test_progs skipped it (it prints no reason unless the test failed)".into(),
                ),
                ..pass(row_name)
            },
            _ => failed(
                row_name,
                format!(
                    "{TEST_PROGS_FAILED}; {}{}",
                    failed_checks(&checks),
                    quote(&log)
                ),
            ),
        });
        log.clear();
    }
    mark_own_failure(&mut rows, run, outside);
    if own {
        rows.extend(summary_mismatch(&run.name, &run.output, counts));
    }
    let top = run.name.clone();
    let why = match (own, run.rc) {
        (_, None) => Some("the VM ended while it ran (no exit status)".to_string()),
        (false, Some(rc)) => Some(format!(
            "test_progs exited with {rc} without a result for it; {}",
            quote(&log)
        )),
        (true, Some(0)) => None,
        (true, Some(rc)) => Some(format!("test_progs exited with {rc}")),
    };
    if let Some(why) = why {
        match rows.iter_mut().find(|r| r.name == top) {
            Some(r) if r.outcome != Outcome::Fail => {
                r.outcome = Outcome::Fail;
                r.reason = Some(why);
            }
            // Its FAIL line, then the VM's end: it did not end by its own verdict.
            Some(r) if run.rc.is_none() => {
                r.reason = Some(format!(
                    "{why}; it had printed: {}",
                    r.reason.as_deref().unwrap_or_default()
                ));
            }
            Some(_) => {}
            None => rows.push(failed(top.clone(), why)),
        }
    }
    // test_progs passes a test whose own error count is zero at its end (`run_one_test`,
    // test_progs.c); a test that failed a subtest on purpose and checked the count, then reset
    // it (prog_tests_framework's `test_fail_subtest`), passes with that subtest's FAIL line.
    // test_progs' verdict on the test stands, and the line says why.
    if own
        && run.rc == Some(0)
        && rows
            .iter()
            .any(|r| r.name == top && r.outcome == Outcome::Pass)
    {
        for r in rows.iter_mut().filter(|r| r.outcome == Outcome::Fail) {
            r.outcome = Outcome::Skip;
            r.reason = Some(format!(
                "test_progs printed FAIL for this subtest but passed {top} (exit 0): the test \
                 failed it on purpose and checked it; {}",
                r.reason.as_deref().unwrap_or_default()
            ));
        }
    }
    rows
}

/// A failing test of `run` with subtests that failed checks of its own (`outside`: those that
/// closed a passing subtest's output or followed its last subtest; and those in its entry
/// function) says so ([`OUTSIDE_SUBTESTS`]): it is not known through its subtests.
fn mark_own_failure<'a>(rows: &mut [TestResult], run: &'a TestRun, mut outside: Vec<&'a str>) {
    let entry = run.name.trim_start_matches(&format!("{TEST_PROGS}/"));
    outside.extend(
        run.output
            .iter()
            .take_while(|l| l.trim() != ALL_ERROR_LOGS)
            .filter(|l| is_check(l) && in_entry(l, entry))
            .map(String::as_str),
    );
    outside.sort();
    outside.dedup();
    let sub = format!("{}/", run.name);
    let has_subtests = rows.iter().any(|r| r.name.starts_with(&sub));
    if let Some(r) = rows
        .iter_mut()
        .find(|r| r.name == run.name && r.outcome == Outcome::Fail)
        .filter(|_| has_subtests && !outside.is_empty())
    {
        let why = r.reason.get_or_insert_with(String::new);
        why.push_str(&format!("; {OUTSIDE_SUBTESTS}{}", outside.join(" | ")));
    }
}

/// A check that failed, as test_progs' `CHECK` and `ASSERT_*` print it
/// (`"%s:FAIL:%s ", __func__, tag`: `_CHECK` in tools/testing/selftests/bpf/test_progs.h) and
/// test_maps' `CHECK` (`"%s(%d):FAIL:%s "`, test_maps.h).
fn is_check(line: &str) -> bool {
    line.contains(":FAIL:")
}

/// Whether the check `line` failed in the test's entry function (`test_NAME` or
/// `serial_test_NAME`, `DEFINE_TEST` in test_progs.c), outside any subtest's own function.
fn in_entry(line: &str, test: &str) -> bool {
    let func = line.trim().split(":FAIL:").next().unwrap_or_default();
    func == format!("test_{test}") || func == format!("serial_test_{test}")
}

/// The most failed checks a row names; past them it says how many more, and no entry's
/// `said` can vouch for the rest.
const CHECKS_NAMED: usize = 8;

/// Says that more checks failed than a row names.
const MORE_CHECKS: &str = "more checks failed";

/// How a failing row names its failed checks, each of them (up to [`CHECKS_NAMED`]).
const FAILED_CHECKS: &str = "failed checks: ";

/// "failed checks: a | b; ", or nothing when none failed.
fn failed_checks(checks: &[&str]) -> String {
    if checks.is_empty() {
        return String::new();
    }
    let named: Vec<&str> = checks.iter().take(CHECKS_NAMED).map(|c| c.trim()).collect();
    let more = match checks.len().saturating_sub(CHECKS_NAMED) {
        0 => String::new(),
        n => format!(" | and {n} {MORE_CHECKS}"),
    };
    format!("{FAILED_CHECKS}{}{more}; ", named.join(" | "))
}

/// Says that a test failed checks of its own, outside its failing subtests: the checks that
/// closed a passing or skipped subtest's output, those after its last subtest, and those in
/// its entry function. test_progs prints a test's own output before its subtests'
/// (`dump_test_log`, test_progs.c, 5.18 and later), so its own failed check in a helper
/// function just before a failing first subtest is told from that subtest's only by the JSON
/// summary (6.4 and later: [`apply_json`]).
const OUTSIDE_SUBTESTS: &str = "it failed outside its subtests: ";

fn pass(name: String) -> TestResult {
    TestResult {
        name,
        outcome: Outcome::Pass,
        reason: None,
        duration_ms: 0,
        kernel_splats: vec![],
    }
}

/// The last lines of a test's log, on one line.
fn quote(log: &[&str]) -> String {
    match log {
        [] => "it printed nothing".into(),
        _ => format!(
            "its last lines: {}",
            log[log.len().saturating_sub(QUOTED)..]
                .iter()
                .map(|l| l.trim())
                .collect::<Vec<_>>()
                .join(" | ")
        ),
    }
}

/// The directory of each run's `--json-summary` file (`<test>.json`), where test_progs has it.
pub const JSON_DIR: &str = "test_progs.json";

/// `test_progs --json-summary FILE` (6.4 and later; `dump_test_log` in test_progs.c): the
/// counts, and each *failed* test and subtest with its log (passing ones are not listed).
#[derive(Debug, Deserialize)]
pub struct JsonSummary {
    pub results: Vec<JsonTest>,
}

#[derive(Debug, Deserialize)]
pub struct JsonTest {
    pub name: String,
    #[serde(default)]
    pub message: String,
    pub failed: bool,
    #[serde(default)]
    pub subtests: Vec<JsonTest>,
}

/// Applies a run's JSON summary to its rows: each failure it lists fails its row (added when
/// the result lines lack it), with the failure's own log as the reason.
pub fn apply_json(rows: &mut Vec<TestResult>, summary: &JsonSummary) {
    let mut failures = vec![];
    let mut own = vec![];
    for t in &summary.results {
        if t.failed {
            failures.push((format!("{TEST_PROGS}/{}", t.name), &t.message));
            // A test's message is its own output, outside its subtests (`dump_test_log`).
            let checks: Vec<&str> = t.message.lines().filter(|l| is_check(l)).collect();
            if !t.subtests.is_empty() && !checks.is_empty() {
                own.push((format!("{TEST_PROGS}/{}", t.name), checks.join(" | ")));
            }
        }
        for sub in t.subtests.iter().filter(|s| s.failed) {
            failures.push((
                format!("{TEST_PROGS}/{}/{}", t.name, sub.name),
                &sub.message,
            ));
        }
    }
    for (name, message) in failures {
        let lines: Vec<&str> = message.lines().filter(|l| !l.trim().is_empty()).collect();
        let checks: Vec<&str> = lines.iter().copied().filter(|l| is_check(l)).collect();
        let mut why = format!(
            "{TEST_PROGS_FAILED} (json summary); {}{}",
            failed_checks(&checks),
            quote(&lines)
        );
        if let Some((_, checks)) = own.iter().find(|(n, _)| *n == name) {
            why.push_str(&format!("; {OUTSIDE_SUBTESTS}{checks}"));
        }
        match rows.iter_mut().find(|r| r.name == name) {
            Some(r) => {
                r.outcome = Outcome::Fail;
                r.reason = Some(why);
            }
            None => rows.push(failed(name, why)),
        }
    }
}

/// `test_maps`' rows from its output and exit status: each map test that printed
/// `NAME:PASS[ DETAIL]` (the `map_tests/*.c` do; `map_in_map_batch_ops` adds `with inner ARRAY
/// map`) passes as `test_maps/NAME[ DETAIL]`; the `test_maps` row passes only when the process
/// exited 0 after its final `test_maps: OK, N SKIPPED` line (a failed check exits at once:
/// `CHECK` in test_maps.h).
pub fn judge_test_maps(out: &str, rc: Option<i32>) -> Vec<TestResult> {
    let mut rows: Vec<TestResult> = out
        .lines()
        .filter_map(|l| {
            let (name, detail) = l.trim().split_once(":PASS")?;
            let ok = !name.is_empty() && !name.contains(char::is_whitespace);
            ok.then(|| pass(format!("{TEST_MAPS}/{name}{detail}")))
        })
        .collect();
    let summary = out.lines().rev().find(|l| l.starts_with("test_maps: "));
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    rows.push(match (rc, summary) {
        (Some(0), Some(s)) if s.starts_with("test_maps: OK") => TestResult {
            reason: s
                .strip_prefix("test_maps: OK, ")
                .filter(|s| !s.starts_with("0 "))
                .map(|s| format!("passed; {s} (test_maps names none)")),
            ..pass(TEST_MAPS.into())
        },
        (None, _) => failed(TEST_MAPS.into(), "the VM ended while it ran".into()),
        (Some(rc), _) => failed(
            TEST_MAPS.into(),
            format!("test_maps exited with {rc}; {}", quote(&lines)),
        ),
    });
    rows
}

/// How a row that test_progs itself failed begins (its FAIL line or its JSON summary), and a
/// test_verifier that exited 1, its status when a case failed: the failures by the test's own
/// verdict, not a crash or the VM's end (`Known::apply`).
const TEST_PROGS_FAILED: &str = "test_progs: FAIL";
const TEST_VERIFIER_FAILED: &str = "test_verifier exited with 1;";
/// What a boot's [`TEST_PROGS_OUT`] holds: every unit's run, or why it could not be read
/// whole, with what a bounded scan of it still tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Runs(Vec<TestRun>),
    Unread {
        /// The read's error (a file over `guest_files::MAX_FILE`, not a regular file).
        why: String,
        /// The units it started, in order, with how many bytes of output each wrote.
        started: Vec<(String, u64)>,
    },
}

impl Output {
    /// Reads the boot's [`TEST_PROGS_OUT`] in `shared`; none there is no unit started. A file
    /// that cannot be read whole is scanned line by line for its start lines.
    pub fn read(shared: &Path) -> Output {
        let path = shared.join(TEST_PROGS_OUT);
        match guest_files::read(&path) {
            Ok(text) => Output::Runs(split_runs(&text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Output::Runs(vec![]),
            Err(e) => Output::Unread {
                why: e.to_string(),
                started: scan_starts(&path).unwrap_or_default(),
            },
        }
    }

    /// The units the boot started, in order (those it left for the next boot have no start
    /// line).
    pub fn started(&self) -> Vec<String> {
        match self {
            Output::Runs(runs) => runs.iter().map(|r| r.name.clone()).collect(),
            Output::Unread { started, .. } => started.iter().map(|(u, _)| u.clone()).collect(),
        }
    }
}

/// The start lines of the file at `path`, read in pieces of at most 4 KiB (a line longer
/// than that is no start line but its first piece), with the bytes each unit wrote after its
/// own.
fn scan_starts(path: &Path) -> std::io::Result<Vec<(String, u64)>> {
    use std::io::{BufRead, Read};
    let mut reader = std::io::BufReader::new(guest_files::open_regular(path)?);
    let mut started: Vec<(String, u64)> = Vec::new();
    let (mut piece, mut line_start) = (Vec::new(), true);
    loop {
        piece.clear();
        let n = (&mut reader).take(4096).read_until(b'\n', &mut piece)?;
        if n == 0 {
            return Ok(started);
        }
        let text = String::from_utf8_lossy(&piece);
        match text.strip_prefix(START).filter(|_| line_start) {
            Some(name) => started.push((name.trim().to_string(), 0)),
            None => {
                if let Some((_, bytes)) = started.last_mut() {
                    *bytes += n as u64;
                }
            }
        }
        line_start = piece.ends_with(b"\n");
    }
}

/// One boot's rows: each unit's that started (`test_progs/NAME`, `test_verifier`,
/// `test_maps`), each unit timed from its kernel log markers. An output that could not be
/// read is a failing `guest:test_progs.out` row naming the unit that wrote the most (the
/// guest writing more than a run may: docs/exit-status.md), and each unit it started fails
/// unjudged: its verdict is in the file unread.
pub fn judge(shared: &Path, output: &Output, kernel_log: &str) -> Vec<TestResult> {
    let mut rows = Vec::new();
    match output {
        Output::Runs(runs) => {
            for run in runs {
                rows.extend(judge_unit(shared, run));
            }
        }
        Output::Unread { why, started } => rows.extend(unread(why, started)),
    }
    let times = durations(kernel_log);
    for r in rows.iter_mut() {
        if let Some(ms) = times.get(&r.name) {
            r.duration_ms = *ms;
        }
    }
    rows
}

/// The rows of an output bpfvm could not read ([`Output::Unread`]).
fn unread(why: &str, started: &[(String, u64)]) -> Vec<TestResult> {
    let most = started.iter().max_by_key(|(_, bytes)| *bytes);
    let wrote = match most {
        Some((unit, bytes)) => format!(
            "{unit} wrote the most of it ({} MiB of output)",
            bytes >> 20
        ),
        None => "no unit's start line could be read from it".into(),
    };
    let mut rows = vec![failed(
        format!("guest:{TEST_PROGS_OUT}"),
        format!("{why}: the guest wrote more than a run may; {wrote}"),
    )];
    rows.extend(started.iter().map(|(unit, _)| {
        failed(
            unit.clone(),
            format!(
                "{} its output is in {TEST_PROGS_OUT}, which could not be read ({why})",
                bpfvm_common::protocol::NOT_JUDGED
            ),
        )
    }));
    rows
}

/// The rows of one unit's run.
fn judge_unit(shared: &Path, run: &TestRun) -> Vec<TestResult> {
    match run.name.as_str() {
        TEST_MAPS => judge_test_maps(&run.output.join("\n"), run.rc),
        TEST_VERIFIER => judge_test_verifier(run),
        _ => {
            let mut own = judge_run(run);
            let test = run.name.trim_start_matches(&format!("{TEST_PROGS}/"));
            let json = shared.join(JSON_DIR).join(format!("{test}.json"));
            let read = match guest_files::read(&json) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                read => Some(read),
            };
            if let Some(Err(e)) = &read {
                own.push(failed(
                    format!("guest:{JSON_DIR}/{test}.json"),
                    format!("could not be read: {e}"),
                ));
            }
            if let Some(Ok(text)) = read {
                match serde_json::from_str::<JsonSummary>(&text) {
                    Ok(summary) => apply_json(&mut own, &summary),
                    // test_progs writes its summary as it exits: one that never exited (the
                    // watchdog or a dead guest ended it) left it unfinished, and its own row
                    // already fails saying so.
                    Err(_) if run.rc.is_none() => {}
                    Err(e) => own.push(failed(
                        format!("guest:{JSON_DIR}/{test}.json"),
                        format!("not a test_progs JSON summary: {e}"),
                    )),
                }
            }
            own
        }
    }
}

/// `test_verifier`'s rows (`do_test` in test_verifier.c): each case prints `#N/p DESCR ` (or
/// `/u`, run unprivileged) then its verdict: `OK` (after `(run i/n)` or `N cases` notes, before
/// an optional `(NOTE: ...)`), `SKIP...`, or `FAIL...` with its reasons on the lines after. A
/// row per case that did not pass, named `test_verifier/#N/p DESCR`; the `test_verifier`
/// row passes when the process exited 0 after its `Summary:` line, and says how many passed.
pub fn judge_test_verifier(run: &TestRun) -> Vec<TestResult> {
    let mut rows: Vec<TestResult> = Vec::new();
    let mut passed = 0usize;
    let mut failing: Option<usize> = None;
    let mut summary = None;
    for line in &run.output {
        if let Some(rest) = line.strip_prefix("Summary: ") {
            summary = Some(rest.to_string());
            failing = None;
            continue;
        }
        let Some((case, verdict)) = verifier_case(line) else {
            if let Some(i) = failing {
                let r: &mut TestResult = &mut rows[i];
                let why = r.reason.get_or_insert_with(String::new);
                if why.len() < 400 && !line.trim().is_empty() {
                    why.push_str(" | ");
                    why.push_str(line.trim());
                }
            }
            continue;
        };
        let name = format!("{TEST_VERIFIER}/{case}");
        failing = None;
        if verdict.starts_with("FAIL") || verdict.contains(" FAIL") {
            rows.push(failed(name, format!("test_verifier: {}", verdict.trim())));
            failing = Some(rows.len() - 1);
        } else if verdict.trim_end().ends_with("SKIP") || verdict.contains("SKIP (") {
            // A bare SKIP is an unprivileged case test_verifier would not run: `do_test` skips
            // them while `unpriv_disabled` (kernel.unprivileged_bpf_disabled not 0; Debian's
            // CONFIG_BPF_UNPRIV_DEFAULT_OFF makes it 2).
            let why = match verdict.trim() {
                "SKIP" => "test_verifier skips unprivileged cases while \
                           kernel.unprivileged_bpf_disabled is set (CONFIG_BPF_UNPRIV_DEFAULT_OFF)"
                    .to_string(),
                v => format!("test_verifier: {v}"),
            };
            rows.push(TestResult {
                outcome: Outcome::Skip,
                reason: Some(why),
                ..pass(name)
            });
        } else if verdict.contains("OK") {
            passed += 1;
        } else {
            rows.push(failed(name, format!("no verdict: {}", verdict.trim())));
        }
    }
    let lines: Vec<&str> = run.output.iter().map(String::as_str).collect();
    rows.push(match (run.rc, summary) {
        (Some(0), Some(s)) => TestResult {
            reason: Some(format!("{passed} cases passed; Summary: {s}")),
            ..pass(TEST_VERIFIER.into())
        },
        (None, _) => failed(
            TEST_VERIFIER.into(),
            format!("the VM ended while it ran; {}", quote(&lines)),
        ),
        (Some(rc), _) => failed(
            TEST_VERIFIER.into(),
            format!("test_verifier exited with {rc}; {}", quote(&lines)),
        ),
    });
    let read = [
        passed,
        count(&rows, TEST_VERIFIER, Outcome::Skip),
        count(&rows, TEST_VERIFIER, Outcome::Fail),
    ];
    rows.extend(summary_mismatch(TEST_VERIFIER, &run.output, read));
    rows
}

/// The rows under `unit` (`unit/...`) with `outcome`.
fn count(rows: &[TestResult], unit: &str, outcome: Outcome) -> usize {
    let sub = format!("{unit}/");
    rows.iter()
        .filter(|r| r.outcome == outcome && r.name.starts_with(&sub))
        .count()
}

/// The row a count `unit` printed on its last `Summary: ` line fails when the rows read from
/// its output (`read`: passed, skipped, failed) do not add up to it: a result line bpfvm
/// could not read hides in the difference. test_verifier prints `Summary: %d PASSED, %d
/// SKIPPED, %d FAILED` (passes, skips, errors: `do_test`, test_verifier.c); test_progs prints
/// `Summary: %d/%d PASSED, %d SKIPPED, %d FAILED` (tests passed / subtests passed, skipped,
/// tests failed: `calculate_summary_and_print_errors`, test_progs.c), whose skipped count
/// also counts `test__skip` calls outside subtests, so it is not compared. None printed (the
/// unit was cut off) compares nothing.
fn summary_mismatch(unit: &str, output: &[String], read: [usize; 3]) -> Option<TestResult> {
    let line = output
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("Summary: "))?;
    let numbers: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|n| !n.is_empty())
        .filter_map(|n| n.parse().ok())
        .collect();
    let (printed, what) = match numbers[..] {
        [p, s, f] => ([p, s, f], "passed, skipped, failed"),
        [t, sub, _, f] => ([t, sub, f], "tests passed, subtests passed, tests failed"),
        _ => {
            return Some(failed(
                format!("{unit}/Summary"),
                format!("its last line `Summary: {line}` is not the counts bpfvm reads"),
            ))
        }
    };
    let got = read;
    (printed != got).then(|| {
        failed(
            format!("{unit}/Summary"),
            format!(
                "it printed `Summary: {line}`, but bpfvm read {} ({what}) from its result \
                 lines: a result it printed in a line bpfvm does not read hides there",
                got.iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })
}

/// A case line of test_verifier: `#N/p DESCR VERDICT` split into `#N/p DESCR` and the
/// verdict, which starts at the first word after the description that is one of
/// test_verifier's (`OK`, `FAIL...`, `SKIP`, `Did not run...`, `(run`, a case count).
fn verifier_case(line: &str) -> Option<(String, &str)> {
    let rest = line.strip_prefix('#')?;
    let (id, rest) = rest.split_once(' ')?;
    let (num, mode) = id.split_once('/')?;
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) || !matches!(mode, "p" | "u") {
        return None;
    }
    const VERDICTS: [&str; 6] = [
        " OK",
        " FAIL",
        " SKIP",
        " Did not run",
        " (run ",
        " Unexpected",
    ];
    let at = VERDICTS
        .iter()
        .filter_map(|v| rest.find(v))
        .min()
        .or_else(|| cases_note(rest))?;
    Some((format!("#{id} {}", rest[..at].trim()), &rest[at..]))
}

/// Where a `N cases OK` note starts (`do_test_single` after several runs).
fn cases_note(rest: &str) -> Option<usize> {
    let at = rest.find(" cases ")?;
    let head = &rest[..at];
    let n = head.rsplit(' ').next()?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| at - n.len() - 1)
}

/// The names of a `test_progs -l` output, one a line.
pub fn listed(list: &str) -> impl Iterator<Item = &str> {
    list.lines().map(str::trim).filter(|l| !l.is_empty())
}

/// Each marked test's time, from its start and end markers' kernel timestamps (microseconds,
/// `/dev/kmsg`'s third field), in milliseconds; a test with no end marker, until the last
/// record.
pub fn durations(kernel_log: &str) -> BTreeMap<String, u64> {
    let mut start: BTreeMap<&str, u64> = BTreeMap::new();
    let mut out = BTreeMap::new();
    let mut last = 0;
    for line in kernel_log.lines() {
        let Some((head, msg)) = line.split_once(';') else {
            continue;
        };
        let Some(usec) = head.split(',').nth(2).and_then(|u| u.parse::<u64>().ok()) else {
            continue;
        };
        last = last.max(usec);
        if let Some(n) = msg.strip_prefix("bpfvm: test start ") {
            start.insert(n, usec);
        } else if let Some(n) = msg.strip_prefix("bpfvm: test end ") {
            if let Some(s) = start.remove(n) {
                out.insert(n.to_string(), usec.saturating_sub(s) / 1000);
            }
        }
    }
    // A unit the VM ended during (stopped by the watchdog, a panic) ran at least until the
    // log's last record: its cost for the next run's plan, which then starts it on a boot of
    // its own.
    for (n, s) in start {
        out.insert(n.to_string(), last.saturating_sub(s) / 1000);
    }
    out
}

/// The pin's inventory of `test_progs`' tests against the binary's whole `-l` list (`all`):
/// a failing `guest:inventory` entry naming every test missing from the build or new to it.
pub fn check_inventory(all: &str, path: &Path, file: &str, bless: &str) -> Option<TestResult> {
    let inv = match Inventory::load(path) {
        Ok(inv) => inv,
        Err(e) => {
            return Some(failed(
                "guest:inventory".into(),
                format!("{e:#}; `{bless}` writes it"),
            ))
        }
    };
    let lists = BTreeMap::from([(
        TEST_PROGS.to_string(),
        Some(listed(all).map(str::to_string).collect()),
    )]);
    inv.compare(&lists, None, true).entry(file, bless)
}

/// The inventory of the binary's whole `-l` list (`all`), for `--bless`.
pub fn inventory_of(all: &str) -> Inventory {
    let mut inv = Inventory::default();
    for t in listed(all) {
        inv.add(TEST_PROGS, t);
    }
    inv
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `test_progs.out` over the 64 MiB bpfvm reads of a guest file is never read as
    /// empty: its units are found by a scan, each fails unjudged, and a `guest:` row names the
    /// file, the limit and the unit that wrote the most.
    #[test]
    fn an_output_too_big_to_read_names_the_file_and_the_unit() {
        let d = tempfile::tempdir().unwrap();
        let line = "x".repeat(1023) + "\n";
        let flood = line.repeat(65 << 10);
        let text = format!(
            "{START}test_progs/a\n#1 a:OK\n{END}test_progs/a 0\n\
             {START}test_progs/b\n{flood}{END}test_progs/b 0\n\
             {START}test_progs/c\n#3 c:OK\n"
        );
        std::fs::write(d.path().join(TEST_PROGS_OUT), text).unwrap();
        let out = Output::read(d.path());
        assert_eq!(
            out.started(),
            ["test_progs/a", "test_progs/b", "test_progs/c"]
        );
        let rows = judge(d.path(), &out, "");
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "guest:test_progs.out",
                "test_progs/a",
                "test_progs/b",
                "test_progs/c"
            ]
        );
        assert!(rows.iter().all(|r| r.outcome == Outcome::Fail), "{rows:#?}");
        let why = rows[0].reason.as_deref().unwrap();
        assert!(
            why.contains("test_progs.out is larger than the 64 MiB")
                && why.contains("the guest wrote more than a run may")
                && why.contains("test_progs/b wrote the most of it (65 MiB"),
            "{why}"
        );
        assert!(rows[1]
            .reason
            .as_deref()
            .unwrap()
            .starts_with(bpfvm_common::protocol::NOT_JUDGED));
        // None there: no unit started.
        let none = tempfile::tempdir().unwrap();
        assert_eq!(Output::read(none.path()), Output::Runs(vec![]));
    }

    /// `test_progs -a bloom_filter_map` and `-a bpf_loop` on the 6.1 pin, as its guest wrote
    /// them (`selftests --kernel 6.1 -t bloom_filter_map,bpf_loop`, test_progs of 6.1.192-3).
    const GREEN: &str = "\
bpfvm-selftest start test_progs/bloom_filter_map
#9       bloom_filter_map:OK
Summary: 1/0 PASSED, 0 SKIPPED, 0 FAILED
bpfvm-selftest end test_progs/bloom_filter_map 0
bpfvm-selftest start test_progs/bpf_loop
#14/1    bpf_loop/check_nr_loops:OK
#14/2    bpf_loop/check_callback_fn_stop:OK
#14/3    bpf_loop/check_null_callback_ctx:OK
#14/4    bpf_loop/check_invalid_flags:OK
#14/5    bpf_loop/check_nested_calls:OK
#14/6    bpf_loop/check_non_constant_callback:OK
#14/7    bpf_loop/check_stack:OK
#14      bpf_loop:OK
Summary: 1/7 PASSED, 0 SKIPPED, 0 FAILED
bpfvm-selftest end test_progs/bpf_loop 0
";

    fn outcomes(rows: &[TestResult]) -> Vec<(String, Outcome)> {
        rows.iter().map(|r| (r.name.clone(), r.outcome)).collect()
    }

    /// A unit's run of `lines`, ended with status `rc`.
    fn unit_run(name: &str, lines: &str, rc: Option<i32>) -> TestRun {
        TestRun {
            name: name.into(),
            output: lines.lines().map(String::from).collect(),
            rc,
        }
    }

    /// The counts upstream prints on its `Summary:` line must be the rows read, or a row says
    /// what hides in the difference.
    #[test]
    fn a_summary_that_does_not_add_up_to_the_rows_fails() {
        let verifier =
            "#0/p a OK\n#1/p b OK\n#2/p c\nFAIL\nSummary: 2 PASSED, 0 SKIPPED, 1 FAILED\n";
        let rows = judge_test_verifier(&unit_run(TEST_VERIFIER, verifier, Some(1)));
        let summary = rows
            .iter()
            .find(|r| r.name == "test_verifier/Summary")
            .unwrap();
        assert_eq!(summary.outcome, Outcome::Fail);
        assert!(
            summary
                .reason
                .as_deref()
                .unwrap()
                .contains("bpfvm read 2, 0, 0"),
            "{summary:?}"
        );
        let agreed = "#0/p a OK\n#1/p b OK\nSummary: 2 PASSED, 0 SKIPPED, 0 FAILED\n";
        let rows = judge_test_verifier(&unit_run(TEST_VERIFIER, agreed, Some(0)));
        assert_eq!(outcomes(&rows), [("test_verifier".into(), Outcome::Pass)]);

        let progs = "#1/1     t/one:OK\n#1/2     t/two:OK\n#1       t:OK\n\
                     Summary: 1/3 PASSED, 0 SKIPPED, 0 FAILED\n";
        let rows = judge_run(&unit_run("test_progs/t", progs, Some(0)));
        let summary = rows
            .iter()
            .find(|r| r.name == "test_progs/t/Summary")
            .unwrap();
        assert!(
            summary
                .reason
                .as_deref()
                .unwrap()
                .contains("bpfvm read 1, 2, 0"),
            "{summary:?}"
        );
        let agreed = progs.replace("1/3 PASSED", "1/2 PASSED");
        let rows = judge_run(&unit_run("test_progs/t", &agreed, Some(0)));
        assert!(rows.iter().all(|r| r.outcome == Outcome::Pass), "{rows:#?}");
    }

    #[test]
    fn each_result_line_is_a_row() {
        let runs = split_runs(GREEN);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[1].rc, Some(0));
        let rows: Vec<TestResult> = runs.iter().flat_map(judge_run).collect();
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "test_progs/bloom_filter_map",
                "test_progs/bpf_loop/check_nr_loops",
                "test_progs/bpf_loop/check_callback_fn_stop",
                "test_progs/bpf_loop/check_null_callback_ctx",
                "test_progs/bpf_loop/check_invalid_flags",
                "test_progs/bpf_loop/check_nested_calls",
                "test_progs/bpf_loop/check_non_constant_callback",
                "test_progs/bpf_loop/check_stack",
                "test_progs/bpf_loop",
            ]
        );
        assert!(rows.iter().all(|r| r.outcome == Outcome::Pass));
    }

    #[test]
    fn a_failure_quotes_the_log_and_a_skip_says_why_none_is_given() {
        let out = "\
bpfvm-selftest start test_progs/bpf_loop
test_check_nr_loops:FAIL:bpf_loop_nr_loops unexpected error: -22
#23/1    bpf_loop/check_nr_loops:FAIL
#23/2    bpf_loop/check_callback_fn_stop:SKIP
#23      bpf_loop:FAIL
bpfvm-selftest end test_progs/bpf_loop 1
";
        let rows = judge_run(&split_runs(out)[0]);
        assert_eq!(rows[0].outcome, Outcome::Fail);
        assert!(
            rows[0]
                .reason
                .as_deref()
                .unwrap()
                .contains("bpf_loop_nr_loops unexpected error: -22"),
            "{rows:?}"
        );
        assert_eq!(rows[1].outcome, Outcome::Skip);
        assert!(rows[1].reason.is_some());
        assert_eq!(rows[2].outcome, Outcome::Fail);
    }

    #[test]
    fn a_test_that_crashed_or_was_cut_off_fails_by_name() {
        let out = "\
bpfvm-selftest start test_progs/ringbuf
#5/1     ringbuf/a:OK
Segmentation fault
bpfvm-selftest end test_progs/ringbuf 139
bpfvm-selftest start test_progs/xdp
";
        let runs = split_runs(out);
        let crashed = judge_run(&runs[0]);
        let top = crashed
            .iter()
            .find(|r| r.name == "test_progs/ringbuf")
            .unwrap();
        assert_eq!(top.outcome, Outcome::Fail);
        assert!(top.reason.as_deref().unwrap().contains("exited with 139"));
        assert!(top
            .reason
            .as_deref()
            .unwrap()
            .contains("Segmentation fault"));
        let cut = judge_run(&runs[1]);
        assert_eq!(outcomes(&cut), [("test_progs/xdp".into(), Outcome::Fail)]);
    }

    /// test_progs 6.12 prints a failed test's result lines twice (after `All error logs:`), and
    /// its JSON summary lists the failure with its log.
    #[test]
    fn repeated_error_logs_are_no_new_rows_and_the_json_summary_gives_the_reason() {
        let out = "\
bpfvm-selftest start test_progs/bpf_loop
#20/1    bpf_loop/check_nr_loops:OK
test_check_invalid_flags:FAIL:err unexpected error: -22
#20/4    bpf_loop/check_invalid_flags:FAIL
#20      bpf_loop:FAIL

All error logs:
test_check_invalid_flags:FAIL:err unexpected error: -22
#20/4    bpf_loop/check_invalid_flags:FAIL
#20      bpf_loop:FAIL
Summary: 0/1 PASSED, 0 SKIPPED, 1 FAILED
bpfvm-selftest end test_progs/bpf_loop 1
";
        let mut rows = judge_run(&split_runs(out)[0]);
        assert_eq!(rows.len(), 3, "{rows:?}");
        let json = r#"{"success": 0, "success_subtest": 1, "skipped": 0, "failed": 1,
            "results": [{"name": "bpf_loop", "number": 20, "message": "", "failed": true,
              "subtests": [{"name": "check_invalid_flags", "number": 4,
                "message": "test_check_invalid_flags:FAIL:err unexpected error: -22\n",
                "failed": true}]}]}"#;
        apply_json(&mut rows, &serde_json::from_str(json).unwrap());
        let sub = &rows[1];
        assert_eq!(sub.name, "test_progs/bpf_loop/check_invalid_flags");
        assert!(sub.reason.as_deref().unwrap().contains("json summary"));
        assert!(sub
            .reason
            .as_deref()
            .unwrap()
            .contains("unexpected error: -22"));
        assert_eq!(rows[0].outcome, Outcome::Pass);
    }

    /// The summary of a test_progs that never exited is unfinished: no row of its own (the
    /// unit's row fails); one that exited and left a bad summary is a failure.
    #[test]
    fn an_unfinished_json_summary_counts_only_when_test_progs_exited() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(JSON_DIR)).unwrap();
        std::fs::write(d.path().join(JSON_DIR).join("uprobe_multi_test.json"), "").unwrap();
        let run = |end: &str| {
            let out = format!("bpfvm-selftest start test_progs/uprobe_multi_test\n{end}");
            std::fs::write(d.path().join(TEST_PROGS_OUT), out).unwrap();
            judge(d.path(), &Output::read(d.path()), "")
        };
        let killed = run("");
        assert_eq!(
            outcomes(&killed),
            [("test_progs/uprobe_multi_test".into(), Outcome::Fail)]
        );
        let exited = run("bpfvm-selftest end test_progs/uprobe_multi_test 0\n");
        assert!(
            exited
                .iter()
                .any(|r| r.name == "guest:test_progs.json/uprobe_multi_test.json"
                    && r.outcome == Outcome::Fail),
            "{exited:?}"
        );
    }

    /// 6.1's prog_tests_framework as its guest printed it: the test passes with a FAIL line
    /// for the dummy subtest it fails on purpose.
    #[test]
    fn a_subtest_failed_on_purpose_under_a_passing_test_is_no_failure() {
        let out = "\
bpfvm-selftest start test_progs/prog_tests_framework
#139/1   prog_tests_framework/test_good_subtest:OK
#139/2   prog_tests_framework/test_skip_subtest:SKIP
#139/3   prog_tests_framework/test_skip_subtest:SKIP
#139/4   prog_tests_framework/test_fail_subtest:FAIL
#139     prog_tests_framework:OK
Summary: 1/0 PASSED, 0 SKIPPED, 0 FAILED
bpfvm-selftest end test_progs/prog_tests_framework 0
";
        let rows = judge_run(&split_runs(out)[0]);
        assert!(rows.iter().all(|r| r.outcome != Outcome::Fail), "{rows:?}");
        assert!(rows[3].reason.as_deref().unwrap().contains("on purpose"));
        let failing = out
            .replace("framework:OK", "framework:FAIL")
            .replace("framework 0", "framework 1");
        let rows = judge_run(&split_runs(&failing)[0]);
        assert_eq!(rows[3].outcome, Outcome::Fail);
    }

    /// 6.12's verifier_and as its guest printed it: a test with skipped subtests is OK.
    #[test]
    fn a_test_that_passed_with_skipped_subtests_is_a_pass() {
        let out = "\
bpfvm-selftest start test_progs/verifier_and
#458/1   verifier_and/invalid verifier context:OK
#458/2   verifier_and/invalid verifier context @unpriv:SKIP
#458     verifier_and:OK (SKIP: 1/2)
Summary: 1/1 PASSED, 1 SKIPPED, 0 FAILED
bpfvm-selftest end test_progs/verifier_and 0
";
        let rows = judge_run(&split_runs(out)[0]);
        assert_eq!(
            outcomes(&rows),
            [
                (
                    "test_progs/verifier_and/invalid verifier context".into(),
                    Outcome::Pass
                ),
                (
                    "test_progs/verifier_and/invalid verifier context @unpriv".into(),
                    Outcome::Skip
                ),
                ("test_progs/verifier_and".into(), Outcome::Pass),
            ]
        );
    }

    #[test]
    fn a_non_zero_status_fails_a_test_that_reported_ok() {
        let out = "bpfvm-selftest start test_progs/a\n#1 a:OK\nbpfvm-selftest end test_progs/a 2\n";
        let rows = judge_run(&split_runs(out)[0]);
        assert_eq!(rows[0].outcome, Outcome::Fail);
        assert_eq!(rows[0].reason.as_deref(), Some("test_progs exited with 2"));
    }

    #[test]
    fn test_maps_passes_only_with_its_final_line_and_status_zero() {
        let out = "\
Fork 100 tasks to 'test_update_delete'
test_array_map_batch_ops:PASS
map_in_map_batch_ops:PASS with inner ARRAY map
test_maps: OK, 2 SKIPPED
";
        let rows = judge_test_maps(out, Some(0));
        assert_eq!(
            outcomes(&rows),
            [
                ("test_maps/test_array_map_batch_ops".into(), Outcome::Pass),
                (
                    "test_maps/map_in_map_batch_ops with inner ARRAY map".into(),
                    Outcome::Pass
                ),
                ("test_maps".into(), Outcome::Pass),
            ]
        );
        assert_eq!(
            rows[2].reason.as_deref(),
            Some("passed; 2 SKIPPED (test_maps names none)")
        );
        let died = "test_array_map_batch_ops:PASS\nerror in lookup_batch: Invalid argument\n";
        let rows = judge_test_maps(died, Some(1));
        assert_eq!(rows[1].outcome, Outcome::Fail);
        assert!(rows[1]
            .reason
            .as_deref()
            .unwrap()
            .contains("Invalid argument"));
        assert_eq!(judge_test_maps("", None)[0].outcome, Outcome::Fail);
    }

    /// The 6.1 guest's markers (its kernel.log) with a WARN planted while `bpf_loop` ran: that
    /// test fails by name, the one before it does not.
    #[test]
    fn a_splat_between_a_tests_markers_fails_that_test() {
        let log = "12,444,7700241,-;bpfvm: phase tests\n\
                   12,445,7701564,-;bpfvm: tainted 1\n\
                   12,446,7724472,-;bpfvm: test start test_progs/bloom_filter_map\n\
                   12,447,8724596,-;bpfvm: test end test_progs/bloom_filter_map\n\
                   12,448,8727601,-;bpfvm: test start test_progs/bpf_loop\n\
                   4,449,9000000,-;------------[ cut here ]------------\n\
                   4,450,9000001,-;WARNING: CPU: 0 PID: 9 at kernel/bpf/syscall.c:512 f+0x1/0x2\n\
                   4,451,9000002,-;---[ end trace 0000000000000000 ]---\n\
                   12,452,10999656,-;bpfvm: test end test_progs/bpf_loop\n\
                   12,453,11571813,-;bpfvm: phase shutdown\n\
                   12,454,11893134,-;bpfvm: phase end\n";
        let allow = crate::results::health::allow::parse("").unwrap();
        let mut health = crate::results::health::judge(log, &allow, "6.1", None);
        let mut rows: Vec<TestResult> = split_runs(GREEN).iter().flat_map(judge_run).collect();
        crate::results::report::apply_kernel_health(&mut rows, &mut health, true, |n| {
            n.to_string()
        });
        let outcome = |n: &str| rows.iter().find(|r| r.name == n).unwrap().outcome;
        assert_eq!(outcome("test_progs/bpf_loop"), Outcome::Fail);
        assert_eq!(outcome("test_progs/bloom_filter_map"), Outcome::Pass);
        assert!(rows.iter().any(|r| r.name.starts_with("kernel:")));
    }

    #[test]
    fn durations_come_from_the_markers() {
        let log = "12,5,1000000,-;bpfvm: test start test_progs/a\n\
                   4,6,1200000,-;something\n\
                   12,7,3500000,-;bpfvm: test end test_progs/a\n";
        assert_eq!(durations(log)["test_progs/a"], 2500);
        let cut = "12,5,1000000,-;bpfvm: test start test_maps\n\
                   4,6,9000000,-;clocksource: Long readout interval\n";
        assert_eq!(durations(cut)["test_maps"], 8000);
    }

    #[test]
    fn the_judge_reads_every_unit_and_the_inventory_is_checked_against_the_list() {
        let d = tempfile::tempdir().unwrap();
        let out = format!(
            "{GREEN}bpfvm-selftest start test_maps\ntest_maps: OK, 0 SKIPPED\n\
             bpfvm-selftest end test_maps 0\nbpfvm-selftest defer test_verifier\n"
        );
        std::fs::write(d.path().join(TEST_PROGS_OUT), out).unwrap();
        let log = "12,5,1000000,-;bpfvm: test start test_maps\n\
                   12,7,3500000,-;bpfvm: test end test_maps\n";
        let rows = judge(d.path(), &Output::read(d.path()), log);
        let maps = rows.iter().find(|r| r.name == "test_maps").unwrap();
        assert_eq!((maps.outcome, maps.duration_ms), (Outcome::Pass, 2500));
        assert_eq!(rows.len(), 10, "{rows:?}");
        assert_eq!(
            Output::read(d.path()).started(),
            [
                "test_progs/bloom_filter_map",
                "test_progs/bpf_loop",
                "test_maps"
            ]
        );
        let all = "bloom_filter_map\nbpf_loop\nnew_test\n";
        let inv = d.path().join("6.1.inventory");
        std::fs::write(
            &inv,
            "test_progs bloom_filter_map\ntest_progs bpf_loop\ntest_progs gone\n",
        )
        .unwrap();
        let entry = check_inventory(all, &inv, "x.inventory", "bless").unwrap();
        let why = entry.reason.unwrap();
        assert!(
            why.contains("test_progs gone") && why.contains("test_progs new_test"),
            "{why}"
        );
        std::fs::write(&inv, inventory_of(all).render("h")).unwrap();
        assert!(check_inventory(all, &inv, "x.inventory", "bless").is_none());
    }

    /// Lines as 6.1's test_verifier prints them (`do_test`, `do_test_single`).
    #[test]
    fn test_verifier_cases_that_do_not_pass_are_rows_and_its_status_decides() {
        let out = "\
#0/u invalid and of negative number OK
#0/p invalid and of negative number OK
#1/p valid map access into an array with a constant (run 1/2) OK
#2/p atomic compare-and-exchange smoke test 2 cases OK
#3/u check with invalid reg offset 0 SKIP
#4/p reference tracking: leak potential reference FAIL
Unexpected error message!
\tEXP: Unreleased reference
#5/p raw_stack: no skb_load_bytes Did not run the program (not supported) OK
Summary: 5 PASSED, 1 SKIPPED, 1 FAILED
";
        let run = TestRun {
            name: TEST_VERIFIER.into(),
            output: out.lines().map(String::from).collect(),
            rc: Some(1),
        };
        let rows = judge_test_verifier(&run);
        let got: Vec<(&str, Outcome)> = rows.iter().map(|r| (r.name.as_str(), r.outcome)).collect();
        assert_eq!(
            got,
            [
                (
                    "test_verifier/#3/u check with invalid reg offset 0",
                    Outcome::Skip
                ),
                (
                    "test_verifier/#4/p reference tracking: leak potential reference",
                    Outcome::Fail
                ),
                ("test_verifier", Outcome::Fail),
            ]
        );
        assert!(rows[1]
            .reason
            .as_deref()
            .unwrap()
            .contains("EXP: Unreleased reference"));
        assert!(rows[2]
            .reason
            .as_deref()
            .unwrap()
            .starts_with(TEST_VERIFIER_FAILED));
        let ok = TestRun { rc: Some(0), ..run };
        let top = judge_test_verifier(&ok).pop().unwrap();
        assert_eq!(top.outcome, Outcome::Pass);
        assert!(top.reason.unwrap().starts_with("5 cases passed"));
        assert!(rows[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("unprivileged_bpf_disabled"));
    }
}
