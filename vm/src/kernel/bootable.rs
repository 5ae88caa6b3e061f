//! A bootable kernel: the `vmlinuz` vng boots, its release and the directory around it (an
//! extracted pin, a staged image or a tree build's staging). What `ready` hands the flows.
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bootable {
    /// The directory holding `boot/` and, where there are modules, `lib/modules/`.
    pub root: PathBuf,
    /// `boot/vmlinuz-<release>` or `usr/lib/modules/<release>/vmlinuz` inside `root`.
    pub vmlinuz: PathBuf,
    /// `uname -r` of this kernel.
    pub release: String,
}

impl Bootable {
    /// `lib/modules/<release>` or `usr/lib/modules/<release>` inside `root`.
    pub fn modules_dir(&self) -> Option<PathBuf> {
        modules_dir(&self.root, &self.release)
    }
}

/// `lib/modules/<release>` or `usr/lib/modules/<release>` (the one holding `kernel/`).
pub(crate) fn modules_dir(root: &Path, release: &str) -> Option<PathBuf> {
    let cands = [
        root.join("lib/modules").join(release),
        root.join("usr/lib/modules").join(release),
    ];
    cands
        .iter()
        .find(|p| p.join("kernel").is_dir())
        .or_else(|| cands.iter().find(|p| p.is_dir()))
        .cloned()
}
