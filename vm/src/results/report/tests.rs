//! Report logic on recorded guest output.
use std::collections::{BTreeMap, HashMap};
use std::os::unix::ffi::OsStringExt;

use super::collect::*;
use super::judge::*;
use super::model::*;
use super::render::*;
use crate::kernel::expect::{Expectation, Mismatch, Probe};
use crate::machine::guest::files;
use crate::machine::vng::FailedBoot;

const RUN: &str = r#"{ "type": "suite", "event": "started", "test_count": 4 }
{ "type": "test", "event": "started", "name": "tests::bloom::a" }
{ "type": "test", "name": "tests::bloom::a", "event": "ok", "exec_time": 0.0125 }
{ "type": "test", "event": "started", "name": "tests::bloom::b" }
{ "type": "test", "name": "tests::bloom::b", "event": "failed", "exec_time": 0.5, "stdout": "some output\n\nthread 'tests::bloom::b' (12) panicked at tests/src/x.rs:3:5:\nassertion failed: 1 == 2\nstack backtrace:\n   0: foo\n" }
{ "type": "test", "event": "started", "name": "tests::bloom::c" }
{ "type": "test", "name": "tests::bloom::c", "event": "ok", "exec_time": 0.001 }
{ "type": "test", "event": "started", "name": "tests::bloom::d" }
"#;

const LIST: &str = "tests::bloom::a: test\ntests::bloom::b: test\ntests::bloom::c: test\n\
                    tests::bloom::d: test\ntests::bloom::e: test\n";

fn binary(jsonl: &str, rc: Option<i32>, stderr_tail: &str) -> BinaryOutput {
    BinaryOutput {
        name: "bpfvm_tests".into(),
        list: Some(LIST.into()),
        jsonl: jsonl.into(),
        rc,
        stderr_tail: stderr_tail.into(),
    }
}

fn by_name(r: &[TestResult]) -> HashMap<&str, &TestResult> {
    r.iter().map(|t| (t.name.as_str(), t)).collect()
}

#[test]
fn parses_passes_failures_and_a_crash() {
    let r = parse_binary(&binary(RUN, Some(134), "Aborted"), "");
    let by = by_name(&r);
    assert_eq!(by["bloom::a"].outcome, Outcome::Pass);
    assert_eq!(by["bloom::a"].duration_ms, 13);
    assert_eq!(by["bloom::b"].outcome, Outcome::Fail);
    assert_eq!(
        by["bloom::b"].reason.as_deref().unwrap(),
        "thread 'tests::bloom::b' (12) panicked at tests/src/x.rs:3:5:\nassertion failed: 1 == 2"
    );
    assert_eq!(by["bloom::d"].outcome, Outcome::Fail);
    assert_eq!(
        by["bloom::d"].reason.as_deref().unwrap(),
        "test process died (signal 6 (SIGABRT)) while this test ran; stderr: Aborted"
    );
    assert_eq!(by["bloom::e"].outcome, Outcome::Fail);
    assert!(
        by["bloom::e"]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("not run: the test process died"),
        "{:?}",
        by["bloom::e"]
    );
    assert!(
        !by.contains_key("binary:bpfvm_tests"),
        "a test failed: no binary entry"
    );
}

#[test]
fn a_non_zero_exit_with_no_failing_test_fails_the_binary() {
    let clean = "{ \"type\": \"test\", \"event\": \"started\", \"name\": \"tests::bloom::a\" }\n\
                 { \"type\": \"test\", \"name\": \"tests::bloom::a\", \"event\": \"ok\" }\n";
    let mut out = binary(clean, Some(3), "leaked fd | exiting");
    out.list = Some("tests::bloom::a: test\n".into());
    let r = parse_binary(&out, "");
    let by = by_name(&r);
    assert_eq!(by["bloom::a"].outcome, Outcome::Pass);
    assert_eq!(
        by["binary:bpfvm_tests"].reason.as_deref(),
        Some("test process died (exit status 3) with no failing test; stderr: leaked fd | exiting")
    );
    out.rc = Some(0);
    assert_eq!(
        parse_binary(&out, "").len(),
        1,
        "a clean run is its tests only"
    );
}

#[test]
fn a_binary_that_never_ran_fails_every_listed_test_and_itself_without_a_list() {
    let r = parse_binary(
        &binary("", None, ""),
        "the guest did not finish within 60 s",
    );
    assert_eq!(r.len(), 5);
    assert!(r.iter().all(|t| t.outcome == Outcome::Fail
        && t.reason
            .as_deref()
            .unwrap()
            .contains("did not finish within 60 s")));
    let mut out = binary("", Some(101), "error: unexpected argument");
    out.list = None;
    let r = parse_binary(&out, "");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].name, "binary:bpfvm_tests");
    assert!(r[0]
        .reason
        .as_deref()
        .unwrap()
        .contains("unexpected argument"));
}

#[test]
fn statuses_read_as_signals_or_exit_codes() {
    assert_eq!(status_words(134), "signal 6 (SIGABRT)");
    assert_eq!(status_words(137), "signal 9 (SIGKILL)");
    assert_eq!(status_words(101), "exit status 101");
    assert_eq!(status_words(3), "exit status 3");
}

fn exp(release: &str) -> Expectation {
    Expectation::for_release(release).unwrap()
}

#[test]
fn recorded_skips_turn_passes_into_skips_but_never_hide_failures() {
    let mut r = parse_binary(&binary(RUN, Some(101), ""), "");
    apply_skips(
        &mut r,
        "{\"test\":\"tests::bloom::c\",\"reason\":\"no kallsyms\"}\n\
         {\"test\":\"tests::bloom::b\",\"reason\":\"x\"}\n",
        &exp("6.1.0-57-cloud-amd64"),
        &BTreeMap::new(),
    );
    let s = summarize(&r);
    assert_eq!((s.passed, s.failed, s.skipped), (1, 3, 1));
    let c = r.iter().find(|t| t.name == "bloom::c").unwrap();
    assert_eq!(c.reason.as_deref(), Some("no kallsyms"));
}

/// A skip recorded from a thread the test spawned is named after that thread: it matches no
/// test, and the run fails naming it instead of the skip vanishing while its test passes.
#[test]
fn a_skip_that_names_no_test_fails_the_run() {
    let mut r = parse_binary(&binary(RUN, Some(101), ""), "");
    let before = summarize(&r);
    apply_skips(
        &mut r,
        "{\"test\":\"<unknown test>\",\"reason\":\"no bloom\"}\n",
        &exp("6.1.0-57-cloud-amd64"),
        &BTreeMap::new(),
    );
    let by = by_name(&r);
    assert_eq!(
        by["guest:skips.jsonl"].reason.as_deref(),
        Some(
            "skips recorded for no test that ran: `<unknown test>` (no bloom); record a skip \
             from the test's own thread (its name is the test's)"
        )
    );
    assert_eq!(summarize(&r).failed, before.failed + 1);
}

#[test]
fn live_progress_judges_a_pass_by_its_skip_record_as_the_report_will() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join(files::SKIPS),
        "{\"test\":\"tests::bloom::a\",\"reason\":\"no bloom\",\"feature\":\"bloom_filter_map\"}\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join(files::FEATURES),
        r#"{"bloom_filter_map":{"answer":"absent","detail":"EINVAL from BPF_MAP_CREATE"}}"#,
    )
    .unwrap();
    let old = exp("5.10.0-46-cloud-amd64");
    let new = exp("6.1.0-57-cloud-amd64");
    assert_eq!(judge_live_pass(d.path(), &old, "bloom::b"), None);
    let (o, _) = judge_live_pass(d.path(), &old, "bloom::a").unwrap();
    assert_eq!(o, Outcome::Skip);
    let (o, why) = judge_live_pass(d.path(), &new, "bloom::a").unwrap();
    assert_eq!(o, Outcome::Fail);
    assert!(why.contains("bloom_filter_map"), "{why}");
    assert!(
        why.contains("EINVAL from BPF_MAP_CREATE"),
        "the probe's answer: {why}"
    );
}

#[test]
fn a_skip_for_an_expected_feature_is_a_failure_naming_it() {
    let skips = "{\"test\":\"tests::bloom::a\",\"reason\":\"bloom filter map not supported by this kernel\",\"feature\":\"bloom_filter_map\"}\n\
                 {\"test\":\"tests::bloom::c\",\"reason\":\"bloom filter map not supported by this kernel\",\"feature\":\"bloom_filter_map\"}\n";
    let probes = BTreeMap::from([(
        "bloom_filter_map".to_string(),
        Probe::Absent("EINVAL from BPF_MAP_CREATE".into()),
    )]);
    let mut r = parse_binary(&binary(RUN, Some(101), ""), "");
    apply_skips(&mut r, skips, &exp("6.1.0-57-cloud-amd64"), &probes);
    let a = r.iter().find(|t| t.name == "bloom::a").unwrap();
    assert_eq!(a.outcome, Outcome::Fail);
    assert!(a.reason.as_deref().unwrap().starts_with(
        "6.1 should have bloom_filter_map (since 5.16), but the probe says: absent (EINVAL from BPF_MAP_CREATE)"
    ));
    let mut r = parse_binary(&binary(RUN, Some(101), ""), "");
    apply_skips(&mut r, skips, &exp("5.10.0-46-cloud-amd64"), &probes);
    let a = r.iter().find(|t| t.name == "bloom::a").unwrap();
    assert_eq!(a.outcome, Outcome::Skip);
}

#[test]
fn features_json_missing_or_corrupt_or_a_failed_probe_fail_the_run() {
    let d = tempfile::tempdir().unwrap();
    let e = exp("6.1.0-57-cloud-amd64");
    let (_, _, entries) = judge_features(d.path(), &e);
    let names: Vec<&str> = entries.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["guest:feature-probe", "guest:features.json"]);
    std::fs::write(d.path().join(files::PROBE_RC), "0\n").unwrap();
    std::fs::write(d.path().join(files::FEATURES), "{\"bloom_filter_map\": tr").unwrap();
    let (_, _, entries) = judge_features(d.path(), &e);
    assert_eq!(entries.len(), 1);
    assert!(entries[0].reason.as_deref().unwrap().contains("not valid"));
    // The old format (name -> bool) is not an answer either.
    std::fs::write(
        d.path().join(files::FEATURES),
        "{\"bloom_filter_map\": true}",
    )
    .unwrap();
    assert_eq!(judge_features(d.path(), &e).2.len(), 1);
}

/// What `vm-test` made of real guest output, recorded on 6.1 with a defect planted by hand
/// (vm/testdata/<kernel>-<defect>/; the plants were never committed).
fn recorded(defect: &str, ending: Option<&str>) -> (Vec<TestResult>, Vec<Mismatch>) {
    let dir = crate::support::paths::workspace_root()
        .join("vm/testdata")
        .join(format!("6.1-{defect}"));
    assert!(dir.is_dir(), "{}", dir.display());
    let e = Expectation::for_pin(&crate::kernel::pins::resolve("6.1").unwrap()).unwrap();
    let v = judge(&dir, &["bpfvm_tests".into()], &e, ending, None);
    (v.tests, v.mismatches)
}

fn failure_of<'a>(tests: &'a [TestResult], name: &str) -> &'a str {
    let t = tests
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no {name} in {tests:#?}"));
    assert_eq!(t.outcome, Outcome::Fail, "{t:?}");
    t.reason.as_deref().unwrap()
}

#[test]
fn recorded_broken_bloom_probe_fails_the_feature_and_the_skipped_test() {
    let (tests, mismatches) = recorded("broken-bloom-probe", None);
    let msg = "6.1 should have bloom_filter_map (since 5.16), but the probe says: absent";
    assert!(failure_of(&tests, "feature:bloom_filter_map").starts_with(msg));
    assert!(failure_of(&tests, "bloom_filter::lookup_miss_is_enoent").starts_with(msg));
    assert_eq!(mismatches.len(), 1);
    assert_eq!(summarize(&tests).failed, 2);
}

#[test]
fn recorded_panic_fails_the_test_with_its_message() {
    let (tests, _) = recorded("panic", None);
    assert!(failure_of(&tests, "smoke::planted_panic").contains("planted panic"));
    assert_eq!(summarize(&tests).failed, 1);
}

#[test]
fn recorded_abort_fails_the_running_test_with_the_signal() {
    let (tests, _) = recorded("abort", None);
    assert!(failure_of(&tests, "smoke::planted_abort")
        .starts_with("test process died (signal 6 (SIGABRT)) while this test ran"));
    assert_eq!(summarize(&tests).failed, 1);
}

#[test]
fn recorded_exit_3_fails_every_test_that_was_running() {
    let (tests, _) = recorded("exit-3", None);
    for name in [
        "smoke::planted_exit_3",
        "smoke::planted_exit_slow_neighbour",
    ] {
        assert!(
            failure_of(&tests, name)
                .starts_with("test process died (exit status 3) while this test ran"),
            "{name}"
        );
    }
}

#[test]
fn recorded_hang_past_the_timeout_fails_the_test_it_was_in() {
    let ending = "the guest did not finish within 75 s (a hang, or raise --timeout)";
    let (tests, _) = recorded("hang", Some(ending));
    assert_eq!(
        failure_of(&tests, "smoke::planted_hang"),
        format!("test process never finished: {ending} while this test ran")
    );
}

fn report(tests: Vec<TestResult>) -> Report {
    Report {
        kernel: KernelInfo {
            version: "6.1".into(),
            arch: crate::domain::arch::Arch::X86_64,
            pinned_release: None,
            release: None,
            tree: None,
        },
        accel: AccelInfo {
            name: "tcg".into(),
            reason: "test".into(),
            tcg_thread: None,
        },
        cmdline: None,
        spectre_v2: None,
        features: BTreeMap::new(),
        probes: BTreeMap::new(),
        expected_features: Some(exp("6.1.0-57-cloud-amd64")),
        feature_mismatches: vec![Mismatch {
            feature: "bloom_filter_map".into(),
            since: "5.16".into(),
            probe: "absent (EINVAL)".into(),
            message:
                "6.1 should have bloom_filter_map (since 5.16), but the probe says: absent (EINVAL)"
                    .into(),
        }],
        kernel_splats: vec![],
        vm: VmInfo {
            ending: VmEnding::Exited,
            wall_time_s: 1.0,
            console_tail: vec![],
            retries: vec![],
            guest: None,
        },
        timings: Timings {
            build_s: Some(12.04),
            boot_s: Some(6.0),
            ..Timings::default()
        },
        summary: summarize(&tests),
        tests,
        verifier: vec![],
        selftests: None,
        status: None,
        reused: vec![],
        piece: None,
    }
}

#[test]
fn junit_marks_skips_and_failures() {
    let report = report(parse_binary(&binary(RUN, Some(101), ""), ""));
    let table = summary_table(&report);
    assert!(
        table.contains("time: build 12.0 s, boot 6.0 s\nslowest: bloom::b 0.5 s, bloom::a 0.0 s"),
        "{table}"
    );
    assert!(
        table.contains("FEATURE MISMATCH: 6.1 should have bloom_filter_map"),
        "{table}"
    );
    assert!(
        table.contains(
            "expected features (release 6.1.0-57-cloud-amd64 (mainline 6.1)): batch_ops_hash,"
        ),
        "{table}"
    );
    let matrix = matrix_table(&[report.clone(), Report::not_run("5.10", "offline")]);
    assert!(matrix.contains("bloom::b"), "{matrix}");
    assert!(matrix.contains("2/3/0"), "{matrix}");
    assert!(matrix.contains("FAIL: 3 tests failed: "), "{matrix}");
    assert!(matrix.contains("FAIL: not run: offline"), "{matrix}");
    let xml = junit(&report).unwrap();
    assert!(xml.contains("<failure"), "{xml}");
    assert!(xml.contains("name=\"bpfvm vm-test\""), "{xml}");
    let mut upstream = report.clone();
    upstream.selftests = Some(crate::results::report::SelftestsInfo {
        source: "linux-source-6.1".into(),
        note: None,
        clang: "Debian clang version 16".into(),
        build_dir: "/c".into(),
        build_cached: true,
        build_s: 0.0,
    });
    let xml = junit(&upstream).unwrap();
    assert!(
        xml.contains("name=\"bpfvm selftests\""),
        "the kernel's own tests: {xml}"
    );
    assert!(!report.ok());
    assert!(summary_table(&report).contains("2 passed, 3 failed, 0 skipped"));
}

fn passed(name: &str) -> TestResult {
    TestResult {
        name: name.into(),
        outcome: Outcome::Pass,
        reason: None,
        duration_ms: 1,
        kernel_splats: vec![],
    }
}

#[test]
fn a_splat_fails_the_tests_it_ran_during_and_its_kernel_entry_names_them() {
    let log = std::fs::read_to_string(
        crate::support::paths::workspace_root().join("vm/testdata/health/two-tests.kmsg"),
    )
    .unwrap();
    let mut health = crate::results::health::judge(&log, &Default::default(), "6.1", None);
    let mut tests = vec![
        passed("bloom_filter::a"),
        passed("batch::hash"),
        passed("smoke::c"),
    ];
    apply_kernel_health(&mut tests, &mut health, true, display_name);
    let by = by_name(&tests);
    assert_eq!(by["smoke::c"].outcome, Outcome::Pass);
    for name in ["bloom_filter::a", "batch::hash"] {
        assert_eq!(by[name].outcome, Outcome::Fail);
        assert!(by[name].reason.as_deref().unwrap().starts_with(
            "the kernel logged a warning while this test ran: WARNING: CPU: 1 PID: 214 at kernel/bpf/syscall.c:512"
        ));
        assert!(by[name].kernel_splats[0].contains("---[ end trace"));
    }
    assert!(by["kernel:warning"].reason.as_deref().unwrap().starts_with(
        "kernel warning while tests ran in parallel: batch::hash, bloom_filter::a: WARNING:"
    ));
    assert_eq!(
        by["kernel:taint"].reason.as_deref(),
        Some("kernel taint while batch::hash ran: new taint flags: W (TAINT_WARN: the kernel issued a warning)")
    );
    assert!(
        by["guest:kernel.log"]
            .reason
            .as_deref()
            .unwrap()
            .contains("splats may be missing"),
        "the fixture has no `phase end`"
    );
    let mut r = report(tests);
    r.kernel_splats = health.splats;
    let xml = junit(&r).unwrap();
    assert!(
        xml.contains("<system-err>------------[ cut here ]------------"),
        "{xml}"
    );
    assert!(summary_table(&r).contains("KERNEL SPLAT: kernel warning while tests ran in parallel"));
    r.kernel_splats[0].allowed = Some("upstream 0123abcd".into());
    assert!(summary_table(&r).contains(
        "allowed kernel warning while tests ran in parallel: batch::hash, bloom_filter::a: WARNING: CPU: 1 PID: 214 at kernel/bpf/syscall.c:512 map_check_btf+0x1a2/0x1e0 (kernels/splats/allowed.toml: upstream 0123abcd)"
    ));
}

#[test]
fn an_allowed_splat_fails_nothing() {
    let log = std::fs::read_to_string(
        crate::support::paths::workspace_root().join("vm/testdata/health/two-tests.kmsg"),
    )
    .unwrap()
        + "12,28,9900040,-;bpfvm: phase end\n";
    let allow = crate::results::health::allow::parse(
        "[[allow]]\nregex = '.'\nkernels = [\"6.1\"]\nreason = \"r\"\n",
    )
    .unwrap();
    let mut health = crate::results::health::judge(&log, &allow, "6.1", None);
    let mut tests = vec![passed("bloom_filter::a"), passed("batch::hash")];
    apply_kernel_health(&mut tests, &mut health, true, display_name);
    assert_eq!(summarize(&tests).failed, 0, "{tests:#?}");
    assert!(tests.iter().all(|t| t.kernel_splats.is_empty()));
    assert_eq!(health.splats.len(), 2);
}

#[test]
fn a_run_with_no_test_fails() {
    let mut r = report(vec![]);
    assert!(!r.ok());
    r.tests.push(TestResult {
        name: "a".into(),
        outcome: Outcome::Pass,
        reason: None,
        duration_ms: 1,
        kernel_splats: vec![],
    });
    r.summary = summarize(&r.tests);
    assert!(r.ok());
    assert!(!is_test("feature:bloom_filter_map") && is_test("bloom_filter::x"));
    assert_eq!(no_test_ran(None).outcome, Outcome::Fail);
}

#[test]
fn a_failed_run_says_why() {
    let mut r = Report::not_run("6.12", "x");
    r.vm.ending = VmEnding::Failed("the guest kernel panicked".into());
    r.vm.retries.push(FailedBoot {
        ending: "the guest kernel panicked".into(),
        console_tail: vec![],
    });
    assert_eq!(
        r.why_failed().unwrap(),
        "the guest kernel panicked (after 1 failed boot retried)"
    );
    r.vm.ending = VmEnding::Exited;
    assert_eq!(r.why_failed().unwrap(), "no test ran");
    r.tests = parse_binary(&binary(RUN, Some(0), ""), "");
    r.summary = summarize(&r.tests);
    assert!(
        r.why_failed().unwrap().starts_with("3 tests failed: "),
        "{:?}",
        r.why_failed()
    );
    r.tests.retain(|t| t.outcome == Outcome::Pass);
    r.summary = summarize(&r.tests);
    assert_eq!(r.why_failed(), None);
    assert!(r.ok());
}

/// What the guest may leave in the shared directory, as bytes a broken or hostile guest
/// could write: JSON-ish lines (to get past the first parse) mixed with arbitrary bytes.
fn guest_file() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    let line = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        Just(br#"{ "type": "test", "event": "started", "name": "a::b" }"#.to_vec()),
        Just(
            br#"{ "type": "test", "event": "failed", "name": "a::b", "stdout": "\u00ff" }"#
                .to_vec()
        ),
        Just(br#"{ "type": "test", "event": "ok", "name": "a::b", "exec_time": -1 }"#.to_vec()),
        Just(br#"{"test":"a::b","reason":"x","feature":"bloom_filter_map"}"#.to_vec()),
        Just(br#"{"bloom_filter_map":{"answer":"present"}}"#.to_vec()),
        Just(b"a::b: test".to_vec()),
        Just(b"-2147483649".to_vec()),
    ];
    proptest::collection::vec(line, 0..8).prop_map(|ls| ls.join(&b'\n'))
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    /// Any bytes in any of the guest's files: the report is a verdict, never a panic.
    #[test]
    fn any_guest_files_give_a_verdict_not_a_panic(
        files in proptest::collection::vec(guest_file(), 8),
        vm_died in proptest::bool::ANY,
    ) {
        use crate::machine::guest::files as names;
        let d = tempfile::tempdir().unwrap();
        let names = [
            names::FEATURES.to_string(), names::PROBE_RC.into(), names::SKIPS.into(),
            names::list("t"), "t.jsonl".into(), "t.rc".into(), "t.stderr".into(),
            crate::machine::vng::STATUS_FILE.into(),
        ];
        for (name, bytes) in names.iter().zip(&files) {
            std::fs::write(d.path().join(name), bytes).unwrap();
        }
        let exp = crate::kernel::expect::Expectation::for_release("6.1.0").unwrap();
        let verdict = judge(
            d.path(), &["t".to_string()], &exp, vm_died.then_some("the VM died"), None,
        );
        // Something is always judged: at least the probe's or the binary's entry.
        proptest::prop_assert!(!verdict.tests.is_empty());
    }
}

#[test]
fn live_progress_reads_finished_tests_only() {
    let ok = r#"{ "type": "test", "name": "tests::bloom::a", "event": "ok", "exec_time": 0.01 }"#;
    assert_eq!(test_finished(ok), Some(("bloom::a".into(), "ok".into())));
    let failed = r#"{ "type": "test", "name": "tests::b", "event": "failed", "stdout": "x" }"#;
    assert_eq!(test_finished(failed), Some(("b".into(), "failed".into())));
    let started = r#"{ "type": "test", "event": "started", "name": "tests::bloom::a" }"#;
    assert_eq!(test_finished(started), None);
    assert_eq!(test_finished(r#"{ "type": "suite", "event": "ok" }"#), None);
    assert_eq!(test_finished("running 3 tests"), None);
}

/// `report.json` keeps `"ending": "exited"` or the reason as a plain string.
#[test]
fn the_vm_ending_is_a_plain_string_in_json() {
    for (ending, json) in [
        (VmEnding::Exited, r#""exited""#),
        (VmEnding::Failed("timed out".into()), r#""timed out""#),
    ] {
        assert_eq!(serde_json::to_string(&ending).unwrap(), json);
        assert_eq!(serde_json::from_str::<VmEnding>(json).unwrap(), ending);
    }
}

/// A copy of `/dev/kmsg` that lost records while tests ran: the entry names the gap, the test
/// running across it fails, and so does a test with no marker left (it ran inside the gap);
/// a test wholly outside the gap passes.
#[test]
fn records_lost_while_tests_ran_fail_the_log_and_the_tests_across_the_gap() {
    let log = "6,0,0,-;Linux version 6.1.0\n\
               12,1,1,-;bpfvm: phase tests\n\
               12,2,2,-;bpfvm: test start a\n\
               12,3,3,-;bpfvm: test end a\n\
               12,4,4,-;bpfvm: test start b\n\
               12,9,9,-;bpfvm: test end c\n\
               12,10,10,-;bpfvm: test end b\n\
               12,11,11,-;bpfvm: test start d\n\
               12,12,12,-;bpfvm: test end d\n\
               12,13,13,-;bpfvm: phase end\n";
    let mut health = crate::results::health::judge(log, &Default::default(), "6.1", None);
    let mut tests = ["a", "b", "c", "d", "e"].map(passed).to_vec();
    apply_kernel_health(&mut tests, &mut health, true, display_name);
    let by = by_name(&tests);
    assert_eq!(
        by["guest:kernel.log"].reason.as_deref(),
        Some(
            "4 records lost between seq 4 and 9 while tests ran in parallel: b, c: \
             splats may be missing"
        )
    );
    for name in ["b", "c"] {
        assert!(by[name].reason.as_deref().unwrap().starts_with(
            "the kernel log lost records while this test ran (4 records lost between seq 4 and 9)"
        ));
    }
    assert!(by["e"]
        .reason
        .as_deref()
        .unwrap()
        .contains("holds no marker of this test"));
    assert_eq!(by["a"].outcome, Outcome::Pass);
    assert_eq!(by["d"].outcome, Outcome::Pass);
}

/// A flood in the verifier phase whose gap swallowed the `phase tests` marker and the first
/// tests' markers: the test with no marker left fails naming the gap, as does the one whose
/// start marker was lost; a test marked after the gap passes.
#[test]
fn a_gap_before_the_tests_phase_that_swallowed_its_marker_fails_the_unmarked_tests() {
    let log = "6,0,0,-;Linux version 6.1.0\n\
               12,1,1,-;bpfvm: phase verifier\n\
               12,10,10,-;bpfvm: test end b\n\
               12,11,11,-;bpfvm: test start c\n\
               12,12,12,-;bpfvm: test end c\n\
               12,13,13,-;bpfvm: phase end\n";
    let mut health = crate::results::health::judge(log, &Default::default(), "6.1", None);
    let mut tests = ["a", "b", "c"].map(passed).to_vec();
    apply_kernel_health(&mut tests, &mut health, true, display_name);
    let by = by_name(&tests);
    assert_eq!(by["a"].outcome, Outcome::Fail);
    assert_eq!(
        by["a"].reason.as_deref().unwrap(),
        "the kernel log lost records that may hold the tests' markers (8 records lost between \
         seq 1 and 10) and holds no marker of this test: it may have run inside the gap, a \
         splat may be missing"
    );
    assert_eq!(by["b"].outcome, Outcome::Fail);
    assert_eq!(by["c"].outcome, Outcome::Pass);
    assert_eq!(by["guest:kernel.log"].outcome, Outcome::Fail);
}

/// A gap before the `phase tests` marker, which the log still holds, hides no test's marker.
#[test]
fn a_gap_before_a_marked_tests_phase_fails_only_the_log() {
    let log = "6,0,0,-;Linux version 6.1.0\n\
               12,1,1,-;bpfvm: phase verifier\n\
               12,9,9,-;bpfvm: phase tests\n\
               12,10,10,-;bpfvm: test start a\n\
               12,11,11,-;bpfvm: test end a\n\
               12,12,12,-;bpfvm: phase end\n";
    let mut health = crate::results::health::judge(log, &Default::default(), "6.1", None);
    let mut tests = vec![passed("a")];
    apply_kernel_health(&mut tests, &mut health, true, display_name);
    let by = by_name(&tests);
    assert_eq!(by["a"].outcome, Outcome::Pass);
    assert_eq!(by["guest:kernel.log"].outcome, Outcome::Fail);
}

/// The same log without the gap fails nothing; one that stops early says so and its bound.
#[test]
fn a_log_without_gaps_fails_nothing_and_an_early_end_names_the_bound() {
    let whole = "12,0,1,-;bpfvm: phase tests\n\
                 12,1,2,-;bpfvm: test start a\n\
                 12,2,3,-;bpfvm: test end a\n\
                 12,3,4,-;bpfvm: phase end\n";
    let mut health = crate::results::health::judge(whole, &Default::default(), "6.1", None);
    let mut tests = vec![passed("a")];
    apply_kernel_health(&mut tests, &mut health, true, display_name);
    assert_eq!(summarize(&tests).failed, 0, "{tests:#?}");
    let cut = &whole[..whole.rfind("12,3").unwrap()];
    let mut health = crate::results::health::judge(cut, &Default::default(), "6.1", None);
    let mut tests = vec![passed("a")];
    apply_kernel_health(&mut tests, &mut health, true, display_name);
    assert_eq!(
        by_name(&tests)["guest:kernel.log"].reason.as_deref(),
        Some(
            "the kernel log stops before the guest script's end (not written, or cut at its \
             bound of 64 MiB): splats may be missing"
        )
    );
}

/// A guest kernel log that is missing, a symlink or a FIFO fails `guest:kernel.log` naming
/// why, although the console's tail it falls back on holds `phase end` and no gap; the tail is
/// still what the run keeps. Before the guest script ran, the tail alone is judged.
#[test]
fn an_unreadable_kernel_log_fails_the_log_and_keeps_the_console_tail() {
    use crate::results::health::{guest_log, judge};
    let shared = tempfile::tempdir().unwrap();
    let dir = shared.path();
    std::fs::write(dir.join("real.log"), "12,0,0,-;bpfvm: phase end\n").unwrap();
    std::os::unix::fs::symlink(dir.join("real.log"), dir.join("symlink.log")).unwrap();
    let fifo = std::ffi::CString::new(dir.join("fifo.log").into_os_string().into_vec()).unwrap();
    // SAFETY: `fifo` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let tail = [
        "[    1.0] bpfvm: phase tests".to_string(),
        "[    2.0] bpfvm: phase end".to_string(),
    ];
    for (name, why) in [
        ("missing.log", "No such file"),
        ("symlink.log", "symbolic links"),
        ("fifo.log", "not a regular file"),
    ] {
        let read = crate::support::guest_files::read(&dir.join(name));
        let log = guest_log(read, &tail, true);
        assert_eq!(log.text, tail.join("\n") + "\n", "{name}: the tail is kept");
        let mut health = judge(&log.text, &Default::default(), "6.1", None);
        health.unread = log.unread;
        let mut tests = vec![passed("a")];
        apply_kernel_health(&mut tests, &mut health, true, display_name);
        let entry = &by_name(&tests)["guest:kernel.log"];
        assert_eq!(entry.outcome, Outcome::Fail, "{name}");
        let reason = entry.reason.as_deref().unwrap();
        assert!(
            reason.starts_with("the guest's kernel log could not be read (")
                && reason.contains(why)
                && reason.contains("only the console's last 2 lines were judged"),
            "{name}: {reason}"
        );
    }
    let before_script = guest_log(
        crate::support::guest_files::read(&dir.join("missing.log")),
        &tail,
        false,
    );
    assert_eq!(before_script.unread, None);
}

#[test]
fn a_vm_dead_before_the_guest_script_is_one_entry_naming_why() {
    let t = never_started("qemu crashed: signal 6 (SIGABRT), with no message of its own");
    assert_eq!((t.name.as_str(), t.outcome), ("guest:boot", Outcome::Fail));
    assert!(!is_test(&t.name));
    assert!(t
        .reason
        .unwrap()
        .starts_with("qemu crashed: signal 6 (SIGABRT), with no message of its own; the guest"));
}

/// report.json names the TCG threading beside the accelerator, and reads back without it.
#[test]
fn the_accelerator_entry_carries_the_tcg_threading() {
    let accel = crate::machine::accel::Accel {
        kind: crate::machine::accel::Kind::Tcg,
        reason: "--accel tcg".into(),
        tcg_thread: Some(crate::machine::tcg_thread::for_version(
            crate::machine::tcg_thread::Version(10, 0, 13),
        )),
    };
    let info = AccelInfo::from(&accel);
    let json = serde_json::to_string(&info).unwrap();
    assert!(
        json.contains(r#""tcg_thread":{"single":true,"reason":"qemu 10.0.13 "#),
        "{json}"
    );
    assert!(
        info.why().contains("one host thread for all vCPUs"),
        "{}",
        info.why()
    );
    let old: AccelInfo = serde_json::from_str(r#"{"name":"tcg","reason":"x"}"#).unwrap();
    assert_eq!(old.why(), "x");
    assert_eq!(old.tcg_thread, None);
}

#[test]
fn guest_phases_run_from_the_kernels_start_to_the_last_marker() {
    let markers = [
        ("probe".to_string(), 7_530_008),
        ("tests".to_string(), 11_779_635),
        ("shutdown".to_string(), 23_877_390),
        ("end".to_string(), 24_089_610),
    ];
    let phases = Timings::guest_phases(&markers);
    let named: Vec<(&str, String)> = phases
        .iter()
        .map(|p| (p.name.as_str(), format!("{:.3}", p.s)))
        .collect();
    assert_eq!(
        named,
        [
            ("kernel boot", "7.530".into()),
            ("probe", "4.250".into()),
            ("tests", "12.098".into()),
            ("shutdown", "0.212".into())
        ]
    );
    assert!(Timings::guest_phases(&[]).is_empty());
    let t = Timings {
        guest_phases: phases,
        wall_s: Some(25.0),
        report_s: Some(0.1),
        ..Timings::default()
    };
    assert_eq!(
        t.describe(),
        "report 0.1 s (wall 25.0 s)\n  guest, by its kernel's clock: kernel boot 7.5 s, \
         probe 4.2 s, tests 12.1 s, shutdown 0.2 s"
    );
}
