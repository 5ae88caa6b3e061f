//! A pin's known failures of the upstream selftests (`kernels/selftests/<pin>.known.toml`):
//! which failing rows an entry excuses, and only the failure its reason describes.
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use super::{is_check, MORE_CHECKS, OUTSIDE_SUBTESTS, TEST_PROGS_FAILED, TEST_VERIFIER_FAILED};
use crate::results::report::{failed, Outcome, TestResult};

/// How a test_verifier case that failed begins (its `FAIL` verdict).
const VERIFIER_CASE_FAILED: &str = "test_verifier: FAIL";
/// test_maps' own verdicts: 1 (`exit(1)` after `accept failed` and the other failures of
/// test_sockmap, test_maps.c) and 255 (`CHECK`'s `exit(-1)`, test_maps.h); a signal is a crash.
const TEST_MAPS_FAILED: [&str; 2] = ["test_maps exited with 1;", "test_maps exited with 255;"];

/// Whether a failing row's `reason` is the test's own verdict (a FAIL line, test_verifier's
/// or test_maps' failing status), not a crash, a watchdog, the VM's end or output bpfvm could
/// not read: only such a failure can be the one a known entry's reason describes.
fn own_verdict(reason: &str) -> bool {
    [
        TEST_PROGS_FAILED,
        TEST_VERIFIER_FAILED,
        VERIFIER_CASE_FAILED,
    ]
    .iter()
    .chain(&TEST_MAPS_FAILED)
    .any(|p| reason.starts_with(p))
}

/// A pin's known failures of the upstream selftests: `kernels/selftests/<pin>.known.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Known {
    #[serde(default)]
    pub known: Vec<KnownFailure>,
}

/// One known failure: a row's name (`test_progs/NAME[/SUB]`) and why it fails on this kernel;
/// `unset` names the config options the reason blames, which the kernel's config must leave
/// unset ([`Known::check_config`]); `timing`: whether it fails depends on how the guest's work
/// is scheduled (the reason says how), so a pass is no sign the entry is stale; `said`: text
/// the failure must hold for the entry to excuse it (one process running many tests, as
/// test_maps, fails in many ways): one text, or a list of which the failure must hold one,
/// and each check the failure names as failed must hold one of them ([`Said`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnownFailure {
    pub test: String,
    pub reason: String,
    #[serde(default)]
    pub unset: Vec<String>,
    #[serde(default)]
    pub timing: bool,
    pub said: Option<Said>,
}

/// A known entry's `said`: one text, or several.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Said {
    One(String),
    Any(Vec<String>),
}

impl Said {
    fn texts(&self) -> &[String] {
        match self {
            Said::One(one) => std::slice::from_ref(one),
            Said::Any(any) => any,
        }
    }

    /// Whether the failure `why` is the one described: it holds one of the texts, each failed
    /// check it names holds one, and it names them all.
    fn describes(&self, why: &str) -> bool {
        let holds = |part: &str| self.texts().iter().any(|t| part.contains(t.as_str()));
        holds(why)
            && !why.contains(MORE_CHECKS)
            && why
                .split([';', '|'])
                .filter(|part| is_check(part))
                .all(holds)
    }
}

impl Known {
    /// Reads the file at `path`; none there is no known failure.
    pub fn load(path: &Path) -> Result<Known> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Known::default()),
            Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
        };
        let known: Known =
            toml::from_str(&text).with_context(|| format!("{} is not valid", path.display()))?;
        for k in &known.known {
            if k.reason.trim().is_empty() {
                bail!(
                    "{}: {}: `reason` is empty; say why it fails on this kernel",
                    path.display(),
                    k.test
                );
            }
            // A pass of a timing entry is not stale: without `said` nothing would ever retire
            // it, and it would excuse any failure of its test for good.
            let said_nothing = k.said.as_ref().is_none_or(|s| {
                s.texts().is_empty() || s.texts().iter().any(|t| t.trim().is_empty())
            });
            if k.timing && said_nothing {
                bail!(
                    "{}: {}: `timing = true` without `said`: name the failure its timing makes \
                     (said = \"TEXT\" or a list, each text the output holds), or it excuses \
                     every failure of the test for good",
                    path.display(),
                    k.test
                );
            }
            for opt in &k.unset {
                if !opt.starts_with("CONFIG_") || !k.reason.contains(opt.as_str()) {
                    bail!(
                        "{}: {}: `unset` names {opt}: it must be a CONFIG_ option that the \
                         reason names",
                        path.display(),
                        k.test
                    );
                }
            }
        }
        Ok(known)
    }

    /// The entries whose reason is wrong for this kernel: an option `unset` names that the
    /// kernel's `config` (its `.config` text) sets. Each is a failing `guest:known` row.
    pub fn check_config(&self, config: &str, file: &str) -> Vec<TestResult> {
        self.known
            .iter()
            .flat_map(|k| k.unset.iter().map(move |opt| (k, opt)))
            .filter_map(|(k, opt)| {
                let set = config.lines().find(|l| {
                    l.strip_prefix(opt.as_str())
                        .is_some_and(|v| v.starts_with('='))
                })?;
                Some(failed(
                    "guest:known".into(),
                    format!(
                        "{file}: {} blames {opt} being unset, but the kernel's config has {set}: \
                         find the real reason and fix the entry",
                        k.test
                    ),
                ))
            })
            .collect()
    }

    /// A failing row this file names, or a failing subtest of a test it names, becomes a skip
    /// with its reason; a named row that passed fails (the entry is stale: the kernel or the
    /// test was fixed), but for an entry whose failure depends on timing.
    pub fn apply(&self, rows: &mut [TestResult], file: &str) {
        for k in &self.known {
            let sub = format!("{}/", k.test);
            for r in rows
                .iter_mut()
                .filter(|r| r.name == k.test || r.name.starts_with(&sub))
            {
                // Only the test's own verdict, and what `said` describes.
                let says = |r: &TestResult| {
                    let why = r.reason.as_deref().unwrap_or_default();
                    own_verdict(why) && k.said.as_ref().is_none_or(|said| said.describes(why))
                };
                match r.outcome {
                    Outcome::Pass if r.name != k.test || k.timing => {}
                    Outcome::Fail if !says(r) => {}
                    Outcome::Fail => {
                        r.outcome = Outcome::Skip;
                        r.reason = Some(format!(
                            "known failure ({file}): {}; it said: {}",
                            k.reason,
                            r.reason.as_deref().unwrap_or("")
                        ));
                    }
                    Outcome::Pass => {
                        r.outcome = Outcome::Fail;
                        r.reason = Some(format!(
                            "listed in {file} as a known failure ({}) but passed: remove the entry",
                            k.reason
                        ));
                    }
                    Outcome::Skip => {}
                }
            }
        }
        self.known_through_subtests(rows, file);
    }

    /// test_progs fails a test when one of its subtests fails (`run_one_test`, test_progs.c),
    /// and test_verifier exits 1 when a case fails (`main`, test_verifier.c), so a test whose
    /// failing subtests or cases are all known, and which failed by its own verdict (not a
    /// crash, a watchdog or the VM's end) and not by a check of its own outside them
    /// ([`OUTSIDE_SUBTESTS`]), is known too: an entry may name only the subtests that fail,
    /// and the test's other subtests stay judged.
    fn known_through_subtests(&self, rows: &mut [TestResult], file: &str) {
        let by_subtests: Vec<String> = rows
            .iter()
            .filter(|r| {
                r.outcome == Outcome::Fail
                    && r.reason.as_deref().is_some_and(|w| {
                        (w.starts_with(TEST_PROGS_FAILED) || w.starts_with(TEST_VERIFIER_FAILED))
                            && !w.contains(OUTSIDE_SUBTESTS)
                    })
                    && !self.known.iter().any(|k| k.test == r.name)
            })
            .filter(|parent| {
                let sub = format!("{}/", parent.name);
                let subs: Vec<&TestResult> =
                    rows.iter().filter(|r| r.name.starts_with(&sub)).collect();
                subs.iter().all(|r| r.outcome != Outcome::Fail)
                    && subs.iter().any(|r| {
                        r.outcome == Outcome::Skip && self.known.iter().any(|k| k.test == r.name)
                    })
            })
            .map(|r| r.name.clone())
            .collect();
        for r in rows.iter_mut().filter(|r| by_subtests.contains(&r.name)) {
            r.outcome = Outcome::Skip;
            r.reason = Some(format!(
                "known failure ({file}): only its subtests listed there failed; it said: {}",
                r.reason.as_deref().unwrap_or("")
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::upstream::{
        judge_run, pass, TestRun, TEST_MAPS, TEST_PROGS, TEST_VERIFIER,
    };

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

    /// Recorded on the 6.1 pin under TCG (`cargo xtask selftests --kernel 6.1 -t
    /// lsm_cgroup,bpf_cookie,bloom_filter_map`): lsm_cgroup/functional failed the three checks
    /// its entry's `said` lists, bpf_cookie its skeleton's load; both are known, and every
    /// `Summary:` line matches its rows.
    #[test]
    fn a_recorded_6_1_run_is_known_by_its_entries_and_its_counts_match() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = std::fs::read_to_string(
            root.join("testdata/selftests/6.1-lsm_cgroup-bpf_cookie.test_progs.out"),
        )
        .unwrap();
        let known = Known::load(&root.join("../kernels/selftests/6.1.known.toml")).unwrap();
        let mut rows: Vec<TestResult> = crate::results::upstream::split_runs(&out)
            .iter()
            .flat_map(judge_run)
            .collect();
        known.apply(&mut rows, "6.1.known.toml");
        assert_eq!(
            outcomes(&rows),
            [
                ("test_progs/bloom_filter_map".into(), Outcome::Pass),
                ("test_progs/bpf_cookie".into(), Outcome::Skip),
                ("test_progs/lsm_cgroup/functional".into(), Outcome::Skip),
                ("test_progs/lsm_cgroup/nonvoid".into(), Outcome::Pass),
                ("test_progs/lsm_cgroup".into(), Outcome::Skip),
            ]
        );
    }

    /// Recorded on the 6.1 arm64 pin under TCG (`cargo xtask selftests --kernel 6.1 --arch arm64
    /// -t bloom_filter_map,bpf_loop`; its 6,000 `PASS:Add random value to` lines left out):
    /// every fentry attach failed with -524 (ENOTSUPP), which
    /// the arm64 list excuses; the same run with one attach failing otherwise is not excused.
    #[test]
    fn a_recorded_6_1_arm64_run_is_known_only_for_its_enotsupp_attaches() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = std::fs::read_to_string(
            root.join("testdata/selftests/6.1-arm64-bloom_filter_map-bpf_loop.test_progs.out"),
        )
        .unwrap();
        let known = Known::load(&root.join("../kernels/selftests/6.1.arm64.known.toml")).unwrap();
        let judge = |out: &str| {
            let mut rows: Vec<TestResult> = crate::results::upstream::split_runs(out)
                .iter()
                .flat_map(judge_run)
                .collect();
            known.apply(&mut rows, "6.1.arm64.known.toml");
            outcomes(&rows)
        };
        let rows = judge(&out);
        let of = |rows: &[(String, Outcome)], name: &str| {
            rows.iter().find(|(n, _)| n == name).map(|(_, o)| *o)
        };
        assert_eq!(rows.len(), 11, "{rows:?}");
        for (name, outcome) in &rows {
            let expected = if name.starts_with("test_progs/verif_scale_") {
                Outcome::Pass
            } else {
                Outcome::Skip
            };
            assert_eq!(*outcome, expected, "{name}");
        }
        let other = out.replacen(
            "check_bloom:FAIL:link unexpected error: -524",
            "check_bloom:FAIL:link unexpected error: -22",
            1,
        );
        assert_ne!(other, out);
        assert_eq!(
            of(&judge(&other), "test_progs/bloom_filter_map"),
            Some(Outcome::Fail)
        );
    }

    /// Recorded on the 6.12 arm64 pin under TCG (`cargo xtask selftests --kernel 6.12 --arch
    /// arm64 -t bloom_filter_map,bpf_loop`, in a Debian 13 root): its arm64 has ftrace's direct
    /// calls (`CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS=y`), so every fentry attach that 6.1
    /// arm64's list excuses as ENOTSUPP attaches there. Its own list names none of these rows,
    /// and 6.1 arm64's, were it copied, would fail each row it names as passing.
    #[test]
    fn a_recorded_6_12_arm64_run_passes_what_6_1_arm64_knows_as_enotsupp() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = std::fs::read_to_string(
            root.join("testdata/selftests/6.12-arm64-bloom_filter_map-bpf_loop.test_progs.out"),
        )
        .unwrap();
        let judge = |list: &str| {
            let known = Known::load(&root.join("../kernels/selftests").join(list)).unwrap();
            let mut rows: Vec<TestResult> = crate::results::upstream::split_runs(&out)
                .iter()
                .flat_map(judge_run)
                .collect();
            known.apply(&mut rows, list);
            (outcomes(&rows), known)
        };
        let (rows, known) = judge("6.12.arm64.known.toml");
        assert!(!known.known.is_empty());
        assert_eq!(rows.len(), 11, "{rows:?}");
        assert!(rows.iter().all(|(_, o)| *o == Outcome::Pass), "{rows:?}");
        let (rows, known) = judge("6.1.arm64.known.toml");
        assert_eq!(rows.len(), 11, "{rows:?}");
        for (name, outcome) in &rows {
            let named = known.known.iter().any(|k| k.test == *name);
            let expected = if named { Outcome::Fail } else { Outcome::Pass };
            assert_eq!(*outcome, expected, "{name}");
        }
        assert_eq!(
            rows.iter().filter(|(_, o)| *o == Outcome::Fail).count(),
            known.known.len()
        );
    }

    /// Recorded on the 6.12 arm64 pin under TCG (`cargo xtask selftests --kernel 6.12 --arch
    /// arm64 -t fentry_test,fexit_test,fentry_fexit,fexit_bpf2bpf,tracing_struct,
    /// trampoline_count,ksyms_module,kfunc_call`): only the three attaches to a function of
    /// more than 8 argument registers failed (-524, arm64's trampoline), and the list excuses
    /// them and, through them, their tests; the same run with one of them failing otherwise is
    /// not excused.
    #[test]
    fn a_recorded_6_12_arm64_run_is_known_only_for_its_many_args_attaches() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = std::fs::read_to_string(
            root.join("testdata/selftests/6.12-arm64-trampolines.test_progs.out"),
        )
        .unwrap();
        let known = Known::load(&root.join("../kernels/selftests/6.12.arm64.known.toml")).unwrap();
        let judge = |out: &str| {
            let mut rows: Vec<TestResult> = crate::results::upstream::split_runs(out)
                .iter()
                .flat_map(judge_run)
                .collect();
            known.apply(&mut rows, "6.12.arm64.known.toml");
            outcomes(&rows)
        };
        let rows = judge(&out);
        assert_eq!(rows.len(), 49, "{rows:?}");
        let mut skipped: Vec<&str> = rows
            .iter()
            .filter(|(_, o)| *o == Outcome::Skip)
            .map(|(n, _)| n.as_str())
            .collect();
        skipped.sort_unstable();
        assert_eq!(
            skipped,
            [
                "test_progs/fentry_test",
                "test_progs/fentry_test/fentry_many_args",
                "test_progs/fexit_test",
                "test_progs/fexit_test/fexit_many_args",
                "test_progs/tracing_struct",
                "test_progs/tracing_struct/struct_many_args",
            ]
        );
        assert!(rows.iter().all(|(_, o)| *o != Outcome::Fail), "{rows:?}");
        let other = out.replacen(
            "tracing_struct_many_args__attach unexpected error: -524",
            "tracing_struct_many_args__attach unexpected error: -22",
            1,
        );
        assert_ne!(other, out);
        let rows = judge(&other);
        let of = |name: &str| rows.iter().find(|(n, _)| n == name).map(|(_, o)| *o);
        assert_eq!(
            of("test_progs/tracing_struct/struct_many_args"),
            Some(Outcome::Fail)
        );
        assert_eq!(of("test_progs/tracing_struct"), Some(Outcome::Fail));
    }

    /// A timing entry must say which failure its timing makes.
    #[test]
    fn a_timing_entry_without_said_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("k.toml");
        let entry = "[[known]]\ntest = \"test_progs/a\"\nreason = \"r\"\ntiming = true\n";
        for extra in ["", "said = []\n", "said = \"\"\n"] {
            std::fs::write(&file, format!("{entry}{extra}")).unwrap();
            let e = format!("{:#}", Known::load(&file).unwrap_err());
            assert!(
                e.contains("test_progs/a: `timing = true` without `said`"),
                "{e}"
            );
        }
        std::fs::write(&file, format!("{entry}said = [\"a:FAIL:x\"]\n")).unwrap();
        assert!(Known::load(&file).is_ok());
    }

    /// An entry that names a test excuses its own verdict, never a crash with no result nor
    /// the VM's end (`known_through_subtests` refuses those too).
    #[test]
    fn a_known_entry_excuses_no_crash() {
        let known: Known =
            toml::from_str("[[known]]\ntest = \"test_progs/a\"\nreason = \"r\"\n").unwrap();
        for (lines, rc) in [
            ("libbpf: loading\n", Some(139)),
            ("libbpf: loading\n", None),
            ("#1 a:FAIL\n", None),
        ] {
            let mut rows = judge_run(&unit_run("test_progs/a", lines, rc));
            known.apply(&mut rows, "k.toml");
            assert_eq!(
                outcomes(&rows),
                [("test_progs/a".into(), Outcome::Fail)],
                "{lines:?} {rc:?}: {rows:#?}"
            );
        }
        let mut rows = judge_run(&unit_run("test_progs/a", "#1 a:FAIL\n", Some(1)));
        known.apply(&mut rows, "k.toml");
        assert_eq!(outcomes(&rows), [("test_progs/a".into(), Outcome::Skip)]);
    }

    /// 6.1's lsm_cgroup/functional entry excuses the failed checks its reason names, as
    /// ASSERT_EQ prints them, and no other: not a run where another check failed too.
    #[test]
    fn the_lsm_cgroup_entry_excuses_only_the_checks_its_reason_names() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/selftests");
        let known = Known::load(&dir.join("6.1.known.toml")).unwrap();
        let run = |checks: &str| {
            let lines = format!(
                "{checks}#135/1   lsm_cgroup/functional:FAIL\n#135     lsm_cgroup:FAIL\n\
                 Summary: 0/0 PASSED, 0 SKIPPED, 1 FAILED\n"
            );
            let mut rows = judge_run(&unit_run("test_progs/lsm_cgroup", &lines, Some(1)));
            known.apply(&mut rows, "6.1.known.toml");
            outcomes(&rows)
        };
        let described = "test_lsm_cgroup_functional:FAIL:called_clone unexpected called_clone: \
                         actual 0 != expected 1\n\
                         test_lsm_cgroup_functional:FAIL:called_alloc unexpected called_alloc: \
                         actual 6 != expected 7\n";
        assert_eq!(
            run(described),
            [
                ("test_progs/lsm_cgroup/functional".into(), Outcome::Skip),
                ("test_progs/lsm_cgroup".into(), Outcome::Skip),
            ]
        );
        let other = format!(
            "{described}test_lsm_cgroup_functional:FAIL:attach_lsm_cgroup unexpected error: -22\n"
        );
        assert_eq!(
            run(&other),
            [
                ("test_progs/lsm_cgroup/functional".into(), Outcome::Fail),
                ("test_progs/lsm_cgroup".into(), Outcome::Fail),
            ]
        );
        assert_eq!(
            run("test_lsm_cgroup_functional:FAIL:join root cgroup unexpected error: 1\n")[0].1,
            Outcome::Fail
        );
    }

    /// A test whose failing subtests are all known is not known through them when it failed a
    /// check of its own: in its entry function, or after its last subtest (5.x prints a test's
    /// own output there).
    #[test]
    fn a_parent_s_own_failure_is_not_known_through_its_subtests() {
        let known: Known =
            toml::from_str("[[known]]\ntest = \"test_progs/t/one\"\nreason = \"r\"\n").unwrap();
        let judged = |lines: &str| {
            let mut rows = judge_run(&unit_run("test_progs/t", lines, Some(1)));
            known.apply(&mut rows, "k.toml");
            rows
        };
        let subs = "helper:FAIL:x unexpected x: actual 0 != expected 1\n\
                    #1/1     t/one:FAIL\n#1/2     t/two:OK\n";
        let only_subtests = judged(&format!("{subs}#1       t:FAIL\n"));
        assert_eq!(only_subtests.last().unwrap().outcome, Outcome::Skip);
        for own in [
            format!("test_t:FAIL:setup unexpected error: -1\n{subs}#1       t:FAIL\n"),
            format!("{subs}cleanup:FAIL:y unexpected y: got FALSE\n#1       t:FAIL\n"),
        ] {
            let rows = judged(&own);
            let top = rows.last().unwrap();
            assert_eq!(top.outcome, Outcome::Fail, "{own}: {rows:#?}");
            assert!(top.reason.as_deref().unwrap().contains(OUTSIDE_SUBTESTS));
        }
    }

    #[test]
    fn a_known_failure_skips_with_its_reason_and_fails_once_it_passes() {
        let known: Known = toml::from_str(
            "[[known]]\ntest = \"test_progs/a\"\nreason = \"needs BTF of bpf_testmod\"\n\
             [[known]]\ntest = \"test_progs/b\"\nreason = \"fixed upstream\"\n",
        )
        .unwrap();
        let fail = |name: &str| {
            failed(
                name.into(),
                format!("{TEST_PROGS_FAILED}; it printed nothing"),
            )
        };
        let mut rows = vec![
            fail("test_progs/a/sub"),
            pass("test_progs/a/other".into()),
            fail("test_progs/a"),
            fail("test_progs/ab"),
            pass("test_progs/b".into()),
            fail("test_progs/c"),
        ];
        known.apply(&mut rows, "kernels/selftests/6.1.known.toml");
        assert_eq!(
            outcomes(&rows),
            [
                ("test_progs/a/sub".into(), Outcome::Skip),
                ("test_progs/a/other".into(), Outcome::Pass),
                ("test_progs/a".into(), Outcome::Skip),
                ("test_progs/ab".into(), Outcome::Fail),
                ("test_progs/b".into(), Outcome::Fail),
                ("test_progs/c".into(), Outcome::Fail),
            ]
        );
        assert!(rows[0].reason.as_deref().unwrap().contains("needs BTF"));
        assert!(rows[4]
            .reason
            .as_deref()
            .unwrap()
            .contains("remove the entry"));
    }

    #[test]
    fn a_test_whose_failing_subtests_are_all_known_is_known_too() {
        let known: Known = toml::from_str(
            "[[known]]\ntest = \"test_progs/a/x @unpriv\"\nreason = \"the message names R0\"\n\
             [[known]]\ntest = \"test_progs/b/x\"\nreason = \"r\"\n\
             [[known]]\ntest = \"test_progs/c/x\"\nreason = \"r\"\n",
        )
        .unwrap();
        let mut rows = vec![
            failed(
                "test_progs/a/x @unpriv".into(),
                "test_progs: FAIL; R0".into(),
            ),
            pass("test_progs/a/y".into()),
            failed(
                "test_progs/a".into(),
                "test_progs: FAIL (json summary); x".into(),
            ),
            failed("test_progs/b/x".into(), "test_progs: FAIL; R0".into()),
            failed("test_progs/b/z".into(), "test_progs: FAIL; other".into()),
            failed("test_progs/b".into(), "test_progs: FAIL; x".into()),
            failed("test_progs/c/x".into(), "test_progs: FAIL; R0".into()),
            failed("test_progs/c".into(), "the VM ended while it ran".into()),
        ];
        known.apply(&mut rows, "k.toml");
        assert_eq!(
            outcomes(&rows),
            [
                ("test_progs/a/x @unpriv".into(), Outcome::Skip),
                ("test_progs/a/y".into(), Outcome::Pass),
                ("test_progs/a".into(), Outcome::Skip),
                ("test_progs/b/x".into(), Outcome::Skip),
                ("test_progs/b/z".into(), Outcome::Fail),
                ("test_progs/b".into(), Outcome::Fail),
                ("test_progs/c/x".into(), Outcome::Skip),
                ("test_progs/c".into(), Outcome::Fail),
            ]
        );
        assert!(rows[2]
            .reason
            .as_deref()
            .unwrap()
            .contains("only its subtests listed there failed"));
    }

    /// An entry whose failure depends on timing excuses the failure and lets a pass stand;
    /// any other entry's pass is stale.
    #[test]
    fn a_timing_entry_lets_a_pass_stand() {
        let known: Known = toml::from_str(
            "[[known]]\ntest = \"test_progs/t/f\"\nreason = \"softirq\"\ntiming = true\n\
             [[known]]\ntest = \"test_progs/s\"\nreason = \"r\"\n",
        )
        .unwrap();
        let mut passing = vec![
            pass("test_progs/t/f".into()),
            pass("test_progs/t".into()),
            pass("test_progs/s".into()),
        ];
        known.apply(&mut passing, "k.toml");
        assert_eq!(
            outcomes(&passing),
            [
                ("test_progs/t/f".into(), Outcome::Pass),
                ("test_progs/t".into(), Outcome::Pass),
                ("test_progs/s".into(), Outcome::Fail),
            ]
        );
        let mut failing = vec![
            failed("test_progs/t/f".into(), "test_progs: FAIL; 0 != 1".into()),
            failed("test_progs/t".into(), "test_progs: FAIL; f".into()),
        ];
        known.apply(&mut failing, "k.toml");
        assert_eq!(
            outcomes(&failing),
            [
                ("test_progs/t/f".into(), Outcome::Skip),
                ("test_progs/t".into(), Outcome::Skip),
            ]
        );
    }

    /// An entry with `said` excuses only a failure that says it.
    #[test]
    fn an_entry_that_names_what_the_failure_said_excuses_only_that() {
        let known: Known = toml::from_str(
            "[[known]]\ntest = \"test_maps\"\nreason = \"softirq\"\ntiming = true\n\
             said = \"accept failed\"\n",
        )
        .unwrap();
        let mut rows = vec![failed(
            "test_maps".into(),
            "test_maps exited with 1; its last lines: accept failed | Failed to create sockmap"
                .into(),
        )];
        known.apply(&mut rows, "k.toml");
        assert_eq!(rows[0].outcome, Outcome::Skip);
        let mut rows = vec![failed(
            "test_maps".into(),
            "test_maps exited with 1; its last lines: Failed to update hashmap".into(),
        )];
        known.apply(&mut rows, "k.toml");
        assert_eq!(rows[0].outcome, Outcome::Fail);
    }

    /// Every pin's committed list loads: its entries name known units, and each option an
    /// entry blames is named in its reason.
    #[test]
    fn the_committed_known_lists_load() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/selftests");
        for (pin, entries) in [
            ("6.1", 14),
            ("6.12", 14),
            ("6.1.arm64", 8),
            ("6.12.arm64", 3),
        ] {
            let known = Known::load(&dir.join(format!("{pin}.known.toml"))).unwrap();
            assert!(known.known.len() >= entries, "{pin}");
            assert!(known.known.iter().all(|k| {
                let unit = k.test.split('/').next().unwrap_or_default();
                [TEST_PROGS, TEST_VERIFIER, TEST_MAPS].contains(&unit) && k.test != TEST_PROGS
            }));
        }
    }

    /// The 6.1 pin's failures of its whole run after unprivileged BPF went on, as recorded:
    /// every one is known, and a test_maps failure of another kind is not.
    #[test]
    fn the_6_1_list_explains_the_unpriv_cases_and_the_sockmap_accept() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/selftests");
        let known = Known::load(&dir.join("6.1.known.toml")).unwrap();
        let case = "test_verifier: FAIL | Unexpected verifier log! | EXP: R1 has pointer with \
                    unsupported alu operation | RES: R0 has pointer with unsupported alu operation";
        let mut rows: Vec<TestResult> = [
            "#164/u check deducing bounds from const, 1",
            "#166/u check deducing bounds from const, 3",
            "#168/u check deducing bounds from const, 5",
            "#169/u check deducing bounds from const, 6",
            "#172/u check deducing bounds from const, 9",
            "#857/u bpf_map_ptr: r = 0, r = r + map_ptr",
        ]
        .iter()
        .map(|c| failed(format!("test_verifier/{c}"), case.into()))
        .collect();
        rows.push(failed(
            TEST_VERIFIER.into(),
            format!(
                "{TEST_VERIFIER_FAILED} its last lines: Summary: 2006 PASSED, 0 SKIPPED, 6 FAILED"
            ),
        ));
        rows.push(pass(
            "test_verifier/#165/u check deducing bounds from const, 2".into(),
        ));
        rows.push(failed(
            TEST_MAPS.into(),
            "test_maps exited with 1; its last lines: accept failed | Failed to create sockmap \
             '6:Bad file descriptor'!"
                .into(),
        ));
        known.apply(&mut rows, "kernels/selftests/6.1.known.toml");
        let left: Vec<_> = rows
            .iter()
            .filter(|r| r.outcome != Outcome::Skip)
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(
            left,
            ["test_verifier/#165/u check deducing bounds from const, 2"]
        );
        let mut other = vec![failed(
            TEST_MAPS.into(),
            "test_maps exited with 1; its last lines: Failed to update hashmap".into(),
        )];
        known.apply(&mut other, "kernels/selftests/6.1.known.toml");
        assert_eq!(other[0].outcome, Outcome::Fail);
    }

    /// The 6.12 pin's failing rows outside its whole-test entries, as its run recorded them
    /// (the @unpriv subtests of verifier_bounds_deduction and verifier_map_ptr): the committed
    /// list makes each of them and their tests known, and leaves their other subtests judged.
    #[test]
    fn the_6_12_list_explains_the_unpriv_message_subtests() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/selftests");
        let known = Known::load(&dir.join("6.12.known.toml")).unwrap();
        let said = "test_progs: FAIL (json summary); its last lines: R0 has pointer with \
                    unsupported alu operation, pointer arithmetic with it prohibited for !root";
        let mut rows: Vec<TestResult> = [1, 3, 5, 6, 9]
            .iter()
            .map(|n| {
                failed(
                    format!("test_progs/verifier_bounds_deduction/check deducing bounds from const, {n} @unpriv"),
                    said.into(),
                )
            })
            .collect();
        rows.push(failed(
            "test_progs/verifier_bounds_deduction".into(),
            "test_progs: FAIL (json summary); its last lines: process_subtest:PASS".into(),
        ));
        rows.push(pass(
            "test_progs/verifier_bounds_deduction/check deducing bounds from const, 2 @unpriv"
                .into(),
        ));
        rows.push(failed(
            "test_progs/verifier_map_ptr/bpf_map_ptr: r = 0, r = r + map_ptr @unpriv".into(),
            said.into(),
        ));
        rows.push(failed(
            "test_progs/verifier_map_ptr".into(),
            "test_progs: FAIL (json summary); its last lines: process_subtest:PASS".into(),
        ));
        known.apply(&mut rows, "kernels/selftests/6.12.known.toml");
        let left: Vec<_> = rows
            .iter()
            .filter(|r| r.outcome != Outcome::Skip)
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(
            left,
            ["test_progs/verifier_bounds_deduction/check deducing bounds from const, 2 @unpriv"]
        );
    }

    #[test]
    fn a_known_entry_that_blames_an_option_the_config_sets_fails() {
        let known: Known = toml::from_str(
            "[[known]]\ntest = \"test_progs/a\"\nreason = \"needs CONFIG_FPROBE\"\n\
             unset = [\"CONFIG_FPROBE\"]\n",
        )
        .unwrap();
        assert!(known
            .check_config("# CONFIG_FPROBE is not set\nCONFIG_BPF=y\n", "k.toml")
            .is_empty());
        let rows = known.check_config("CONFIG_FPROBE=y\n", "k.toml");
        assert_eq!(rows.len(), 1);
        assert!(rows[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("CONFIG_FPROBE=y"));
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("k.toml");
        std::fs::write(
            &f,
            "[[known]]\ntest = \"test_progs/a\"\nreason = \"x\"\nunset = [\"CONFIG_FPROBE\"]\n",
        )
        .unwrap();
        let e = format!("{:#}", Known::load(&f).unwrap_err());
        assert!(e.contains("that the reason names"), "{e}");
    }
}
