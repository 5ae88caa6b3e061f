//! The kernel cache: verified `.deb`s in `debs/`, extracted trees in `kernels/<version>-<id>/`,
//! and a lock so concurrent runs take turns.
//!
//! Everything lands under a temporary name first and is renamed into place once complete, so
//! a crash never leaves a half file or half tree where a later run would trust it. A tree
//! counts as cached only with its [`COMPLETE`] marker, written last, after a `syncfs` of the
//! tree: it records the sha256 of the vmlinuz and every module file with its size
//! ([`Manifest`]), and every use checks them again (hashing the ~8 MB vmlinuz and listing the
//! modules). A tree without a marker in this form (an older bpfvm's, one put there by hand) is
//! extracted again; one that no longer matches its marker (altered, truncated) is re-extracted
//! from its verified `.deb`s, or, when they are gone (CI restores the trees without them),
//! removed with an error saying to fetch it again.
use super::apt::{says_not_on_mirror, Apt};
use super::pin::{Package, Pin};
use crate::domain::arch::Arch;
use crate::kernel::bootable::{modules_dir, Bootable};
use crate::support::fs::sha256_file;
use crate::support::output::Events;
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file written last into an extracted tree, after it was checked to hold the kernel.
pub(super) const COMPLETE: &str = ".bpfvm-complete";

/// What a tree's [`COMPLETE`] marker records, in text: a header line, then
/// `vmlinuz <sha256> <path>` and `module <size> <path>` lines, paths relative to the tree,
/// modules sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Manifest {
    pub vmlinuz_sha256: String,
    pub vmlinuz: PathBuf,
    pub modules: Vec<(u64, PathBuf)>,
}

/// Version 2: without the depmod indexes (version 1 listed them, and every boot changed them).
const MANIFEST_HEADER: &str = "bpfvm kernel tree 2";

impl Manifest {
    /// The manifest of the tree `tree` is now.
    pub(super) fn of(tree: &Bootable) -> Result<Manifest> {
        let rel = |p: &Path| p.strip_prefix(&tree.root).unwrap_or(p).to_path_buf();
        let mut modules = vec![];
        if let Some(dir) = tree.modules_dir() {
            list_files(&dir, &mut |path, size| {
                if !is_module_index(&dir, path) {
                    modules.push((size, rel(path)))
                }
            })?;
        }
        modules.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(Manifest {
            vmlinuz_sha256: sha256_file(&tree.vmlinuz)?,
            vmlinuz: rel(&tree.vmlinuz),
            modules,
        })
    }

    pub(super) fn to_text(&self) -> String {
        let mut t = format!(
            "{MANIFEST_HEADER}\nvmlinuz {} {}\n",
            self.vmlinuz_sha256,
            self.vmlinuz.display()
        );
        for (size, path) in &self.modules {
            t.push_str(&format!("module {size} {}\n", path.display()));
        }
        t
    }

    /// `None` for text that is not a manifest (an older bpfvm wrote only the release).
    pub(super) fn parse(text: &str) -> Option<Manifest> {
        let mut lines = text.lines();
        if lines.next()? != MANIFEST_HEADER {
            return None;
        }
        let (sha, vmlinuz) = lines.next()?.strip_prefix("vmlinuz ")?.split_once(' ')?;
        let modules = lines
            .map(|l| {
                let (size, path) = l.strip_prefix("module ")?.split_once(' ')?;
                Some((size.parse().ok()?, PathBuf::from(path)))
            })
            .collect::<Option<_>>()?;
        Some(Manifest {
            vmlinuz_sha256: sha.to_string(),
            vmlinuz: PathBuf::from(vmlinuz),
            modules,
        })
    }

    /// How `now` differs from this recorded manifest, if it does.
    fn difference(&self, now: &Manifest) -> Option<String> {
        if self.vmlinuz != now.vmlinuz || self.vmlinuz_sha256 != now.vmlinuz_sha256 {
            return Some(format!(
                "{} has sha256 {}, its marker says {}",
                now.vmlinuz.display(),
                now.vmlinuz_sha256,
                self.vmlinuz_sha256
            ));
        }
        if self.modules != now.modules {
            let first = self
                .modules
                .iter()
                .zip(&now.modules)
                .find(|(a, b)| a != b)
                .map(|(a, b)| {
                    format!(
                        " (first: {} {} bytes, now {} {} bytes)",
                        a.1.display(),
                        a.0,
                        b.1.display(),
                        b.0
                    )
                })
                .unwrap_or_default();
            return Some(format!(
                "its modules differ from its marker: {} files recorded, {} there{first}",
                self.modules.len(),
                now.modules.len()
            ));
        }
        None
    }
}

/// The `modules.*` files at the top of `lib/modules/<release>`: the indexes that virtme-ng
/// regenerates with `depmod -a -b` on every boot of the tree (modules.dep, modules.alias,
/// ...), so they cannot be part of what the marker holds fixed. The modules themselves are.
fn is_module_index(modules_dir: &Path, path: &Path) -> bool {
    path.parent() == Some(modules_dir)
        && path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("modules."))
}

/// Every regular file and symlink under `dir`, with its size (a symlink's own), depth first.
fn list_files(dir: &Path, found: &mut impl FnMut(&Path, u64)) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let e = e?;
        let meta = e.metadata()?;
        if meta.is_dir() {
            list_files(&e.path(), found)?;
        } else {
            found(&e.path(), meta.len());
        }
    }
    Ok(())
}

/// What the cache holds for a pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Cached {
    /// No tree with a marker of this bpfvm's form.
    Absent,
    Valid(Bootable),
    /// A tree that does not match its marker: why.
    Damaged(String),
}

/// Flushes the filesystem holding `dir` to disk.
fn sync_fs(dir: &Path) -> Result<()> {
    let f = File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    // SAFETY: syncfs on a descriptor we own.
    if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("syncing the filesystem of {}", dir.display()));
    }
    Ok(())
}

/// Where the cache lives; `cache_dir()` in normal use, a temp dir in tests.
#[derive(Debug, Clone)]
pub(super) struct Cache {
    pub root: PathBuf,
}

impl Cache {
    pub(super) fn debs(&self) -> PathBuf {
        self.root.join("debs")
    }

    pub(super) fn kernels(&self) -> PathBuf {
        self.root.join("kernels")
    }

    /// Where the verified `.deb` of `pkg` is kept.
    pub(super) fn deb_path(&self, pkg: &Package, arch: Arch) -> PathBuf {
        self.debs().join(pkg.deb_file_name(arch))
    }

    /// The extracted tree of a pin: `kernels/<version>-<short id>`.
    pub(super) fn tree_dir(&self, pin: &Pin) -> PathBuf {
        let arch = match pin.arch {
            Arch::X86_64 => String::new(),
            a => format!("{a}-"),
        };
        // The same test as `extract`'s: a tree that is also a root made here is keyed by it.
        let id = match pin.arch.boots_host_root() {
            true => pin.short_id(),
            false => super::userland::root_id(&pin.short_id()),
        };
        self.kernels().join(format!("{}-{arch}{id}", pin.version))
    }

    /// The complete tree for `pin`, if one is in place and matches its [`COMPLETE`] marker.
    pub(super) fn cached(&self, pin: &Pin) -> Option<Bootable> {
        match self.state(pin) {
            Cached::Valid(tree) => Some(tree),
            Cached::Absent | Cached::Damaged(_) => None,
        }
    }

    /// The tree of `pin`, checked against its marker.
    pub(super) fn state(&self, pin: &Pin) -> Cached {
        let dir = self.tree_dir(pin);
        let Some(recorded) = std::fs::read_to_string(dir.join(COMPLETE))
            .ok()
            .and_then(|t| Manifest::parse(&t))
        else {
            return Cached::Absent;
        };
        let now = find_tree(&dir, &pin.release).and_then(|tree| Ok((Manifest::of(&tree)?, tree)));
        let why = match now {
            Ok((now, tree)) => match recorded.difference(&now) {
                None => return Cached::Valid(tree),
                Some(why) => why,
            },
            Err(e) => format!("{e:#}"),
        };
        Cached::Damaged(format!(
            "the cached kernel {} in {} was altered: {why}",
            pin.version,
            dir.display()
        ))
    }

    /// Takes the cache lock, waiting (and saying so) while another run holds it.
    pub(super) fn lock(&self, events: &Events) -> Result<File> {
        let dir = self.kernels();
        crate::support::fs::writable(&dir, "the kernel cache", "XDG_CACHE_HOME")?;
        crate::support::wait::lock_dir(&dir, || {
            events.note(format!(
                "another bpfvm run is fetching kernels; waiting for its lock ({})",
                dir.join(".lock").display()
            ))
        })
    }

    /// Removes temporary files and trees left by runs that died. Call with the lock held.
    pub(super) fn clean_stale(&self, events: &Events) {
        for dir in [self.debs(), self.kernels()] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(".tmp") {
                    let p = e.path();
                    let r = if p.is_dir() {
                        std::fs::remove_dir_all(&p)
                    } else {
                        std::fs::remove_file(&p)
                    };
                    match r {
                        Ok(()) => events.note(format!("removed leftover {}", p.display())),
                        Err(err) => events.warn(format!("cannot remove {}: {err}", p.display())),
                    }
                }
            }
        }
    }

    /// Verifies every cached `.deb` of `pin` against its sha256. A mismatch (a corrupt or
    /// altered file) is an error naming both hashes; the file is removed, so the next run
    /// downloads it again. Missing `.deb`s are fine: a complete tree does not need them.
    /// Call with the lock held: another run may be verifying or renaming the same file.
    pub(super) fn check_cached_debs(&self, pin: &Pin) -> Result<()> {
        for pkg in &pin.packages {
            let path = self.deb_path(pkg, pin.arch);
            if !path.is_file() {
                continue;
            }
            let actual = sha256_file(&path)?;
            if actual != pkg.sha256 {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
                bail!(
                    "sha256 mismatch for the cached {}:\n  expected {} (pin {})\n  actual   {actual}\n\
                     the bad file was removed; run the command again to download it afresh",
                    path.display(),
                    pkg.sha256,
                    pin.path.display()
                );
            }
        }
        Ok(())
    }

    /// The verified `.deb` of `pkg`, downloading it (after one `apt-get update`, tracked by
    /// `updated`) when it is not in `debs/` yet.
    pub(super) fn deb(
        &self,
        pin: &Pin,
        pkg: &Package,
        apt: &Apt,
        updated: &mut bool,
        events: &Events,
    ) -> Result<PathBuf> {
        let debs = self.debs();
        std::fs::create_dir_all(&debs).with_context(|| format!("creating {}", debs.display()))?;
        let dest = self.deb_path(pkg, pin.arch);
        if dest.is_file() {
            events.note(format!("using cached {}", dest.display()));
            return Ok(dest);
        }
        if !*updated {
            apt.update(events)?;
            *updated = true;
        }
        events.step(format!("downloading {}", pkg.spec()));
        let tmp = tempfile::Builder::new()
            .prefix(".tmp-download-")
            .tempdir_in(&debs)
            .with_context(|| format!("creating a temp dir in {}", debs.display()))?;
        let out = apt.download(pkg, tmp.path(), events)?;
        if !out.ok {
            let stderr = out.stderr.trim();
            if says_not_on_mirror(stderr) {
                bail!(
                    "pin {} ({}) is no longer on the Debian mirror; run `cargo xtask kernels bump {}` \
                     to re-pin to the newest package in its suites ({})\napt-get said:\n{stderr}",
                    pin.version,
                    pkg.spec(),
                    pin.version,
                    suites(pin)
                );
            }
            bail!("apt-get download {} failed:\n{stderr}", pkg.spec());
        }
        let got = single_deb(tmp.path())?;
        let actual = sha256_file(&got)?;
        if actual != pkg.sha256 {
            // The temp dir and the bad file in it go away when `tmp` drops.
            bail!(
                "sha256 mismatch for {} from the mirror:\n  expected {} (pin {})\n  actual   {actual}\n\
                 the bad file was deleted. If the mirror rebuilt the package, re-pin with \
                 `cargo xtask kernels bump {}`",
                pkg.spec(),
                pkg.sha256,
                pin.path.display(),
                pin.version
            );
        }
        std::fs::rename(&got, &dest)
            .with_context(|| format!("moving {} to {}", got.display(), dest.display()))?;
        Ok(dest)
    }

    /// Extracts `debs` into a temp tree, checks it holds the kernel, and renames it to
    /// [`Cache::tree_dir`]. Call with the lock held.
    pub(super) fn extract(&self, pin: &Pin, debs: &[PathBuf], events: &Events) -> Result<Bootable> {
        let kernels = self.kernels();
        std::fs::create_dir_all(&kernels)
            .with_context(|| format!("creating {}", kernels.display()))?;
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".tmp-{}-", pin.version))
            .tempdir_in(&kernels)
            .with_context(|| format!("creating a temp dir in {}", kernels.display()))?;
        for deb in debs {
            events.step(format!(
                "extracting {}",
                deb.file_name().unwrap_or_default().to_string_lossy()
            ));
            let argv = ["dpkg-deb", "-x"];
            events.command(format!(
                "{} {} {}",
                argv.join(" "),
                deb.display(),
                tmp.path().display()
            ));
            let out = crate::support::wait::output(
                Command::new(argv[0])
                    .args(&argv[1..])
                    .arg(deb)
                    .arg(tmp.path())
                    .env("LC_ALL", "C"),
            )
            .map_err(|e| {
                let missing = e
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound);
                if missing {
                    anyhow::anyhow!("`dpkg-deb` not found: install the Debian package `dpkg`")
                } else {
                    e.context("running dpkg-deb")
                }
            })?;
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let full = if stderr.contains("No space left on device") {
                    format!(
                        "\nthe disk holding {} is full: free space there or set XDG_CACHE_HOME \
                         to a disk with room (nothing half-extracted was kept)",
                        kernels.display()
                    )
                } else {
                    String::new()
                };
                bail!(
                    "dpkg-deb -x {} failed:\n{}{full}",
                    deb.display(),
                    stderr.trim()
                );
            }
        }
        if !pin.arch.boots_host_root() {
            super::userland::make_root(tmp.path(), &pin.release, pin.arch, events)?;
        }
        let tree = find_tree(tmp.path(), &pin.release).with_context(|| {
            format!(
                "the packages of pin {} do not hold the kernel it names; check `release` in {}",
                pin.version,
                pin.path.display()
            )
        })?;
        let manifest = Manifest::of(&tree)?;
        // What the marker describes is on disk before the marker is.
        sync_fs(tmp.path())?;
        let marker = tmp.path().join(COMPLETE);
        let mut f =
            File::create(&marker).with_context(|| format!("writing {}", marker.display()))?;
        std::io::Write::write_all(&mut f, manifest.to_text().as_bytes())
            .and_then(|()| f.sync_all())
            .with_context(|| format!("writing {}", marker.display()))?;
        let dest = self.tree_dir(pin);
        if dest.exists() {
            // A tree without a valid marker: an older bpfvm's, one left by hand, or altered.
            events.note(format!(
                "replacing {}: it has no completion marker or does not match it",
                dest.display()
            ));
            std::fs::remove_dir_all(&dest)
                .with_context(|| format!("removing {}", dest.display()))?;
        }
        let tmp_path = tmp.keep();
        std::fs::rename(&tmp_path, &dest)
            .with_context(|| format!("moving {} to {}", tmp_path.display(), dest.display()))?;
        File::open(&kernels)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("syncing {}", kernels.display()))?;
        find_tree(&dest, &pin.release)
    }
}

fn suites(pin: &Pin) -> String {
    pin.sources
        .iter()
        .map(|s| s.suite.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The one `.deb` apt-get download left in `dir`.
fn single_deb(dir: &Path) -> Result<PathBuf> {
    let debs: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    match debs.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!(
            "apt-get download left {} .deb files in {}, expected one",
            debs.len(),
            dir.display()
        ),
    }
}

/// Finds the kernel image and modules of `release` in an extracted tree.
pub(super) fn find_tree(root: &Path, release: &str) -> Result<Bootable> {
    let vmlinuz = [
        root.join("boot").join(format!("vmlinuz-{release}")),
        root.join("usr/lib/modules").join(release).join("vmlinuz"),
    ]
    .into_iter()
    .find(|p| p.is_file());
    let Some(vmlinuz) = vmlinuz else {
        bail!(
            "no kernel image for release {release} in {}: looked for boot/vmlinuz-{release} and \
             usr/lib/modules/{release}/vmlinuz; found {}",
            root.display(),
            describe(root)
        );
    };
    if modules_dir(root, release).is_none() {
        bail!(
            "no modules for release {release} in {}: looked for lib/modules/{release} and \
             usr/lib/modules/{release}; found {}",
            root.display(),
            describe(root)
        );
    }
    Ok(Bootable {
        root: root.to_path_buf(),
        vmlinuz,
        release: release.to_string(),
    })
}

/// What kernels a tree does hold, for error messages.
fn describe(root: &Path) -> String {
    let mut found = vec![];
    for (dir, strip) in [
        ("boot", Some("vmlinuz-")),
        ("lib/modules", None),
        ("usr/lib/modules", None),
    ] {
        if let Ok(rd) = std::fs::read_dir(root.join(dir)) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if strip.is_none_or(|s| n.starts_with(s)) {
                    found.push(format!("{dir}/{n}"));
                }
            }
        }
    }
    found.sort();
    if found.is_empty() {
        "nothing of that kind".to_string()
    } else {
        found.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"x").unwrap();
    }

    #[test]
    fn finds_boot_layout() {
        let t = tempfile::tempdir().unwrap();
        let r = "6.1.0-57-cloud-amd64";
        touch(&t.path().join(format!("boot/vmlinuz-{r}")));
        touch(&t.path().join(format!("lib/modules/{r}/kernel/fs/x.ko")));
        let tree = find_tree(t.path(), r).unwrap();
        assert_eq!(tree.vmlinuz, t.path().join(format!("boot/vmlinuz-{r}")));
        assert_eq!(tree.release, r);
        assert_eq!(
            tree.modules_dir().unwrap(),
            t.path().join(format!("lib/modules/{r}"))
        );
    }

    /// vng runs `depmod -a -b` on the tree at every boot: its indexes are not the kernel, so
    /// the marker ignores them; a changed module is a changed kernel.
    #[test]
    fn the_marker_holds_the_modules_not_the_depmod_indexes() {
        let t = tempfile::tempdir().unwrap();
        let r = "6.1.0-57-cloud-amd64";
        touch(&t.path().join(format!("boot/vmlinuz-{r}")));
        touch(&t.path().join(format!("lib/modules/{r}/kernel/fs/x.ko")));
        let tree = find_tree(t.path(), r).unwrap();
        let marked = Manifest::of(&tree).unwrap();
        let dir = tree.modules_dir().unwrap();
        std::fs::write(dir.join("modules.dep"), b"kernel/fs/x.ko:\n").unwrap();
        std::fs::write(dir.join("modules.alias.bin"), b"\0").unwrap();
        assert_eq!(marked.difference(&Manifest::of(&tree).unwrap()), None);
        std::fs::write(dir.join("kernel/fs/x.ko"), b"changed").unwrap();
        let why = marked.difference(&Manifest::of(&tree).unwrap()).unwrap();
        assert!(why.contains("modules differ"), "{why}");
    }

    #[test]
    fn finds_usr_lib_modules_layout() {
        let t = tempfile::tempdir().unwrap();
        let r = "7.2.13+deb14-cloud-amd64";
        touch(&t.path().join(format!("usr/lib/modules/{r}/vmlinuz")));
        touch(&t.path().join(format!("usr/lib/modules/{r}/kernel/x.ko")));
        let tree = find_tree(t.path(), r).unwrap();
        assert_eq!(
            tree.vmlinuz,
            t.path().join(format!("usr/lib/modules/{r}/vmlinuz"))
        );
    }

    #[test]
    fn missing_kernel_names_what_is_there() {
        let t = tempfile::tempdir().unwrap();
        touch(&t.path().join("boot/vmlinuz-6.1.0-56-cloud-amd64"));
        touch(
            &t.path()
                .join("lib/modules/6.1.0-56-cloud-amd64/kernel/x.ko"),
        );
        let e = find_tree(t.path(), "6.1.0-57-cloud-amd64")
            .unwrap_err()
            .to_string();
        assert!(e.contains("boot/vmlinuz-6.1.0-57-cloud-amd64"), "{e}");
        assert!(e.contains("found boot/vmlinuz-6.1.0-56-cloud-amd64"), "{e}");
        // vmlinuz but no modules
        touch(&t.path().join("boot/vmlinuz-6.1.0-57-cloud-amd64"));
        let e = find_tree(t.path(), "6.1.0-57-cloud-amd64")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no modules"), "{e}");
    }

    #[test]
    fn hashes_files() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_corrupt_cached_deb_fails_once_with_both_hashes_then_is_gone() {
        let t = tempfile::tempdir().unwrap();
        let c = Cache {
            root: t.path().to_path_buf(),
        };
        let pin = Pin::parse(
            &format!(
                "version = \"6.1\"\nrelease = \"6.1.0-57-cloud-amd64\"\ndescription = \"t\"\n\
                 [[source]]\nuri = \"http://deb.debian.org/debian\"\nsuite = \"bookworm\"\n\
                 [[package]]\nname = \"linux-image-x\"\nversion = \"1\"\nsha256 = \"{}\"\n",
                // sha256("abc"): the good content.
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
            ),
            Path::new("kernels/6.1.toml"),
        )
        .unwrap();
        let deb = c.debs().join(pin.packages[0].deb_file_name(pin.arch));
        std::fs::create_dir_all(c.debs()).unwrap();
        std::fs::write(&deb, b"abc").unwrap();
        c.check_cached_debs(&pin).unwrap();
        std::fs::write(&deb, b"abd").unwrap();
        let err = format!("{:#}", c.check_cached_debs(&pin).unwrap_err());
        assert!(err.contains("expected ba7816bf"), "{err}");
        assert!(err.contains("actual   a52d159f"), "{err}");
        assert!(!deb.exists(), "the bad file is removed");
        c.check_cached_debs(&pin).unwrap();
    }

    #[test]
    fn lock_is_exclusive_and_stale_temps_go() {
        let t = tempfile::tempdir().unwrap();
        let c = Cache {
            root: t.path().to_path_buf(),
        };
        let first = c.lock(&Events::silent()).unwrap();
        let other = File::options()
            .write(true)
            .open(c.kernels().join(".lock"))
            .unwrap();
        assert!(matches!(
            other.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        drop(first);
        other.try_lock().unwrap();
        std::fs::create_dir_all(c.kernels().join(".tmp-6.1-abc/boot")).unwrap();
        touch(&c.debs().join(".tmp-download-x/a.deb"));
        touch(&c.debs().join("keep.deb"));
        c.clean_stale(&Events::silent());
        assert!(!c.kernels().join(".tmp-6.1-abc").exists());
        assert!(!c.debs().join(".tmp-download-x").exists());
        assert!(c.debs().join("keep.deb").exists());
        assert!(c.kernels().join(".lock").exists());
    }
}
