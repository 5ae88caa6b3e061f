//! Debian packages: which are needed, which dpkg has, and installing the rest with apt (as root).
use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::distro::{package_hint, Distro};
use super::{is_root, run_logged, Layout};
use crate::domain::arch::Arch;
use crate::support::output::Events;

/// The keyring the private apt checks the kernel suites with (`kernels::apt::KEYRING`). Debian
/// always has it; Ubuntu ships the same file in its `debian-archive-keyring` package.
const KEYRING_PACKAGE: &str = "debian-archive-keyring";

/// Packages needed on every route.
const BASE_PACKAGES: &[&str] = &[
    // dpkg/apt basics: kernel pins are fetched with `apt-get download` and unpacked with
    // `dpkg-deb`; TLS roots for apt, pip and cargo.
    "apt",
    "dpkg",
    "ca-certificates",
    KEYRING_PACKAGE,
    // A C toolchain for linking Rust binaries (virtiofsd, bpf-linker, the guest tests).
    "gcc",
    "libc6-dev",
    // virtme-ng and its host tools.
    "qemu-system-x86",
    "kmod",
    "udev",
    // vng builds an initramfs (to load virtio/virtiofs modules of the cloud kernels) from it,
    // after asking `file -L` whether it is static (`virtme/commands/run.py`,
    // `is_statically_linked`): without `file` (priority standard, so not on a minimal Debian 13)
    // virtme-run dies with FileNotFoundError before qemu starts.
    "busybox-static",
    "file",
    "python3",
    "python3-venv",
    // virtiofsd.
    "libseccomp-dev",
    "libcap-ng-dev",
    "pkg-config",
    // bpf-linker.
    "llvm-22-dev",
    "libzstd-dev",
];

/// Debian's Rust 1.96 with the library sources, for `-Z build-std=core`.
const DEBIAN_RUST_PACKAGES: &[&str] = &["rustc-web", "cargo-web", "rust-web-src"];

/// The same on Debian's testing and unstable, which have no rustc-web (it backports a newer
/// Rust to the stable releases): their own Rust is as new, with the same paths.
const DEBIAN_UNRELEASED_RUST_PACKAGES: &[&str] = &["rustc", "cargo", "rust-src"];

/// What the kernel's BPF selftests (`tools/testing/selftests/bpf/Makefile`) build with besides
/// clang `clang`: its llc, llvm-strip and llvm-objcopy, lld (`urandom_read` links with
/// `-fuse-ld=lld`), libelf and zlib (libbpf), libcap, libssl (`sign-file`), flex and bison
/// (bpftool's and resolve_btfids' builds), pahole, make, rsync (the kernel headers' install,
/// the copy of the source), and xz-utils (the `linux-source` tarball is `.tar.xz`; a minimal
/// Debian 13 lacks `xz`). And the programs the tests run in the guest, which shares the
/// host's root (`SYS(...)` in prog_tests/): ping (iputils-ping: cgroup_attach_*, cgroup_link,
/// netcnt), iptables (xdp_synproxy), keyctl (keyutils: verify_pkcs7_sig's
/// verify_sig_setup.sh), ethtool (xdp_do_redirect, xdp_synproxy: a minimal Debian 13 lacks it);
/// `ip` and `tc` are iproute2's, already there.
///
/// For an `arch` other than the host's, the libraries the selftests link are that
/// architecture's too (Debian's multiarch `name:arm64`, [`install_packages`] adds the
/// architecture to dpkg): libelf, zlib and zstd (libbpf), libcap, and libssl (`sign-file` is
/// built with the cross compiler: it runs in the guest).
pub fn selftests_packages(clang: u32, arch: Arch) -> Vec<String> {
    let mut p: Vec<String> = ["clang", "llvm", "lld"]
        .iter()
        .map(|t| format!("{t}-{clang}"))
        .collect();
    p.extend(
        [
            "make",
            "libelf-dev",
            "zlib1g-dev",
            "libcap-dev",
            "libssl-dev",
            "flex",
            "bison",
            "dwarves",
            "rsync",
            "xz-utils",
            "iputils-ping",
            "iptables",
            "keyutils",
            "ethtool",
        ]
        .map(String::from),
    );
    if arch != Arch::host() {
        p.extend(
            [
                "libelf-dev",
                "zlib1g-dev",
                "libzstd-dev",
                "libcap-dev",
                "libssl-dev",
            ]
            .map(|lib| format!("{lib}:{}", arch.debian())),
        );
    }
    p
}

/// The foreign architectures `pkgs` name (`libelf-dev:arm64`), which dpkg must know before apt
/// can install them.
fn foreign_architectures<'a>(pkgs: &[&'a str]) -> Vec<&'a str> {
    let native = Arch::host().debian();
    let mut archs: Vec<&str> = pkgs
        .iter()
        .filter_map(|p| p.split_once(':').map(|(_, a)| a))
        .filter(|a| *a != native && *a != "all" && *a != "any")
        .collect();
    archs.sort_unstable();
    archs.dedup();
    archs
}

/// What booting a guest of `arch` on this host needs beyond the base packages: for arm64,
/// qemu's system emulator, its user-mode emulator (it lists the applets of the guest root's
/// busybox, `kernel::pins::userland`), and the cross linker and libc the guest binaries are
/// linked with (they are built with `-Z build-std=std` by the toolchain the base packages
/// give: `build::guest_command`).
pub fn arch_packages(arch: Arch) -> Vec<&'static str> {
    match arch {
        Arch::X86_64 => vec![],
        Arch::Arm64 => vec![
            "qemu-system-arm",
            "qemu-user",
            "gcc-aarch64-linux-gnu",
            "libc6-dev-arm64-cross",
        ],
    }
}

/// The Debian packages needed on `distro`, given whether rustup nightly has rust-src.
pub fn required_packages(nightly_has_rust_src: bool, distro: &Distro) -> Vec<&'static str> {
    let mut p = BASE_PACKAGES.to_vec();
    if !nightly_has_rust_src {
        p.extend_from_slice(match distro.is_debian_unreleased() {
            true => DEBIAN_UNRELEASED_RUST_PACKAGES,
            false => DEBIAN_RUST_PACKAGES,
        });
    }
    p
}

/// Parses `dpkg-query -W -f='${binary:Package}\t${Status}\n' PKGS...` into package ->
/// installed. A package of a foreign architecture is known by its `name:arch` only (`libelf-dev:
/// arm64` is not the host's `libelf-dev`); one of the host's by its name too. Packages dpkg does
/// not know are absent from the output (dpkg-query complains on stderr).
pub fn parse_dpkg_status(out: &str) -> BTreeMap<String, bool> {
    let native = Arch::host().debian();
    let mut m = BTreeMap::new();
    for line in out.lines() {
        let Some((pkg, status)) = line.split_once('\t') else {
            continue;
        };
        let pkg = pkg.trim();
        // Status is "want flag state", e.g. "install ok installed", "deinstall ok config-files".
        let installed = status.split_whitespace().nth(2) == Some("installed");
        let names = match pkg.split_once(':') {
            Some((name, arch)) if arch == native || arch == "all" => vec![name, pkg],
            Some(_) => vec![pkg],
            None => vec![pkg],
        };
        for n in names {
            *m.entry(n.to_string()).or_insert(false) |= installed;
        }
    }
    m
}

/// Whether `apt-cache policy PKGS...` shows a package with no candidate (or not at all), so
/// that `apt-get update` must run before `apt-get install`.
pub fn needs_apt_update(policy: &str, pkgs: &[&str]) -> bool {
    let mut candidates: BTreeMap<&str, bool> = BTreeMap::new();
    let mut current: Option<&str> = None;
    for line in policy.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            current = Some(line.trim_end_matches(':').split(':').next().unwrap_or(""));
            continue;
        }
        if let (Some(pkg), Some(c)) = (current, line.trim().strip_prefix("Candidate:")) {
            candidates.insert(pkg, c.trim() != "(none)");
        }
    }
    pkgs.iter()
        .any(|p| !candidates.get(p).copied().unwrap_or(false))
}

/// The command line that installs Debian packages (prefixed with `sudo` when not root).
pub fn apt_install_command(pkgs: &[&str], root: bool) -> String {
    let sudo = if root { "" } else { "sudo " };
    format!(
        "{sudo}env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {}",
        pkgs.join(" ")
    )
}

/// The version dpkg has of `pkg` installed, if it has.
pub fn installed_version(pkg: &str) -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}\t${Version}", pkg])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (status, version) = text.split_once('\t')?;
    (status.split_whitespace().nth(2) == Some("installed")).then(|| version.trim().to_string())
}

/// Which of `pkgs` dpkg reports installed.
pub(super) fn dpkg_installed(pkgs: &[&str]) -> BTreeMap<String, bool> {
    let out = Command::new("dpkg-query")
        .arg("-W")
        .arg("-f=${binary:Package}\t${Status}\n")
        .args(pkgs)
        .stderr(Stdio::null())
        .output();
    match out {
        Ok(o) => parse_dpkg_status(&String::from_utf8_lossy(&o.stdout)),
        Err(_) => BTreeMap::new(),
    }
}

pub(super) fn install_packages(
    missing: &[&str],
    distro: &Distro,
    l: &Layout,
    events: &Events,
) -> Result<()> {
    let hint = package_hint(missing, distro);
    if !is_root() {
        bail!(
            "Debian packages missing: {}. Install them as root:\n  {}{}",
            missing.join(" "),
            apt_install_command(missing, false),
            hint.map(|h| format!("\n({h})")).unwrap_or_default()
        );
    }
    if let Some(h) = hint {
        events.warn(h);
    }
    let policy = Command::new("apt-cache")
        .arg("policy")
        .args(missing)
        .stderr(Stdio::null())
        .output()
        .context("running apt-cache policy")?;
    // A foreign architecture dpkg did not have yet: its package indexes are not there either.
    let mut added = false;
    for arch in foreign_architectures(missing) {
        let known = Command::new("dpkg")
            .arg("--print-foreign-architectures")
            .output()
            .context("running dpkg --print-foreign-architectures")?;
        if !String::from_utf8_lossy(&known.stdout)
            .split_whitespace()
            .any(|a| a == arch)
        {
            let shown = format!("dpkg --add-architecture {arch}");
            events.command(&shown);
            run_logged(
                Command::new("dpkg").args(["--add-architecture", arch]),
                &shown,
                &l.logs.join("apt-get-update.log"),
            )?;
            added = true;
        }
    }
    if added || needs_apt_update(&String::from_utf8_lossy(&policy.stdout), missing) {
        let shown = "env DEBIAN_FRONTEND=noninteractive apt-get update";
        events.command(shown);
        run_logged(
            Command::new("apt-get")
                .arg("update")
                .env("DEBIAN_FRONTEND", "noninteractive"),
            shown,
            &l.logs.join("apt-get-update.log"),
        )?;
    }
    let shown = apt_install_command(missing, true);
    events.command(&shown);
    run_logged(
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends"])
            .args(missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
        &shown,
        &l.logs.join("apt-get-install.log"),
    )?;
    // `name=version` is installed as `name`.
    let names: Vec<&str> = missing
        .iter()
        .map(|p| p.split('=').next().unwrap_or(p))
        .collect();
    let after = dpkg_installed(&names);
    let still: Vec<&str> = names
        .iter()
        .copied()
        .filter(|p| !after.get(*p).copied().unwrap_or(false))
        .collect();
    if !still.is_empty() {
        bail!(
            "apt-get install succeeded but these are still not installed: {}",
            still.join(" ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::provision::distro::parse_os_release;
    use crate::machine::provision::distro::tests::{DEBIAN, SID};

    #[test]
    fn packages_depend_on_route() {
        let bookworm = parse_os_release(DEBIAN);
        let with = required_packages(true, &bookworm);
        let without = required_packages(false, &bookworm);
        assert!(!with.contains(&"rustc-web"));
        for p in [
            "rustc-web",
            "cargo-web",
            "rust-web-src",
            "llvm-22-dev",
            "qemu-system-x86",
        ] {
            assert!(without.contains(&p), "{p}");
        }
        assert!(with.contains(&"llvm-22-dev"));
    }

    /// sid has no rustc-web: its own rustc, cargo and rust-src are installed instead.
    #[test]
    fn debian_unstable_takes_its_own_rust() {
        let sid = required_packages(false, &parse_os_release(SID));
        for p in ["rustc", "cargo", "rust-src", "llvm-22-dev"] {
            assert!(sid.contains(&p), "{p}");
        }
        assert!(!sid
            .iter()
            .any(|p| p.ends_with("-web") || p.contains("-web-")));
        assert!(!required_packages(true, &parse_os_release(SID)).contains(&"rustc"));
    }

    #[test]
    fn dpkg_status_parsing() {
        let out = "kmod\tinstall ok installed\nudev\tdeinstall ok config-files\n\
                   libc6:amd64\tinstall ok installed\nqemu-system-x86\tinstall ok half-installed\n\
                   libelf-dev:arm64\tinstall ok installed\n";
        let m = parse_dpkg_status(out);
        // The arm64 library is not the host's.
        assert_eq!(m.get("libelf-dev:arm64"), Some(&true));
        assert_eq!(m.get("libelf-dev"), None);
        assert_eq!(m.get("libc6:amd64"), Some(&true));
        assert_eq!(m.get("kmod"), Some(&true));
        assert_eq!(m.get("udev"), Some(&false));
        assert_eq!(m.get("libc6"), Some(&true));
        assert_eq!(m.get("qemu-system-x86"), Some(&false));
        assert_eq!(m.get("python3-venv"), None);
    }

    #[test]
    fn apt_policy_parsing() {
        let policy =
            "kmod:\n  Installed: 30+20221128-1\n  Candidate: 30+20221128-1\n  Version table:\n\
                      udev:\n  Installed: (none)\n  Candidate: 252.39-1~deb12u1\n";
        assert!(!needs_apt_update(policy, &["kmod", "udev"]));
        assert!(
            needs_apt_update(policy, &["kmod", "llvm-22-dev"]),
            "unknown package"
        );
        let none = "llvm-22-dev:\n  Installed: (none)\n  Candidate: (none)\n";
        assert!(needs_apt_update(none, &["llvm-22-dev"]));
    }

    #[test]
    fn keyring_package_is_required_on_every_route() {
        for nightly in [true, false] {
            let p = required_packages(nightly, &parse_os_release(DEBIAN));
            assert!(p.contains(&"debian-archive-keyring"));
        }
    }
}
