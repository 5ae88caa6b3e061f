//! `bpfvm test --against BASE`: a user's crate, BASE a ref of the crate's own git repository.
//! Head is `bpfvm test` here; the base is `bpfvm test` (this same bpfvm) in the crate's
//! directory of that repository's worktree at BASE, with its own target directory. A rerun of
//! `<binary>::<test>` gives the test binaries `<test>` as one more name filter.
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use super::{base, compare, Against, Suite};
use crate::domain::options;
use crate::flows::crate_test::{self, CrateTestOptions, REPORTS};
use crate::kernel::choice::KernelChoice;
use crate::results::change::Change;
use crate::results::report::Report;
use crate::support::output::Events;
use crate::support::status::Status;

/// The directory under the crate's reports (`<target>/bpfvm-test/`) the change is written to.
pub const CHANGE: &str = "change";

/// The git repository holding the crate in `dir`, and `dir`'s place inside it; a crate in no
/// repository is an error naming the fix.
pub fn repository(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let top = base::git(dir, &["rev-parse", "--show-toplevel"]).map_err(|e| {
        anyhow::anyhow!(
            "--against: the crate in {} is in no git repository ({e:#}); BASE is a ref of the \
             crate's own repository: commit the crate to one (`git init && git add -A && git \
             commit`), or leave out --against",
            dir.display()
        )
    })?;
    let top = PathBuf::from(top);
    let here = std::fs::canonicalize(dir).with_context(|| format!("{}", dir.display()))?;
    let top = std::fs::canonicalize(&top).with_context(|| format!("{}", top.display()))?;
    let inside = here
        .strip_prefix(&top)
        .with_context(|| format!("{} is not inside {}", here.display(), top.display()))?
        .to_path_buf();
    Ok((top, inside))
}

/// Compares the crate in the current directory at head with itself at `against.base` on every
/// kernel of `opts`, `bpfvm` being the program that runs the base. Returns the change, the
/// directory its files are in (`<target>/bpfvm-test/change/`) and head's whole reports (also
/// in `<target>/bpfvm-test/`, `matrix.json` of them all).
pub fn crate_test_against(
    opts: &CrateTestOptions,
    against: &Against,
    bpfvm: &Path,
    events: &Events,
) -> Result<(Change, PathBuf, Vec<Report>)> {
    options::check(&opts.vm)?;
    if opts.piece.is_some() {
        anyhow::bail!("--against compares whole runs: leave out --piece");
    }
    let cwd = std::env::current_dir().context("the current directory")?;
    let (repo, inside) = repository(&cwd)?;
    let (base, head) = base::revisions(&repo, &against.base, "the crate's repository")?;
    let reports = crate_test::cargo_dirs(events)?.target.join(REPORTS);
    let suite = CrateSuite {
        opts,
        repo,
        inside,
        bpfvm: bpfvm.to_path_buf(),
        reports: reports.clone(),
        heads: RefCell::new(vec![]),
    };
    let (change, dir) = compare(&suite, &opts.kernels, base, head, against, events)?;
    let heads = suite.heads.into_inner();
    crate_test::write_matrix(&reports, &heads.iter().collect::<Vec<_>>())?;
    Ok((change, dir, heads))
}

struct CrateSuite<'a> {
    opts: &'a CrateTestOptions,
    repo: PathBuf,
    /// The crate's directory inside `repo`.
    inside: PathBuf,
    bpfvm: PathBuf,
    /// `<target>/bpfvm-test`.
    reports: PathBuf,
    /// Head's whole reports, kernel by kernel.
    heads: RefCell<Vec<Report>>,
}

impl Suite for CrateSuite<'_> {
    fn out(&self) -> PathBuf {
        self.reports.join(CHANGE)
    }

    fn head(
        &self,
        kernel: &KernelChoice,
        test: Option<&str>,
        events: &Events,
    ) -> Result<(Report, PathBuf)> {
        let mut opts = CrateTestOptions {
            kernels: vec![kernel.clone()],
            ..self.opts.clone()
        };
        opts.test_args.extend(rerun_filter(test));
        let (mut runs, _) = crate_test::crate_test_dirs(&opts, events)?;
        let (report, dir) = runs.pop().context("the crate's run reported no kernel")?;
        if test.is_none() {
            self.heads.borrow_mut().push(report.clone());
        }
        // A kernel that did not run has no directory: its report says why.
        let dir = dir.unwrap_or_else(|| self.reports.join(CHANGE).join("not-run"));
        Ok((report, dir))
    }

    fn head_error(
        &self,
        kernel: &KernelChoice,
        e: anyhow::Error,
        events: &Events,
    ) -> (Status, String) {
        match crate_test::build_check(&self.opts.cargo_args, kernel.arch(), events) {
            Err(b) => (Status::Untestable, format!("head cannot be built: {b:#}")),
            Ok(()) => (Status::Stopped, format!("head cannot be judged: {e:#}")),
        }
    }

    fn base(
        &self,
        commit: &str,
        kernel: &KernelChoice,
        label: &str,
        test: Option<&str>,
        events: &Events,
    ) -> Result<Report> {
        let mut cmd = Command::new(&self.bpfvm);
        cmd.args(base_args(self.opts, kernel, test)?);
        let report = Path::new(REPORTS).join(label).join("report.json");
        base::run_in_worktree(&self.repo, commit, &self.inside, cmd, &report, events)
    }

    fn verifier(&self) -> bool {
        self.opts.verifier_stats.is_some()
    }

    fn scope(&self) -> String {
        let o = self.opts;
        let inside = self.inside.to_string_lossy();
        let mut parts: Vec<&str> = vec!["crate", &inside, "cargo"];
        parts.extend(o.cargo_args.iter().map(String::as_str));
        parts.push("test");
        parts.extend(o.test_args.iter().map(String::as_str));
        parts.push("env");
        parts.extend(o.env.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()]));
        if o.verifier_stats.is_some() {
            parts.push("verifier-stats");
        }
        base::scope(&parts)
    }
}

/// The test binaries' extra name filter that reruns `test` (`<binary>::<test>`, as the report
/// names it): `<test>`, which libtest matches as a part of a name (a name the report shows
/// without its `tests::` still matches). A name of no binary (`kernel:warning`) reruns all.
fn rerun_filter(test: Option<&str>) -> Option<String> {
    let (_, name) = test?.split_once("::")?;
    Some(name.to_string())
}

/// `bpfvm test`'s arguments for the base: the same kernel, VM, variables, verifier statistics
/// and cargo test arguments as head, and the rerun's filter.
pub fn base_args(
    opts: &CrateTestOptions,
    kernel: &KernelChoice,
    test: Option<&str>,
) -> Result<Vec<String>> {
    let mut args: Vec<String> = vec!["test".into()];
    args.extend(base::kernel_args(kernel)?);
    args.extend(base::vm_args(&opts.vm));
    // The same bpfvm runs the base, so every VM option it has is given as head's.
    let vm = &opts.vm;
    args.extend([
        "--accel".into(),
        vm.accel.to_string(),
        "--tcg-thread".into(),
        vm.tcg_thread.to_string(),
    ]);
    if !vm.retry {
        args.push("--no-retry".into());
    }
    for (name, _) in &opts.env {
        args.extend(["--env".into(), name.clone()]);
    }
    // Objects named on head's command line are head's files: the base finds its own.
    if opts.verifier_stats.is_some() {
        args.push("--verifier-stats".into());
    }
    args.push("--".into());
    args.extend(opts.cargo_args.iter().cloned());
    args.push("--".into());
    args.extend(opts.test_args.iter().cloned());
    args.extend(rerun_filter(test));
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::arch::Arch;
    use crate::kernel::pins;

    fn git(dir: &Path, args: &[&str]) {
        base::git(dir, args).unwrap();
    }

    #[test]
    fn the_base_is_the_same_bpfvm_test_with_the_rerun_as_one_more_filter() {
        let pin = pins::pins().unwrap();
        let pin = pin.iter().find(|p| p.arch == Arch::X86_64).unwrap();
        let kernel = KernelChoice::Pin(pin.clone());
        let opts = CrateTestOptions {
            vm: crate::domain::options::VmOptions::new(std::time::Duration::from_secs(60)),
            kernels: vec![kernel.clone()],
            cargo_args: vec!["--release".into()],
            test_args: vec!["--test-threads".into(), "1".into()],
            env: vec![("RUST_LOG".into(), "debug".into())],
            verifier_stats: Some(vec![]),
            piece: None,
        };
        let mut opts = opts;
        opts.vm.accel = crate::domain::options::Choice::Tcg;
        opts.vm.retry = false;
        let args = base_args(&opts, &kernel, Some("maps::tests::fails")).unwrap();
        let at = |a: &str| args.iter().position(|x| x == a).unwrap();
        assert_eq!(args[0], "test");
        assert_eq!(args[at("--kernel") + 1], pin.version);
        assert_eq!(args[at("--accel") + 1], "tcg");
        assert_eq!(args[at("--memory") + 1], opts.vm.memory);
        assert!(args.contains(&"--no-retry".to_string()));
        assert_eq!(args[at("--env") + 1], "RUST_LOG");
        assert!(args.contains(&"--verifier-stats".to_string()));
        let tail = &args[at("--")..];
        assert_eq!(
            tail,
            [
                "--",
                "--release",
                "--",
                "--test-threads",
                "1",
                "tests::fails"
            ]
        );
        // bpfvm test splits them back as head had them, the rerun's name added.
        let (cargo, test) = crate_test::split_args(&tail[1..]);
        assert_eq!(cargo, opts.cargo_args);
        assert_eq!(test, ["--test-threads", "1", "tests::fails"]);
        let whole = base_args(&opts, &kernel, None).unwrap();
        assert_eq!(whole.last().unwrap(), "1");
        assert_eq!(rerun_filter(Some("kernel:warning")), None);
    }

    #[test]
    fn base_is_a_ref_of_the_crates_own_repository() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        let krate = repo.join("crates/demo");
        std::fs::create_dir_all(&krate).unwrap();
        std::fs::write(krate.join("Cargo.toml"), "[package]\nname = \"demo\"\n").unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["add", "-A"]);
        let who = ["-c", "user.name=t", "-c", "user.email=t@t"];
        git(&repo, &[&who[..], &["commit", "-qm", "base"]].concat());
        git(&repo, &["tag", "v1"]);
        let (top, inside) = repository(&krate).unwrap();
        assert_eq!(top, std::fs::canonicalize(&repo).unwrap());
        assert_eq!(inside, Path::new("crates/demo"));
        let head = base::resolve(&top, "HEAD", "the crate's repository").unwrap();
        assert_eq!(
            base::resolve(&top, "v1", "the crate's repository").unwrap(),
            head
        );
        // A ref of another repository (bpfvm's) is not one of the crate's.
        let e = format!(
            "{:#}",
            base::resolve(&top, "no-such-base", "the crate's repository").unwrap_err()
        );
        assert!(
            e.contains("--against no-such-base: not a commit of the crate's repository"),
            "{e}"
        );
        assert!(e.contains("give a branch, tag or commit"), "{e}");
    }

    #[test]
    fn a_crate_in_no_git_repository_is_refused_naming_the_fix() {
        let d = tempfile::tempdir().unwrap();
        let e = format!("{:#}", repository(d.path()).unwrap_err());
        assert!(e.contains("is in no git repository"), "{e}");
        assert!(e.contains("git init"), "{e}");
        assert!(e.contains("leave out --against"), "{e}");
        assert_eq!(
            Status::of_error(&anyhow::anyhow!(e)),
            Status::Stopped,
            "exit 255"
        );
    }
}
