//! KVM or TCG. `/dev/kvm` existing proves nothing (on PVM hosts it opens, and qemu then aborts
//! or hangs), so KVM is chosen only when a real guest kernel prints its first line under it.
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde::Serialize;

use crate::proc::{Group, Stream};

/// What the user asked for with `--accel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Auto,
    Kvm,
    Tcg,
}

impl std::str::FromStr for Choice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Choice::Auto),
            "kvm" => Ok(Choice::Kvm),
            "tcg" => Ok(Choice::Tcg),
            _ => Err(format!("{s:?} is not an accelerator: auto, kvm or tcg")),
        }
    }
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Choice::Auto => "auto",
            Choice::Kvm => "kvm",
            Choice::Tcg => "tcg",
        })
    }
}

/// The accelerator a run uses and why, as recorded in reports.
#[derive(Debug, Clone, Serialize)]
pub struct Accel {
    /// `kvm` or `tcg`.
    pub name: &'static str,
    pub reason: String,
}

impl Accel {
    pub fn is_kvm(&self) -> bool {
        self.name == "kvm"
    }

    /// How the report describes the figures measured under this accelerator.
    pub fn describe(&self) -> String {
        match self.name {
            "kvm" => format!("KVM ({})", self.reason),
            _ => format!("TCG, software emulation ({})", self.reason),
        }
    }
}

/// How long a working KVM may take to print the kernel's first line (it takes well under 1 s).
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Decides the accelerator, probing KVM with `vmlinuz` unless the user chose TCG.
pub fn decide(choice: Choice, vmlinuz: &Path) -> Result<Accel> {
    if choice == Choice::Tcg {
        return Ok(Accel {
            name: "tcg",
            reason: "--accel tcg".into(),
        });
    }
    match probe_kvm(vmlinuz) {
        Ok(how) => Ok(Accel {
            name: "kvm",
            reason: how,
        }),
        Err(why) if choice == Choice::Auto => Ok(Accel {
            name: "tcg",
            reason: format!("KVM not usable: {why}"),
        }),
        Err(why) => bail!(
            "--accel kvm was asked for, but KVM does not work on this host: {why}\n\
             fix: run with --accel tcg (or --accel auto to fall back by itself)"
        ),
    }
}

/// Boots `vmlinuz` under KVM with no root filesystem and waits for "Linux version".
fn probe_kvm(vmlinuz: &Path) -> Result<String, String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map_err(|e| format!("cannot open /dev/kvm: {e}"))?;
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(probe_args(vmlinuz));
    let mut group = Group::spawn(&mut cmd).map_err(|e| format!("cannot run qemu: {e}"))?;
    let start = Instant::now();
    let mut last = String::new();
    let verdict = loop {
        match group.lines.recv_timeout(Duration::from_millis(100)) {
            Ok((Stream::Stdout, line)) if line.contains("Linux version") => {
                break Ok(format!(
                    "probe booted a kernel under KVM in {:.1} s",
                    start.elapsed().as_secs_f64()
                ));
            }
            Ok((_, line)) => last = line,
            Err(_) => {}
        }
        if let Ok(Some(status)) = group.try_wait() {
            break Err(format!(
                "qemu exited ({status}) before the kernel printed: {last}"
            ));
        }
        if start.elapsed() > PROBE_TIMEOUT {
            break Err(format!(
                "no kernel output under KVM within {} s (e.g. a PVM host)",
                PROBE_TIMEOUT.as_secs()
            ));
        }
    };
    group.finish();
    verdict
}

fn probe_args(vmlinuz: &Path) -> Vec<String> {
    [
        "-accel",
        "kvm",
        "-cpu",
        "host",
        "-m",
        "256M",
        "-nodefaults",
        "-display",
        "none",
        "-no-reboot",
        "-serial",
        "stdio",
        "-kernel",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        vmlinuz.display().to_string(),
        "-append".into(),
        "console=ttyS0 panic=-1".into(),
    ])
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcg_choice_needs_no_probe() {
        let a = decide(Choice::Tcg, Path::new("/nonexistent")).unwrap();
        assert_eq!(a.name, "tcg");
        assert!(a.describe().starts_with("TCG"));
    }

    #[test]
    fn probe_uses_the_cpu_vng_uses_under_kvm() {
        let args = probe_args(Path::new("/k"));
        assert!(args.windows(2).any(|w| w == ["-cpu", "host"]));
        assert!(args.windows(2).any(|w| w == ["-kernel", "/k"]));
    }
}
