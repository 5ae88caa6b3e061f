//! The suite at the base: checked out in its own `git worktree` (never the user's working
//! tree) with its own target directory (the slot), run by the base's own `cargo xtask vm-test`,
//! and its whole report kept by (commit, kernel, arch, filter) so that the next comparison
//! against the same base runs only head and the reruns.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::domain::options::VmOptions;
use crate::kernel::choice::KernelChoice;
use crate::machine::provision::scrub_cargo_env;
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

/// The commit `rev` names in the checkout, or an error saying how to name one.
pub fn resolve(rev: &str) -> Result<String> {
    let spec = format!("{rev}^{{commit}}");
    git(
        &workspace_root(),
        &["rev-parse", "--verify", "--quiet", &spec],
    )
    .map_err(|_| {
        anyhow::anyhow!(
            "--against {rev}: not a commit of this repository ({}); give a branch, tag or \
             commit (`git fetch` it first if it is a remote's)",
            workspace_root().display()
        )
    })
}

/// The base's place in the cache, one per checkout: `change/<hash of the checkout's path>/`,
/// holding `worktree/` and `target/`.
fn slot() -> PathBuf {
    use sha2::{Digest, Sha256};
    let root = workspace_root();
    let hash = hex::encode(Sha256::digest(root.as_os_str().as_encoded_bytes()));
    cache_dir().join("change").join(&hash[..16])
}

/// A base run, whole or of one test.
pub struct BaseRun<'a> {
    pub commit: &'a str,
    pub kernel: &'a KernelChoice,
    /// The kernel's label (`6.1`): the base's report directory.
    pub label: &'a str,
    pub vm: &'a VmOptions,
    pub filter: Option<&'a str>,
}

impl BaseRun<'_> {
    /// The cache entry of this run's whole report.
    fn cached(&self) -> PathBuf {
        use sha2::{Digest, Sha256};
        let filter = match self.filter {
            None => "all".to_string(),
            Some(f) => format!("filter-{}", &hex::encode(Sha256::digest(f))[..16]),
        };
        let kernel = format!("{}-{}", self.label, self.kernel.arch().name());
        cache_dir()
            .join("change")
            .join("reports")
            .join(self.commit)
            .join(kernel)
            .join(filter)
            .join("report.json")
    }

    /// The base's report, from the cache when an earlier comparison kept it (then `true`).
    pub fn whole(&self, events: &Events) -> Result<(Report, bool)> {
        let cached = self.cached();
        if let Ok(text) = std::fs::read_to_string(&cached) {
            if let Ok(report) = serde_json::from_str::<Report>(&text) {
                events.note(format!("the base's report: cached, {}", cached.display()));
                return Ok((report, true));
            }
        }
        let report = self.run(events)?;
        let json = serde_json::to_string_pretty(&report)? + "\n";
        std::fs::create_dir_all(cached.parent().expect("a file in a directory"))?;
        crate::support::fs::write_atomic(&cached, json.as_bytes())?;
        Ok((report, false))
    }

    /// Runs the base's `cargo xtask vm-test` in its worktree, a fresh boot, and reads its
    /// report; a report that judged nothing (the VM did not run the suite) is an error.
    pub fn run(&self, events: &Events) -> Result<Report> {
        let slot = slot();
        std::fs::create_dir_all(&slot)?;
        let _lock = crate::support::wait::lock_dir(&slot, || {
            events.note(format!(
                "waiting for {} (another comparison)",
                slot.display()
            ))
        })?;
        let tree = checkout(&slot, self.commit, events)?;
        let target = slot.join("target");
        let report = target.join("vm-test").join(self.label).join("report.json");
        let _ = std::fs::remove_file(&report);
        let mut args: Vec<String> = vec!["xtask".into(), "vm-test".into()];
        args.extend(kernel_args(self.kernel)?);
        let vm = self.vm;
        args.extend([
            "--timeout".into(),
            vm.timeout.as_secs().to_string(),
            "--cpus".into(),
            vm.cpus.to_string(),
            "--memory".into(),
            vm.memory.clone(),
        ]);
        for a in &vm.append {
            args.extend(["--append".into(), a.clone()]);
        }
        if let Some(f) = self.filter {
            args.extend(["--filter".into(), f.to_string()]);
        }
        events.command(format!(
            "(cd {} && CARGO_TARGET_DIR={} cargo {})",
            tree.display(),
            target.display(),
            args.join(" ")
        ));
        let mut cmd = Command::new("cargo");
        scrub_cargo_env(&mut cmd);
        let status = cmd
            .args(&args)
            .current_dir(&tree)
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("BPFVM_PIECE")
            .env_remove("BPFVM_PLAN")
            .env_remove("CARGO_MANIFEST_DIR")
            .stdin(Stdio::null())
            .stdout(std::io::stderr())
            .status()
            .context("starting the base's cargo xtask vm-test")?;
        // 0 and 1 judged the base; 125 and 255 (or a signal) could not.
        if !matches!(status.code(), Some(0 | 1)) {
            bail!("its `cargo xtask vm-test` exited {status} (its output is above)");
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
}

/// The base's command-line kernel options for `kernel`.
fn kernel_args(kernel: &KernelChoice) -> Result<Vec<String>> {
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
/// first forgets one whose directory was removed with the cache).
fn checkout(slot: &Path, commit: &str, events: &Events) -> Result<PathBuf> {
    let root = workspace_root();
    let tree = slot.join("worktree");
    git(&root, &["worktree", "prune"])?;
    if tree.join(".git").exists() {
        git(
            &tree,
            &["checkout", "--quiet", "--force", "--detach", commit],
        )?;
        git(&tree, &["clean", "-fdq"])?;
    } else {
        events.step(format!(
            "checking out the base {commit} in {}",
            tree.display()
        ));
        let path = tree.display().to_string();
        git(
            &root,
            &["worktree", "add", "--force", "--detach", &path, commit],
        )?;
    }
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::domain::arch::Arch;
    use crate::kernel::pins;

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
        let head = resolve("HEAD").unwrap();
        assert_eq!(head.len(), 40, "{head}");
        assert_eq!(resolve(&head[..12]).unwrap(), head);
        let e = format!("{:#}", resolve("no-such-ref-of-bpfvm").unwrap_err());
        assert!(
            e.contains("--against no-such-ref-of-bpfvm: not a commit"),
            "{e}"
        );
        assert!(e.contains("give a branch, tag or commit"), "{e}");
    }
}
