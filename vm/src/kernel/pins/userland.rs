//! The guest's root for a kernel of another architecture than the host's: the host's `/`
//! cannot run there, so the pin lists the packages of a minimal root (busybox, bash, libc, the
//! libraries the guest binaries link, and perl for a kept guest's state record) beside its
//! kernel, and its extracted tree becomes that root. The packages are extracted, never installed (no maintainer scripts, no binfmt);
//! this module adds what their maintainer scripts or an installer would.
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::domain::arch::Arch;
use crate::support::output::Events;

/// Directories the guest's init mounts over or writes into (virtme-ng's `virtme-init` mounts
/// tmpfs and overlays on them and fails on a missing one).
const DIRS: &[&str] = &[
    "proc",
    "sys",
    "dev",
    "tmp",
    "run",
    "root",
    "home",
    "opt",
    "srv",
    "mnt",
    "var/tmp",
    "var/log",
    "var/cache",
    "var/lib",
    "var/spool",
    "etc/lvm",
];

/// The links Debian's base-files makes into the tmpfs `virtme-init` mounts on `/run`: `ip netns
/// add` keeps its namespaces in `/var/run/netns`, and the root itself is shared read-only.
const LINKS: &[(&str, &str)] = &[("var/run", "/run"), ("var/lock", "/run/lock")];

/// The files `virtme-init` expects in `/etc` (it bind-mounts over `fstab` and `shadow`, and
/// reads `passwd` for the user the script runs as), and the few the guest's tools read.
const ETC: &[(&str, &str)] = &[
    ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"),
    ("etc/group", "root:x:0:\n"),
    ("etc/shadow", "root:*:0:::::\n"),
    ("etc/fstab", ""),
    // The selftests ping `localhost` (cgroup_storage): Debian's installer writes these two.
    (
        "etc/hosts",
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    ),
    ("etc/nsswitch.conf", "hosts: files dns\n"),
    // virtme-ng 1.42 ships its Rust init for x86-64 only, so an arm64 guest runs its shell
    // init (`virtme/guest/virtme-init`), which runs the script over the virtio ports that
    // udev names (`/dev/virtio-ports/<name>`, udev's rule `KERNEL=="vport*",
    // SYMLINK+="virtio-ports/$attr{name}"`) and starts `udevd` to get them. busybox's mdev
    // makes the same links from this rule; `udevd` below runs it.
    (
        "etc/mdev.conf",
        "vport[0-9]+p[0-9]+ 0:0 600 @mkdir -p /dev/virtio-ports && \
         ln -sf /dev/$MDEV /dev/virtio-ports/$(cat /sys/class/virtio-ports/$MDEV/name)\n",
    ),
    (
        "usr/sbin/udevd",
        "#!/bin/sh\n# udev's work in this root is mdev's: see /etc/mdev.conf.\nexec mdev -s\n",
    ),
    // `virtme-init` waits for udev after `udevd`; `mdev -s` finished before it returned.
    ("usr/sbin/udevadm", "#!/bin/sh\nexit 0\n"),
];

/// How this code makes a root, bumped when `make_root` makes a different one from the same
/// packages (the lists above are hashed already).
const MAKER: u32 = 1;

/// The id of the root made from the packages of id `packages`: a root cached by an older
/// `make_root` (another [`DIRS`], [`LINKS`], [`ETC`] or [`MAKER`]) is made again, not booted.
pub(super) fn root_id(packages: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(format!(
        "{packages}\n{MAKER}\n{DIRS:?}\n{LINKS:?}\n{ETC:?}\n"
    ));
    hex::encode(h.finalize())[..12].to_string()
}

/// Makes the extracted packages in `root` a root the guest boots into: the merged-`/usr`
/// links, the module indexes of kernel `release`, busybox's applets, the directories and
/// `/etc` files the init needs.
pub(super) fn make_root(root: &Path, release: &str, arch: Arch, events: &Events) -> Result<()> {
    events.step(format!("making the {arch} guest's root"));
    merge_usr(root)?;
    module_indexes(root, release)?;
    for d in DIRS {
        std::fs::create_dir_all(root.join(d))?;
    }
    link_into_run(root)?;
    for (path, text) in ETC {
        let path = root.join(path);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        if text.starts_with("#!") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    for applet in applets(root, arch)? {
        let at = root.join(&applet);
        if std::fs::symlink_metadata(&at).is_err() {
            std::os::unix::fs::symlink("/usr/bin/busybox", &at)
                .with_context(|| format!("linking {}", at.display()))?;
        }
    }
    Ok(())
}

/// [`LINKS`], where the packages left nothing at their paths.
fn link_into_run(root: &Path) -> Result<()> {
    for (path, to) in LINKS {
        let at = root.join(path);
        if std::fs::symlink_metadata(&at).is_err() {
            std::os::unix::fs::symlink(to, &at)
                .with_context(|| format!("linking {}", at.display()))?;
        }
    }
    Ok(())
}

/// Moves `/bin`, `/sbin` and `/lib` into `/usr` and links them there, as Debian's `usrmerge`
/// does: packages before Debian 13 ship files in both (bookworm's busybox-static is
/// `/bin/busybox`, its libc6 `/lib/aarch64-linux-gnu`).
fn merge_usr(root: &Path) -> Result<()> {
    for dir in ["bin", "sbin", "lib"] {
        let top = root.join(dir);
        let usr = root.join("usr").join(dir);
        std::fs::create_dir_all(&usr)?;
        let meta = std::fs::symlink_metadata(&top);
        if meta.as_ref().is_ok_and(|m| m.is_dir()) {
            move_into(&top, &usr)?;
            std::fs::remove_dir(&top).with_context(|| format!("removing {}", top.display()))?;
        }
        if std::fs::symlink_metadata(&top).is_err() {
            std::os::unix::fs::symlink(format!("usr/{dir}"), &top)
                .with_context(|| format!("linking {}", top.display()))?;
        }
    }
    Ok(())
}

/// `depmod -a -b root release`: the kernel package ships no `modules.dep`. virtme-ng makes it
/// only when it is missing, in this cached root, after the boot's copy of the root was made
/// (`machine::own_root`), so without it here the first boot's guest had none and its
/// `modprobe` failed ("can't open 'modules.dep'"). depmod reads modules of any architecture.
/// By its path: a user's PATH may lack the sbin directories (kmod's `/sbin/depmod`, `/usr/sbin`
/// on a merged `/usr`).
fn module_indexes(root: &Path, release: &str) -> Result<()> {
    let out = Command::new("/sbin/depmod")
        .args(["-a", "-b"])
        .arg(root)
        .arg(release)
        .output()
        .context("running depmod (Debian package kmod)")?;
    if !out.status.success() {
        bail!(
            "depmod -a -b {} {release} failed: {}",
            root.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Moves every entry of `from` into `to`, merging directories both have.
fn move_into(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        let is_dir = entry.file_type()?.is_dir();
        if is_dir && dest.is_dir() {
            move_into(&entry.path(), &dest)?;
            std::fs::remove_dir(entry.path())?;
        } else {
            std::fs::rename(entry.path(), &dest).with_context(|| {
                format!("moving {} to {}", entry.path().display(), dest.display())
            })?;
        }
    }
    Ok(())
}

/// Where busybox installs each of its applets (`busybox --list-full`), asked of the root's
/// own busybox under qemu's user-mode emulator: the applets differ between versions.
fn applets(root: &Path, arch: Arch) -> Result<Vec<String>> {
    let busybox = root.join("usr/bin/busybox");
    if !busybox.is_file() {
        bail!(
            "the pin's packages hold no usr/bin/busybox: an {arch} pin lists busybox-static \
             among its [[package]]s for the guest's root"
        );
    }
    let qemu = arch.qemu_user();
    let out = Command::new(qemu)
        .arg("-L")
        .arg(root)
        .arg(&busybox)
        .arg("--list-full")
        .output()
        .with_context(|| {
            format!("running {qemu} (from the Debian package qemu-user, which bpfvm installs for --arch {arch})")
        })?;
    if !out.status.success() {
        bail!(
            "{qemu} {} --list-full failed ({}): {}",
            busybox.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_applets(&String::from_utf8_lossy(&out.stdout))
}

/// `busybox --list-full`'s lines (`usr/bin/[`, `sbin/acpid`), each checked to stay inside the
/// root.
fn parse_applets(text: &str) -> Result<Vec<String>> {
    let list: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    if let Some(bad) = list
        .iter()
        .find(|l| l.starts_with('/') || l.split('/').any(|p| p == ".." || p.is_empty()))
    {
        bail!("busybox --list-full gave {bad:?}, not a path inside the root");
    }
    if !list.iter().any(|l| l.ends_with("/mount")) {
        bail!("busybox --list-full lists no `mount`: the guest's init could not start");
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_level_directories_move_into_usr() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("bin")).unwrap();
        std::fs::write(r.join("bin/busybox"), "bb").unwrap();
        std::fs::create_dir_all(r.join("lib/aarch64-linux-gnu")).unwrap();
        std::fs::write(r.join("lib/aarch64-linux-gnu/libc.so.6"), "c").unwrap();
        std::fs::create_dir_all(r.join("usr/lib/aarch64-linux-gnu")).unwrap();
        std::fs::write(r.join("usr/lib/aarch64-linux-gnu/libgcc_s.so.1"), "g").unwrap();
        merge_usr(r).unwrap();
        assert_eq!(
            std::fs::read_link(r.join("bin")).unwrap(),
            Path::new("usr/bin")
        );
        assert_eq!(
            std::fs::read_to_string(r.join("usr/bin/busybox")).unwrap(),
            "bb"
        );
        assert!(r.join("lib/aarch64-linux-gnu/libc.so.6").is_file());
        assert!(r.join("lib/aarch64-linux-gnu/libgcc_s.so.1").is_file());
        assert!(r.join("sbin").is_dir());
        // A root merged already is left as it is.
        merge_usr(r).unwrap();
        assert!(r.join("usr/bin/busybox").is_file());
    }

    /// The root's modules are indexed when the root is made, before any boot copies it.
    #[test]
    fn a_roots_modules_are_indexed_when_it_is_made() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("usr/lib/modules/6.12.0-arm64/kernel")).unwrap();
        merge_usr(r).unwrap();
        module_indexes(r, "6.12.0-arm64").unwrap();
        assert!(r.join("lib/modules/6.12.0-arm64/modules.dep").is_file());
        let e = module_indexes(r, "7.0.0-none").unwrap_err().to_string();
        assert!(e.contains("depmod -a -b"), "{e}");
    }

    /// A root is keyed by its packages and by how it is made: the same packages, another id.
    #[test]
    fn a_roots_id_is_its_packages_and_its_making() {
        let id = root_id("0123456789ab");
        assert_eq!(id.len(), 12);
        assert_ne!(id, "0123456789ab");
        assert_ne!(id, root_id("0123456789ac"));
        assert_eq!(id, root_id("0123456789ab"));
    }

    #[test]
    fn var_run_is_the_inits_run_as_base_files_makes_it() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("var")).unwrap();
        link_into_run(r).unwrap();
        link_into_run(r).unwrap();
        assert_eq!(
            std::fs::read_link(r.join("var/run")).unwrap(),
            Path::new("/run")
        );
        assert_eq!(
            std::fs::read_link(r.join("var/lock")).unwrap(),
            Path::new("/run/lock")
        );
    }

    #[test]
    fn applets_are_paths_inside_the_root() {
        let list = parse_applets("usr/bin/[\nbin/mount\nsbin/mdev\n\n").unwrap();
        assert_eq!(list, ["usr/bin/[", "bin/mount", "sbin/mdev"]);
        assert!(parse_applets("bin/mount\n/etc/passwd\n").is_err());
        assert!(parse_applets("bin/mount\nbin/../../x\n").is_err());
        let e = parse_applets("bin/ls\n").unwrap_err().to_string();
        assert!(e.contains("no `mount`"), "{e}");
    }
}
