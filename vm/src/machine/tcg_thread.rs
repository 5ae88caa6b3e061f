//! How TCG runs the vCPUs: a host thread each (multi-threaded TCG, qemu's default for x86) or one
//! thread for all (`-accel tcg,thread=single`), chosen by qemu's version.
//!
//! Why: under multi-threaded TCG a vCPU can reach the wrong device's MMIO while another vCPU
//! changes the memory map (Linux does, probing PCI at boot), and qemu aborts in hw/pci/msix.c.
//! From qemu 10.0.4 (10.1.0) nothing keeps a vCPU's stale TLB index and the dispatch table in
//! step, so one thread for all is chosen there only: it makes the tests phase markedly slower.
//! `--tcg-thread` overrides the choice; the race: docs/hosts.md.
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

pub use crate::domain::options::TcgThread as Choice;

/// How a TCG run threads its vCPUs, and why; recorded in reports beside the accelerator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Threading {
    /// One host thread for every vCPU (`-accel tcg,thread=single`).
    pub single: bool,
    pub reason: String,
}

impl Threading {
    /// The qemu arguments that set it (none for qemu's default, multi-threaded).
    pub fn qemu_opts(&self) -> Vec<String> {
        if self.single {
            vec!["-accel".into(), "tcg,thread=single".into()]
        } else {
            vec![]
        }
    }

    pub fn describe(&self) -> String {
        let how = if self.single {
            "one host thread for all vCPUs"
        } else {
            "a host thread per vCPU"
        };
        format!("{how}: {}", self.reason)
    }
}

/// A qemu release: major, minor, micro.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The first qemu release whose TLB lookups use the current dispatch (10.0.4: the stable
/// backport of 2865bf1c57; 10.1.0 has it too).
const FIRST_WITHOUT_PER_CPU_DISPATCH: Version = Version(10, 0, 4);

/// The version in `qemu-system-x86_64 --version`'s first line, e.g. "QEMU emulator version
/// 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)".
pub fn parse_version(output: &str) -> Option<Version> {
    let line = output.lines().next()?;
    let rest = line.split("version ").nth(1)?;
    let number = rest.split_whitespace().next()?;
    let mut parts = number.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let micro = parts.next().unwrap_or(Some(0))?;
    Some(Version(major, minor, micro))
}

/// The version of the qemu vng will start (`qemu-system-x86_64` on PATH).
fn qemu_version() -> Result<Version> {
    let out = Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .context("run qemu-system-x86_64 --version")?;
    let text = String::from_utf8_lossy(&out.stdout);
    match parse_version(&text) {
        Some(v) if out.status.success() => Ok(v),
        _ => bail!(
            "qemu-system-x86_64 --version printed {:?} ({}), which names no version; \
             fix: check the qemu on PATH (Debian's qemu-system-x86), or choose with \
             --tcg-thread single|multi",
            text.trim(),
            out.status
        ),
    }
}

/// What `--tcg-thread auto` chooses on qemu `version`.
pub fn for_version(version: Version) -> Threading {
    if version >= FIRST_WITHOUT_PER_CPU_DISPATCH {
        Threading {
            single: true,
            reason: format!(
                "qemu {version} can route an MMIO access to the wrong device while another \
                 vCPU changes the memory map (docs/hosts.md)"
            ),
        }
    } else {
        Threading {
            single: false,
            reason: format!("qemu {version}"),
        }
    }
}

/// The threading for a run of the kernel's selftests where `choice` left it to bpfvm: one
/// thread for all vCPUs. The selftests patch kernel text at nearly every attach (trampolines,
/// static keys: `text_poke_bp`, arch/x86/kernel/alternative.c), and under multi-threaded TCG a
/// vCPU can still run the int3 that patching plants after the patch has completed: the guest
/// panics with "Oops: int3" inside a test that did nothing wrong (attach_probe's
/// perf_event_open on a 6.12 tree, in `__schedule`). The tests run one at a time, so a second
/// host thread buys them little.
pub fn for_selftests(choice: Choice, chosen: &Threading) -> Threading {
    if choice != Choice::Auto || chosen.single {
        return chosen.clone();
    }
    Threading {
        single: true,
        reason: format!(
            "the selftests patch kernel text at every attach, which multi-threaded TCG can \
             race into an \"Oops: int3\" (docs/selftests.md); was: {}",
            chosen.reason
        ),
    }
}

/// The threading for `choice`: auto asks the qemu on PATH its version, the explicit choices
/// need no qemu.
pub fn decide(choice: Choice) -> Result<Threading> {
    Ok(match choice {
        Choice::Auto => for_version(qemu_version()?),
        Choice::Single => Threading {
            single: true,
            reason: "--tcg-thread single".into(),
        },
        Choice::Multi => Threading {
            single: false,
            reason: "--tcg-thread multi".into(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The selftests run single-threaded unless the user chose: auto on qemu 7.2 (multi) turns
    /// single with the reason; an explicit --tcg-thread multi stands.
    #[test]
    fn the_selftests_run_single_threaded_unless_the_user_chose() {
        let multi = for_version(Version(7, 2, 22));
        let t = for_selftests(Choice::Auto, &multi);
        assert!(t.single && t.reason.contains("Oops: int3") && t.reason.contains("qemu 7.2.22"));
        assert_eq!(for_selftests(Choice::Multi, &multi), multi);
        let single = for_version(Version(10, 0, 13));
        assert_eq!(for_selftests(Choice::Auto, &single), single);
    }

    #[test]
    fn versions_parse_from_debians_qemu() {
        assert_eq!(
            parse_version(
                "QEMU emulator version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)\n\
                 Copyright (c) 2003-2025 Fabrice Bellard and the QEMU Project developers\n"
            ),
            Some(Version(10, 0, 13))
        );
        assert_eq!(
            parse_version("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\n"),
            Some(Version(7, 2, 22))
        );
        assert_eq!(
            parse_version("QEMU emulator version 9.2.50 (v9.2.0-1234-gabc)\n"),
            Some(Version(9, 2, 50))
        );
        assert_eq!(
            parse_version("QEMU emulator version 8.2\n"),
            Some(Version(8, 2, 0))
        );
        assert_eq!(parse_version("qemu: command not found\n"), None);
        assert_eq!(parse_version(""), None);
        assert_eq!(parse_version("QEMU emulator version ten\n"), None);
    }

    /// The qemu option is passed exactly on the versions without a per-vCPU dispatch copy.
    #[test]
    fn single_threaded_tcg_from_qemu_10_0_4_on() {
        for (v, single) in [
            (Version(7, 2, 22), false),
            (Version(8, 1, 0), false),
            (Version(10, 0, 3), false),
            (Version(10, 0, 4), true),
            (Version(10, 0, 13), true),
            (Version(10, 1, 0), true),
            (Version(11, 0, 0), true),
        ] {
            let t = for_version(v);
            assert_eq!(t.single, single, "{v}");
            assert_eq!(
                t.qemu_opts(),
                if single {
                    vec!["-accel".to_string(), "tcg,thread=single".into()]
                } else {
                    vec![]
                },
                "{v}"
            );
            assert!(t.reason.contains(&v.to_string()), "{}", t.reason);
        }
    }

    #[test]
    fn the_users_choice_wins_either_way() {
        assert!(decide(Choice::Single).unwrap().single);
        assert!(!decide(Choice::Multi).unwrap().single);
        assert!(decide(Choice::Multi)
            .unwrap()
            .reason
            .contains("--tcg-thread multi"));
        assert_eq!("single".parse::<Choice>(), Ok(Choice::Single));
        assert!("one"
            .parse::<Choice>()
            .unwrap_err()
            .contains("auto, single or multi"));
    }
}
