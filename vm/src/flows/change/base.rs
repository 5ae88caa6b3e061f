//! The suite at the base: its repository (this one for `vm-test`, the user's for `bpfvm test`)
//! checked out in its own `git worktree` (never the user's working tree) with its own target
//! directory (the slot), run there (by the base's own `cargo xtask vm-test`, or by `bpfvm test`
//! in the crate's directory), and its whole report kept by (commit, kernel, arch, scope) so
//! that the next comparison against the same base runs only head and the reruns.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::domain::options::VmOptions;
use crate::kernel::choice::KernelChoice;
use crate::machine::provision::scrub_cargo_env;
use crate::results::change::Revision;
use crate::results::report::Report;
use crate::support::output::Events;
use crate::support::paths::{cache_dir, workspace_root};

/// A git command in `dir`; its stdout, trimmed, or why it failed.
pub(crate) fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("starting git")?;
    if !out.status.success() {
        bail!(
            "`git {}` in {} failed: {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The commit `rev` names in the repository `repo` (`what` says whose, for the error), or an
/// error saying how to name one.
pub fn resolve(repo: &Path, rev: &str, what: &str) -> Result<String> {
    let spec = format!("{rev}^{{commit}}");
    git(repo, &["rev-parse", "--verify", "--quiet", &spec]).map_err(|_| {
        anyhow::anyhow!(
            "--against {rev}: not a commit of {what} ({}); give a branch, tag or commit \
             (`git fetch` it first if it is a remote's)",
            repo.display()
        )
    })
}

/// The base `rev` and HEAD of `repo` (named `what` in errors), as a change compares them.
pub fn revisions(repo: &Path, rev: &str, what: &str) -> Result<(Revision, Revision)> {
    let base = Revision {
        name: rev.to_string(),
        commit: resolve(repo, rev, what)?,
    };
    let head = Revision {
        name: "HEAD".into(),
        commit: crate::results::plan::commit(repo)
            .with_context(|| format!("the commit of {what} (`git rev-parse HEAD`)"))?,
    };
    Ok((base, head))
}

/// The base's place in the cache, one per repository: `change/<hash of its path>/`, holding
/// `worktree/` and `target/`.
fn slot(repo: &Path) -> PathBuf {
    use sha2::{Digest, Sha256};
    let hash = hex::encode(Sha256::digest(repo.as_os_str().as_encoded_bytes()));
    cache_dir().join("change").join(&hash[..16])
}

/// The base's whole report on one kernel, from the cache when an earlier comparison kept it
/// (then `true`), else `run` and kept: by its commit, kernel (`label`), arch and `scope` (what
/// else selects its tests: a filter, a crate and its arguments).
pub fn whole(
    commit: &str,
    kernel: &KernelChoice,
    label: &str,
    scope: &str,
    events: &Events,
    run: impl FnOnce() -> Result<Report>,
) -> Result<(Report, bool)> {
    let cached = cache_dir()
        .join("change")
        .join("reports")
        .join(commit)
        .join(format!("{label}-{}", kernel.arch().name()))
        .join(scope)
        .join("report.json");
    if let Ok(text) = std::fs::read_to_string(&cached) {
        if let Ok(report) = serde_json::from_str::<Report>(&text) {
            events.note(format!("the base's report: cached, {}", cached.display()));
            return Ok((report, true));
        }
    }
    let report = run()?;
    let json = serde_json::to_string_pretty(&report)? + "\n";
    std::fs::create_dir_all(cached.parent().expect("a file in a directory"))?;
    crate::support::fs::write_atomic(&cached, json.as_bytes())?;
    Ok((report, false))
}

/// A scope of the cache: `all`, or a hash of what selects the tests.
pub fn scope(parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    if parts.is_empty() {
        return "all".into();
    }
    // Parts apart by a NUL; one part alone is hashed as it is, as vm-test's filter always was.
    let mut h = Sha256::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h.update([0]);
        }
        h.update(p.as_bytes());
    }
    format!("filter-{}", &hex::encode(h.finalize())[..16])
}

/// Runs `cmd` (its program and arguments set; not yet its directory) at the base: in the
/// worktree of `repo` checked out at `commit`, in `dir` inside it, with `CARGO_TARGET_DIR` the
/// slot's own target directory, a fresh boot; then reads the report `report` names under that
/// target directory. A run that judged nothing (it exited other than 0 or 1, or its VM did
/// not run to its end) is an error.
pub fn run_in_worktree(
    repo: &Path,
    commit: &str,
    dir: &Path,
    mut cmd: Command,
    report: &Path,
    events: &Events,
) -> Result<Report> {
    let slot = slot(repo);
    std::fs::create_dir_all(&slot)?;
    let _lock = crate::support::wait::lock_dir(&slot, || {
        events.note(format!(
            "waiting for {} (another comparison)",
            slot.display()
        ))
    })?;
    let tree = checkout(repo, &slot, commit, events)?;
    let target = slot.join("target");
    let report = target.join(report);
    let _ = std::fs::remove_file(&report);
    let cwd = tree.join(dir);
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let program = cmd.get_program().to_string_lossy().into_owned();
    events.command(format!(
        "(cd {} && CARGO_TARGET_DIR={} {program} {})",
        cwd.display(),
        target.display(),
        args.join(" ")
    ));
    scrub_cargo_env(&mut cmd);
    let status = cmd
        .current_dir(&cwd)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("BPFVM_PIECE")
        .env_remove("BPFVM_PLAN")
        .env_remove("CARGO_MANIFEST_DIR")
        .stdin(Stdio::null())
        .stdout(std::io::stderr())
        .status()
        .with_context(|| format!("starting the base's {program}"))?;
    // 0 and 1 judged the base; 125 and 255 (or a signal) could not.
    if !matches!(status.code(), Some(0 | 1)) {
        bail!(
            "its `{program} {}` exited {status} (its output is above)",
            args.join(" ")
        );
    }
    let text = std::fs::read_to_string(&report)
        .with_context(|| format!("its run wrote no {}", report.display()))?;
    let report: Report = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a report", report.display()))?;
    if let crate::results::report::VmEnding::Failed(why) = &report.vm.ending {
        bail!("its VM did not run the suite to its end: {why}");
    }
    Ok(report)
}

/// This repository's suite at the base: its own `cargo xtask vm-test`, whole or filtered.
pub fn vm_test(
    commit: &str,
    kernel: &KernelChoice,
    label: &str,
    vm: &VmOptions,
    filter: Option<&str>,
    events: &Events,
) -> Result<Report> {
    let mut args: Vec<String> = vec!["xtask".into(), "vm-test".into()];
    args.extend(kernel_args(kernel)?);
    args.extend(vm_args(vm));
    if let Some(f) = filter {
        args.extend(["--filter".into(), f.to_string()]);
    }
    let mut cmd = Command::new("cargo");
    cmd.args(&args);
    let report = Path::new("vm-test").join(label).join("report.json");
    run_in_worktree(
        &workspace_root(),
        commit,
        Path::new(""),
        cmd,
        &report,
        events,
    )
}

/// The VM options a base run is given, the same as head's.
pub fn vm_args(vm: &VmOptions) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--timeout".into(),
        vm.timeout.as_secs().to_string(),
        "--cpus".into(),
        vm.cpus.to_string(),
        "--memory".into(),
        vm.memory.clone(),
    ];
    for a in &vm.append {
        args.extend(["--append".into(), a.clone()]);
    }
    args
}

/// The base's command-line kernel options for `kernel`.
pub fn kernel_args(kernel: &KernelChoice) -> Result<Vec<String>> {
    Ok(match kernel {
        KernelChoice::Pin(p) => {
            let mut a = vec!["--kernel".into(), p.version.clone()];
            if p.arch != crate::domain::arch::Arch::X86_64 {
                a.extend(["--arch".into(), p.arch.name().into()]);
            }
            a
        }
        KernelChoice::Image { path, modules } => {
            let mut a = vec!["--kernel".into(), path.display().to_string()];
            if let Some(m) = modules {
                a.extend(["--modules".into(), m.display().to_string()]);
            }
            a
        }
        KernelChoice::Tree { dir, kconfig } => {
            let mut a = vec!["--kernel-tree".into(), dir.display().to_string()];
            for k in kconfig {
                a.extend(["--kconfig".into(), k.display().to_string()]);
            }
            a
        }
        KernelChoice::TreeRef { .. } => {
            bail!(
                "--against with a kernel tree's ref compares kernels, not this repository's suite"
            )
        }
    })
}

/// The slot's worktree, checked out at `commit` (added on first use; `git worktree prune`
/// first forgets one whose directory was removed with the cache). A worktree its repository
/// no longer knows (the repository was cloned again at the same path) is added again.
fn checkout(root: &Path, slot: &Path, commit: &str, events: &Events) -> Result<PathBuf> {
    let tree = slot.join("worktree");
    git(root, &["worktree", "prune"])?;
    if tree.join(".git").exists() {
        let again = git(
            &tree,
            &["checkout", "--quiet", "--force", "--detach", commit],
        )
        .and_then(|_| git(&tree, &["clean", "-fdq"]));
        match again {
            Ok(_) => return Ok(tree),
            Err(e) => {
                events.note(format!(
                    "the base's worktree is not usable ({e:#}): adding it again"
                ));
                std::fs::remove_dir_all(&tree)
                    .with_context(|| format!("removing {}", tree.display()))?;
            }
        }
    }
    events.step(format!(
        "checking out the base {commit} in {}",
        tree.display()
    ));
    let path = tree.display().to_string();
    git(
        root,
        &["worktree", "add", "--force", "--detach", &path, commit],
    )?;
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::domain::arch::Arch;
    use crate::kernel::pins;

    /// A repository made again at the same path (its slot the same) gets its worktree again:
    /// the old one's `.git` names a repository that is gone.
    #[test]
    fn a_repository_made_again_at_its_path_gets_its_worktree_again() {
        let d = tempfile::tempdir().unwrap();
        let (repo, slot) = (d.path().join("repo"), d.path().join("slot"));
        let commit = |text: &str| {
            std::fs::create_dir_all(&repo).unwrap();
            git(&repo, &["init", "--quiet"]).unwrap();
            std::fs::write(repo.join("f"), text).unwrap();
            git(&repo, &["add", "f"]).unwrap();
            let who = ["-c", "user.name=t", "-c", "user.email=t@t"];
            git(
                &repo,
                &[&who[..], &["commit", "--quiet", "-m", text]].concat(),
            )
            .unwrap();
            git(&repo, &["rev-parse", "HEAD"]).unwrap()
        };
        let first = commit("one");
        let tree = checkout(&repo, &slot, &first, &Events::silent()).unwrap();
        assert_eq!(std::fs::read_to_string(tree.join("f")).unwrap(), "one");
        std::fs::remove_dir_all(&repo).unwrap();
        let second = commit("two");
        let tree = checkout(&repo, &slot, &second, &Events::silent()).unwrap();
        assert_eq!(std::fs::read_to_string(tree.join("f")).unwrap(), "two");
    }

    #[test]
    fn the_base_is_given_the_same_kernel_and_a_kernel_change_is_refused() {
        let all = pins::pins().unwrap();
        let x86 = all.iter().find(|p| p.arch == Arch::X86_64).unwrap();
        let mut arm = x86.clone();
        arm.arch = Arch::Arm64;
        let args = |k: KernelChoice| kernel_args(&k).unwrap();
        assert_eq!(
            args(KernelChoice::Pin(x86.clone())),
            ["--kernel", x86.version.as_str()]
        );
        assert_eq!(
            args(KernelChoice::Pin(arm.clone())),
            ["--kernel", arm.version.as_str(), "--arch", "arm64"]
        );
        let image = KernelChoice::Image {
            path: PathBuf::from("/k/bzImage"),
            modules: Some(PathBuf::from("/k/mods")),
        };
        assert_eq!(
            args(image),
            ["--kernel", "/k/bzImage", "--modules", "/k/mods"]
        );
        let tree = KernelChoice::Tree {
            dir: PathBuf::from("/src/linux"),
            kconfig: vec![PathBuf::from("/f.config")],
        };
        assert_eq!(
            args(tree),
            ["--kernel-tree", "/src/linux", "--kconfig", "/f.config"]
        );
        let tree_ref = KernelChoice::TreeRef {
            dir: PathBuf::from("/src/linux"),
            rev: "v6.12".into(),
            kconfig: vec![],
        };
        assert!(kernel_args(&tree_ref).is_err());
    }

    #[test]
    fn a_base_is_a_commit_of_this_repository_or_an_error_saying_what_to_give() {
        let root = workspace_root();
        let resolve = |rev| resolve(&root, rev, "this repository");
        let head = resolve("HEAD").unwrap();
        assert_eq!(head.len(), 40, "{head}");
        assert_eq!(resolve(&head[..12]).unwrap(), head);
        let e = format!("{:#}", resolve("no-such-ref-of-bpfvm").unwrap_err());
        assert!(
            e.contains("--against no-such-ref-of-bpfvm: not a commit of this repository"),
            "{e}"
        );
        assert!(e.contains("give a branch, tag or commit"), "{e}");
    }
}
