//! What makes a boot, named part by part: a kept guest serves only runs whose VM would have
//! booted the same, and a refusal says which part differs.
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::machine::vng::VmSpec;
use crate::support::fs::sha256_file;

/// What a run and its keeper say to each other (`wire`), as a part of the key: a run of
/// another version is refused at once, never left waiting for a line it does not send.
const PROTOCOL: &str = "2: the question before the build, the script after";

/// The parts of a boot, each with its value: the kernel image's digest and release, its
/// architecture and the guest's root, the accelerator, the VM's CPUs, memory, kernel command
/// line and qemu options, virtme-ng and the guest loop. Not the guest's test binaries, nor the
/// host directories a guest with its own root reads: each run hands its binaries in the share
/// (`client`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    pub parts: Vec<(String, String)>,
}

impl Key {
    /// The key of `spec`'s boot of `release`, with virtme-ng at `vng` running `guest_loop`.
    pub fn of(spec: &VmSpec, release: &str, vng: &Path, guest_loop: &str) -> Result<Self> {
        use sha2::{Digest, Sha256};
        let loop_digest = hex::encode(Sha256::digest(guest_loop.as_bytes()));
        let parts = [
            ("kernel image", sha256_file(&spec.vmlinuz)?),
            ("kernel release", release.to_string()),
            ("architecture", spec.arch.name().to_string()),
            // A pin's cached root is named by the pin's digest (its packages).
            (
                "guest root",
                spec.own_root
                    .as_ref()
                    .map_or("the host's".into(), |o| o.root.display().to_string()),
            ),
            (
                "accelerator",
                format!("{:?} {:?}", spec.accel.kind, spec.accel.qemu_opts()),
            ),
            ("cpus", spec.cpus.to_string()),
            ("memory", spec.memory.clone()),
            ("kernel command line", spec.append.join(" ")),
            ("qemu options", spec.qemu_opts.join(" ")),
            ("virtme-ng", vng.display().to_string()),
            ("guest loop", loop_digest),
            ("bpfvm", env!("CARGO_PKG_VERSION").to_string()),
            ("protocol", PROTOCOL.to_string()),
        ];
        Ok(Self {
            parts: parts.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        })
    }

    /// How `self` (a run's) differs from `kept` (the guest's), one part a line: empty when
    /// they are the same.
    pub fn differences(&self, kept: &Key) -> Vec<String> {
        let mut why = Vec::new();
        for (name, mine) in &self.parts {
            match kept.parts.iter().find(|(n, _)| n == name) {
                Some((_, theirs)) if theirs == mine => {}
                Some((_, theirs)) => {
                    why.push(format!("{name}: {theirs} in the kept guest, {mine} here"))
                }
                None => why.push(format!("{name}: not in the kept guest's key")),
            }
        }
        for (name, _) in &kept.parts {
            if !self.parts.iter().any(|(n, _)| n == name) {
                why.push(format!("{name}: only in the kept guest's key"));
            }
        }
        why
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(parts: &[(&str, &str)]) -> Key {
        Key {
            parts: parts
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_key_names_each_part_that_differs() {
        let kept = key(&[("kernel image", "aa"), ("cpus", "4"), ("memory", "2G")]);
        assert_eq!(kept.differences(&kept), Vec::<String>::new());
        let mine = key(&[("kernel image", "bb"), ("cpus", "4"), ("memory", "1G")]);
        assert_eq!(
            mine.differences(&kept),
            [
                "kernel image: aa in the kept guest, bb here",
                "memory: 2G in the kept guest, 1G here"
            ]
        );
        let fewer = key(&[("kernel image", "aa"), ("cpus", "4")]);
        assert_eq!(
            fewer.differences(&kept),
            ["memory: only in the kept guest's key"]
        );
    }

    /// Every part that makes a boot is in the key: a change to any of them is another key. An
    /// arm64 run never takes an x86_64 guest, nor one of another pin's root.
    #[test]
    fn the_key_changes_with_the_image_the_options_and_the_loop() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("vmlinuz");
        std::fs::write(&image, b"one").unwrap();
        let spec = VmSpec {
            vmlinuz: image.clone(),
            accel: crate::machine::accel::Accel {
                kind: crate::machine::accel::Kind::Tcg,
                reason: "test".into(),
                tcg_thread: None,
            },
            cpus: 4,
            memory: "2G".into(),
            append: vec!["maxcpus=2".into()],
            rwdir: dir.path().into(),
            script: dir.path().join("s"),
            timeout: std::time::Duration::from_secs(1),
            boot_timeout: std::time::Duration::from_secs(1),
            qemu_opts: vec![],
            arch: crate::domain::arch::Arch::host(),
            own_root: None,
            watchdog: None,
            stop: None,
            input: None,
        };
        let vng = Path::new("/v/vng");
        let base = Key::of(&spec, "6.1.0-57", vng, "loop").unwrap();
        let differs = |k: Key| k.differences(&base).len();
        std::fs::write(&image, b"two").unwrap();
        assert_eq!(differs(Key::of(&spec, "6.1.0-57", vng, "loop").unwrap()), 1);
        std::fs::write(&image, b"one").unwrap();
        assert_eq!(differs(Key::of(&spec, "6.1.0-57", vng, "loop").unwrap()), 0);
        assert_eq!(differs(Key::of(&spec, "6.1.0-58", vng, "loop").unwrap()), 1);
        assert_eq!(
            differs(Key::of(&spec, "6.1.0-57", vng, "loop2").unwrap()),
            1
        );
        let mut other = spec.clone();
        other.memory = "1G".into();
        other.append.push("x".into());
        assert_eq!(
            differs(Key::of(&other, "6.1.0-57", vng, "loop").unwrap()),
            2
        );
        let mut arm64 = spec.clone();
        arm64.arch = crate::domain::arch::Arch::Arm64;
        arm64.own_root = Some(crate::machine::own_root::OwnRoot {
            root: dir.path().join("6.12-arm64-fe64c9765f3a"),
            reads: vec![],
        });
        assert_eq!(
            differs(Key::of(&arm64, "6.1.0-57", vng, "loop").unwrap()),
            2,
            "another architecture, its own root"
        );
        let mut other_root = arm64.clone();
        other_root.own_root = Some(crate::machine::own_root::OwnRoot {
            root: dir.path().join("6.12-arm64-0123456789ab"),
            reads: vec![],
        });
        let arm64_key = Key::of(&arm64, "6.1.0-57", vng, "loop").unwrap();
        assert_eq!(
            Key::of(&other_root, "6.1.0-57", vng, "loop")
                .unwrap()
                .differences(&arm64_key)
                .len(),
            1
        );
        let mut reading = arm64.clone();
        reading.own_root = Some(crate::machine::own_root::OwnRoot {
            reads: vec![dir.path().join("cross")],
            ..arm64.own_root.clone().unwrap()
        });
        assert!(
            Key::of(&reading, "6.1.0-57", vng, "loop")
                .unwrap()
                .differences(&arm64_key)
                .is_empty(),
            "a run's reads are staged in the share, not mounted"
        );
        let mut long = spec.clone();
        long.timeout = std::time::Duration::from_secs(99);
        long.script = dir.path().join("other");
        assert_eq!(
            differs(Key::of(&long, "6.1.0-57", vng, "loop").unwrap()),
            0,
            "not a boot's"
        );
    }
}
