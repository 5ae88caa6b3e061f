//! A `selftests` run in as many boots as it takes: each boot runs the units left, in order,
//! until its time budget is spent (the guest script stops starting units) or one of them
//! hangs (the host's watchdog stops the VM) or kills the guest; the next boot starts from the
//! next unit. Each boot is judged like a run of its own (`run::conclude`, its report under
//! `boot-N/`), and the boots' reports make the run's.
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::domain::options::VmOptions;
use crate::flows::run::{self, Prepared, RunDir, TestRun};
use crate::machine::guest;
use crate::machine::vng::{Ending, RunOutcome, Watchdog};
use crate::results::costs::Costs;
use crate::results::health::allow::Allowlist;
use crate::results::report::{self, failed, Outcome, Report, TestResult};
use crate::results::upstream::{self, END, START};
use crate::support::output::Events;
use crate::support::status::Status;

use super::script;
use super::units::Unit;

/// How a run's time is cut into boots: a boot starts no unit after `budget` of units (unless
/// it started none yet), and a unit runs at most `cap`, so that one started at the end of the
/// budget ends before the VM's timeout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub budget: Duration,
    pub cap: Duration,
}

impl Plan {
    /// The plan for boots of `timeout` each: after the boot's own allowance, half the time is
    /// the units' budget and half the longest a unit may overrun it.
    pub(crate) fn for_timeout(timeout: Duration) -> Result<Plan> {
        let usable = timeout.saturating_sub(run::BOOT_TIMEOUT);
        if usable < Duration::from_secs(120) {
            bail!(
                "--timeout {} s leaves no time for the selftests after a boot's {} s: give at \
                 least {} s",
                timeout.as_secs(),
                run::BOOT_TIMEOUT.as_secs(),
                (run::BOOT_TIMEOUT + Duration::from_secs(120)).as_secs()
            );
        }
        Ok(Plan {
            budget: usable / 2,
            cap: usable / 2,
        })
    }

    /// The plan for `units` units, as the run's notes say it.
    pub(crate) fn describe(&self, units: usize) -> String {
        format!(
            "{units} units; each boot starts them until {} s of tests, a unit runs at most {} s \
             (its watchdog; the first of a boot, {} s)",
            self.budget.as_secs(),
            self.cap.as_secs(),
            (self.budget + self.cap).as_secs()
        )
    }

    /// How long `unit` may run before the watchdog stops it: four times its measured cost,
    /// at least a minute, at most the cap; the cap when it was never measured. The unit a boot
    /// starts with has the boot to itself, so its most is the budget and the cap together: a
    /// unit too slow for the cap (test_maps under a lockdep kernel) runs to its end there.
    pub(crate) fn limit(&self, costs: &Costs, unit: &str, first: bool) -> Duration {
        let most = if first {
            self.budget + self.cap
        } else {
            self.cap
        };
        match costs.ms.get(unit) {
            Some(ms) => (Duration::from_millis(ms * 4)).clamp(Duration::from_secs(60), most),
            None => most,
        }
    }
}

/// What every boot of a run shares.
pub(crate) struct Run<'a> {
    pub vm: &'a VmOptions,
    pub plan: Plan,
    pub costs: &'a Costs,
    pub out_dir: &'a Path,
    /// The guest script of a boot writing into its shared directory.
    pub script: &'a dyn Fn(&Path) -> String,
    /// A boot's own rows, made final (known failures applied) before it is judged.
    pub finish: &'a dyn Fn(&mut Vec<TestResult>),
    pub rules: &'a TestRun<'a>,
    pub allow: &'a Allowlist,
}

/// Runs `units` in as many boots as it takes; `first_rows` (the run's checks made before any
/// boot) go into the first boot's report. Returns each boot's report and the units no boot
/// ran, each failed with why.
pub(crate) fn run(
    p: &mut Prepared,
    run: &Run,
    units: &[Unit],
    mut first_rows: Vec<TestResult>,
    events: &Events,
) -> Result<(Vec<Report>, Vec<TestResult>)> {
    let boots_dir = run.out_dir.join("boots");
    let _ = std::fs::remove_dir_all(&boots_dir);
    let mut left: &[Unit] = units;
    let mut reports = Vec::new();
    let mut again: Vec<String> = Vec::new();
    // Each unit run again, with what its first stop was: its retry's row says it.
    let mut stops: Vec<(String, String)> = Vec::new();
    loop {
        let n = reports.len() + 1;
        if n > 1 {
            events.step(format!(
                "boot {n}: {} units left, from {}",
                left.len(),
                left.first().map_or("", |u| u.name.as_str())
            ));
        }
        let dir = boots_dir.join(n.to_string());
        let files = RunDir::new(&dir)?;
        let todo: Vec<(&Unit, u64)> = left.iter().map(|u| (u, run.costs.of(&u.name))).collect();
        guest::write(&files.shared.join(script::TODO), &script::todo(&todo))?;
        guest::write(&files.script, &(run.script)(&files.shared))?;
        p.watchdog = Some(Watchdog {
            start: START,
            end: END,
            limits: left
                .iter()
                .enumerate()
                .map(|(i, u)| (u.name.clone(), run.plan.limit(run.costs, &u.name, i == 0)))
                .collect(),
            default: run.plan.cap,
        });
        let booted = run::boot_tests(p, run.vm, files, &dir, events)?;
        let shared = booted.files.shared.clone();
        let kernel_log = crate::support::guest_files::read(&shared.join(guest::files::KERNEL_LOG))
            .unwrap_or_default();
        let output = upstream::Output::read(&shared);
        let started = output.started();
        let mut tests = match booted.outcome.boot {
            None if !booted.vm_ok() => vec![report::never_started(&booted.ending())],
            _ => upstream::judge(&shared, &output, &kernel_log),
        };
        let retry = run_again(&run.plan, run.costs, &booted.outcome.ending, left, &again);
        if let Some(unit) = &retry {
            let stop = first_stop(&run.plan, run.costs, unit, n);
            events.note(format!("{unit}: {stop}"));
            tests.retain(|t| t.name != *unit && !t.name.starts_with(&format!("{unit}/")));
            again.push(unit.clone());
            stops.push((unit.clone(), stop));
        } else if let Some(cut) = started.last().filter(|_| !booted.vm_ok()) {
            let diagnosis = with_longer_timeout(&run.plan, &booted.outcome, run.vm.timeout);
            blame_the_ending(&mut tests, cut, &diagnosis);
        }
        if let Some(why) = testmod_failure(&shared) {
            tests.push(failed("guest:bpf_testmod".into(), why));
        }
        tests.append(&mut first_rows);
        (run.finish)(&mut tests);
        name_the_first_stop(&mut tests, &stops);
        let mut report = run::conclude(p, booted, tests, run.rules, run.allow, events, |_| {})?;
        if retry.is_some() {
            // The stopped unit's verdict is its retry's: this boot is judged by the rest.
            report.status = Some(run::conclude::status_before_a_retry(
                &report,
                run.rules.filter.is_some(),
            ));
            report::write(&report, &dir)?;
        }
        reports.push(report);
        let ran = left
            .iter()
            .take_while(|u| started.contains(&u.name))
            .count()
            - usize::from(retry.is_some());
        left = &left[ran..];
        if left.is_empty() {
            return Ok((reports, vec![]));
        }
        if ran == 0 {
            let not_run = not_run(left, n, reports.last());
            return Ok((reports, not_run));
        }
    }
}

/// How boot `n` first stopped `unit`, to run it again first in the next boot.
fn first_stop(plan: &Plan, costs: &Costs, unit: &str, n: usize) -> String {
    format!(
        "boot {n}'s watchdog stopped it at {} s, the limit of a unit after others in its boot, \
         and it ran again first in boot {}, where its limit is {} s",
        plan.cap.as_secs(),
        n + 1,
        plan.limit(costs, unit, true).as_secs()
    )
}

/// The rows of the units `left` when boot `n` (its report `last`) started none of them.
fn not_run(left: &[Unit], n: usize, last: Option<&Report>) -> Vec<TestResult> {
    let ending = last
        .and_then(Report::why_failed)
        .unwrap_or_else(|| "it ran none of them".into());
    left.iter()
        .map(|u| {
            failed(
                u.name.clone(),
                format!(
                    "{}boot {n} started no unit ({ending}), so the run stopped",
                    upstream::NOT_RUN
                ),
            )
        })
        .collect()
}

/// The unit the watchdog stopped at the cap (`ending`) that would have more time first in a
/// boot, as a slow unit never measured has (test_maps under a lockdep kernel): it runs once
/// more, first in the next boot. Not the first of `left` (it had the most already), nor a unit
/// run `again` before.
fn run_again(
    plan: &Plan,
    costs: &Costs,
    ending: &Ending,
    left: &[Unit],
    again: &[String],
) -> Option<String> {
    let Ending::TestHung { test, limit } = ending else {
        return None;
    };
    let first = left.first().is_some_and(|u| u.name == *test);
    let more = plan.limit(costs, test, true) > *limit;
    (!first && more && !again.contains(test)).then(|| test.clone())
}

/// The row of each unit run again (`stops`: the unit, how it was stopped first) says so: a
/// pass is a slow unit's, not a hang (the first stop was slowness); a failure (it hung again,
/// or failed) keeps its reason after it.
pub(crate) fn name_the_first_stop(tests: &mut [TestResult], stops: &[(String, String)]) {
    for (unit, stop) in stops {
        let Some(r) = tests.iter_mut().find(|t| t.name == *unit) else {
            continue;
        };
        r.reason = Some(match r.outcome {
            Outcome::Fail => format!("{stop}; there: {}", r.reason.as_deref().unwrap_or_default()),
            _ => {
                let passed = match &r.reason {
                    Some(why) => format!("{why}; "),
                    None => String::new(),
                };
                format!("{passed}slow, not hung: {stop}, and ended there")
            }
        });
    }
}

/// What to do when the watchdog stopped a unit at the most any boot gives one (the budget and
/// the cap together, which `timeout` sets): only a longer `--timeout` gives it more.
fn longer_timeout(plan: &Plan, ending: &Ending, timeout: Duration) -> Option<String> {
    let Ending::TestHung { test, limit } = ending else {
        return None;
    };
    (*limit >= plan.budget + plan.cap).then(|| {
        format!(
            "{test} had the whole boot, the most --timeout {} s gives one unit: a slower unit \
             than that needs a longer --timeout",
            timeout.as_secs()
        )
    })
}

/// How the VM ended, its first line (the failure's headline, `blame_the_ending`) saying when
/// only a longer `--timeout` would have helped.
fn with_longer_timeout(plan: &Plan, outcome: &RunOutcome, timeout: Duration) -> String {
    let diagnosis = outcome.diagnosis();
    match longer_timeout(plan, &outcome.ending, timeout) {
        None => diagnosis,
        Some(more) => match diagnosis.split_once('\n') {
            Some((first, rest)) => format!("{first}; {more}\n{rest}"),
            None => format!("{diagnosis}; {more}"),
        },
    }
}

/// The unit that was running when the VM ended (`cut`) fails with how it ended and the
/// console's last lines: a watchdog that stopped it, a panic, the VM's death.
fn blame_the_ending(tests: &mut [TestResult], cut: &str, diagnosis: &str) {
    let tail: Vec<&str> = diagnosis.lines().collect();
    let why = format!(
        "{}; the console's last lines: {}",
        tail.first().copied().unwrap_or_default(),
        tail[tail.len().saturating_sub(8)..].join(" | ")
    );
    if let Some(r) = tests
        .iter_mut()
        .find(|r| r.name == cut && r.outcome == Outcome::Fail)
    {
        r.reason = Some(format!(
            "{}; {why}",
            r.reason.as_deref().unwrap_or_default()
        ));
    }
}

/// Why `insmod bpf_testmod.ko` failed before the tests, if it did (its output, then its status).
fn testmod_failure(shared: &Path) -> Option<String> {
    let text = match crate::support::guest_files::read(&shared.join(upstream::TESTMOD)) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            return Some(format!(
                "what insmod bpf_testmod.ko said could not be read: {e}"
            ))
        }
    };
    let mut lines: Vec<&str> = text.lines().collect();
    let rc = lines.pop()?;
    (rc.trim() != "0").then(|| {
        format!(
            "insmod bpf_testmod.ko exited with {rc}: {} (the tests that use it fail)",
            lines.join(" | ")
        )
    })
}

/// The run's report from its boots': every boot's rows (a row of the boot itself, not of a
/// unit, says which boot when there were several), their splats, the first failing boot's
/// ending, the times added up; the status the boots' add up to, and never good while a unit
/// of `not_run` was left unrun.
pub(crate) fn combine(boots: Vec<Report>, not_run: Vec<TestResult>) -> Report {
    let several = boots.len() > 1;
    // A unit no boot ran was judged by nothing: the run is no pass (255, unless a boot's
    // verdict blames the kernel).
    let unjudged = (!not_run.is_empty()).then_some(Status::Stopped);
    let status = Status::combine(boots.iter().map(Report::status).chain(unjudged));
    let mut all = boots.into_iter().enumerate();
    let (_, mut report) = all.next().expect("a run boots at least once");
    // A boot whose ending judged nothing against it (its stopped unit passed in its retry)
    // gives the run no failed ending.
    if report.status() == Status::Good {
        report.vm.ending = report::VmEnding::Exited;
    }
    if several {
        name_boot_rows(&mut report.tests, 1);
    }
    for (i, b) in all {
        let judged_against = b.status() != Status::Good;
        let mut tests = b.tests;
        name_boot_rows(&mut tests, i + 1);
        report.tests.extend(tests);
        report.kernel_splats.extend(b.kernel_splats);
        if report.vm.ending == report::VmEnding::Exited && judged_against {
            report.vm.ending = b.vm.ending;
            report.vm.console_tail = b.vm.console_tail;
        }
        report.vm.wall_time_s += b.vm.wall_time_s;
        report.vm.retries.extend(b.vm.retries);
        let t = &mut report.timings;
        for (sum, add) in [
            (&mut t.boot_s, b.timings.boot_s),
            (&mut t.tests_s, b.timings.tests_s),
            (&mut t.shutdown_s, b.timings.shutdown_s),
            (&mut t.report_s, b.timings.report_s),
        ] {
            *sum = Some(sum.unwrap_or(0.0) + add.unwrap_or(0.0));
        }
        t.wall_s = b.timings.wall_s;
        report.cmdline = b.cmdline.or(report.cmdline);
    }
    report.tests.extend(not_run);
    report.summary = report::summarize(&report.tests);
    report.status = Some(status);
    report
}

/// Rows that are not a unit's (`guest:inventory`, `kernel:warning`) get their boot's number.
fn name_boot_rows(tests: &mut [TestResult], boot: usize) {
    for t in tests.iter_mut().filter(|t| !is_unit_row(&t.name)) {
        t.name = format!("{} (boot {boot})", t.name);
    }
}

/// A row of a unit: `test_progs/...`, `test_verifier[/...]`, `test_maps[/...]` (a name may
/// hold `:`, as `test_progs/btf/dedup: enum fwd resolution` does).
fn is_unit_row(name: &str) -> bool {
    let head = name.split('/').next().unwrap_or(name);
    [
        upstream::TEST_PROGS,
        upstream::TEST_VERIFIER,
        upstream::TEST_MAPS,
    ]
    .contains(&head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boot_s_time_is_split_between_the_budget_and_the_longest_unit() {
        let plan = Plan::for_timeout(Duration::from_secs(2400)).unwrap();
        assert_eq!(plan.budget, Duration::from_secs(1110));
        assert_eq!(plan.cap, Duration::from_secs(1110));
        let costs = Costs {
            ms: [
                ("test_progs/a".to_string(), 2_000),
                ("test_progs/slow".to_string(), 480_000),
                ("test_progs/huge".to_string(), 900_000),
            ]
            .into(),
        };
        assert_eq!(
            plan.limit(&costs, "test_progs/a", false),
            Duration::from_secs(60)
        );
        assert_eq!(
            plan.limit(&costs, "test_progs/slow", false),
            Duration::from_secs(1110)
        );
        assert_eq!(plan.limit(&costs, "test_progs/never", false), plan.cap);
        // First in its boot: the whole boot's time.
        assert_eq!(
            plan.limit(&costs, "test_progs/slow", true),
            Duration::from_secs(1920)
        );
        assert_eq!(
            plan.limit(&costs, "test_progs/huge", true),
            Duration::from_secs(2220)
        );
        assert_eq!(
            plan.limit(&costs, "test_progs/never", true),
            Duration::from_secs(2220)
        );
        let small = Plan::for_timeout(Duration::from_secs(600)).unwrap();
        assert_eq!(
            small.limit(&costs, "test_progs/a", false),
            Duration::from_secs(60)
        );
        let e = Plan::for_timeout(Duration::from_secs(200)).unwrap_err();
        assert!(e.to_string().contains("give at least 300 s"), "{e}");
    }

    /// A unit stopped at the cap after others runs once more, first in a boot; not one that
    /// was first, nor one its own measured limit stopped, nor one that ran again already.
    #[test]
    fn a_unit_stopped_at_the_cap_runs_again_first_in_a_boot() {
        let plan = Plan::for_timeout(Duration::from_secs(2400)).unwrap();
        let costs = Costs {
            ms: [("test_progs/quick".to_string(), 2_000)].into(),
        };
        let unit = |name: &str| Unit {
            name: name.into(),
            args: vec![],
        };
        let left = [unit("test_verifier"), unit("test_maps")];
        let hung = |test: &str, limit: Duration| Ending::TestHung {
            test: test.into(),
            limit,
        };
        let maps_at_cap = hung("test_maps", plan.cap);
        assert_eq!(
            run_again(&plan, &costs, &maps_at_cap, &left, &[]),
            Some("test_maps".into())
        );
        assert_eq!(
            run_again(&plan, &costs, &maps_at_cap, &left, &["test_maps".into()]),
            None
        );
        assert_eq!(
            run_again(&plan, &costs, &maps_at_cap, &left[1..], &[]),
            None
        );
        let quick = [unit("test_maps"), unit("test_progs/quick")];
        let own_limit = hung("test_progs/quick", Duration::from_secs(60));
        assert_eq!(run_again(&plan, &costs, &own_limit, &quick, &[]), None);
        assert_eq!(run_again(&plan, &costs, &Ending::Panic, &left, &[]), None);
    }

    #[test]
    fn a_unit_stopped_with_the_whole_boot_names_the_longer_timeout() {
        let plan = Plan::for_timeout(Duration::from_secs(2400)).unwrap();
        let t = Duration::from_secs(2400);
        let whole = Ending::TestHung {
            test: "test_maps".into(),
            limit: plan.budget + plan.cap,
        };
        let said = longer_timeout(&plan, &whole, t).unwrap();
        assert!(said.contains("--timeout 2400 s"), "{said}");
        let capped = Ending::TestHung {
            test: "test_maps".into(),
            limit: plan.cap,
        };
        assert_eq!(longer_timeout(&plan, &capped, t), None);
        assert_eq!(longer_timeout(&plan, &Ending::Panic, t), None);
    }

    #[test]
    fn the_cut_unit_fails_with_how_the_vm_ended() {
        let mut rows = vec![failed(
            "test_progs/hang".into(),
            "the VM ended while it ran (no exit status)".into(),
        )];
        blame_the_ending(
            &mut rows,
            "test_progs/hang",
            "test_progs/hang was still running after 60 s, its limit: the VM was killed\n\
             --- last 2 lines of the console ---\n[ 1.0] a\n[ 2.0] b",
        );
        let why = rows[0].reason.as_deref().unwrap();
        assert!(why.contains("still running after 60 s"), "{why}");
        assert!(why.contains("[ 2.0] b"), "{why}");
    }

    fn boot_report(tests: Vec<TestResult>, status: Status, ending: report::VmEnding) -> Report {
        let mut r: Report =
            serde_json::from_str(include_str!("../../../tests/data/boot-report-6.1.json")).unwrap();
        r.summary = report::summarize(&tests);
        r.tests = tests;
        r.status = Some(status);
        r.vm.ending = ending;
        r
    }

    fn row(name: &str, outcome: Outcome) -> TestResult {
        TestResult {
            name: name.into(),
            outcome,
            reason: None,
            duration_ms: 1,
            kernel_splats: vec![],
        }
    }

    /// Two boots, the first stopped by the watchdog in `hang`: every unit's row once, the
    /// boots' own rows named by boot, the first failing ending kept, the worst status.
    #[test]
    fn the_boots_reports_make_one_with_every_row_once() {
        let hung = report::VmEnding::Failed("test_progs/hang was still running".into());
        let first = boot_report(
            vec![
                row("test_progs/a", Outcome::Pass),
                row("test_progs/hang", Outcome::Fail),
                row("guest:inventory", Outcome::Pass),
            ],
            Status::Bad,
            hung.clone(),
        );
        let second = boot_report(
            vec![
                row("test_progs/b", Outcome::Pass),
                row("test_progs/btf/dedup: enum fwd resolution", Outcome::Pass),
                row("test_verifier/#1/u unpriv: return pointer", Outcome::Skip),
                row("test_verifier", Outcome::Pass),
                row("kernel:warning", Outcome::Fail),
            ],
            Status::Good,
            report::VmEnding::Exited,
        );
        let not_run = vec![failed("test_maps".into(), "not run".into())];
        let r = combine(vec![first, second], not_run);
        let names: Vec<&str> = r.tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "test_progs/a",
                "test_progs/hang",
                "guest:inventory (boot 1)",
                "test_progs/b",
                "test_progs/btf/dedup: enum fwd resolution",
                "test_verifier/#1/u unpriv: return pointer",
                "test_verifier",
                "kernel:warning (boot 2)",
                "test_maps",
            ]
        );
        assert_eq!(r.status, Some(Status::Bad));
        assert_eq!(r.vm.ending, hung);
        assert_eq!(r.summary.failed, 3);
        let one = combine(
            vec![boot_report(
                vec![row("guest:inventory", Outcome::Pass)],
                Status::Good,
                report::VmEnding::Exited,
            )],
            vec![],
        );
        assert_eq!(one.tests[0].name, "guest:inventory");
        assert_eq!(one.status, Some(Status::Good));
    }

    /// A later boot's failed ending becomes the run's only when that boot was judged against
    /// and no earlier one failed; the boots' wall times add up.
    #[test]
    fn a_later_boots_ending_is_the_runs_only_when_it_was_judged_against() {
        let ending = |first: (Status, report::VmEnding), second: (Status, report::VmEnding)| {
            let a = boot_report(vec![row("test_progs/a", Outcome::Pass)], first.0, first.1);
            let b = boot_report(vec![row("test_progs/b", Outcome::Pass)], second.0, second.1);
            let wall = a.vm.wall_time_s + b.vm.wall_time_s;
            let r = combine(vec![a, b], vec![]);
            assert_eq!(r.vm.wall_time_s, wall);
            r.vm.ending
        };
        let hung = |u: &str| report::VmEnding::Failed(format!("test_progs/{u} was still running"));
        let exited = || (Status::Good, report::VmEnding::Exited);
        assert_eq!(ending(exited(), (Status::Bad, hung("b"))), hung("b"));
        assert_eq!(
            ending((Status::Bad, hung("a")), (Status::Bad, hung("b"))),
            hung("a")
        );
        // Stopped at the cap, then passed in its retry: nothing judged against the boot.
        assert_eq!(
            ending(exited(), (Status::Good, hung("b"))),
            report::VmEnding::Exited
        );
    }
}
