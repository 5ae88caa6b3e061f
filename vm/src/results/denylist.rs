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

/// The entries of a deny list the user gave (`selftests --denylist FILE`), in the same format.
/// test_progs splits `-d` on commas (`parse_test_list`, testing_helpers.c), so an entry with a
/// comma would deny something else: refused, with the glob that means it.
pub fn load_file(path: &Path) -> anyhow::Result<Vec<Denied>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the deny list {}: {e}\nfix: give --denylist a file of `test` or \
             `test/subtest` lines",
            path.display()
        )
    })?;
    let file = path.display().to_string();
    let denied = parse(&text, &file);
    if let Some(d) = denied
        .iter()
        .find(|d| d.test.contains(',') || d.subtest.as_deref().is_some_and(|s| s.contains(',')))
    {
        let entry = match &d.subtest {
            Some(s) => format!("{}/{s}", d.test),
            None => d.test.clone(),
        };
        anyhow::bail!(
            "{file}: `{entry}` has a comma, where test_progs' -d splits its list\n\
             fix: write `*` for the comma and what follows it up to the next word (`{}`)",
            entry.replace(", ", "*").replace(',', "*")
        );
    }
    Ok(denied)
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

    /// A user's list loads like the tree's; an entry with a comma (a subtest such as
    /// "check deducing bounds from const, 1") is refused with the glob that means it; a file
    /// that is not there is an error naming it.
    #[test]
    fn a_users_deny_list_loads_and_an_entry_with_a_comma_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("ok");
        std::fs::write(&ok, "verif_scale_pyperf600 # clang 19\na/b*1 @unpriv\n").unwrap();
        let d = load_file(&ok).unwrap();
        assert_eq!(d.len(), 2);
        assert!(d[0].reason.ends_with("/ok: clang 19"), "{}", d[0].reason);
        let comma = dir.path().join("comma");
        std::fs::write(&comma, "a/check deducing bounds from const, 1 @unpriv\n").unwrap();
        let e = load_file(&comma).unwrap_err().to_string();
        assert!(
            e.contains("a/check deducing bounds from const*1 @unpriv"),
            "{e}"
        );
        let e = load_file(&dir.path().join("none")).unwrap_err().to_string();
        assert!(e.contains("cannot read the deny list"), "{e}");
    }

    /// The committed list for Debian's 6.12 source run as a tree loads, each entry with its
    /// reason, and its globs name the failing @unpriv subtests only.
    #[test]
    fn the_committed_tree_deny_list_loads() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../kernels/selftests/debian-linux-source-6.12.denylist");
        let d = load_file(&path).unwrap();
        assert_eq!(d.len(), 7);
        assert!(d.iter().all(|d| !d.reason.ends_with("(no reason given)")));
        let sub = |n: &str| format!("check deducing bounds from const, {n} @unpriv");
        let pat = d[1].subtest.as_deref().unwrap();
        assert!(glob_match(&sub("1"), pat));
        assert!(
            !glob_match(&sub("2"), pat) && !glob_match("check deducing bounds from const, 1", pat)
        );
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
