//! KVM or TCG. `/dev/kvm` existing proves nothing (on PVM hosts it opens, and qemu then aborts
//! or hangs), so KVM is chosen only when a real guest kernel prints its first line under it.
//! The probe can take its whole timeout (on a PVM host qemu spins in the host kernel: one core
//! of system time until it is killed), so its verdict is kept in the cache for the rest of the
//! host's boot (`/proc/sys/kernel/random/boot_id`).
use crate::domain::arch::Arch;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::domain::options::Choice;
use crate::machine::tcg_thread::{self, Threading};
use crate::support::paths::cache_dir;
use crate::support::proc::{Group, Stream};

/// Which accelerator qemu runs the guest with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Kvm,
    Tcg,
}

impl Kind {
    /// `kvm` or `tcg`, as reports name it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Kvm => "kvm",
            Kind::Tcg => "tcg",
        }
    }
}

/// The accelerator a run uses and why, as recorded in reports.
#[derive(Debug, Clone, Serialize)]
pub struct Accel {
    #[serde(rename = "name")]
    pub kind: Kind,
    pub reason: String,
    /// Under TCG, how the vCPUs are threaded (`tcg_thread`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcg_thread: Option<Threading>,
}

impl Accel {
    pub fn is_kvm(&self) -> bool {
        self.kind == Kind::Kvm
    }

    /// How the report describes the figures measured under this accelerator.
    pub fn describe(&self) -> String {
        match self.kind {
            Kind::Kvm => format!("KVM ({})", self.reason),
            Kind::Tcg => match &self.tcg_thread {
                Some(t) => format!(
                    "TCG, software emulation ({}; {})",
                    self.reason,
                    t.describe()
                ),
                None => format!("TCG, software emulation ({})", self.reason),
            },
        }
    }

    /// The qemu arguments this accelerator needs beyond vng's own (`--disable-kvm`).
    pub fn qemu_opts(&self) -> Vec<String> {
        self.tcg_thread
            .as_ref()
            .map_or_else(Vec::new, Threading::qemu_opts)
    }
}

/// How long a working KVM may take to print the kernel's first line. Even TCG, far slower,
/// printed "Linux version" after 0.46-0.66 s with these arguments on a 2-core host, and after
/// 1.5-2.3 s with six busy loops beside it (2026-12-02, 6.1 cloud kernel, three runs each).
/// A miss is kept for the host boot, so the margin is wide; but on a PVM host qemu spins one
/// core of system time for the whole wait, on every first run (20 s when this was 20).
const PROBE_TIMEOUT: Duration = Duration::from_secs(6);

/// Refuses `--accel kvm` for a guest KVM cannot run: before anything is fetched.
pub fn check(choice: Choice, arch: Arch) -> Result<()> {
    if choice == Choice::Kvm && !arch.is_host() {
        bail!(
            "--accel kvm with an {arch} kernel: {}\nfix: leave --accel out (TCG)",
            kvm_host_only()
        );
    }
    Ok(())
}

fn kvm_host_only() -> String {
    format!(
        "KVM runs guests of the host's architecture ({}) only",
        Arch::host()
    )
}

/// Decides the accelerator for a guest of `arch`, probing KVM with `vmlinuz` unless the user
/// chose TCG or the guest is not of the host's architecture, and under TCG how its vCPUs are
/// threaded (`threads`, `--tcg-thread`).
pub fn decide(
    choice: Choice,
    threads: tcg_thread::Choice,
    vmlinuz: &Path,
    arch: Arch,
) -> Result<Accel> {
    let tcg = |reason: String| -> Result<Accel> {
        Ok(Accel {
            kind: Kind::Tcg,
            reason,
            tcg_thread: Some(tcg_thread::decide(threads)?),
        })
    };
    if choice == Choice::Tcg {
        return tcg("--accel tcg".into());
    }
    check(choice, arch)?;
    if !arch.is_host() {
        return tcg(format!("an {arch} guest: {}", kvm_host_only()));
    }
    match probe_kvm_once_per_boot(vmlinuz, &verdict_file()) {
        Ok(how) => Ok(Accel {
            kind: Kind::Kvm,
            reason: how,
            tcg_thread: None,
        }),
        Err(why) if choice == Choice::Auto => tcg(format!("KVM not usable: {why}")),
        Err(why) => bail!(
            "--accel kvm was asked for, but KVM does not work on this host: {why}\n\
             fix: run with --accel tcg (or --accel auto to fall back by itself)"
        ),
    }
}

/// A KVM probe's verdict and the host boot it was made in.
#[derive(Debug, Serialize, Deserialize)]
struct ProbeRecord {
    boot_id: String,
    /// `Ok(how)` when KVM works, else why not.
    kvm: Result<String, String>,
}

fn verdict_file() -> PathBuf {
    cache_dir().join("accel.json")
}

fn host_boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string())
}

/// [`probe_kvm`], or its verdict from earlier in this host boot (kept in `file`). A cache that
/// cannot be read or written only costs a probe.
fn probe_kvm_once_per_boot(vmlinuz: &Path, file: &Path) -> Result<String, String> {
    let boot_id = host_boot_id();
    let cached = std::fs::read_to_string(file)
        .ok()
        .and_then(|s| serde_json::from_str::<ProbeRecord>(&s).ok())
        .filter(|v| Some(&v.boot_id) == boot_id.as_ref());
    if let Some(v) = cached {
        let note = format!(
            "probed earlier this host boot; delete {} to probe again",
            file.display()
        );
        return v
            .kvm
            .map(|how| format!("{how}; {note}"))
            .map_err(|why| format!("{why}; {note}"));
    }
    let kvm = probe_kvm(vmlinuz);
    if let Some(boot_id) = boot_id {
        let v = ProbeRecord {
            boot_id,
            kvm: kvm.clone(),
        };
        if let Ok(json) = serde_json::to_string(&v) {
            let _ = std::fs::create_dir_all(cache_dir());
            let _ = crate::support::fs::write_atomic(file, json.as_bytes());
        }
    }
    kvm
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
        let a = decide(
            Choice::Tcg,
            tcg_thread::Choice::Single,
            Path::new("/nonexistent"),
            Arch::X86_64,
        )
        .unwrap();
        assert_eq!(a.kind, Kind::Tcg);
        assert!(a.describe().starts_with("TCG"));
        assert!(a.describe().contains("one host thread for all vCPUs"));
        assert_eq!(a.qemu_opts(), ["-accel", "tcg,thread=single"]);
    }

    /// No probe either for another architecture's guest (the image does not exist: a probe
    /// would fail), and `--accel kvm` is refused with the reason.
    #[test]
    fn a_guest_of_another_architecture_runs_under_tcg() {
        let other = Arch::EVERY.into_iter().find(|a| !a.is_host()).unwrap();
        let nothing = Path::new("/nonexistent");
        let a = decide(Choice::Auto, tcg_thread::Choice::Single, nothing, other).unwrap();
        assert_eq!(a.kind, Kind::Tcg);
        assert!(
            a.reason
                .contains("KVM runs guests of the host's architecture"),
            "{}",
            a.reason
        );
        let e = decide(Choice::Kvm, tcg_thread::Choice::Single, nothing, other).unwrap_err();
        assert!(e.to_string().contains("leave --accel out"), "{e}");
    }

    #[test]
    fn a_verdict_from_this_host_boot_is_reused_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("accel.json");
        let v = ProbeRecord {
            boot_id: host_boot_id().unwrap(),
            kvm: Err("qemu exited".into()),
        };
        std::fs::write(&file, serde_json::to_string(&v).unwrap()).unwrap();
        // A vmlinuz that does not exist: a real probe could not have said "qemu exited".
        let why = probe_kvm_once_per_boot(Path::new("/nonexistent"), &file).unwrap_err();
        assert!(
            why.starts_with("qemu exited; probed earlier this host boot"),
            "{why}"
        );
    }

    #[test]
    fn a_verdict_from_another_host_boot_is_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("accel.json");
        let v = ProbeRecord {
            boot_id: "another boot".into(),
            kvm: Ok("probe booted".into()),
        };
        std::fs::write(&file, serde_json::to_string(&v).unwrap()).unwrap();
        let r = probe_kvm_once_per_boot(Path::new("/nonexistent"), &file);
        assert!(r.is_err(), "{r:?}");
        let kept: ProbeRecord =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(Some(kept.boot_id), host_boot_id());
    }

    #[test]
    fn probe_uses_the_cpu_vng_uses_under_kvm() {
        let args = probe_args(Path::new("/k"));
        assert!(args.windows(2).any(|w| w == ["-cpu", "host"]));
        assert!(args.windows(2).any(|w| w == ["-kernel", "/k"]));
    }
}
