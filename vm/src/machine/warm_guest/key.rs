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

/// The programs a kept guest's loop and a run's guest script start (`script`,
/// `machine::guest`), found as the guest finds them in the host's root.
const GUEST_TOOLS: &[&str] = &[
    "sh",
    "bash",
    "perl",
    "dd",
    "grep",
    "mount",
    "cp",
    "tail",
    "sleep",
    "nproc",
    "cat",
    "mountpoint",
    "unshare",
    "rm",
    "tee",
];

/// Where the guest finds a program (its `PATH`).
const HOST_BIN: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// The dynamic loader's default directories for `arch`, Debian's multiarch ones first.
fn host_lib(arch: crate::domain::arch::Arch) -> Vec<std::path::PathBuf> {
    let multiarch = format!("{}-linux-gnu", arch.machine());
    ["/lib", "/usr/lib"]
        .iter()
        .map(|d| Path::new(d).join(&multiarch))
        .chain(
            ["/lib64", "/usr/lib64", "/lib", "/usr/lib"]
                .iter()
                .map(|d| d.into()),
        )
        .collect()
}

/// What a guest of the host's root reads from the host for its whole life, through a
/// `cache=always` mount (a file replaced on the host may still read as the old one there): each
/// program its scripts start, its dynamic loader (`PT_INTERP`) and every shared library they
/// load (`DT_NEEDED`, to the last), a part each, `host file PATH` with the sha256 of what
/// it holds (`missing` when it is not there). An upgrade of any of them is another key.
fn host_reads(bin: &[std::path::PathBuf], lib: &[std::path::PathBuf]) -> Vec<(String, String)> {
    let mut seen = std::collections::BTreeSet::new();
    let mut todo: Vec<std::path::PathBuf> = GUEST_TOOLS
        .iter()
        .filter_map(|t| bin.iter().map(|d| d.join(t)).find(|p| p.exists()))
        .collect();
    while let Some(path) = todo.pop() {
        if !seen.insert(path.clone()) {
            continue;
        }
        let Ok(data) = std::fs::read(&path) else {
            continue;
        };
        for needed in elf_needs(&data) {
            match needed.strip_prefix("/") {
                Ok(_) => todo.push(needed),
                Err(_) => {
                    let found = lib.iter().map(|d| d.join(&needed));
                    todo.extend(found.clone().find(|p| p.exists()));
                }
            }
        }
    }
    seen.into_iter()
        .map(|p| {
            let digest = sha256_file(&p).unwrap_or_else(|_| "missing".into());
            (format!("host file {}", p.display()), digest)
        })
        .collect()
}

/// The dynamic loader (an absolute path) and the shared libraries (names) a 64-bit ELF
/// file asks for; none for anything else (a script, a static program).
fn elf_needs(data: &[u8]) -> Vec<std::path::PathBuf> {
    use object::elf::{FileHeader64, DT_NEEDED};
    use object::read::elf::{Dyn, FileHeader, ProgramHeader};
    let mut out = Vec::new();
    let Ok(header) = FileHeader64::<object::Endianness>::parse(data) else {
        return out;
    };
    let Ok(endian) = header.endian() else {
        return out;
    };
    if let Ok(segments) = header.program_headers(endian, data) {
        for s in segments {
            if let Ok(Some(interp)) = s.interpreter(endian, data) {
                out.push(std::path::PathBuf::from(
                    String::from_utf8_lossy(interp).as_ref(),
                ));
            }
        }
    }
    let Ok(sections) = header.sections(endian, data) else {
        return out;
    };
    if let Ok(Some((dynamic, link))) = sections.dynamic(endian, data) {
        if let Ok(strings) = sections.strings(endian, data, link) {
            for d in dynamic {
                if d.tag32(endian) == Some(DT_NEEDED as i32) {
                    if let Ok(name) = d.string(endian, strings) {
                        out.push(String::from_utf8_lossy(name).as_ref().into());
                    }
                }
            }
        }
    }
    out
}

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
        let mut parts: Vec<(String, String)> =
            parts.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        if spec.own_root.is_none() {
            let bin: Vec<std::path::PathBuf> = HOST_BIN.iter().map(|d| d.into()).collect();
            parts.extend(host_reads(&bin, &host_lib(spec.arch)));
        }
        Ok(Self { parts })
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

    /// The key names each file the guest reads from the host by what it holds: the programs
    /// its scripts start, their dynamic loader and every library they load (here a copy of
    /// this test's own program as `sh`, which loads `libc.so.6`, found in a directory of
    /// libraries). An upgraded libc is another key, named.
    #[test]
    fn the_key_names_the_hosts_loader_libc_and_tools_by_content() {
        let d = tempfile::tempdir().unwrap();
        let (bin, lib) = (d.path().join("bin"), d.path().join("lib"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::copy(std::env::current_exe().unwrap(), bin.join("sh")).unwrap();
        let libc = lib.join("libc.so.6");
        std::fs::write(&libc, b"glibc 2.36-9").unwrap();
        let reads = || Key {
            parts: host_reads(std::slice::from_ref(&bin), std::slice::from_ref(&lib)),
        };
        let names: Vec<String> = reads().parts.into_iter().map(|(n, _)| n).collect();
        let named = |p: &Path| format!("host file {}", p.display());
        assert!(names.contains(&named(&bin.join("sh"))), "{names:?}");
        assert!(names.contains(&named(&libc)), "{names:?}");
        let loader = elf_needs(&std::fs::read(bin.join("sh")).unwrap())
            .into_iter()
            .find(|p| p.is_absolute())
            .expect("a dynamic loader");
        assert!(names.contains(&named(&loader)), "{names:?}");
        let before = reads();
        assert_eq!(reads().differences(&before), Vec::<String>::new());
        std::fs::write(&libc, b"glibc 2.36-10").unwrap();
        let why = reads().differences(&before);
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(why[0].starts_with(&named(&libc)), "{why:?}");
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
        let why = Key::of(&arm64, "6.1.0-57", vng, "loop")
            .unwrap()
            .differences(&base);
        let (host, other): (Vec<&String>, Vec<&String>) = why.iter().partition(|w| {
            w.starts_with("host file ") && w.ends_with(": only in the kept guest's key")
        });
        assert_eq!(
            other.len(),
            2,
            "another architecture, its own root: {other:?}"
        );
        assert!(
            !host.is_empty(),
            "an own root reads none of the host's programs"
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
