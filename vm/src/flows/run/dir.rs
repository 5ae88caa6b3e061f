//! A run's files: the guest script and the directory the guest shares with the host.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::support::output::Events;

use super::prepare::Prepared;

/// One run's files: a fresh directory under `parent` (two runs never share one) holding the
/// guest script and the `shared` directory the guest writes into.
pub(crate) struct RunDir {
    dir: tempfile::TempDir,
    pub shared: PathBuf,
    pub script: PathBuf,
}

impl RunDir {
    /// virtme-run 1.42 starts virtiofsd with `os.system(f"... --shared-dir {path} ...")`
    /// (`virtme/commands/run.py`, `VirtioFS.start`), unquoted: a shared directory whose path
    /// holds a space (a checkout in `my proj/`) splits there and the boot fails, and a symlink
    /// of a plain path to it mounts in the guest but fails every write (EIO, tried here). So
    /// when `parent` is not a plain path the run's files live under /tmp until
    /// [`RunDir::keep`] moves them.
    pub(crate) fn new(parent: &Path) -> Result<Self> {
        let base = if plain_path(parent) {
            parent
        } else {
            Path::new("/tmp")
        };
        std::fs::create_dir_all(base).with_context(|| format!("create {}", base.display()))?;
        let dir = tempfile::Builder::new()
            .prefix("bpfvm-run-")
            .tempdir_in(base)
            .with_context(|| format!("create a run directory in {}", base.display()))?;
        let shared = dir.path().join("shared");
        std::fs::create_dir_all(&shared)?;
        let script = dir.path().join("guest.sh");
        Ok(Self {
            dir,
            shared,
            script,
        })
    }

    /// Keeps the run's raw guest files (JSON events, stderr) at `dest`. When another run
    /// moved its files there at the same moment, this run's stay in their own directory.
    pub(crate) fn keep(self, dest: &Path, events: &Events) {
        let _ = std::fs::remove_dir_all(dest);
        if let Some(parent) = dest.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let kept = self.dir.keep();
        if let Err(e) = std::fs::rename(&kept, dest) {
            events.warn(format!(
                "guest files stay in {} (could not move them to {}: {e})",
                kept.display(),
                dest.display()
            ));
        }
    }
}

/// The run directory of a boot whose guest reads `reads` if it has a root of its own
/// (`vm-run` and `bpfvm exec` the current directory, `bpfvm test` the crate): under `parent`,
/// unless one of `reads` holds it. virtme-run mounts the writable directory before the
/// read-only ones, so a read directory holding `parent` (a checkout's `target/`) would hide
/// the run's shared directory: its files then live in the cache's `runs/`.
pub(crate) fn run_dir_reading(
    p: &mut Prepared,
    reads: Vec<PathBuf>,
    parent: &Path,
) -> Result<RunDir> {
    if p.kernel.guest_root.is_none() {
        return RunDir::new(parent);
    }
    let hidden = reads.iter().any(|r| parent.starts_with(r));
    p.guest_reads = reads;
    if hidden {
        RunDir::new(&crate::support::paths::cache_dir().join("runs"))
    } else {
        RunDir::new(parent)
    }
}

/// A path every layer under vng passes on as it is: letters, digits and `_ + / . -`.
fn plain_path(p: &Path) -> bool {
    p.to_str().is_some_and(|s| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_+/.-".contains(c))
    })
}
