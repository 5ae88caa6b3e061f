//! Which compiler builds `ebpf/`: rustup's nightly when it has rust-src, else Debian's
//! rustc-web, which only Debian's archive has.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::distro::Distro;
use super::{scrub_cargo_env, DEBIAN_CARGO, DEBIAN_RUSTC};

/// The toolchain that builds `ebpf/` for `bpfel-unknown-none`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EbpfToolchain {
    /// `cargo +nightly build -Z build-std=core`: rustup's nightly has rust-src.
    RustupNightly {
        /// The `bpf-linker` binary.
        bpf_linker: PathBuf,
    },
    /// Debian's `rustc-web` 1.96 with `RUSTC_BOOTSTRAP=1` and `-Z build-std=core`.
    Debian {
        cargo: PathBuf,
        rustc: PathBuf,
        /// The `bpf-linker` binary.
        bpf_linker: PathBuf,
    },
}

impl EbpfToolchain {
    /// The `bpf-linker` binary.
    pub fn bpf_linker(&self) -> &Path {
        match self {
            EbpfToolchain::RustupNightly { bpf_linker }
            | EbpfToolchain::Debian { bpf_linker, .. } => bpf_linker,
        }
    }

    /// The directory to put first in PATH so rustc finds `bpf-linker`.
    pub fn bpf_linker_dir(&self) -> &Path {
        self.bpf_linker().parent().unwrap_or(Path::new("/"))
    }

    /// The line printed when the toolchain is chosen.
    pub fn describe(&self) -> &'static str {
        route_description(matches!(self, EbpfToolchain::RustupNightly { .. }))
    }
}

/// The line saying which eBPF toolchain is used.
pub fn route_description(nightly_has_rust_src: bool) -> &'static str {
    if nightly_has_rust_src {
        "eBPF toolchain: rustup nightly + rust-src"
    } else {
        "eBPF toolchain: Debian's Rust (rustc-web 1.96 on Debian 12 and 13, rustc on testing and \
         unstable; RUSTC_BOOTSTRAP=1, -Z build-std=core); rustup nightly has no rust-src"
    }
}

/// Why the chosen eBPF toolchain route cannot work on this host, if it cannot: Debian's
/// rustc-web exists only in Debian's archive, so elsewhere rustup's nightly is the route.
pub fn route_problem(nightly_has_rust_src: bool, distro: &Distro) -> Option<String> {
    // An unknown distribution (no os-release) gets the benefit of the doubt.
    let elsewhere = !distro.id.is_empty() && !distro.is_debian();
    (!nightly_has_rust_src && elsewhere).then(|| {
        format!(
            "{} has no Debian rustc-web; install rustup's nightly with the library sources: \
             rustup toolchain install nightly --component rust-src",
            distro.pretty
        )
    })
}

/// The rustup toolchain of the nightly route: `$BPFVM_NIGHTLY` (CI pins a dated nightly whose
/// LLVM matches bpf-linker's), else `nightly`.
pub fn nightly_toolchain() -> String {
    std::env::var("BPFVM_NIGHTLY")
        .ok()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "nightly".into())
}

/// Whether rustup's nightly has rust-src (so `cargo +nightly -Z build-std=core` works).
pub fn nightly_has_rust_src() -> bool {
    let mut cmd = Command::new("rustc");
    scrub_cargo_env(&mut cmd);
    let Ok(out) = cmd
        .arg(format!("+{}", nightly_toolchain()))
        .args(["--print", "sysroot"])
        .stderr(Stdio::null())
        .output()
    else {
        return false;
    };
    if !out.status.success() {
        return false;
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    sysroot
        .join("lib/rustlib/src/rust/library/core/Cargo.toml")
        .is_file()
}

pub(super) fn debian_toolchain(bpf_linker: PathBuf) -> EbpfToolchain {
    EbpfToolchain::Debian {
        cargo: DEBIAN_CARGO.into(),
        rustc: DEBIAN_RUSTC.into(),
        bpf_linker,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::provision::distro::tests::{DEBIAN, UBUNTU};
    use crate::machine::provision::parse_os_release;

    #[test]
    fn route_lines() {
        assert_eq!(
            route_description(true),
            "eBPF toolchain: rustup nightly + rust-src"
        );
        let t = debian_toolchain("/x/bin/bpf-linker".into());
        assert!(t
            .describe()
            .starts_with("eBPF toolchain: Debian's Rust (rustc-web 1.96"));
        assert_eq!(t.bpf_linker_dir(), Path::new("/x/bin"));
    }

    #[test]
    fn debian_route_is_refused_off_debian_only() {
        let (u, d) = (parse_os_release(UBUNTU), parse_os_release(DEBIAN));
        let p = route_problem(false, &u).expect("Ubuntu has no rustc-web");
        assert!(
            p.contains("Ubuntu 24.04.3 LTS") && p.contains("--component rust-src"),
            "{p}"
        );
        assert_eq!(route_problem(true, &u), None);
        assert_eq!(route_problem(false, &d), None);
        assert_eq!(
            route_problem(false, &Distro::default()),
            None,
            "unknown host"
        );
    }
}
