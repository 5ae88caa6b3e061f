//! Guest steps whose answers are facts about their inputs and the kernel alone: the feature
//! probe and the verifier statistics give the same answers for the same binaries, objects and
//! kernel (two runs were identical but for the verifier's `duration`), so a run that passed
//! keeps them under the cache, and the next run with the same inputs reads them back instead
//! of paying for them in the guest. The key hashes the kernel image, its release, the VM's
//! CPUs and command line, and every file the step runs; anything else that changed makes a
//! new key. `rm -r ~/.cache/bpfvm/guest-facts` forgets them all.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::kernel::bootable::Bootable;
use crate::machine::guest::files;
use crate::support::fs::sha256_file;
use crate::support::paths::cache_dir;

/// A step whose answers can be reused, with the files it writes into the shared directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Probe,
    Verifier,
}

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::Probe => "probe",
            Step::Verifier => "verifier",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Step::Probe => "feature probes",
            Step::Verifier => "verifier statistics",
        }
    }

    /// What the step leaves in the shared directory: its answers, its stderr, its exit status.
    pub fn files(self) -> [&'static str; 3] {
        match self {
            Step::Probe => [files::FEATURES, files::PROBE_STDERR, files::PROBE_RC],
            Step::Verifier => [files::VERIFIER, files::VERIFIER_STDERR, files::VERIFIER_RC],
        }
    }
}

/// The kernel and VM a step's answers hold for: the image hashed once for every step's key.
pub struct Kernel<'a> {
    image_sha256: String,
    release: &'a str,
    cpus: u32,
    append: &'a [String],
}

impl<'a> Kernel<'a> {
    pub fn of(bootable: &'a Bootable, cpus: u32, append: &'a [String]) -> Result<Self> {
        Ok(Self {
            image_sha256: sha256_file(&bootable.vmlinuz)?,
            release: &bootable.release,
            cpus,
            append,
        })
    }
}

/// Where `step`'s answers for `inputs` on `kernel` are kept: a directory named for the key.
pub fn entry(step: Step, kernel: &Kernel, inputs: &[PathBuf]) -> Result<PathBuf> {
    Ok(root().join(format!("{}-{}", step.name(), key(step, kernel, inputs)?)))
}

fn root() -> PathBuf {
    cache_dir().join("guest-facts")
}

/// sha256 over the step, the kernel image's hash and release, the CPUs, the command line and
/// each input's hash (in the order given: the step's argv order).
fn key(step: Step, kernel: &Kernel, inputs: &[PathBuf]) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut line = |s: &str| {
        h.update(s.as_bytes());
        h.update(b"\n");
    };
    line("bpfvm guest facts 1");
    line(step.name());
    line(&kernel.image_sha256);
    line(kernel.release);
    line(&kernel.cpus.to_string());
    line(&kernel.append.join(" "));
    for input in inputs {
        line(&sha256_file(input)?);
    }
    Ok(hex::encode(h.finalize())[..16].to_string())
}

/// Copies a kept entry's files into `shared` and says so; `false` (nothing copied) when there
/// is no complete entry.
pub fn restore(step: Step, entry: &Path, shared: &Path) -> Result<bool> {
    if !step.files().iter().all(|f| entry.join(f).is_file()) {
        return Ok(false);
    }
    for f in step.files() {
        std::fs::copy(entry.join(f), shared.join(f)).with_context(|| {
            format!("copy {} into {}", entry.join(f).display(), shared.display())
        })?;
    }
    Ok(true)
}

/// Keeps `step`'s files from `guest` (a run's kept guest files) as `entry`, when the step ran
/// there and exited 0. The entry appears whole or not at all (written beside it, then renamed).
pub fn keep(step: Step, guest: &Path, entry: &Path) -> Result<()> {
    let rc = std::fs::read_to_string(guest.join(step.files()[2])).unwrap_or_default();
    if rc.trim() != "0" || entry.is_dir() {
        return Ok(());
    }
    let parent = entry.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempdir_in(parent)
        .with_context(|| format!("create a directory in {}", parent.display()))?;
    for f in step.files() {
        std::fs::copy(guest.join(f), tmp.path().join(f))
            .with_context(|| format!("copy {}", guest.join(f).display()))?;
    }
    match std::fs::rename(tmp.keep(), entry) {
        // Another run kept the same answers first.
        Err(_) if entry.is_dir() => Ok(()),
        r => r.with_context(|| format!("keep {}", entry.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        dir: tempfile::TempDir,
        bootable: Bootable,
        inputs: Vec<PathBuf>,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let vmlinuz = dir.path().join("vmlinuz");
        std::fs::write(&vmlinuz, b"kernel A").unwrap();
        let inputs = ["verifier", "bloom_filter", "smoke"]
            .iter()
            .map(|n| {
                let p = dir.path().join(n);
                std::fs::write(&p, n.as_bytes()).unwrap();
                p
            })
            .collect();
        Fixture {
            bootable: Bootable {
                root: dir.path().into(),
                vmlinuz,
                release: "6.1.0-57-cloud-amd64".into(),
            },
            dir,
            inputs,
        }
    }

    fn key_of(f: &Fixture, cpus: u32, append: &[String]) -> String {
        let k = Kernel::of(&f.bootable, cpus, append).unwrap();
        key(Step::Verifier, &k, &f.inputs).unwrap()
    }

    #[test]
    fn a_changed_object_or_kernel_gets_a_new_key() {
        let f = fixture();
        let first = key_of(&f, 2, &[]);
        assert_eq!(key_of(&f, 2, &[]), first, "same inputs, same key");

        std::fs::write(&f.inputs[1], b"bloom_filter, one instruction more").unwrap();
        let object_changed = key_of(&f, 2, &[]);
        assert_ne!(object_changed, first, "a changed object");

        std::fs::write(&f.bootable.vmlinuz, b"kernel B").unwrap();
        let kernel_changed = key_of(&f, 2, &[]);
        assert_ne!(kernel_changed, object_changed, "a changed kernel image");

        assert_ne!(key_of(&f, 4, &[]), kernel_changed, "other CPUs");
        assert_ne!(
            key_of(&f, 2, &["bpf_jit_harden=2".into()]),
            kernel_changed,
            "another command line"
        );
        let mut other_release = fixture();
        other_release.bootable.release = "6.1.0-58-cloud-amd64".into();
        assert_ne!(key_of(&other_release, 2, &[]), key_of(&fixture(), 2, &[]));
    }

    fn write_step(dir: &Path, step: Step, rc: &str) {
        std::fs::create_dir_all(dir).unwrap();
        let [answers, stderr, status] = step.files();
        std::fs::write(dir.join(answers), "[]").unwrap();
        std::fs::write(dir.join(stderr), "").unwrap();
        std::fs::write(dir.join(status), rc).unwrap();
    }

    #[test]
    fn answers_of_a_step_that_exited_0_come_back_whole() {
        let f = fixture();
        let guest = f.dir.path().join("guest");
        write_step(&guest, Step::Verifier, "0\n");
        let entry = f.dir.path().join("facts/verifier-1");
        keep(Step::Verifier, &guest, &entry).unwrap();

        let shared = f.dir.path().join("shared");
        std::fs::create_dir_all(&shared).unwrap();
        assert!(restore(Step::Verifier, &entry, &shared).unwrap());
        for file in Step::Verifier.files() {
            assert_eq!(
                std::fs::read(shared.join(file)).unwrap(),
                std::fs::read(guest.join(file)).unwrap()
            );
        }
    }

    #[test]
    fn a_failed_or_missing_step_is_not_kept_and_a_partial_entry_not_restored() {
        let f = fixture();
        let shared = f.dir.path().join("shared");
        std::fs::create_dir_all(&shared).unwrap();

        let guest = f.dir.path().join("failed");
        write_step(&guest, Step::Probe, "1\n");
        let entry = f.dir.path().join("facts/probe-1");
        keep(Step::Probe, &guest, &entry).unwrap();
        assert!(!entry.exists(), "a step that failed is measured again");

        keep(Step::Probe, &f.dir.path().join("never-ran"), &entry).unwrap();
        assert!(!entry.exists(), "a step the guest never reached");

        write_step(&entry, Step::Probe, "0\n");
        std::fs::remove_file(entry.join(files::PROBE_STDERR)).unwrap();
        assert!(!restore(Step::Probe, &entry, &shared).unwrap());
        assert!(!shared.join(files::FEATURES).exists());
    }
}
