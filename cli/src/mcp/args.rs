//! A tool call's arguments checked, and the command line each runs: the same commands and
//! options as on a terminal (`cargo xtask vm-test`, `bpfvm test`, `bpfvm selftests`), so a call
//! and a terminal run write the same report.json. A bad argument is refused here, before
//! anything runs, with what to give instead.
use std::path::{Path, PathBuf};

use bpfvm_host::kernel::choice::KernelArgs;
use schemars::JsonSchema;
use serde::Deserialize;

/// `run`'s arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(super) struct RunParams {
    /// A pinned kernel version (`6.1`, `6.12`: the `kernels` tool lists them) or the path of a
    /// kernel image you built (a value with a `/`). Default: 6.1.
    pub(super) kernel: Option<String>,
    /// A kernel source tree to configure, build (in bpfvm's cache) and boot, instead of
    /// `kernel`. A tree that does not build is a tool error (the command's exit status 125).
    pub(super) kernel_tree: Option<String>,
    /// Run only the tests whose name contains this (a part of a test's name, e.g.
    /// `bloom_filter`); every test when left out.
    pub(super) filter: Option<String>,
    /// The directory of your own crate: run its tests (`bpfvm test`) instead of bpfvm's
    /// suite (`cargo xtask vm-test`).
    pub(super) crate_dir: Option<String>,
    /// Seconds before the VM is killed (default 600).
    pub(super) timeout: Option<u64>,
    /// Boot, even when a kept guest (`cargo xtask vm-guest`) could take the run (bpfvm's
    /// suite only).
    pub(super) fresh: Option<bool>,
}

/// `selftests`' arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(super) struct SelftestsParams {
    /// test_progs' selection (`-t`): comma-separated names, each matching the tests whose
    /// name contains it, e.g. `bloom_filter_map,bpf_loop`.
    pub(super) tests: String,
    /// A pinned kernel version (default 6.1) or the path of a kernel image you built.
    pub(super) kernel: Option<String>,
    /// A kernel source tree, instead of `kernel`.
    pub(super) kernel_tree: Option<String>,
    /// Seconds before each boot's VM is killed (default 600).
    pub(super) timeout: Option<u64>,
}

/// `bisect_step`'s arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(super) struct BisectParams {
    /// The kernel source tree (a git checkout).
    pub(super) tree: String,
    /// The commit to judge (a git rev of the tree). It is exported into bpfvm's cache
    /// (`git archive`), so the tree's own checkout is left alone. Default: the tree as it is,
    /// as `git bisect run` leaves it.
    pub(super) rev: Option<String>,
    /// Judge only the tests whose name contains this; the whole suite when left out.
    pub(super) filter: Option<String>,
    /// Seconds before the VM is killed (default 600).
    pub(super) timeout: Option<u64>,
}

/// `change_verdict`'s arguments: `cargo xtask vm-test --against BASE` (docs/change.md).
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub(super) struct ChangeParams {
    /// The base: a branch, tag or commit of this repository. The suite at BASE is built in its
    /// own worktree (never the checkout's working tree) and its report cached by commit.
    pub(super) against: String,
    /// A pinned kernel version, `all` (every pin), or the path of a kernel image. Default: 6.1.
    pub(super) kernel: Option<String>,
    /// Compare only the tests whose name contains this; every test when left out.
    pub(super) filter: Option<String>,
    /// How many times a test failing at head runs again at head, then at the base, each in a
    /// fresh boot (default 2).
    pub(super) reruns: Option<u32>,
    /// A program's processed insns or states growing by more than this percent fails the
    /// change too; without it only a verdict success -> rejected does.
    pub(super) verifier_threshold: Option<f64>,
    /// Seconds before each VM is killed (default 600).
    pub(super) timeout: Option<u64>,
}

/// The longest `timeout` taken: a day.
const MAX_TIMEOUT_S: u64 = 86_400;

/// A program, its arguments and the directory it runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Invocation {
    pub(super) program: PathBuf,
    pub(super) args: Vec<String>,
    pub(super) dir: PathBuf,
}

impl Invocation {
    /// As a shell would show it, for the tool's result and the log.
    pub(super) fn shown(&self) -> String {
        bpfvm_host::support::shell::display(&[], &self.program.display().to_string(), &self.args)
    }
}

/// Where the commands run from: the checkout (`cargo xtask` runs there) and this binary
/// (`bpfvm test`, `bpfvm selftests`).
#[derive(Debug, Clone)]
pub(super) struct Commands {
    pub(super) checkout: PathBuf,
    pub(super) bpfvm: PathBuf,
}

impl Commands {
    /// `run`: `cargo xtask vm-test` in the checkout, or `bpfvm test` in the user's crate.
    pub(super) fn run(&self, p: &RunParams) -> Result<Invocation, String> {
        let mut args = kernel_args(p.kernel.as_deref(), p.kernel_tree.as_deref())?;
        args.extend(timeout_args(p.timeout)?);
        let filter = p.filter.as_deref().map(check_filter).transpose()?;
        match &p.crate_dir {
            Some(dir) => {
                if p.fresh.is_some() {
                    return Err(
                        "fresh is for bpfvm's own suite (a kept guest runs only it); \
                                leave it out with crate_dir"
                            .into(),
                    );
                }
                let dir = crate_dir(dir)?;
                let mut all = vec!["test".to_string()];
                all.extend(args);
                if let Some(f) = filter {
                    // cargo's arguments, then `--` and the test binaries': the filter.
                    all.extend(["--".into(), "--".into(), f.to_string()]);
                }
                Ok(Invocation {
                    program: self.bpfvm.clone(),
                    args: all,
                    dir,
                })
            }
            None => {
                if p.fresh == Some(true) {
                    args.push("--fresh".into());
                }
                Ok(self.vm_test(args, filter))
            }
        }
    }

    /// `selftests`: `bpfvm selftests -t` in the checkout.
    pub(super) fn selftests(&self, p: &SelftestsParams) -> Result<Invocation, String> {
        let tests = check_selection(&p.tests)?;
        let mut args = vec!["selftests".to_string()];
        args.extend(kernel_args(p.kernel.as_deref(), p.kernel_tree.as_deref())?);
        args.extend(timeout_args(p.timeout)?);
        args.extend(["-t".into(), tests.to_string()]);
        Ok(Invocation {
            program: self.bpfvm.clone(),
            args,
            dir: self.checkout.clone(),
        })
    }

    /// `bisect_step`'s run, once its tree (`tree`, the rev's export when a rev was given)
    /// is known: the suite (or a filter of it) on the tree's kernel.
    pub(super) fn bisect(&self, tree: &Path, p: &BisectParams) -> Result<Invocation, String> {
        let mut args = vec!["--kernel-tree".to_string(), tree.display().to_string()];
        args.extend(timeout_args(p.timeout)?);
        let filter = p.filter.as_deref().map(check_filter).transpose()?;
        Ok(self.vm_test(args, filter))
    }

    /// `change_verdict`: `cargo xtask vm-test --against BASE` on the kernels asked.
    pub(super) fn change(&self, p: &ChangeParams) -> Result<Invocation, String> {
        let base = check_rev(&p.against)?;
        let mut args = match p.kernel.as_deref() {
            Some("all") => vec!["--kernel".to_string(), "all".into()],
            k => kernel_args(k, None)?,
        };
        args.extend(timeout_args(p.timeout)?);
        args.extend(["--against".into(), base.to_string()]);
        if let Some(n) = p.reruns {
            args.extend(["--reruns".into(), n.to_string()]);
        }
        if let Some(t) = p.verifier_threshold {
            if !(t.is_finite() && t >= 0.0) {
                return Err(format!("verifier_threshold {t}: give a percent, 0 or more"));
            }
            args.extend(["--verifier-threshold".into(), t.to_string()]);
        }
        let filter = p.filter.as_deref().map(check_filter).transpose()?;
        Ok(self.vm_test(args, filter))
    }

    fn vm_test(&self, kernel: Vec<String>, filter: Option<&str>) -> Invocation {
        let mut args = vec!["xtask".to_string(), "vm-test".into()];
        args.extend(kernel);
        if let Some(f) = filter {
            args.extend(["--filter".into(), f.to_string()]);
        }
        Invocation {
            program: "cargo".into(),
            args,
            dir: self.checkout.clone(),
        }
    }
}

/// `--kernel` or `--kernel-tree`, checked as the commands check them (`kernel::choice`: an
/// unknown pin is named with the pins there are), and a tree that is not one refused.
pub(super) fn kernel_args(kernel: Option<&str>, tree: Option<&str>) -> Result<Vec<String>, String> {
    let choice = KernelArgs {
        kernel: kernel.map(str::to_string),
        env: None,
        modules: None,
        kernel_tree: tree.map(PathBuf::from),
        kconfig: vec![],
        arch: None,
    };
    choice.one().map_err(|e| format!("{e:#}"))?;
    match (kernel, tree) {
        (_, Some(t)) => {
            check_tree(Path::new(t))?;
            Ok(vec!["--kernel-tree".into(), t.into()])
        }
        (Some(k), None) => Ok(vec!["--kernel".into(), k.into()]),
        (None, None) => Ok(vec![
            "--kernel".into(),
            bpfvm_host::domain::options::defaults::KERNEL.into(),
        ]),
    }
}

/// A directory that is a kernel source tree (a top-level Makefile with VERSION and
/// PATCHLEVEL, as `source_tree` reads it).
pub(super) fn check_tree(tree: &Path) -> Result<(), String> {
    if !tree.is_dir() {
        return Err(format!(
            "kernel_tree {}: no such directory; give the top directory of a kernel source tree \
             (where its Makefile is)",
            tree.display()
        ));
    }
    if !bpfvm_host::kernel::source_tree::is_tree(tree) {
        return Err(format!(
            "kernel_tree {}: a directory, but not a kernel source tree (no top-level Makefile \
             with VERSION and PATCHLEVEL); give the top directory of a kernel checkout",
            tree.display()
        ));
    }
    Ok(())
}

/// A test filter: a part of a test's name. Test names hold letters, digits, `_`, `:`, `/`,
/// `.` and `-`; anything else (a space, a quote, a glob) matches no test, and a filter
/// beginning with `-` would be read as an option by the command.
pub(super) fn check_filter(f: &str) -> Result<&str, String> {
    let fix = "give a part of a test's name, e.g. `bloom_filter` or `maps::hash`, or leave the \
               filter out to run every test";
    if f.is_empty() {
        return Err(format!("filter is empty: {fix}"));
    }
    if f.starts_with('-') {
        return Err(format!("filter {f:?} begins with `-`: {fix}"));
    }
    if let Some(c) = f.chars().find(|c| !name_char(*c)) {
        return Err(format!(
            "filter {f:?} holds {c:?}, which no test name has (names hold letters, digits and \
             `_:/.-`); a filter matches a part of the name, not a pattern: {fix}"
        ));
    }
    Ok(f)
}

/// A base revision as git names one (`main`, `v1.2`, `HEAD~3`, a SHA); whether it is a commit
/// of the repository the command itself says. One beginning with `-` would be read as an
/// option, and git's ref names hold no space, control character or `~^:?*[\\` but for `~`
/// and `^` after a name (git-check-ref-format(1)).
pub(super) fn check_rev(rev: &str) -> Result<&str, String> {
    let fix = "give a branch, tag or commit of this repository, e.g. `main` or a commit SHA";
    if rev.is_empty() || rev.starts_with('-') {
        return Err(format!("against {rev:?}: not a revision; {fix}"));
    }
    if let Some(c) = rev
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_/.-~^@{}".contains(*c)))
    {
        return Err(format!(
            "against {rev:?} holds {c:?}, which no revision has; {fix}"
        ));
    }
    Ok(rev)
}

/// test_progs' `-t`: comma-separated names, each as a filter, and `*` (its glob).
pub(super) fn check_selection(t: &str) -> Result<&str, String> {
    let fix = "give test_progs' names, comma-separated, e.g. `bloom_filter_map,bpf_loop`";
    if t.split(',').any(str::is_empty) {
        return Err(format!("tests {t:?}: an empty name; {fix}"));
    }
    if t.starts_with('-') {
        return Err(format!("tests {t:?} begins with `-`; {fix}"));
    }
    if let Some(c) = t
        .chars()
        .find(|c| !(name_char(*c) || *c == ',' || *c == '*'))
    {
        return Err(format!(
            "tests {t:?} holds {c:?}, which no test name has; {fix}"
        ));
    }
    Ok(t)
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_:/.-".contains(c)
}

fn timeout_args(t: Option<u64>) -> Result<Vec<String>, String> {
    match t {
        None => Ok(vec![]),
        Some(s) if (1..=MAX_TIMEOUT_S).contains(&s) => Ok(vec!["--timeout".into(), s.to_string()]),
        Some(s) => Err(format!(
            "timeout {s}: give the seconds before the VM is killed, 1 to {MAX_TIMEOUT_S}"
        )),
    }
}

fn crate_dir(dir: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(dir);
    if !path.join("Cargo.toml").is_file() {
        return Err(format!(
            "crate_dir {dir}: no Cargo.toml there; give the directory of your crate (or its \
             workspace), or leave crate_dir out to run bpfvm's own suite"
        ));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commands() -> Commands {
        Commands {
            checkout: "/co".into(),
            bpfvm: "/bin/bpfvm".into(),
        }
    }

    #[test]
    fn a_filtered_run_is_vm_test_with_its_filter() {
        let inv = commands()
            .run(&RunParams {
                kernel: Some("6.1".into()),
                filter: Some("maps::hash".into()),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(inv.program, PathBuf::from("cargo"));
        assert_eq!(
            inv.args,
            [
                "xtask",
                "vm-test",
                "--kernel",
                "6.1",
                "--filter",
                "maps::hash"
            ]
        );
        assert_eq!(inv.dir, PathBuf::from("/co"));
    }

    #[test]
    fn a_change_verdict_is_vm_test_against_its_base_and_a_bad_base_is_refused() {
        let inv = commands()
            .change(&ChangeParams {
                against: "origin/main~2".into(),
                kernel: Some("all".into()),
                filter: Some("bloom_filter".into()),
                reruns: Some(3),
                verifier_threshold: Some(5.0),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            inv.args,
            [
                "xtask",
                "vm-test",
                "--kernel",
                "all",
                "--against",
                "origin/main~2",
                "--reruns",
                "3",
                "--verifier-threshold",
                "5",
                "--filter",
                "bloom_filter"
            ]
        );
        let change = |against: &str, kernel: Option<&str>, threshold| {
            commands()
                .change(&ChangeParams {
                    against: against.into(),
                    kernel: kernel.map(str::to_string),
                    verifier_threshold: threshold,
                    ..Default::default()
                })
                .unwrap_err()
        };
        assert!(change("--force", None, None).contains("not a revision"));
        assert!(change("main; id", None, None).contains("holds ';'"));
        assert!(change("", None, None).contains("not a revision"));
        assert!(change("main", Some("9.99"), None).contains("9.99"));
        assert!(change("main", None, Some(-1.0)).contains("0 or more"));
    }

    #[test]
    fn a_users_crate_runs_bpfvm_test_there_with_the_filter_after_two_dashes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Cargo.toml"), "").unwrap();
        let inv = commands()
            .run(&RunParams {
                filter: Some("probe".into()),
                crate_dir: Some(dir.path().display().to_string()),
                timeout: Some(60),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(inv.program, PathBuf::from("/bin/bpfvm"));
        assert_eq!(
            inv.args,
            [
                "test",
                "--kernel",
                "6.1",
                "--timeout",
                "60",
                "--",
                "--",
                "probe"
            ]
        );
        assert_eq!(inv.dir, dir.path());
        let e = commands()
            .run(&RunParams {
                crate_dir: Some("/nonexistent".into()),
                ..Default::default()
            })
            .unwrap_err();
        assert!(e.contains("no Cargo.toml"), "{e}");
    }

    #[test]
    fn an_unknown_kernel_is_refused_with_the_pins() {
        let e = kernel_args(Some("9.99"), None).unwrap_err();
        assert!(e.contains("9.99"), "{e}");
        assert!(e.contains("6.1"), "the pins there are: {e}");
        let e = kernel_args(Some("6.1"), Some("/tmp")).unwrap_err();
        assert!(e.contains("give one"), "{e}");
    }

    #[test]
    fn a_tree_that_is_no_tree_is_refused_before_anything_runs() {
        let dir = tempfile::tempdir().unwrap();
        let e = check_tree(dir.path()).unwrap_err();
        assert!(e.contains("not a kernel source tree"), "{e}");
        let e = check_tree(&dir.path().join("gone")).unwrap_err();
        assert!(e.contains("no such directory"), "{e}");
        std::fs::write(
            dir.path().join("Makefile"),
            "VERSION = 6\nPATCHLEVEL = 12\nSUBLEVEL = 0\n",
        )
        .unwrap();
        check_tree(dir.path()).unwrap();
    }

    #[test]
    fn malformed_filters_are_refused_and_names_pass() {
        for bad in ["", "--kernel", "bloom filter", "maps::*", "a;b", "x\n"] {
            let e = check_filter(bad).unwrap_err();
            assert!(e.contains("give a part of a test's name"), "{bad:?}: {e}");
        }
        for good in [
            "bloom_filter",
            "maps::hash::batch",
            "test_progs/bpf_cookie",
            "a-b.c",
        ] {
            assert_eq!(check_filter(good), Ok(good));
        }
        assert!(check_selection("bloom_filter_map,bpf_loop").is_ok());
        assert!(check_selection("verif*").is_ok());
        assert!(check_selection("a,,b").is_err());
        assert!(check_selection("-t").is_err());
        assert!(check_selection("a b").is_err());
    }

    #[test]
    fn a_timeout_is_bounded() {
        assert_eq!(timeout_args(Some(30)).unwrap(), ["--timeout", "30"]);
        assert!(timeout_args(Some(0)).unwrap_err().contains("1 to 86400"));
        assert!(timeout_args(Some(MAX_TIMEOUT_S + 1)).is_err());
    }
}
