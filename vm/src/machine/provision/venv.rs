//! virtme-ng's Python venv, made so that pip dying half-way never leaves one that counts as
//! present.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::run_logged;
use crate::support::output::Events;
use crate::support::shell;

/// Marker written into a venv after pip succeeded.
const VENV_MARKER: &str = ".bpfvm-complete";

/// A venv under the cache holding pinned PyPI packages. It counts as present only when its
/// marker (written last, after pip succeeded) lists exactly `specs`; one without it is made again.
#[derive(Debug, Clone)]
pub struct PipVenv {
    pub dir: PathBuf,
    /// `name==version`, one per package; with ` --hash=sha256:...` on every one, pip installs
    /// them in hash-checking mode.
    pub specs: Vec<String>,
    /// An executable pip must have put into `bin/`.
    pub bin: &'static str,
    /// Wheels only (`--only-binary :all:`): no sdist, whose build would run code and fetch its
    /// build dependencies unpinned.
    pub wheels_only: bool,
}

/// The requirements in a requirements file's text: its lines without comments and blanks.
pub fn parse_requirements(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

impl PipVenv {
    fn hashed(&self) -> bool {
        self.specs.iter().all(|s| s.contains(" --hash="))
    }

    /// pip's arguments; `reqs` is where [`PipVenv::install`] writes the hashed specs.
    pub fn pip_args(&self, reqs: &Path) -> Vec<String> {
        let mut args = vec!["install".to_string(), "--disable-pip-version-check".into()];
        if self.wheels_only {
            args.extend(["--only-binary".into(), ":all:".into()]);
        }
        if self.hashed() {
            args.extend(["--require-hashes".into(), "-r".into()]);
            args.push(reqs.display().to_string());
        } else {
            args.extend(self.specs.iter().cloned());
        }
        args
    }

    pub fn bin_path(&self) -> PathBuf {
        self.dir.join("bin").join(self.bin)
    }

    fn marker(&self) -> PathBuf {
        self.dir.join(VENV_MARKER)
    }

    pub fn present(&self) -> bool {
        self.bin_path().is_file()
            && std::fs::read_to_string(self.marker())
                .map(|s| s.trim() == self.specs.join("\n"))
                .unwrap_or(false)
    }

    /// Makes the venv from scratch; logs go to `logs/<log>-*.log`.
    pub fn install(&self, logs: &Path, log: &str, events: &Events) -> Result<()> {
        if self.dir.exists() {
            events.note(format!("removing incomplete venv {}", self.dir.display()));
            std::fs::remove_dir_all(&self.dir)
                .with_context(|| format!("removing {}", self.dir.display()))?;
        }
        if let Some(parent) = self.dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let shown = format!(
            "python3 -m venv {}",
            shell::quote(&self.dir.display().to_string())
        );
        events.command(&shown);
        run_logged(
            Command::new("python3").args(["-m", "venv"]).arg(&self.dir),
            &shown,
            &logs.join(format!("{log}-venv.log")),
        )?;
        let pip = self.dir.join("bin/pip");
        let reqs = self.dir.join("requirements.txt");
        if self.hashed() {
            // Pinned by hash: pip takes hashes only from a requirements file.
            std::fs::write(&reqs, self.specs.join("\n") + "\n")
                .with_context(|| format!("writing {}", reqs.display()))?;
        }
        let args = self.pip_args(&reqs);
        let shown = shell::display(&[], &pip.display().to_string(), &args);
        events.command(&shown);
        run_logged(
            Command::new(&pip).args(&args),
            &shown,
            &logs.join(format!("{log}-pip.log")),
        )?;
        if !self.bin_path().is_file() {
            bail!(
                "pip installed {} but {} is missing",
                self.specs.join(" "),
                self.bin_path().display()
            );
        }
        // Last: only now does the venv count as present.
        std::fs::write(self.marker(), format!("{}\n", self.specs.join("\n")))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pip_venv_counts_only_with_matching_marker() {
        let dir = tempfile::tempdir().unwrap();
        let v = PipVenv {
            dir: dir.path().join("v"),
            specs: vec!["a==1".into(), "b==2".into()],
            bin: "a",
            wheels_only: false,
        };
        std::fs::create_dir_all(v.dir.join("bin")).unwrap();
        std::fs::write(v.bin_path(), "").unwrap();
        assert!(!v.present(), "no marker: pip may have died half-way");
        std::fs::write(v.marker(), "a==1\n").unwrap();
        assert!(!v.present(), "marker of other pins");
        std::fs::write(v.marker(), "a==1\nb==2\n").unwrap();
        assert!(v.present());
        std::fs::remove_file(v.bin_path()).unwrap();
        assert!(!v.present(), "marker without the executable");
    }
}
