//! The guest's architecture (`--arch`): one value, parsed once, with what bpfvm knows of it in
//! one place (as little-vm-helper's `pkg/arch`): its names (vng's `--arch`, Debian's, the Rust
//! target), the qemu that boots it and the one that runs its binaries on the host, the cross
//! compiler its guest binaries are linked with, and what bpfvm cannot do with it yet.
use std::fmt;
use std::str::FromStr;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// What `--arch all` names: every architecture.
pub const ALL: &str = "all";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Arch {
    #[serde(rename = "x86_64")]
    X86_64,
    #[serde(rename = "arm64")]
    Arm64,
}

impl Arch {
    /// Every architecture, in the order `--arch all` runs them.
    pub const EVERY: [Arch; 2] = [Arch::X86_64, Arch::Arm64];

    /// The host's: what `--arch` defaults to.
    pub fn host() -> Arch {
        if cfg!(target_arch = "aarch64") {
            Arch::Arm64
        } else {
            Arch::X86_64
        }
    }

    /// The name users pass and reports show (vng's `--arch` takes the same).
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "arm64",
        }
    }

    /// Debian's name (`APT::Architecture`, the `.deb` file names).
    pub fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// The Rust target the guest binaries are built for.
    pub fn rust_target(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Arm64 => "aarch64-unknown-linux-gnu",
        }
    }

    /// Whether the guest can run the host's own root (binaries, libraries, `/usr`).
    pub fn is_host(self) -> bool {
        self == Arch::host()
    }

    /// The qemu binary vng picks to boot it (`qemu_helpers.Qemu`: `qemu-system-{arch}` on
    /// PATH).
    pub fn qemu_system(self) -> &'static str {
        match self {
            Arch::X86_64 => "qemu-system-x86_64",
            Arch::Arm64 => "qemu-system-aarch64",
        }
    }

    /// The qemu user-mode emulator that runs its binaries on the host (Debian `qemu-user`).
    pub fn qemu_user(self) -> &'static str {
        match self {
            Arch::X86_64 => "qemu-x86_64",
            Arch::Arm64 => "qemu-aarch64",
        }
    }

    /// Debian's cross linker for it (package `gcc-<triple>`, `provision::arch_packages`).
    pub fn cross_gcc(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-gnu-gcc",
            Arch::Arm64 => "aarch64-linux-gnu-gcc",
        }
    }

    /// Its number of `bpf(2)`: each architecture has its own syscall table (x86_64's
    /// arch/x86/entry/syscalls/syscall_64.tbl, arm64's include/uapi/asm-generic/unistd.h).
    pub fn bpf_syscall(self) -> u32 {
        match self {
            Arch::X86_64 => 321,
            Arch::Arm64 => 280,
        }
    }

    /// Its number of `membarrier(2)` (the same tables as [`Arch::bpf_syscall`]).
    pub fn membarrier_syscall(self) -> u32 {
        match self {
            Arch::X86_64 => 324,
            Arch::Arm64 => 283,
        }
    }

    /// The machine's name, as `uname -m` and bash's `$HOSTTYPE` say it.
    pub fn machine(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "aarch64",
        }
    }

    /// Whether its pins boot the host's own root. bpfvm's host is x86_64's: another
    /// architecture's pin boots a root made from its packages (`kernel::pins::userland`), and
    /// only pins (not an image or a tree), with the commands docs/arm64.md lists.
    pub fn boots_host_root(self) -> bool {
        self == Arch::X86_64
    }

    /// The label of a run of its pin `version`: the report's kernel and its directory's name
    /// (`6.1`; another architecture's `6.1-arm64`, so the two never share one).
    pub fn label(self, version: &str) -> String {
        match self.boots_host_root() {
            true => version.to_string(),
            false => format!("{version}-{self}"),
        }
    }

    /// Refuses, with why and the fix, what bpfvm does with x86_64 kernels only.
    pub fn refuse(self, what: X86Only) -> Result<()> {
        if self.boots_host_root() {
            return Ok(());
        }
        match what {
            X86Only::Command => bail!(
                "--arch {self}: this command does not boot {self} kernels yet (docs/arm64.md \
                 lists those that do)"
            ),
            X86Only::KernelBench => bail!(
                "--upstream with an {self} kernel: the kernel's selftests are built for x86_64 \
                 only; leave --upstream out"
            ),
        }
    }

    /// `--arch`'s value: `x86_64`, `arm64` (Debian's `amd64` and the kernel's `aarch64` too),
    /// or `all`.
    pub fn parse_list(value: &str) -> Result<Vec<Arch>> {
        if value == ALL {
            return Ok(Arch::EVERY.to_vec());
        }
        value.split(',').map(|v| v.trim().parse()).collect()
    }
}

/// What bpfvm does with x86_64 kernels only ([`Arch::refuse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum X86Only {
    /// The commands docs/arm64.md does not list.
    Command,
    /// The kernel's own `bench` in bench-vm (`--upstream`).
    KernelBench,
}

impl FromStr for Arch {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Arch> {
        match s {
            "x86_64" | "amd64" | "x86-64" => Ok(Arch::X86_64),
            "arm64" | "aarch64" => Ok(Arch::Arm64),
            _ => bail!("--arch {s:?}: not an architecture bpfvm boots; use x86_64, arm64 or all"),
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for a in Arch::EVERY {
            assert_eq!(a.name().parse::<Arch>().unwrap(), a);
            assert_eq!(a.debian().parse::<Arch>().unwrap(), a);
        }
        assert_eq!("aarch64".parse::<Arch>().unwrap(), Arch::Arm64);
    }

    #[test]
    fn all_and_lists() {
        assert_eq!(Arch::parse_list("all").unwrap(), Arch::EVERY.to_vec());
        assert_eq!(
            Arch::parse_list("arm64, x86_64").unwrap(),
            vec![Arch::Arm64, Arch::X86_64]
        );
        let e = Arch::parse_list("riscv64").unwrap_err().to_string();
        assert!(
            e.contains("riscv64") && e.contains("x86_64, arm64 or all"),
            "{e}"
        );
    }

    #[test]
    fn what_x86_64_alone_does_is_refused_for_arm64_naming_the_fix() {
        assert!(Arch::X86_64.refuse(X86Only::Command).is_ok());
        let e = Arch::Arm64
            .refuse(X86Only::Command)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--arch arm64: this command does not boot arm64 kernels yet (docs/arm64.md lists \
             those that do)"
        );
        let e = Arch::Arm64
            .refuse(X86Only::KernelBench)
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("built for x86_64 only; leave --upstream out"),
            "{e}"
        );
        assert_eq!(Arch::Arm64.qemu_system(), "qemu-system-aarch64");
        assert_eq!(Arch::Arm64.cross_gcc(), "aarch64-linux-gnu-gcc");
    }

    /// The numbers are the kernel's own, as its uapi headers on the host define them
    /// (`linux-libc-dev`): x86_64's table, and the generic one arm64's `asm/unistd.h`
    /// includes.
    #[test]
    fn the_bpf_syscall_is_each_architectures_own() {
        let defined = |header: &str| -> u32 {
            let text = std::fs::read_to_string(header).unwrap();
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix("#define __NR_bpf "))
                .unwrap_or_else(|| panic!("{header} defines no __NR_bpf"));
            line.trim().parse().unwrap()
        };
        assert_eq!(
            Arch::X86_64.bpf_syscall(),
            defined("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
        );
        assert_eq!(
            Arch::Arm64.bpf_syscall(),
            defined("/usr/include/asm-generic/unistd.h")
        );
        assert_eq!(Arch::host().bpf_syscall() as libc::c_long, libc::SYS_bpf);
    }

    #[test]
    fn the_membarrier_syscall_is_each_architectures_own() {
        let defined = |header: &str| -> u32 {
            let text = std::fs::read_to_string(header).unwrap();
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix("#define __NR_membarrier "))
                .unwrap_or_else(|| panic!("{header} defines no __NR_membarrier"));
            line.trim().parse().unwrap()
        };
        assert_eq!(
            Arch::X86_64.membarrier_syscall(),
            defined("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
        );
        assert_eq!(
            Arch::Arm64.membarrier_syscall(),
            defined("/usr/include/asm-generic/unistd.h")
        );
        assert_eq!(
            Arch::host().membarrier_syscall() as libc::c_long,
            libc::SYS_membarrier
        );
    }
}
