//! The guest's architecture (`--arch`): one value, parsed once, that names the Debian packages,
//! the Rust target, vng's `--arch` and qemu's machine for every command that boots.
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

    /// `--arch`'s value: `x86_64`, `arm64` (Debian's `amd64` and the kernel's `aarch64` too),
    /// or `all`.
    pub fn parse_list(value: &str) -> Result<Vec<Arch>> {
        if value == ALL {
            return Ok(Arch::EVERY.to_vec());
        }
        value.split(',').map(|v| v.trim().parse()).collect()
    }
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
}
