//! Where tree builds live: `cache_dir()/tree-builds/<slot>/`, one slot per source tree and
//! toolchain, so that a changed tree rebuilds incrementally in the same `build/` (make's own
//! dependency tracking) and an unchanged one is not built at all (its stamp matches).
//!
//! A slot holds `build/` (make's `O=`), `config/` (where the config is derived), `config.log`,
//! `merge.log`, `build.log`, and `stamp.json`, written
//! last and only after a build that succeeded: a build that died leaves no stamp, so the next
//! run builds again. `.lock` is held while a run configures or builds, and for the rest of the
//! run that uses the build (`SlotLock`: its bzImage staged, the selftests built against its
//! vmlinux, its `.config` read; eviction never removes a kernel in use).
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::support::paths::cache_dir;

/// What a successful build was built from and what it made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub tree: String,
    pub commit: Option<String>,
    pub dirty: bool,
    pub kernelversion: String,
    /// `make kernelrelease`: what `uname -r` says in the guest.
    pub release: String,
    /// sha256 of the `.config` the kernel was built with.
    pub config_hash: String,
    /// sha256 of the sources (see `source::content_key`), the fragments, the toolchain and
    /// bpfvm's build recipe: what the kernel is a function of.
    pub key: String,
    pub toolchain: String,
    pub built_unix: u64,
    pub build_seconds: u64,
}

pub fn root() -> PathBuf {
    cache_dir().join("tree-builds")
}

/// A slot's lock: while a run holds it (its `Ready` does, for the whole run), no other run
/// configures, builds or evicts the slot whose bzImage, vmlinux and `.config` it uses.
#[derive(Debug, Clone)]
pub struct SlotLock {
    /// Held, never read: the lock goes with the last clone.
    _file: Arc<File>,
}

/// One tree's build directory.
#[derive(Debug, Clone)]
pub struct Slot {
    pub dir: PathBuf,
}

impl Slot {
    /// The slot of `tree` built with `toolchain`.
    pub(crate) fn of(root: &Path, tree: &Path, toolchain: &str) -> Slot {
        let mut h = Sha256::new();
        h.update(tree.as_os_str().as_encoded_bytes());
        h.update(b"\0");
        h.update(toolchain.as_bytes());
        let name = tree
            .file_name()
            .map(|n| {
                n.to_string_lossy().replace(
                    |c: char| !c.is_ascii_alphanumeric() && c != '.' && c != '-',
                    "_",
                )
            })
            .unwrap_or_default();
        Slot {
            dir: root.join(format!("{name}-{}", &hex::encode(h.finalize())[..12])),
        }
    }

    pub(crate) fn out(&self) -> PathBuf {
        self.dir.join("build")
    }
    pub(crate) fn image(&self) -> PathBuf {
        self.out().join("arch/x86/boot/bzImage")
    }
    pub(crate) fn build_log(&self) -> PathBuf {
        self.dir.join("build.log")
    }
    /// Where the config is derived afresh for each build (see `configure`).
    pub(crate) fn config_dir(&self) -> PathBuf {
        self.dir.join("config")
    }
    pub(crate) fn config_log(&self) -> PathBuf {
        self.dir.join("config.log")
    }
    fn stamp_path(&self) -> PathBuf {
        self.dir.join("stamp.json")
    }

    /// Takes the slot's lock (waiting, Ctrl-C ends the wait), held until its last clone is
    /// dropped. A slot this process holds already is shared, not waited for: a run that
    /// prepares one tree twice (an A/B of a tree against itself) would wait for itself.
    pub(crate) fn lock(&self, on_wait: impl FnOnce()) -> Result<SlotLock> {
        static HELD: Mutex<BTreeMap<PathBuf, Weak<File>>> = Mutex::new(BTreeMap::new());
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("create {}", self.dir.display()))?;
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(file) = held.get(&self.dir).and_then(Weak::upgrade) {
            return Ok(SlotLock { _file: file });
        }
        let file = Arc::new(crate::support::wait::lock_dir(&self.dir, on_wait)?);
        held.insert(self.dir.clone(), Arc::downgrade(&file));
        Ok(SlotLock { _file: file })
    }

    pub(crate) fn stamp(&self) -> Option<Stamp> {
        let text = std::fs::read_to_string(self.stamp_path()).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Forgets the last build: what follows may leave `build/` half-made.
    pub(crate) fn unstamp(&self) -> Result<()> {
        match std::fs::remove_file(self.stamp_path()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    pub(crate) fn write_stamp(&self, stamp: &Stamp) -> Result<()> {
        crate::support::fs::write_atomic(&self.stamp_path(), &serde_json::to_vec_pretty(stamp)?)
    }

    /// Marks the slot used now (eviction removes the least recently used first).
    pub(crate) fn touch(&self) {
        let _ = std::fs::write(self.dir.join(".used"), now().to_string());
    }

    fn last_used(&self) -> u64 {
        std::fs::read_to_string(self.dir.join(".used"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A slot as `kernels list` shows it.
#[derive(Debug)]
pub struct Listed {
    pub slot: Slot,
    pub stamp: Option<Stamp>,
    pub bytes: u64,
    pub last_used: u64,
}

/// Every slot under `root`, most recently used first.
pub fn list(root: &Path) -> Vec<Listed> {
    let mut all: Vec<Listed> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let slot = Slot { dir: e.path() };
            Listed {
                stamp: slot.stamp(),
                bytes: disk_usage(&slot.dir),
                last_used: slot.last_used(),
                slot,
            }
        })
        .collect();
    all.sort_by_key(|l| std::cmp::Reverse(l.last_used));
    all
}

/// Bytes of the files under `dir` (allocated blocks, as `du` counts them).
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                total += meta.blocks() * 512;
            }
        }
    }
    total
}

/// The most the tree builds may take together before the least recently used are removed.
/// One build of the suite's config of 6.12 takes about 3 GB; `BPFVM_TREE_CACHE_GB` sets it.
pub(crate) fn limit() -> u64 {
    let gb = std::env::var("BPFVM_TREE_CACHE_GB")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(20);
    gb << 30
}

/// Removes least recently used slots, never `keep` nor one whose lock another run holds,
/// until the rest fit in `limit` bytes. Returns what was removed.
pub(crate) fn evict(root: &Path, limit: u64, keep: &Path) -> Vec<PathBuf> {
    let all = list(root);
    let mut total: u64 = all.iter().map(|l| l.bytes).sum();
    let mut removed = Vec::new();
    for l in all.iter().rev() {
        if total <= limit {
            break;
        }
        if l.slot.dir == keep {
            continue;
        }
        // A slot another run holds is in use: leave it.
        let Ok(lock) = File::create(l.slot.dir.join(".lock")) else {
            continue;
        };
        if lock.try_lock().is_err() {
            continue;
        }
        if std::fs::remove_dir_all(&l.slot.dir).is_ok() {
            total -= l.bytes;
            removed.push(l.slot.dir.clone());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_with(root: &Path, name: &str, bytes: usize, used: u64) -> Slot {
        let slot = Slot {
            dir: root.join(name),
        };
        std::fs::create_dir_all(slot.out()).unwrap();
        std::fs::write(slot.out().join("vmlinux"), vec![1u8; bytes]).unwrap();
        std::fs::write(slot.dir.join(".used"), used.to_string()).unwrap();
        slot
    }

    #[test]
    fn slots_differ_by_tree_and_toolchain() {
        let r = Path::new("/c");
        let a = Slot::of(r, Path::new("/src/linux"), "gcc 12");
        assert_eq!(a.dir, Slot::of(r, Path::new("/src/linux"), "gcc 12").dir);
        assert_ne!(a.dir, Slot::of(r, Path::new("/src/linux"), "gcc 14").dir);
        assert_ne!(a.dir, Slot::of(r, Path::new("/src/linux-b"), "gcc 12").dir);
        assert!(a
            .dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("linux-"));
    }

    #[test]
    fn a_stamp_round_trips_and_unstamping_forgets_it() {
        let d = tempfile::tempdir().unwrap();
        let slot = Slot {
            dir: d.path().join("s"),
        };
        std::fs::create_dir_all(&slot.dir).unwrap();
        assert!(slot.stamp().is_none());
        let stamp = Stamp {
            tree: "/src/linux".into(),
            commit: Some("abc".into()),
            dirty: true,
            kernelversion: "6.12.118".into(),
            release: "6.12.118".into(),
            config_hash: "c".into(),
            key: "k".into(),
            toolchain: "gcc".into(),
            built_unix: 1,
            build_seconds: 2,
        };
        slot.write_stamp(&stamp).unwrap();
        assert_eq!(slot.stamp().unwrap(), stamp);
        slot.unstamp().unwrap();
        slot.unstamp().unwrap();
        assert!(slot.stamp().is_none());
        std::fs::write(slot.dir.join("stamp.json"), b"{not json").unwrap();
        assert!(slot.stamp().is_none(), "a torn stamp is no stamp");
    }

    #[test]
    fn eviction_removes_the_least_recently_used_until_the_rest_fit() {
        let d = tempfile::tempdir().unwrap();
        let old = slot_with(d.path(), "old", 40_000, 1);
        let mid = slot_with(d.path(), "mid", 40_000, 2);
        let new = slot_with(d.path(), "new", 40_000, 3);
        let total: u64 = list(d.path()).iter().map(|l| l.bytes).sum();
        // Room for two: the oldest goes.
        let removed = evict(d.path(), total - 1, &new.dir);
        assert_eq!(removed, std::slice::from_ref(&old.dir));
        assert!(mid.dir.exists() && new.dir.exists());
        // The one being built is kept even when it alone is over the limit; a locked one too.
        let held = mid.lock(|| {}).unwrap();
        assert!(evict(d.path(), 0, &new.dir).is_empty());
        drop(held);
        assert_eq!(evict(d.path(), 0, &new.dir), std::slice::from_ref(&mid.dir));
        assert!(new.dir.exists());
    }
}
