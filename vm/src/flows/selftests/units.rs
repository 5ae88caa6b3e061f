//! What a `selftests` run runs: its units, each one process in the guest between two kernel
//! log markers: a `test_progs` test (`test_progs/NAME`, with the `-a`/`-d` arguments that
//! select exactly what the run asked for), `test_verifier`, `test_maps`.
use crate::results::denylist::{glob_match, Denied};
use crate::results::report::{Outcome, TestResult};
use crate::results::upstream::{TEST_PROGS, TEST_VERIFIER};

/// One unit: its report name and, for a `test_progs` test, test_progs' arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unit {
    pub name: String,
    pub args: Vec<String>,
}

/// The units of a run: each test of `selected` (test_progs' `-l` for the run's `-t
/// pattern`, in its order, or a piece's) not denied as a whole, then `test_verifier` with
/// `verifier`, then `test_maps` with `maps`; and a skip row, with its reason, for each test or
/// subtest `denied` names.
pub(crate) fn units(
    selected: &[String],
    pattern: Option<&str>,
    denied: &[Denied],
    verifier: bool,
    maps: bool,
) -> (Vec<Unit>, Vec<TestResult>) {
    let mut units = Vec::new();
    let mut skipped = Vec::new();
    for test in selected {
        let name = format!("{TEST_PROGS}/{test}");
        let on_test: Vec<&Denied> = denied
            .iter()
            .filter(|d| glob_match(test, &d.test))
            .collect();
        if let Some(d) = on_test.iter().find(|d| d.subtest.is_none()) {
            skipped.push(skip(name, &d.reason));
            continue;
        }
        let mut args = selector(test, pattern);
        for d in &on_test {
            let sub = d.subtest.as_deref().unwrap_or_default();
            args.extend(["-d".to_string(), format!("{test}/{sub}")]);
            skipped.push(skip(format!("{name}/{sub}"), &d.reason));
        }
        units.push(Unit { name, args });
    }
    if verifier {
        units.push(Unit {
            name: TEST_VERIFIER.into(),
            args: vec![],
        });
    }
    if maps {
        units.push(Unit {
            name: crate::results::upstream::TEST_MAPS.into(),
            args: vec![],
        });
    }
    (units, skipped)
}

/// test_progs' arguments that run `test` as the run's `-t pattern` selected it: the whole test
/// (`-a test`), or only the subtests the pattern names where every element of the pattern
/// that selects the test names subtests (`-t foo/bar` is `-a 'foo/*bar*'`, as test_progs reads
/// `-t`: `parse_test_list` in testing_helpers.c wraps both parts in `*`).
fn selector(test: &str, pattern: Option<&str>) -> Vec<String> {
    let whole = vec!["-a".to_string(), test.to_string()];
    let Some(pattern) = pattern else {
        return whole;
    };
    let mut subs = Vec::new();
    for element in pattern.split(',').filter(|e| !e.is_empty()) {
        let (t, sub) = match element.split_once('/') {
            Some((t, s)) => (t, Some(s)),
            None => (element, None),
        };
        if !glob_match(test, &format!("*{t}*")) {
            continue;
        }
        match sub {
            None => return whole,
            Some(s) => subs.push(format!("{test}/*{s}*")),
        }
    }
    match subs.is_empty() {
        true => whole,
        false => vec!["-a".to_string(), subs.join(",")],
    }
}

fn skip(name: String, reason: &str) -> TestResult {
    TestResult {
        name,
        outcome: Outcome::Skip,
        reason: Some(reason.to_string()),
        duration_ms: 0,
        kernel_splats: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::denylist;

    fn names(u: &[Unit]) -> Vec<&str> {
        u.iter().map(|u| u.name.as_str()).collect()
    }

    #[test]
    fn every_listed_test_is_a_unit_then_the_verifier_and_the_maps() {
        let listed = ["bpf_loop".to_string(), "xdp".to_string()];
        let (u, skipped) = units(&listed, None, &[], true, true);
        assert_eq!(
            names(&u),
            [
                "test_progs/bpf_loop",
                "test_progs/xdp",
                "test_verifier",
                "test_maps"
            ]
        );
        assert_eq!(u[0].args, ["-a", "bpf_loop"]);
        assert!(skipped.is_empty());
        let (u, _) = units(&listed, Some("bpf_loop"), &[], false, false);
        assert_eq!(names(&u), ["test_progs/bpf_loop", "test_progs/xdp"]);
    }

    /// `-t foo/bar` selects foo's bar subtests only, not its siblings.
    #[test]
    fn a_pattern_with_a_subtest_runs_only_that_subtest() {
        assert_eq!(
            selector("bpf_loop", Some("bpf_loop/nr_loops")),
            ["-a", "bpf_loop/*nr_loops*"]
        );
        assert_eq!(
            selector("bpf_loop", Some("bpf_loop/nr_loops,loop/stack")),
            ["-a", "bpf_loop/*nr_loops*,bpf_loop/*stack*"]
        );
        assert_eq!(
            selector("bpf_loop", Some("bpf_loop/nr_loops,bloom,loop")),
            ["-a", "bpf_loop"],
            "an element without a subtest selects the whole test"
        );
        assert_eq!(selector("bpf_loop", None), ["-a", "bpf_loop"]);
    }

    #[test]
    fn a_denied_test_is_skipped_with_its_reason_and_a_denied_subtest_is_left_out() {
        let denied = denylist::parse(
            "verif_scale*   # too slow\ntc_redirect/tc_redirect_dtime # netns\n",
            "DENYLIST",
        );
        let listed = [
            "verif_scale_pyperf600".to_string(),
            "tc_redirect".to_string(),
        ];
        let (u, skipped) = units(&listed, None, &denied, true, false);
        assert_eq!(names(&u), ["test_progs/tc_redirect", "test_verifier"]);
        assert_eq!(
            u[0].args,
            ["-a", "tc_redirect", "-d", "tc_redirect/tc_redirect_dtime"]
        );
        let rows: Vec<(&str, &str)> = skipped
            .iter()
            .map(|r| (r.name.as_str(), r.reason.as_deref().unwrap()))
            .collect();
        assert_eq!(
            rows,
            [
                (
                    "test_progs/verif_scale_pyperf600",
                    "denied by DENYLIST: too slow"
                ),
                (
                    "test_progs/tc_redirect/tc_redirect_dtime",
                    "denied by DENYLIST: netns"
                ),
            ]
        );
    }
}
