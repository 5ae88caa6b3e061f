//! Replays of recorded kernel output (vm/testdata/health/).
use super::*;

fn fixture(name: &str) -> String {
    let path = crate::support::paths::workspace_root()
        .join("vm/testdata/health")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The one splat in fixture `name`.
fn only_splat(name: &str) -> Splat {
    let splats = scan(&fixture(name)).splats;
    assert_eq!(splats.len(), 1, "{name}: {splats:#?}");
    splats.into_iter().next().unwrap()
}

#[test]
fn each_kind_of_splat_is_recognised_as_a_whole_block() {
    // (fixture, kind, first line, last line of the block)
    let cases = [
        (
            "warning.log",
            Kind::Warning,
            "------------[ cut here ]------------",
            "---[ end trace 0000000000000000 ]---",
        ),
        (
            "refcount.log",
            Kind::Refcount,
            "------------[ cut here ]------------",
            "---[ end trace 0000000000000000 ]---",
        ),
        (
            "verifier-bug.log",
            Kind::VerifierBug,
            "------------[ cut here ]------------",
            "---[ end trace 0000000000000000 ]---",
        ),
        (
            "ubsan.log",
            Kind::Ubsan,
            "------------[ cut here ]------------",
            "---[ end trace ]---",
        ),
        (
            "bug.log",
            Kind::Bug,
            "BUG: sleeping function called from invalid context at mm/slab.h:723",
            " </TASK>",
        ),
        (
            "kernel-bug.log",
            Kind::Bug,
            "------------[ cut here ]------------",
            "---[ end trace 0000000000000000 ]---",
        ),
        (
            "oops.log",
            Kind::Oops,
            "BUG: kernel NULL pointer dereference, address: 0000000000000008",
            "---[ end trace 0000000000000000 ]---",
        ),
        (
            "gpf.log",
            Kind::Oops,
            "general protection fault, probably for non-canonical address 0xdead000000000122: 0000 [#1] PREEMPT SMP NOPTI",
            "---[ end trace 0000000000000000 ]---",
        ),
        (
            "kasan.log",
            Kind::Kasan,
            "==================================================================",
            "==================================================================",
        ),
        (
            "lockdep.log",
            Kind::Lockdep,
            "======================================================",
            " </TASK>",
        ),
        (
            "rcu-usage.log",
            Kind::Rcu,
            "=============================",
            " </TASK>",
        ),
        (
            "rcu-stall.log",
            Kind::Rcu,
            "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
            " </TASK>",
        ),
        (
            "soft-lockup.log",
            Kind::SoftLockup,
            "watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [tests::bpf_loo:420]",
            " </TASK>",
        ),
        (
            "hung-task.log",
            Kind::HungTask,
            "INFO: task tests::batch:430 blocked for more than 120 seconds.",
            " </TASK>",
        ),
    ];
    for (name, kind, first, last) in cases {
        let s = only_splat(name);
        assert_eq!(s.kind, kind, "{name}:\n{}", s.text);
        let lines: Vec<&str> = s.text.lines().collect();
        assert_eq!(lines.first(), Some(&first), "{name}:\n{}", s.text);
        assert_eq!(lines.last(), Some(&last), "{name}:\n{}", s.text);
        assert_eq!(s.phase, BOOT, "{name}: no marker, so boot");
        assert_eq!(s.when(), "during boot (no test running)");
    }
}

#[test]
fn a_warn_logged_while_two_tests_ran_blames_both() {
    let splats = scan(&fixture("two-tests.kmsg")).splats;
    assert_eq!(splats.len(), 2, "{splats:#?}");
    let warn = &splats[0];
    assert_eq!(warn.kind, Kind::Warning);
    assert_eq!(warn.phase, "tests");
    assert_eq!(warn.running, ["batch::hash", "bloom_filter::a"]);
    assert_eq!(
        warn.when(),
        "while tests ran in parallel: batch::hash, bloom_filter::a"
    );
    assert!(
        warn.text.starts_with(
            "------------[ cut here ]------------\nWARNING: CPU: 1 PID: 214 at kernel/bpf/syscall.c:512"
        ),
        "{}",
        warn.text
    );
    assert!(
        !warn.text.contains("bpfvm:") && !warn.text.contains("SUBSYSTEM"),
        "markers and dictionaries are not the splat's: {}",
        warn.text
    );
    assert!(warn
        .text
        .ends_with(" </TASK>\n---[ end trace 0000000000000000 ]---\n"));
    // W appeared at the check after batch::hash ended (not after bloom_filter::a did).
    let taint = &splats[1];
    assert_eq!(taint.kind, Kind::Taint);
    assert_eq!(taint.running, ["batch::hash"]);
    assert_eq!(
        taint.text,
        "new taint flags: W (TAINT_WARN: the kernel issued a warning)"
    );
}

#[test]
fn a_taint_seen_after_a_test_started_blames_it_and_the_boot_mask_is_no_splat() {
    let log = [
        Marker::Tainted(8192),
        Marker::Phase("tests".into()),
        Marker::TestStart("a".into()),
        Marker::Tainted(8192 | 512),
        Marker::TestEnd("a".into()),
        Marker::Phase("shutdown".into()),
        Marker::Tainted(8192 | 512 | 1),
    ]
    .iter()
    .map(Marker::line)
    .collect::<Vec<_>>()
    .join("\n");
    let splats = scan(&log).splats;
    assert_eq!(splats.len(), 2, "{splats:#?}");
    assert_eq!(splats[0].running, ["a"], "the test whose start preceded it");
    assert_eq!(splats[1].phase, "shutdown");
    assert_eq!(splats[1].when(), "during shutdown (no test running)");
    assert!(splats[1].text.starts_with("new taint flags: P "));
}

#[test]
fn ordinary_boot_lines_are_no_splat() {
    let log = "[    0.101000] RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable to RETBleed attacks, data leaks possible!\n\
               [    0.200000] ==================\n\
               [    0.200001] some table\n\
               [    1.000000] x86/fpu: Supporting XSAVE feature 0x001: 'x87 floating point registers'\n\
               [    2.000000] bpfvm: test start BUG: a test named like a splat\n";
    assert_eq!(scan(log).splats, []);
}

#[test]
fn a_block_is_bounded_in_lines_and_bytes() {
    let mut log = String::from("------------[ cut here ]------------\n");
    for i in 0..1000 {
        log.push_str(&format!(" frame_{i}+0x10/0x20 {}\n", "x".repeat(100)));
    }
    let s = only_splat_of(&log);
    assert!(
        s.text.lines().count() <= detect::MAX_LINES,
        "{}",
        s.text.lines().count()
    );
    assert!(s.text.len() <= detect::MAX_BYTES + 64, "{}", s.text.len());
    assert!(s
        .text
        .ends_with("[... cut: the splat is longer than bpfvm keeps]\n"));
}

fn only_splat_of(log: &str) -> Splat {
    let splats = scan(log).splats;
    assert_eq!(splats.len(), 1, "{splats:#?}");
    splats.into_iter().next().unwrap()
}

#[test]
fn an_allowed_splat_carries_its_reason_and_a_complete_log_ends_with_its_marker() {
    let allow = allow::parse(
        "[[allow]]\nregex = 'at kernel/bpf/syscall\\.c:512'\nkernels = [\"6.1\"]\nreason = \"r\"\n",
    )
    .unwrap();
    let h = judge(&fixture("two-tests.kmsg"), &allow, "6.1", None);
    assert_eq!(h.splats[0].allowed.as_deref(), Some("r"));
    assert_eq!(
        h.splats[1].allowed.as_deref(),
        Some("set by the allowed splat before it (r)"),
        "the W the allowed WARN set is allowed with it"
    );
    assert_eq!(
        h.splats[0].describe(),
        "kernel warning while tests ran in parallel: batch::hash, bloom_filter::a: \
         WARNING: CPU: 1 PID: 214 at kernel/bpf/syscall.c:512 map_check_btf+0x1a2/0x1e0"
    );
    assert!(!h.complete, "the fixture stops before `phase end`");
    let ended = format!(
        "{}\n{}",
        fixture("two-tests.kmsg"),
        Marker::Phase(END_PHASE.into()).line()
    );
    assert!(judge(&ended, &allow, "6.12", None).complete);
    assert_eq!(judge(&ended, &allow, "6.12", None).splats[0].allowed, None);
}

/// The taint is allowed only with the splat that set it: without an allowed WARN before it,
/// or when it brings a flag the allowed splat does not set, it fails.
#[test]
fn a_taint_is_allowed_only_with_the_allowed_splat_that_sets_it() {
    let allow = allow::parse(
        "[[allow]]\nregex = 'at kernel/bpf/syscall\\.c:512'\nkernels = [\"6.1\"]\nreason = \"r\"\n",
    )
    .unwrap();
    let none = allow::parse("").unwrap();
    let h = judge(&fixture("two-tests.kmsg"), &none, "6.1", None);
    assert!(h.splats.iter().all(|s| s.allowed.is_none()), "{h:#?}");
    // W and D appear at once after the allowed WARN: D is no WARN's.
    let log = fixture("two-tests.kmsg").replace(
        "bpfvm: tainted 8704",
        &format!("bpfvm: tainted {}", 8704 | taint::DIE),
    );
    let h = judge(&log, &allow, "6.1", None);
    assert_eq!(h.splats[0].allowed.as_deref(), Some("r"));
    assert_eq!(h.splats[1].kind, Kind::Taint);
    assert_eq!(h.splats[1].allowed, None, "{:?}", h.splats[1]);
}

/// A WARN the kernel logged while it started, before the script's first phase, spoils the
/// boot alone; the same WARN once the script ran (`phase bench`), lost records or a log cut
/// short are evidence against the kernel.
#[test]
fn only_a_splat_before_the_scripts_first_phase_spoiled_the_boot() {
    let none = allow::parse("").unwrap();
    let warn = |seq: u32| {
        format!(
            "4,{seq},{seq},-;------------[ cut here ]------------\n\
             4,{},{},-;WARNING: CPU: 0 PID: 1 at crypto/api.c:164 crypto_wait_for_test+0x1/0x2\n\
             4,{},{},-;---[ end trace 0000000000000000 ]---\n",
            seq + 1,
            seq + 1,
            seq + 2,
            seq + 2
        )
    };
    let at_boot = format!(
        "{}12,3,3,-;bpfvm: phase bench\n12,4,4,-;bpfvm: phase end\n",
        warn(0)
    );
    assert!(judge(&at_boot, &none, "6.1", None).spoiled_at_boot());
    let in_bench = format!(
        "12,0,0,-;bpfvm: phase bench\n{}12,4,4,-;bpfvm: phase end\n",
        warn(1)
    );
    assert!(!judge(&in_bench, &none, "6.1", None).spoiled_at_boot());
    let lost = at_boot.replace("12,4,4,-;", "12,9,9,-;");
    assert!(!judge(&lost, &none, "6.1", None).spoiled_at_boot());
    let cut = at_boot.replace("12,4,4,-;bpfvm: phase end\n", "");
    assert!(!judge(&cut, &none, "6.1", None).spoiled_at_boot());
    let clean = "12,0,0,-;bpfvm: phase bench\n12,1,1,-;bpfvm: phase end\n";
    assert!(!judge(clean, &none, "6.1", None).spoiled_at_boot());
}

/// A kept guest's run copies only its own records, after the first line that says where they
/// continue: no loss is counted before them, and a jump after them still is.
#[test]
fn a_copy_that_continues_after_a_seq_loses_nothing_before_it() {
    let head = Marker::Continues(41).line();
    assert_eq!(Marker::parse(&head), Some(Marker::Continues(41)));
    let own = format!("{head}\n12,42,9000000,-;bpfvm: phase tests\n12,43,9000001,-;x\n");
    assert_eq!(scan(&own).lost, []);
    let late = format!("{head}\n12,44,9000000,-;bpfvm: phase tests\n");
    let lost = scan(&late).lost;
    assert_eq!(lost.len(), 1, "{lost:#?}");
    assert_eq!(
        lost[0].gap.describe(),
        "2 records lost between seq 41 and 44"
    );
    let without = "12,42,9000000,-;bpfvm: phase tests\n";
    assert_eq!(
        scan(without).lost.len(),
        1,
        "a copy that says nothing starts at seq 0"
    );
    let again = format!("12,0,0,-;a\n{head}\n12,43,1,-;b\n");
    assert_eq!(scan(&again).lost.len(), 1, "only as the first record");
}

/// Under TCG a soft lockup judges nothing, and neither does the `L` it sets
/// (`watchdog_timer_fn`, kernel/watchdog.c: `add_taint(TAINT_SOFTLOCKUP, ...)`), seen at the
/// next taint marker; a flag no excused splat set (`D` beside it) still blames the kernel.
#[test]
fn the_taint_a_soft_lockup_sets_under_tcg_judges_nothing_either() {
    let log = |mask: u64| {
        format!(
            "12,0,0,-;bpfvm: phase tests\n12,1,1,-;bpfvm: tainted 0\n\
             12,2,2,-;bpfvm: test start a\n\
             0,3,3,-;watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [bpfvm_tests:214]\n\
             12,4,4,-;bpfvm: test end a\n12,5,5,-;bpfvm: tainted {mask}\n\
             12,6,6,-;bpfvm: phase end\n"
        )
    };
    let none = allow::parse("").unwrap();
    let mut h = judge(&log(taint::SOFTLOCKUP), &none, "6.1", None);
    assert_eq!(h.splats.len(), 2, "{h:#?}");
    assert!(h.blames_the_kernel());
    h.under_tcg();
    assert!(!h.blames_the_kernel(), "{h:#?}");
    let taint = &h.splats[1];
    assert_eq!(taint.kind, Kind::Taint);
    assert!(
        taint
            .host_clock
            .as_deref()
            .unwrap()
            .starts_with("set by the stall report"),
        "{taint:?}"
    );
    let mut h = judge(&log(taint::SOFTLOCKUP | taint::DIE), &none, "6.1", None);
    h.under_tcg();
    assert!(h.blames_the_kernel(), "{h:#?}");
}

/// The watchdog reports a lockup again each time the CPU stays stuck for another
/// `2 * watchdog_thresh` (`watchdog_timer_fn`, kernel/watchdog.c), and sets `L` with each: two
/// reports before one taint marker still excuse it, as one does.
#[test]
fn a_lockup_reported_twice_before_its_taint_judges_nothing_under_tcg() {
    let log = format!(
        "12,0,0,-;bpfvm: phase tests\n12,1,1,-;bpfvm: tainted 0\n\
         12,2,2,-;bpfvm: test start a\n\
         0,3,3,-;watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [bpfvm_tests:214]\n\
         4,4,4,-;Call Trace:\n4,5,5,-; bpf_loop+0x1/0x2\n\
         0,6,6,-;watchdog: BUG: soft lockup - CPU#1 stuck for 48s! [bpfvm_tests:214]\n\
         4,7,7,-;Call Trace:\n4,8,8,-; bpf_loop+0x1/0x2\n\
         12,9,9,-;bpfvm: test end a\n12,10,10,-;bpfvm: tainted {}\n\
         12,11,11,-;bpfvm: phase end\n",
        taint::SOFTLOCKUP
    );
    let mut h = judge(&log, &allow::parse("").unwrap(), "6.1", None);
    assert_eq!(h.splats.len(), 3, "{h:#?}");
    h.under_tcg();
    assert!(!h.blames_the_kernel(), "{h:#?}");
}

/// An allowed oops sets `D` (`oops_end`, arch/x86/kernel/dumpstack.c): the taint that brings
/// only `D` after it is allowed with its reason.
#[test]
fn the_die_taint_of_an_allowed_oops_is_allowed_with_it() {
    let allow =
        allow::parse("[[allow]]\nregex = 'planted_oops'\nkernels = [\"6.1\"]\nreason = \"r\"\n")
            .unwrap();
    let log = format!(
        "12,0,0,-;bpfvm: phase tests\n12,1,1,-;bpfvm: tainted 0\n\
         12,2,2,-;bpfvm: test start a\n\
         4,3,3,-;Oops: general protection fault, probably for non-canonical address \
         0xdead000000000100: 0000 [#1] PREEMPT SMP NOPTI\n\
         4,4,4,-;RIP: 0010:planted_oops+0x1/0x2\n\
         12,5,5,-;bpfvm: test end a\n12,6,6,-;bpfvm: tainted {}\n\
         12,7,7,-;bpfvm: phase end\n",
        taint::DIE
    );
    let h = judge(&log, &allow, "6.1", None);
    assert_eq!(h.splats.len(), 2, "{h:#?}");
    assert_eq!(h.splats[0].kind, Kind::Oops);
    assert_eq!(h.splats[1].kind, Kind::Taint);
    assert!(!h.blames_the_kernel(), "{h:#?}");
}
