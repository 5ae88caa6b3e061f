//! Provisioning: the host packages, virtme-ng, virtiofsd, bpf-linker and the eBPF toolchain.
//!
//! [`check`] only looks; [`ensure`] installs what is missing (idempotently) and returns where
//! everything is. Debian packages need root: as non-root, [`ensure`] reports the exact command
//! and fails. The rest installs under [`cache_dir`] and needs no root.
//!
//! Routes: the eBPF objects build with rustup's nightly when it has rust-src (GitHub's Ubuntu
//! runners, most developers), else with Debian's rustc-web, which only Debian has; [`ensure`]
//! says which, and on another distribution without that nightly it fails saying what to install.
//! The package list is Debian's; elsewhere a package may need another archive ([`package_hint`]).
//!
//! Atomicity: `cargo install` only writes its binary and `.crates.toml` at the end, so a failed
//! build leaves nothing that counts as present. The virtme-ng venv counts as present only when
//! its marker file (written last, after pip succeeded) names the pinned version; a venv without
//! it is removed and made again.
mod cargo_tools;
mod debian;
mod distro;
mod toolchain;
mod venv;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use anyhow::{bail, Context, Result};

use crate::support::output::Events;
use crate::support::paths::cache_dir;

pub use cargo_tools::{bpf_linker_install_args, crates_toml_has, virtiofsd_install_args};
pub use debian::{
    apt_install_command, arch_packages, installed_version, needs_apt_update, parse_dpkg_status,
    required_packages, selftests_packages,
};
pub use distro::{host_distro, package_hint, parse_os_release, Distro};
pub use toolchain::{
    nightly_has_rust_src, nightly_toolchain, route_description, route_problem, EbpfToolchain,
};
pub use venv::{parse_requirements, PipVenv};

use cargo_tools::{cargo_install, cargo_installed};
use debian::{dpkg_installed, install_packages};
use toolchain::debian_toolchain;

/// virtme-ng from PyPI, installed in `cache_dir()/venv`.
pub const VIRTME_NG_VERSION: &str = "1.42";
/// virtme-ng and its whole dependency closure, each a wheel pinned by sha256 (the file says
/// how it was made).
const VIRTME_NG_REQUIREMENTS: &str = include_str!("../../../virtme-ng-requirements.txt");
/// The Rust virtiofsd from crates.io (the C one Debian's qemu ships rejects vng's arguments).
pub const VIRTIOFSD_VERSION: &str = "1.14.0";
/// bpf-linker from crates.io, built against Debian's LLVM 22.
pub const BPF_LINKER_VERSION: &str = "0.13.0";
/// The LLVM bpf-linker links against (`llvm-22-dev`).
pub const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
/// Debian's rustc/cargo (`rustc-web`, `cargo-web`), used when rustup nightly has no rust-src.
pub const DEBIAN_CARGO: &str = "/usr/bin/cargo";
pub const DEBIAN_RUSTC: &str = "/usr/bin/rustc";

/// Everything the runner needs, as [`ensure`] found or made it.
#[derive(Debug, Clone)]
pub struct Tools {
    /// The `vng` script in the venv.
    pub vng: PathBuf,
    /// Directories to prepend to PATH for vng (venv bin for `virtme-run`, tools bin for
    /// `virtiofsd`).
    pub path_prefix: Vec<PathBuf>,
    /// The Rust virtiofsd.
    pub virtiofsd: PathBuf,
    /// How to build `ebpf/`.
    pub ebpf: EbpfToolchain,
}

/// One thing provisioning looks after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub name: String,
    pub present: bool,
    pub detail: String,
}

/// Where the provisioned things live.
#[derive(Debug, Clone)]
struct Layout {
    venv: PathBuf,
    tools: PathBuf,
    logs: PathBuf,
}

impl Layout {
    fn new() -> Self {
        let c = cache_dir();
        Layout {
            venv: c.join("venv"),
            tools: c.join("tools"),
            logs: c.join("logs"),
        }
    }
    fn vng(&self) -> PathBuf {
        self.venv.join("bin/vng")
    }
    fn virtme_venv(&self) -> PipVenv {
        PipVenv {
            dir: self.venv.clone(),
            specs: parse_requirements(VIRTME_NG_REQUIREMENTS),
            bin: "vng",
            wheels_only: true,
        }
    }
    fn tool(&self, name: &str) -> PathBuf {
        self.tools.join("bin").join(name)
    }
}

/// The last `n` lines of `s`.
pub fn tail_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Environment a `cargo xtask` parent leaks that would steer a child cargo (toolchain, target
/// dir, flags of the host build). Removed from every cargo/rustc the provisioning and the
/// eBPF build start.
pub(crate) const LEAKED_CARGO_ENV: &[&str] = &[
    "RUSTUP_TOOLCHAIN",
    "RUSTC",
    "RUSTDOC",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_ENCODED_RUSTDOCFLAGS",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_RUSTC",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_MAKEFLAGS",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_PKG_NAME",
    "CARGO_CRATE_NAME",
    "RUSTC_BOOTSTRAP",
];

/// Removes [`LEAKED_CARGO_ENV`] from `cmd`.
pub(crate) fn scrub_cargo_env(cmd: &mut Command) -> &mut Command {
    for k in LEAKED_CARGO_ENV {
        cmd.env_remove(k);
    }
    cmd
}

/// Reports what is present and what is missing; changes nothing.
pub fn check() -> Vec<Item> {
    let l = Layout::new();
    let nightly = nightly_has_rust_src();
    let distro = host_distro();
    let problem = route_problem(nightly, &distro);
    let pkgs = required_packages(nightly, &distro);
    let installed = dpkg_installed(&pkgs);
    let mut items = vec![Item {
        name: "ebpf-toolchain".into(),
        present: problem.is_none(),
        detail: format!(
            "{}{}",
            route_description(nightly),
            problem.map(|p| format!(": {p}")).unwrap_or_default()
        ),
    }];
    for p in &pkgs {
        let present = installed.get(*p).copied().unwrap_or(false);
        items.push(Item {
            name: format!("deb:{p}"),
            present,
            detail: if present {
                "installed".into()
            } else {
                format!("missing: {}", apt_install_command(&[p], is_root()))
            },
        });
    }
    items.push(Item {
        name: "virtme-ng".into(),
        present: l.virtme_venv().present(),
        detail: format!("virtme-ng=={VIRTME_NG_VERSION} in {}", l.venv.display()),
    });
    items.push(Item {
        name: "virtiofsd".into(),
        present: cargo_installed(&l, "virtiofsd", "virtiofsd", VIRTIOFSD_VERSION),
        detail: format!(
            "virtiofsd {VIRTIOFSD_VERSION} (crates.io) in {}",
            l.tools.display()
        ),
    });
    items.push(Item {
        name: "bpf-linker".into(),
        present: cargo_installed(&l, "bpf-linker", "bpf-linker", BPF_LINKER_VERSION),
        detail: format!(
            "bpf-linker {BPF_LINKER_VERSION} (crates.io, LLVM 22 from {LLVM_PREFIX}) in {}",
            l.tools.display()
        ),
    });
    items
}

/// Runs `cmd` (already shown with `events.command`), its stdout and stderr going to `log`.
/// On failure the error carries the tail of the output and the log's path.
pub(crate) fn run_logged(cmd: &mut Command, shown: &str, log: &Path) -> Result<()> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let f = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let f2 = f.try_clone()?;
    let status = crate::support::wait::status(cmd, f.into(), f2.into())
        .with_context(|| format!("running `{shown}`"))?;
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read(log)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    Err(Failed {
        status,
        log: log.to_path_buf(),
        message: format!(
            "`{shown}` failed ({status}); last lines of its output (full log: {}):\n{}",
            log.display(),
            tail_lines(&text, 40)
        ),
    }
    .into())
}

/// The error of a command [`run_logged`] ran that exited non-zero: its status and log, for a
/// caller that decides whether the host or the sources failed
/// (`kernel::source_tree::host_failure_of`).
#[derive(Debug)]
pub struct Failed {
    pub status: ExitStatus,
    pub log: PathBuf,
    message: String,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failed {}

/// The packages of `pkgs` that dpkg does not report installed.
fn missing_packages<'a>(pkgs: &[&'a str]) -> Vec<&'a str> {
    let installed = dpkg_installed(pkgs);
    pkgs.iter()
        .copied()
        .filter(|p| !installed.get(*p).copied().unwrap_or(false))
        .collect()
}

/// Installs whichever of the Debian packages `pkgs` dpkg does not have (as root; otherwise
/// the error gives the `sudo apt-get install` line). For what only some commands need, such as
/// the kernel build tools of `--kernel-tree`.
pub fn ensure_packages(pkgs: &[&str], events: &Events) -> Result<()> {
    let missing = missing_packages(pkgs);
    if missing.is_empty() {
        return Ok(());
    }
    events.step(format!("installing Debian packages: {}", missing.join(" ")));
    install_packages(&missing, &host_distro(), &Layout::new(), events)
}

/// Makes sure everything is installed (installing what is missing) and returns where it is.
pub fn ensure(events: &Events) -> Result<Tools> {
    ensure_alongside(events, || Ok(())).map(|(tools, ())| tools)
}

/// [`ensure`], running `alongside` (a kernel fetch: network and decompression) in a second
/// thread once the Debian packages are in, while this one builds and installs the tools
/// (pip and cargo: mostly CPU). On a fresh machine the two overlap instead of adding up.
/// Both poll the same interrupt flag; the first error wins, after both have stopped.
pub fn ensure_alongside<T: Send>(
    events: &Events,
    alongside: impl FnOnce() -> Result<T> + Send,
) -> Result<(Tools, T)> {
    let l = Layout::new();
    events.step("provisioning host tools");
    let nightly = nightly_has_rust_src();
    let distro = host_distro();
    events.note(format!(
        "host: {}; {}",
        distro.pretty,
        route_description(nightly)
    ));
    if let Some(problem) = route_problem(nightly, &distro) {
        bail!("{problem}");
    }

    // Debian packages.
    let pkgs = required_packages(nightly, &distro);
    let missing = missing_packages(&pkgs);
    if missing.is_empty() {
        events.note(format!("Debian packages: all {} present", pkgs.len()));
    } else {
        events.step(format!("installing Debian packages: {}", missing.join(" ")));
        install_packages(&missing, &distro, &l, events)?;
        events.note(format!("Debian packages: installed {}", missing.join(" ")));
    }

    std::thread::scope(|s| {
        let other = s.spawn(alongside);
        let tools = install_tools(&l, nightly, events);
        let other = other
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        Ok((tools?, other?))
    })
}

/// virtme-ng, virtiofsd and bpf-linker, each installed unless present.
fn install_tools(l: &Layout, nightly: bool, events: &Events) -> Result<Tools> {
    // virtme-ng.
    let virtme = l.virtme_venv();
    if virtme.present() {
        events.note(format!(
            "virtme-ng {VIRTME_NG_VERSION}: present in {}",
            l.venv.display()
        ));
    } else {
        events.step(format!(
            "installing virtme-ng {VIRTME_NG_VERSION} into {}",
            l.venv.display()
        ));
        virtme.install(&l.logs, "virtme-ng", events)?;
        events.note(format!("virtme-ng {VIRTME_NG_VERSION}: installed"));
    }

    // virtiofsd.
    if cargo_installed(l, "virtiofsd", "virtiofsd", VIRTIOFSD_VERSION) {
        events.note(format!(
            "virtiofsd {VIRTIOFSD_VERSION}: present in {}",
            l.tools.display()
        ));
    } else {
        events.step(format!("building virtiofsd {VIRTIOFSD_VERSION} (~1 min)"));
        cargo_install(
            l,
            events,
            "virtiofsd",
            &[],
            virtiofsd_install_args(&l.tools),
        )?;
        events.note(format!("virtiofsd {VIRTIOFSD_VERSION}: installed"));
    }

    // bpf-linker: always built against Debian's LLVM 22 (the same LLVM as rustc-web 1.96 and
    // rustup's 1.95+ compilers), whichever route builds the objects.
    if cargo_installed(l, "bpf-linker", "bpf-linker", BPF_LINKER_VERSION) {
        events.note(format!(
            "bpf-linker {BPF_LINKER_VERSION}: present in {}",
            l.tools.display()
        ));
    } else {
        events.step(format!(
            "building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (~40 s)"
        ));
        cargo_install(
            l,
            events,
            "bpf-linker",
            &[("LLVM_PREFIX", LLVM_PREFIX.to_string())],
            bpf_linker_install_args(&l.tools),
        )?;
        events.note(format!("bpf-linker {BPF_LINKER_VERSION}: installed"));
    }

    let bpf_linker = l.tool("bpf-linker");
    let ebpf = if nightly {
        EbpfToolchain::RustupNightly { bpf_linker }
    } else {
        debian_toolchain(bpf_linker)
    };
    Ok(Tools {
        vng: l.vng(),
        path_prefix: vec![l.venv.join("bin"), l.tools.join("bin")],
        virtiofsd: l.tool("virtiofsd"),
        ebpf,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The venv vng runs from installs virtme-ng's whole closure, every package pinned to one
    /// wheel by hash, no sdist.
    #[test]
    fn virtme_ng_installs_a_hash_pinned_closure_of_wheels() {
        let v = Layout::new().virtme_venv();
        assert!(v.specs.contains(&format!(
            "virtme-ng=={VIRTME_NG_VERSION} --hash=sha256:99589f1f5d74249038fe3c52aad9d3c33cb82a2d9617997511d4489fc709a707"
        )));
        for dep in [
            "argcomplete==",
            "requests==",
            "urllib3==",
            "idna==",
            "certifi==",
            "charset-normalizer==",
        ] {
            assert!(
                v.specs.iter().any(|s| s.starts_with(dep)),
                "{dep} not pinned"
            );
        }
        for s in &v.specs {
            let (spec, hash) = s.split_once(" --hash=sha256:").expect("hashed");
            assert!(spec.contains("=="), "{s}");
            assert_eq!(hash.len(), 64, "{s}");
        }
        let args = v.pip_args(Path::new("/v/requirements.txt"));
        assert_eq!(
            args[2..],
            [
                "--only-binary",
                ":all:",
                "--require-hashes",
                "-r",
                "/v/requirements.txt"
            ]
        );
    }

    #[test]
    fn tails() {
        assert_eq!(tail_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail_lines("a", 5), "a");
    }

    #[test]
    fn failing_command_shows_tail() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("x.log");
        let err = run_logged(
            Command::new("sh").args(["-c", "echo one; echo two >&2; exit 3"]),
            "sh -c ...",
            &log,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("one") && err.contains("two"), "{err}");
        assert!(run_logged(&mut Command::new("true"), "true", &log).is_ok());
    }
}
