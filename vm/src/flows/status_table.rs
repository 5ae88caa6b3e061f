//! The exit status table (docs/exit-status.md), one test per command that boots, at the level
//! where the command decides its status, on recorded and synthetic guest output: good → 0, a
//! failing test or a splat → 1, a tree that does not build → 125, a host failure or a test
//! that could not judge → 255.
//! `vm-run` and `bpfvm exec` decide in `bpfvm::command_code` (the same table in cli/src/lib.rs's
//! tests); 128 + N is `bpfvm::main_status`'s for every command (cli/tests/exit_on_signal.rs).
use std::time::Duration;

use crate::flows::bench;
use crate::flows::run::conclude::test_run_status;
use crate::flows::run::judge_kernel_log;
use crate::machine::accel::{Accel, Kind};
use crate::machine::vng::{Ending, RunOutcome};
use crate::results::bench::{ab, compare, model::BenchReport};
use crate::results::health;
use crate::results::report::{self, BinaryOutput, Outcome, Report, TestResult, VmInfo};
use crate::support::status::{Status, Untestable};
use bpfvm_common::protocol::NOT_JUDGED;

/// A kernel log that fails nothing: the script's phases to its end.
const CLEAN: &str = "12,0,0,-;bpfvm: phase tests\n12,1,1,-;bpfvm: phase end\n";

/// A WARN while bloom_filter::a and batch::hash ran (recorded on 6.1), the log complete.
fn warned() -> String {
    let path = crate::support::paths::workspace_root().join("vm/testdata/health/two-tests.kmsg");
    std::fs::read_to_string(path).unwrap() + "12,28,9900040,-;bpfvm: phase end\n"
}

fn pass(name: &str) -> TestResult {
    TestResult {
        name: name.into(),
        outcome: Outcome::Pass,
        reason: None,
        duration_ms: 1,
        kernel_splats: vec![],
    }
}

fn outcome(ending: Ending) -> RunOutcome {
    RunOutcome {
        ending,
        console_tail: vec![],
        elapsed: Duration::from_secs(1),
        boot: None,
        guest: None,
        retries: vec![],
    }
}

/// A booted run's status as `run::conclude` decides it for every command that runs tests
/// (`vm-test`, `bpfvm test`, `selftests`): the kernel log's rules applied to the tests, then
/// `run::test_run_status`.
fn concluded(tests: Vec<TestResult>, log: &str, ending: Ending) -> Report {
    concluded_on(false, tests, log, ending)
}

/// [`concluded`] under KVM (`kvm`) or TCG, as `run::conclude` judges the log
/// (`run::judge_kernel_log`, as every flow does).
fn concluded_on(kvm: bool, mut tests: Vec<TestResult>, log: &str, ending: Ending) -> Report {
    let accel = Accel {
        kind: if kvm { Kind::Kvm } else { Kind::Tcg },
        reason: "the test's".into(),
        tcg_thread: None,
    };
    let mut health = judge_kernel_log(log, &Default::default(), "6.1", &accel, &None);
    let blamed = health.blames_the_kernel();
    let vm_ok = ending == Ending::Exited(0);
    report::apply_kernel_health(&mut tests, &mut health, vm_ok, report::display_name);
    let mut r = Report::not_run("6.1", "");
    r.vm = VmInfo::of(&outcome(ending.clone()));
    r.summary = report::summarize(&tests);
    r.tests = tests;
    r.status = Some(test_run_status(&r, &ending, blamed, false));
    r
}

/// A guest test binary's libtest output: `batch::concurrency::x` failed with `message`, the
/// other tests passed.
fn failed_binary(message: &str) -> Vec<TestResult> {
    let stdout = format!(
        "thread 'batch::concurrency::x' (9) panicked at tests/src/tests/batch/concurrency.rs:36:9:\n\
         {message}\nstack backtrace:\n   0: x\n"
    );
    let failed = serde_json::json!({
        "type": "test", "event": "failed", "name": "batch::concurrency::x", "stdout": stdout
    });
    let out = BinaryOutput {
        name: "bpfvm_tests".into(),
        list: Some("batch::concurrency::x: test\nbloom_filter::a: test\n".into()),
        jsonl: format!(
            "{{ \"type\": \"test\", \"event\": \"started\", \"name\": \"bloom_filter::a\" }}\n\
             {{ \"type\": \"test\", \"name\": \"bloom_filter::a\", \"event\": \"ok\" }}\n\
             {{ \"type\": \"test\", \"event\": \"started\", \"name\": \"batch::concurrency::x\" }}\n\
             {failed}\n"
        ),
        rc: Some(101),
        stderr_tail: String::new(),
    };
    report::parse_binary(&out, "")
}

fn code(r: &Report) -> u8 {
    r.status().code()
}

/// What `kernel::source_tree` returns for a tree that does not build at this commit.
fn not_built() -> anyhow::Error {
    Untestable("`make bzImage` failed (exit status: 2)".into()).into()
}

/// What a failed host returns: a plain error (here the disk, while staging the kernel).
fn host_failed() -> anyhow::Error {
    anyhow::anyhow!("write target/custom-kernels/bzImage: No space left on device")
}

/// An error's exit status, as every command's `main` gives it (`bpfvm::error_status`).
fn error_code(e: &anyhow::Error) -> u8 {
    Status::of_error(e).code()
}

#[test]
fn vm_test() {
    let passes = || vec![pass("bloom_filter::a"), pass("batch::hash")];
    assert_eq!(code(&concluded(passes(), CLEAN, Ending::Exited(0))), 0);
    // A test that panicked (recorded on 6.1 with a panic planted in a test).
    let dir = crate::support::paths::workspace_root().join("vm/testdata/6.1-panic");
    let exp =
        crate::kernel::expect::Expectation::for_pin(&crate::kernel::pins::resolve("6.1").unwrap())
            .unwrap();
    let failing = report::judge(&dir, &["bpfvm_tests".into()], &exp, None, None).tests;
    assert_eq!(code(&concluded(failing, CLEAN, Ending::Exited(0))), 1);
    assert_eq!(code(&concluded(passes(), &warned(), Ending::Exited(0))), 1);
    assert_eq!(code(&concluded(passes(), CLEAN, Ending::Panic)), 1);
    assert_eq!(error_code(&not_built()), 125);
    let crashed = Ending::QemuCrashed("qemu: SIGABRT".into());
    assert_eq!(code(&concluded(passes(), CLEAN, crashed.clone())), 255);
    assert_eq!(code(&concluded(passes(), &warned(), crashed)), 1);
    let timeout = Ending::Timeout(Duration::from_secs(600));
    assert_eq!(code(&concluded(passes(), CLEAN, timeout)), 255);
    assert_eq!(error_code(&host_failed()), 255);
    // A test that could not judge (a concurrency test whose threads the host never ran at
    // once) judged nothing; with a splat, or another test's failure, the kernel is to blame.
    let not_judged = format!("{NOT_JUDGED} in 20 rounds the dump never saw the other thread");
    let stalled = failed_binary(&not_judged);
    assert_eq!(
        code(&concluded(stalled.clone(), CLEAN, Ending::Exited(0))),
        255
    );
    assert_eq!(
        code(&concluded(stalled.clone(), &warned(), Ending::Exited(0))),
        1
    );
    let mut and_failed = stalled;
    and_failed.extend(failed_binary("assertion failed: survivor 3 missing"));
    assert_eq!(code(&concluded(and_failed, CLEAN, Ending::Exited(0))), 1);
    let plain = failed_binary("in 20 rounds the dump never saw the other thread");
    assert_eq!(code(&concluded(plain, CLEAN, Ending::Exited(0))), 1);
}

/// A kernel log where `reports` (each "LEVEL;TEXT") were logged while bloom_filter::a ran,
/// the log complete, with the guest script's taint markers around the test (`bpfvm: tainted`,
/// the boot's mask 0, then the flags the reports set: [`taint_of`]).
fn detector(reports: &[&str]) -> String {
    let mut log = "12,0,0,-;bpfvm: phase tests\n12,1,5,-;bpfvm: tainted 0\n\
                   12,2,10,-;bpfvm: test start bloom_filter::a\n"
        .to_string();
    let mut seq = 3;
    let mut mask = 0;
    for r in reports {
        let (level, text) = r.split_once(';').unwrap();
        log += &format!("{level},{seq},{},-;{text}\n", 10 + seq);
        mask |= taint_of(text);
        seq += 1;
    }
    log + &format!(
        "12,{seq},90,-;bpfvm: test end bloom_filter::a\n12,{},91,-;bpfvm: tainted {mask}\n\
         12,{},95,-;bpfvm: phase end\n",
        seq + 1,
        seq + 2
    )
}

/// The taint flag the kernel sets with the report `text`: `L` with a soft lockup
/// (`watchdog_timer_fn`, kernel/watchdog.c), `W` with a WARN (`__warn`, kernel/panic.c); an
/// RCU stall (kernel/rcu/tree_stall.h), a hung task (kernel/hung_task.c) and lockdep's
/// suspicious RCU usage (`lockdep_rcu_suspicious`, kernel/locking/lockdep.c) set none.
fn taint_of(text: &str) -> u64 {
    if text.contains("BUG: soft lockup") {
        health::taint::SOFTLOCKUP
    } else if text.starts_with("WARNING: CPU:") {
        health::taint::WARN
    } else {
        0
    }
}

/// The stall detectors (an RCU stall, a soft lockup, a hung task) time the guest's CPUs, which
/// under TCG are host threads the host can stop or starve: there they judge nothing (255), and
/// their test says so; under KVM, or beside another splat, they are the kernel's (1).
#[test]
fn a_stall_detector_under_tcg_judges_nothing() {
    let passes = || vec![pass("bloom_filter::a"), pass("batch::hash")];
    let stalls = [
        "3;rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
        "0;watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [bpfvm_tests:214]",
        "3;INFO: task kworker/0:1:12 blocked for more than 122 seconds.",
    ];
    for stall in stalls {
        let log = detector(&[stall]);
        let tcg = concluded(passes(), &log, Ending::Exited(0));
        assert_eq!(code(&tcg), 255, "{stall}: {:#?}", tcg.tests);
        let a = tcg
            .tests
            .iter()
            .find(|t| t.name == "bloom_filter::a")
            .unwrap();
        assert!(
            a.reason.as_deref().unwrap().starts_with(NOT_JUDGED),
            "{stall}"
        );
        assert_eq!(
            code(&concluded_on(true, passes(), &log, Ending::Exited(0))),
            1
        );
        let warn = "4;WARNING: CPU: 1 PID: 214 at kernel/bpf/syscall.c:512 f+0x1/0x2";
        let with_warn = detector(&[
            stall,
            "4;------------[ cut here ]------------",
            warn,
            "4;---[ end trace 0000000000000000 ]---",
        ]);
        let r = concluded(passes(), &with_warn, Ending::Exited(0));
        assert_eq!(code(&r), 1, "{stall}: {:#?}", r.tests);
    }
    // Lockdep's "suspicious RCU usage" is no stall: the kernel's under TCG too.
    let usage = detector(&["4;WARNING: suspicious RCU usage"]);
    let r = concluded(passes(), &usage, Ending::Exited(0));
    assert_eq!(code(&r), 1, "{:#?}", r.tests);
}

/// Under TCG a host that starved a vCPU thread and a kernel that really stalls (a `bpf_loop`
/// callback that never reschedules) log the same report: the log cannot tell them apart
/// there, so both judge nothing (255) and the test's reason says so and what to run instead;
/// under KVM the kernel's stall is 1. A hung task the VM's timeout followed is the same: 255
/// under TCG (`git bisect run` stops), 1 under KVM.
#[test]
fn a_host_stall_and_a_kernel_stall() {
    let passes = || vec![pass("bloom_filter::a"), pass("batch::hash")];
    let host = detector(&["0;watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [kworker/1:1:30]"]);
    let kernel = detector(&[
        "0;watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [bpfvm_tests:214]",
        "4;RIP: 0010:bpf_loop+0x4e/0xa0",
    ]);
    for (stall, log) in [("host", &host), ("kernel", &kernel)] {
        let r = concluded(passes(), log, Ending::Exited(0));
        assert_eq!(code(&r), 255, "{stall} stall under TCG: {:#?}", r.tests);
        let a = r
            .tests
            .iter()
            .find(|t| t.name == "bloom_filter::a")
            .unwrap();
        let why = a.reason.as_deref().unwrap();
        assert!(
            why.contains("bpfvm cannot judge a stall") && why.contains("--accel kvm"),
            "{why}"
        );
    }
    assert_eq!(
        code(&concluded_on(true, passes(), &kernel, Ending::Exited(0))),
        1
    );
    let hung = detector(&["3;INFO: task bpfvm_tests:214 blocked for more than 120 seconds."]);
    let timeout = Ending::Timeout(Duration::from_secs(600));
    assert_eq!(code(&concluded(passes(), &hung, timeout.clone())), 255);
    assert_eq!(code(&concluded_on(true, passes(), &hung, timeout)), 1);
}

/// `bpfvm test`: each binary's libtest output, one report per kernel, the worst of them
/// (`bpfvm::judged_status`: evidence against a kernel, then nothing judged, then untestable).
#[test]
fn bpfvm_test() {
    let binary = |event: &str| BinaryOutput {
        name: "map_test".into(),
        list: Some("tests::a: test\n".into()),
        jsonl: format!(
            "{{ \"type\": \"test\", \"event\": \"started\", \"name\": \"tests::a\" }}\n\
             {{ \"type\": \"test\", \"name\": \"tests::a\", \"event\": \"{event}\" }}\n"
        ),
        rc: Some(if event == "ok" { 0 } else { 101 }),
        stderr_tail: String::new(),
    };
    let run = |event: &str, log: &str| {
        concluded(
            report::parse_binary(&binary(event), ""),
            log,
            Ending::Exited(0),
        )
    };
    let worst = |rs: &[&Report]| Status::combine(rs.iter().map(|r| r.status())).code();
    let good = run("ok", CLEAN);
    assert_eq!(worst(&[&good]), 0);
    let failed = run("failed", CLEAN);
    assert_eq!(worst(&[&good, &failed]), 1);
    assert_eq!(worst(&[&run("ok", &warned())]), 1);
    let tree = Report::not_run_because("/src/linux", &not_built());
    assert_eq!(worst(&[&good, &tree]), 125);
    let host = Report::not_run_because("6.12", &host_failed());
    assert_eq!(worst(&[&good, &tree, &host]), 255);
    assert_eq!(worst(&[&failed, &tree, &host]), 1);
}

/// `selftests`: the kernel's own tests as rows, judged as the suite's are.
#[test]
fn selftests() {
    let rows = || {
        vec![
            pass("test_progs:bloom_filter_map"),
            pass("test_maps:test_maps"),
        ]
    };
    assert_eq!(code(&concluded(rows(), CLEAN, Ending::Exited(0))), 0);
    let mut failing = rows();
    failing[0].outcome = Outcome::Fail;
    failing[0].reason = Some("test_progs: bloom_filter_map FAIL".into());
    assert_eq!(code(&concluded(failing, CLEAN, Ending::Exited(0))), 1);
    assert_eq!(code(&concluded(rows(), &warned(), Ending::Exited(0))), 1);
    // The tree's kernel or its selftests do not build at this commit
    // (`flows::selftests::build`'s own test tells a host failure from the sources').
    assert_eq!(error_code(&not_built()), 125);
    let hang = Ending::BootHang(Duration::from_secs(120));
    assert_eq!(code(&concluded(rows(), "", hang)), 255);
    assert_eq!(error_code(&host_failed()), 255);
}

/// `selftests`: an output too big to read is the guest writing more than a run may (1), named;
/// a unit no boot ran leaves the run no pass (255, with boots that judged nothing against the
/// kernel: here the first boot's rows are the tree's DENYLIST skips).
#[test]
fn selftests_an_output_too_big_or_a_unit_not_run() {
    use crate::flows::selftests::boots::combine;
    use crate::results::upstream::{self, Output};
    let flooded = Output::Unread {
        why: "test_progs.out is larger than the 64 MiB bpfvm reads of a guest file".into(),
        started: vec![("test_progs/a".into(), 70 << 20)],
    };
    let rows = upstream::judge(std::path::Path::new("/nowhere"), &flooded, "");
    let r = concluded(rows, CLEAN, Ending::Exited(0));
    assert_eq!(code(&r), 1, "{:#?}", r.tests);
    let denied = TestResult {
        outcome: Outcome::Skip,
        reason: Some("denied by DENYLIST".into()),
        ..pass("test_progs/denied")
    };
    let boot = concluded(vec![denied], CLEAN, Ending::Exited(0));
    assert_eq!(code(&boot), 0);
    let not_run = vec![report::failed(
        "test_progs/a".into(),
        format!(
            "{}boot 1 started no unit (it ran none of them), so the run stopped",
            upstream::NOT_RUN
        ),
    )];
    assert_eq!(code(&combine(vec![boot], not_run)), 255);
}

/// `selftests` over several boots (`boots::combine`): a unit the watchdog stopped at the cap
/// after others runs again first in the next boot, and its retry decides. A pass there is a
/// pass (0), its first stop named as slowness; a second stop fails it by name (1), so that a
/// bisect finds a real hang; a splat in the first boot still fails the run (1).
#[test]
fn selftests_a_unit_stopped_at_the_cap_is_judged_by_its_retry() {
    use crate::flows::run::conclude::status_before_a_retry;
    use crate::flows::selftests::boots::{combine, name_the_first_stop};
    let cap = Duration::from_secs(1110);
    let first_boot = |log: &str| {
        let stopped = Ending::TestHung {
            test: "test_maps".into(),
            limit: cap,
        };
        let mut r = concluded(vec![pass("test_progs/a")], log, stopped);
        assert_eq!(code(&r), 1, "as conclude alone judges it");
        r.status = Some(status_before_a_retry(&r, false));
        r
    };
    let stops = [(
        "test_maps".to_string(),
        "boot 1's watchdog stopped it at 1110 s, the limit of a unit after others in its boot, \
         and it ran again first in boot 2, where its limit is 2220 s"
            .to_string(),
    )];
    let mut passed = vec![pass("test_maps")];
    name_the_first_stop(&mut passed, &stops);
    let run = combine(
        vec![
            first_boot(CLEAN),
            concluded(passed, CLEAN, Ending::Exited(0)),
        ],
        vec![],
    );
    assert_eq!(code(&run), 0, "{:#?}", run.tests);
    assert_eq!(run.vm.ending, report::VmEnding::Exited);
    let maps = run.tests.iter().find(|t| t.name == "test_maps").unwrap();
    let why = maps.reason.as_deref().unwrap();
    assert!(
        why.starts_with("slow, not hung: boot 1's watchdog"),
        "{why}"
    );

    let mut hung = vec![report::failed(
        "test_maps".into(),
        "the VM ended while it ran".into(),
    )];
    name_the_first_stop(&mut hung, &stops);
    let again = Ending::TestHung {
        test: "test_maps".into(),
        limit: cap * 2,
    };
    let run = combine(
        vec![first_boot(CLEAN), concluded(hung, CLEAN, again)],
        vec![],
    );
    assert_eq!(code(&run), 1);
    let maps = run.tests.iter().find(|t| t.name == "test_maps").unwrap();
    assert_eq!(maps.outcome, Outcome::Fail);
    assert!(maps
        .reason
        .as_deref()
        .unwrap()
        .contains("stopped it at 1110 s"));

    let mut passed = vec![pass("test_maps")];
    name_the_first_stop(&mut passed, &stops);
    let warned_first = first_boot(&warned());
    assert_eq!(code(&warned_first), 1, "a splat stands");
    let run = combine(
        vec![warned_first, concluded(passed, CLEAN, Ending::Exited(0))],
        vec![],
    );
    assert_eq!(code(&run), 1);
}

fn recorded_bench() -> BenchReport {
    serde_json::from_str(include_str!("../../tests/data/bench-6.1-quick.json")).unwrap()
}

/// A boot the kernel made invalid, by a WARN once the benchmarks ran.
fn warned_in_bench(r: &mut BenchReport, i: usize) {
    r.runs[i].valid = false;
    r.runs[i].invalid_reason = Some("kernel:warning: kernel warning during bench".into());
}

/// `bench-vm`: the report's boots (`BenchReport::status`); a boot that judged nothing (qemu,
/// the host) is the run's error.
#[test]
fn bench_vm() {
    let good = recorded_bench();
    assert_eq!(good.status().code(), 0);
    let mut bad = good.clone();
    warned_in_bench(&mut bad, 0);
    assert_eq!(bad.status().code(), 1);
    // Repeated away only when the kernel spoiled the boot while it booted.
    bad.runs[0].excluded = Some("invalid: repeated".into());
    assert_eq!(bad.status().code(), 1);
    bad.runs[0].spoiled_at_boot = true;
    assert_eq!(bad.status().code(), 0);
    assert_eq!(error_code(&not_built()), 125);
    assert_eq!(error_code(&host_failed()), 255);
}

/// `bench-vm --against BASE`: B's own boots, then the base, then the rows (`ab::status`); a
/// base that does not build judges nothing.
#[test]
fn bench_vm_against() {
    let good = recorded_bench();
    let mut bad = good.clone();
    warned_in_bench(&mut bad, 0);
    let status = |a: &BenchReport, b: &BenchReport| {
        ab::status(a, b, &compare::compare(a, b, 1.0).unwrap()).code()
    };
    assert_eq!(status(&good, &good), 0);
    assert_eq!(status(&good, &bad), 1);
    assert_eq!(status(&bad, &good), 255);
    assert_eq!(error_code(&not_built()), 125, "B does not build");
    assert_eq!(
        error_code(&bench::base_not_ready(not_built())),
        255,
        "A does not build"
    );
    assert_eq!(error_code(&host_failed()), 255);
}
