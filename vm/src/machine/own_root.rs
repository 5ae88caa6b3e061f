//! A guest that boots into a root of its own (another architecture's kernel: the host's `/`
//! cannot run there). virtme-ng shares that root read-only, and mounts each host directory at
//! a mount point that must already be in it, so every boot gets its own copy of the cached
//! root, made of hard links (tens of milliseconds), with the mount points and the guest script
//! added: the cached root never changes and two runs never share one.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The root a guest boots into and the host directories it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnRoot {
    /// The cached root (a pin's extracted tree, `kernel::pins::userland`).
    pub root: PathBuf,
    /// Host directories the guest reads (its binaries, the BPF objects), mounted read-only at
    /// their own paths ([`outermost`]). None may hold another or the run's shared directory.
    pub reads: Vec<PathBuf>,
}

/// `dirs` without those another of them holds, each once: what to mount for all of them.
pub fn outermost(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for d in dirs {
        if out.iter().any(|o| d.starts_with(o)) {
            continue;
        }
        out.retain(|o| !o.starts_with(d));
        out.push(d.clone());
    }
    out
}

/// Where the boot whose guest script is `script` gets its root: beside the script.
pub fn staged_path(script: &Path) -> PathBuf {
    script.parent().unwrap_or(Path::new("/")).join("root")
}

/// Makes this boot's root at [`staged_path`]: the cached root linked, the mount points of
/// `rwdir` and the reads, and `script` at its own path.
pub fn stage(own: &OwnRoot, rwdir: &Path, script: &Path) -> Result<PathBuf> {
    check_disjoint(&own.reads, rwdir)?;
    let dest = staged_path(script);
    // `cp -al` links the whole tree at once; across filesystems it cannot, so it is copied.
    let mut made = false;
    for how in ["-al", "-a"] {
        let _ = std::fs::remove_dir_all(&dest);
        let status = Command::new("cp")
            .arg(how)
            .arg(&own.root)
            .arg(&dest)
            .status();
        if status.context("running cp")?.success() {
            made = true;
            break;
        }
    }
    if !made {
        bail!(
            "could not copy the guest's root {} to {}",
            own.root.display(),
            dest.display()
        );
    }
    for dir in own.reads.iter().map(PathBuf::as_path).chain([rwdir]) {
        let at = inside(&dest, dir);
        std::fs::create_dir_all(&at).with_context(|| format!("creating {}", at.display()))?;
    }
    let at = inside(&dest, script);
    if let Some(parent) = at.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(script, &at)
        .with_context(|| format!("copying the guest script to {}", at.display()))?;
    Ok(dest)
}

/// `path` (absolute) under `root`.
fn inside(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// virtme-run mounts the writable directories before the read-only ones
/// (`virtme/commands/run.py`): a read-only directory holding the writable one would hide it.
fn check_disjoint(reads: &[PathBuf], rwdir: &Path) -> Result<()> {
    for r in reads {
        if !r.is_absolute() {
            bail!(
                "{}: the guest reads host directories by absolute path",
                r.display()
            );
        }
        let others = reads.iter().filter(|o| *o != r).map(PathBuf::as_path);
        if let Some(o) = others.chain([rwdir]).find(|o| o.starts_with(r)) {
            bail!(
                "{} holds {}: the guest's mounts would hide one another",
                r.display(),
                o.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boot_gets_a_linked_root_with_its_mount_points_and_script() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("cache/root");
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        std::fs::write(root.join("usr/bin/busybox"), "bb").unwrap();
        let run = t.path().join("run");
        std::fs::create_dir_all(run.join("shared")).unwrap();
        std::fs::write(run.join("guest.sh"), "echo hi").unwrap();
        let own = OwnRoot {
            root: root.clone(),
            reads: vec![t.path().join("target/cross")],
        };
        let dest = stage(&own, &run.join("shared"), &run.join("guest.sh")).unwrap();
        assert_eq!(dest, run.join("root"));
        assert_eq!(
            std::fs::read_to_string(dest.join("usr/bin/busybox")).unwrap(),
            "bb"
        );
        assert!(inside(&dest, &t.path().join("target/cross")).is_dir());
        assert!(inside(&dest, &run.join("shared")).is_dir());
        let script = inside(&dest, &run.join("guest.sh"));
        assert_eq!(std::fs::read_to_string(script).unwrap(), "echo hi");
        // The cached root is untouched.
        assert!(!inside(&root, &run.join("shared")).exists());
    }

    #[test]
    fn a_directory_another_holds_is_mounted_with_it() {
        let dirs = [
            "/w/crate/target/debug/deps",
            "/w/crate",
            "/w/crate",
            "/w/target/cross",
            "/w/crate/target/x",
        ]
        .map(PathBuf::from);
        assert_eq!(
            outermost(&dirs),
            [PathBuf::from("/w/crate"), "/w/target/cross".into()]
        );
    }

    #[test]
    fn nested_mounts_are_refused() {
        let reads = [PathBuf::from("/w/target")];
        let e = check_disjoint(&reads, Path::new("/w/target/vm-test/x/shared")).unwrap_err();
        assert!(e.to_string().contains("would hide"), "{e}");
        let reads = [
            PathBuf::from("/w/target/cross"),
            PathBuf::from("/w/target/ebpf"),
        ];
        check_disjoint(&reads, Path::new("/w/target/vm-test/x/shared")).unwrap();
        assert!(check_disjoint(&[PathBuf::from("rel")], Path::new("/s")).is_err());
    }
}
