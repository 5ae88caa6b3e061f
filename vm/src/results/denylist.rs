//! The selftests' own deny lists (`tools/testing/selftests/bpf/DENYLIST` and
//! `DENYLIST.<arch>`, what BPF CI passes to `test_progs -d`): one `test` or `test/subtest`
//! a line, `*` as test_progs' glob, a `#` comment as the reason.
use std::path::Path;

/// One entry: the test (and subtest) it names, and its comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub test: String,
    pub subtest: Option<String>,
    /// The file it came from and its comment.
    pub reason: String,
}

/// Every entry of the deny lists that apply to `arch` in the selftests directory `dir`:
/// `DENYLIST` and `DENYLIST.<arch>` (`aarch64`, `x86_64`, as BPF CI names them).
pub fn load(dir: &Path, arch: &str) -> Vec<Denied> {
    ["DENYLIST".to_string(), format!("DENYLIST.{arch}")]
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            parse(&text, f)
        })
        .collect()
}

/// The entries of one file's `text`; `file` names it in each reason.
pub fn parse(text: &str, file: &str) -> Vec<Denied> {
    text.lines()
        .filter_map(|line| {
            let (entry, comment) = line.split_once('#').unwrap_or((line, ""));
            let entry = entry.trim();
            if entry.is_empty() {
                return None;
            }
            let (test, subtest) = match entry.split_once('/') {
                Some((t, s)) => (t.to_string(), Some(s.to_string())),
                None => (entry.to_string(), None),
            };
            let comment = comment.trim();
            Some(Denied {
                test,
                subtest,
                reason: match comment {
                    "" => format!("denied by {file} (no reason given)"),
                    c => format!("denied by {file}: {c}"),
                },
            })
        })
        .collect()
}

/// test_progs' `glob_match` (test_progs.c): `*` matches any run of characters, nothing else
/// is special.
pub fn glob_match(s: &str, pat: &str) -> bool {
    match pat.split_once('*') {
        None => s == pat,
        Some((head, rest)) => {
            let Some(tail) = s.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len())
                .filter(|i| tail.is_char_boundary(*i))
                .any(|i| glob_match(&tail[i..], rest))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of 6.1's `DENYLIST` and `DENYLIST.s390x`, a tab among them.
    #[test]
    fn each_line_is_a_test_or_subtest_with_its_comment_as_reason() {
        let text = "# TEMPORARY\nget_stack_raw_tp    # spams with kernel warnings\n\
                    stacktrace_build_id\nget_func_args_test\t                 # trampoline\n\
                    tc_redirect/tc_redirect_dtime # uses netns\n";
        let d = parse(text, "DENYLIST");
        assert_eq!(d.len(), 4);
        assert_eq!(d[0].test, "get_stack_raw_tp");
        assert_eq!(
            d[0].reason,
            "denied by DENYLIST: spams with kernel warnings"
        );
        assert_eq!(d[1].reason, "denied by DENYLIST (no reason given)");
        assert_eq!(d[2].test, "get_func_args_test");
        assert_eq!(d[3].subtest.as_deref(), Some("tc_redirect_dtime"));
    }

    #[test]
    fn the_glob_is_test_progs_own() {
        assert!(glob_match("bpf_loop", "bpf_loop"));
        assert!(!glob_match("bpf_loop2", "bpf_loop"));
        assert!(glob_match("verif_scale_pyperf600", "verif_scale*"));
        assert!(glob_match("xdp_bonding", "*bond*"));
        assert!(!glob_match("xdp", "*bond*"));
        assert!(glob_match("a", "*"));
    }
}
