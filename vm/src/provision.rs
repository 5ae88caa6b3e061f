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
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::output::Events;
use crate::paths::cache_dir;
use crate::shell;

/// virtme-ng from PyPI, installed in `cache_dir()/venv`.
pub const VIRTME_NG_VERSION: &str = "1.42";
/// The Rust virtiofsd from crates.io (the C one Debian's qemu ships rejects vng's arguments).
pub const VIRTIOFSD_VERSION: &str = "1.14.0";
/// bpf-linker from crates.io, built against Debian's LLVM 22.
pub const BPF_LINKER_VERSION: &str = "0.13.0";
/// The LLVM bpf-linker links against (`llvm-22-dev`).
pub const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
/// Debian's rustc/cargo (`rustc-web`, `cargo-web`), used when rustup nightly has no rust-src.
pub const DEBIAN_CARGO: &str = "/usr/bin/cargo";
pub const DEBIAN_RUSTC: &str = "/usr/bin/rustc";

/// Marker written into a venv after pip succeeded.
const VENV_MARKER: &str = ".bpfvm-complete";

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
    // vng builds an initramfs (to load virtio/virtiofs modules of the cloud kernels) from it.
    "busybox-static",
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
        "eBPF toolchain: Debian rustc-web 1.96 (RUSTC_BOOTSTRAP=1, -Z build-std=core); rustup nightly has no rust-src"
    }
}

/// The host's distribution, from os-release(5).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Distro {
    /// `ID`: "debian", "ubuntu", ...
    pub id: String,
    /// `VERSION_CODENAME`: "bookworm", "noble", ...
    pub codename: String,
    /// `PRETTY_NAME`, for messages.
    pub pretty: String,
}

impl Distro {
    pub fn is_debian(&self) -> bool {
        self.id == "debian"
    }
}

/// Parses os-release(5): `KEY=value` lines, values optionally quoted.
pub fn parse_os_release(text: &str) -> Distro {
    let mut d = Distro::default();
    for line in text.lines() {
        let Some((k, v)) = line.trim().split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches(|c| c == '"' || c == '\'').to_string();
        match k {
            "ID" => d.id = v,
            "VERSION_CODENAME" => d.codename = v,
            "PRETTY_NAME" => d.pretty = v,
            _ => {}
        }
    }
    if d.pretty.is_empty() {
        d.pretty = if d.id.is_empty() {
            "unknown Linux".into()
        } else {
            d.id.clone()
        };
    }
    d
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

/// A hint for Debian packages other distributions do not carry (the package list is Debian's).
pub fn package_hint(missing: &[&str], distro: &Distro) -> Option<String> {
    let llvm = LLVM_PREFIX.trim_start_matches("/usr/lib/");
    let dev = format!("{llvm}-dev");
    (!distro.is_debian() && missing.contains(&dev.as_str())).then(|| {
        format!(
            "{dev} is not in {}'s archive: add LLVM's apt repository \
             (suite llvm-toolchain-{}-{}) first, as ci/github-runner-setup.sh does",
            distro.pretty,
            distro.codename,
            llvm.trim_start_matches("llvm-")
        )
    })
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
            specs: vec![format!("virtme-ng=={VIRTME_NG_VERSION}")],
            bin: "vng",
        }
    }
    fn tool(&self, name: &str) -> PathBuf {
        self.tools.join("bin").join(name)
    }
}

// ---------------------------------------------------------------------------------------------
// Pure logic (unit-tested).

/// The Debian packages needed, given whether rustup nightly has rust-src.
pub fn required_packages(nightly_has_rust_src: bool) -> Vec<&'static str> {
    let mut p = BASE_PACKAGES.to_vec();
    if !nightly_has_rust_src {
        p.extend_from_slice(DEBIAN_RUST_PACKAGES);
    }
    p
}

/// Parses `dpkg-query -W -f='${Package}\t${Status}\n' PKGS...` into package -> installed.
/// Packages dpkg does not know are absent from the output (dpkg-query complains on stderr).
pub fn parse_dpkg_status(out: &str) -> BTreeMap<String, bool> {
    let mut m = BTreeMap::new();
    for line in out.lines() {
        let Some((pkg, status)) = line.split_once('\t') else {
            continue;
        };
        // `${Package}` may carry `:arch` in some dpkg versions.
        let pkg = pkg.split(':').next().unwrap_or(pkg).trim();
        // Status is "want flag state", e.g. "install ok installed", "deinstall ok config-files".
        let installed = status.split_whitespace().nth(2) == Some("installed");
        let e = m.entry(pkg.to_string()).or_insert(false);
        *e |= installed;
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

/// Whether `.crates.toml` (cargo install's record) lists `krate` at exactly `version`.
pub fn crates_toml_has(crates_toml: &str, krate: &str, version: &str) -> bool {
    let Ok(doc) = crates_toml.parse::<toml::Table>() else {
        return false;
    };
    let Some(v1) = doc.get("v1").and_then(|v| v.as_table()) else {
        return false;
    };
    let want = format!("{krate} {version} ");
    v1.keys().any(|k| k.starts_with(&want))
}

/// `cargo install` arguments for virtiofsd.
pub fn virtiofsd_install_args(root: &Path) -> Vec<String> {
    let mut a: Vec<String> = [
        "install",
        "--locked",
        "virtiofsd",
        "--version",
        VIRTIOFSD_VERSION,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push("--root".into());
    a.push(root.display().to_string());
    a
}

/// `cargo install` arguments for bpf-linker against Debian's LLVM 22 (env `LLVM_PREFIX`).
pub fn bpf_linker_install_args(root: &Path) -> Vec<String> {
    let mut a: Vec<String> = [
        "install",
        "bpf-linker",
        "--version",
        BPF_LINKER_VERSION,
        "--locked",
        "--no-default-features",
        "--features",
        "llvm-22",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push("--root".into());
    a.push(root.display().to_string());
    a
}

/// The last `n` lines of `s`.
pub fn tail_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// Probes.

fn is_root() -> bool {
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

/// Whether rustup's nightly has rust-src (so `cargo +nightly -Z build-std=core` works).
pub fn nightly_has_rust_src() -> bool {
    let mut cmd = Command::new("rustc");
    scrub_cargo_env(&mut cmd);
    let Ok(out) = cmd
        .args(["+nightly", "--print", "sysroot"])
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

/// The host's distribution (`/etc/os-release`, else `/usr/lib/os-release`).
pub fn host_distro() -> Distro {
    ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|t| parse_os_release(&t))
        .unwrap_or_default()
}

/// Which of `pkgs` dpkg reports installed.
fn dpkg_installed(pkgs: &[&str]) -> BTreeMap<String, bool> {
    let out = Command::new("dpkg-query")
        .arg("-W")
        .arg("-f=${Package}\t${Status}\n")
        .args(pkgs)
        .stderr(Stdio::null())
        .output();
    match out {
        Ok(o) => parse_dpkg_status(&String::from_utf8_lossy(&o.stdout)),
        Err(_) => BTreeMap::new(),
    }
}

fn cargo_installed(l: &Layout, krate: &str, bin: &str, version: &str) -> bool {
    l.tool(bin).is_file()
        && std::fs::read_to_string(l.tools.join(".crates.toml"))
            .map(|s| crates_toml_has(&s, krate, version))
            .unwrap_or(false)
}

fn debian_toolchain(bpf_linker: PathBuf) -> EbpfToolchain {
    EbpfToolchain::Debian {
        cargo: DEBIAN_CARGO.into(),
        rustc: DEBIAN_RUSTC.into(),
        bpf_linker,
    }
}

/// Reports what is present and what is missing; changes nothing.
pub fn check() -> Vec<Item> {
    let l = Layout::new();
    let nightly = nightly_has_rust_src();
    let distro = host_distro();
    let problem = route_problem(nightly, &distro);
    let pkgs = required_packages(nightly);
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

// ---------------------------------------------------------------------------------------------
// Installing.

/// Runs `cmd` (already shown with `events.command`), its stdout and stderr going to `log`.
/// On failure the error carries the tail of the output and the log's path.
pub(crate) fn run_logged(cmd: &mut Command, shown: &str, log: &Path) -> Result<()> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let f = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let f2 = f.try_clone()?;
    let status = cmd
        .stdin(Stdio::null())
        .stdout(f)
        .stderr(f2)
        .status()
        .with_context(|| format!("starting `{shown}`"))?;
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read(log)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    bail!(
        "`{shown}` failed ({status}); last lines of its output (full log: {}):\n{}",
        log.display(),
        tail_lines(&text, 40)
    )
}

fn install_packages(missing: &[&str], distro: &Distro, l: &Layout, events: &Events) -> Result<()> {
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
    if needs_apt_update(&String::from_utf8_lossy(&policy.stdout), missing) {
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
    let after = dpkg_installed(missing);
    let still: Vec<&str> = missing
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

/// A venv under the cache holding pinned PyPI packages. It counts as present only when its
/// marker (written last, after pip succeeded) lists exactly `specs`; one without it is made again.
#[derive(Debug, Clone)]
pub(crate) struct PipVenv {
    pub dir: PathBuf,
    /// `name==version`, one per package.
    pub specs: Vec<String>,
    /// An executable pip must have put into `bin/`.
    pub bin: &'static str,
}

impl PipVenv {
    pub fn bin_path(&self) -> PathBuf {
        self.dir.join("bin").join(self.bin)
    }

    fn marker(&self) -> PathBuf {
        self.dir.join(VENV_MARKER)
    }

    pub fn present(&self) -> bool {
        self.bin_path().is_file()
            && std::fs::read_to_string(self.marker())
                .map(|s| s.trim() == self.specs.join("\n"))
                .unwrap_or(false)
    }

    /// Makes the venv from scratch; logs go to `logs/<log>-*.log`.
    pub fn install(&self, logs: &Path, log: &str, events: &Events) -> Result<()> {
        if self.dir.exists() {
            events.note(format!("removing incomplete venv {}", self.dir.display()));
            std::fs::remove_dir_all(&self.dir)
                .with_context(|| format!("removing {}", self.dir.display()))?;
        }
        if let Some(parent) = self.dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let shown = format!(
            "python3 -m venv {}",
            shell::quote(&self.dir.display().to_string())
        );
        events.command(&shown);
        run_logged(
            Command::new("python3").args(["-m", "venv"]).arg(&self.dir),
            &shown,
            &logs.join(format!("{log}-venv.log")),
        )?;
        let pip = self.dir.join("bin/pip");
        let mut args = vec!["install".to_string(), "--disable-pip-version-check".into()];
        args.extend(self.specs.iter().cloned());
        let shown = shell::display(&[], &pip.display().to_string(), &args);
        events.command(&shown);
        run_logged(
            Command::new(&pip).args(&args),
            &shown,
            &logs.join(format!("{log}-pip.log")),
        )?;
        if !self.bin_path().is_file() {
            bail!(
                "pip installed {} but {} is missing",
                self.specs.join(" "),
                self.bin_path().display()
            );
        }
        // Last: only now does the venv count as present.
        std::fs::write(self.marker(), format!("{}\n", self.specs.join("\n")))?;
        Ok(())
    }
}

fn cargo_install(
    l: &Layout,
    events: &Events,
    what: &str,
    envs: &[(&str, String)],
    args: Vec<String>,
) -> Result<()> {
    std::fs::create_dir_all(&l.tools)?;
    let shown = shell::display(envs, "cargo", &args);
    events.command(&shown);
    let mut cmd = Command::new("cargo");
    scrub_cargo_env(&mut cmd);
    cmd.args(&args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    run_logged(
        &mut cmd,
        &shown,
        &l.logs.join(format!("cargo-install-{what}.log")),
    )
}

/// Makes sure everything is installed (installing what is missing) and returns where it is.
pub fn ensure(events: &Events) -> Result<Tools> {
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
    let pkgs = required_packages(nightly);
    let installed = dpkg_installed(&pkgs);
    let missing: Vec<&str> = pkgs
        .iter()
        .copied()
        .filter(|p| !installed.get(*p).copied().unwrap_or(false))
        .collect();
    if missing.is_empty() {
        events.note(format!("Debian packages: all {} present", pkgs.len()));
    } else {
        events.step(format!("installing Debian packages: {}", missing.join(" ")));
        install_packages(&missing, &distro, &l, events)?;
        events.note(format!("Debian packages: installed {}", missing.join(" ")));
    }

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
    if cargo_installed(&l, "virtiofsd", "virtiofsd", VIRTIOFSD_VERSION) {
        events.note(format!(
            "virtiofsd {VIRTIOFSD_VERSION}: present in {}",
            l.tools.display()
        ));
    } else {
        events.step(format!("building virtiofsd {VIRTIOFSD_VERSION} (~1.5 min)"));
        cargo_install(
            &l,
            events,
            "virtiofsd",
            &[],
            virtiofsd_install_args(&l.tools),
        )?;
        events.note(format!("virtiofsd {VIRTIOFSD_VERSION}: installed"));
    }

    // bpf-linker: always built against Debian's LLVM 22 (the same LLVM as rustc-web 1.96 and
    // rustup's 1.95+ compilers), whichever route builds the objects.
    if cargo_installed(&l, "bpf-linker", "bpf-linker", BPF_LINKER_VERSION) {
        events.note(format!(
            "bpf-linker {BPF_LINKER_VERSION}: present in {}",
            l.tools.display()
        ));
    } else {
        events.step(format!(
            "building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (~1.5 min)"
        ));
        cargo_install(
            &l,
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

    #[test]
    fn packages_depend_on_route() {
        let with = required_packages(true);
        let without = required_packages(false);
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

    #[test]
    fn dpkg_status_parsing() {
        let out = "kmod\tinstall ok installed\nudev\tdeinstall ok config-files\n\
                   libc6:amd64\tinstall ok installed\nqemu-system-x86\tinstall ok half-installed\n";
        let m = parse_dpkg_status(out);
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
    fn command_lines() {
        assert_eq!(
            apt_install_command(&["kmod", "udev"], false),
            "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends kmod udev"
        );
        let root = Path::new("/c/tools");
        assert_eq!(
            shell::display(&[], "cargo", &virtiofsd_install_args(root)),
            format!(
                "cargo install --locked virtiofsd --version {VIRTIOFSD_VERSION} --root /c/tools"
            )
        );
        assert_eq!(
            shell::display(
                &[("LLVM_PREFIX", LLVM_PREFIX.into())],
                "cargo",
                &bpf_linker_install_args(root)
            ),
            "LLVM_PREFIX=/usr/lib/llvm-22 cargo install bpf-linker --version 0.13.0 --locked \
             --no-default-features --features llvm-22 --root /c/tools"
        );
        assert_eq!(
            shell::display(&[("PATH", "/t/bin:$PATH".into())], "cargo", &[]),
            "PATH=/t/bin:\"$PATH\" cargo"
        );
    }

    #[test]
    fn crates_toml() {
        let t = r#"[v1]
"bpf-linker 0.13.0 (registry+https://github.com/rust-lang/crates.io-index)" = ["bpf-linker"]
"virtiofsd 1.13.0 (registry+https://github.com/rust-lang/crates.io-index)" = ["virtiofsd"]
"#;
        assert!(crates_toml_has(t, "bpf-linker", "0.13.0"));
        assert!(!crates_toml_has(t, "bpf-linker", "0.13.1"));
        assert!(!crates_toml_has(t, "virtiofsd", "1.14.0"));
        assert!(!crates_toml_has("garbage [", "virtiofsd", "1.14.0"));
    }

    #[test]
    fn route_lines() {
        assert_eq!(
            route_description(true),
            "eBPF toolchain: rustup nightly + rust-src"
        );
        let t = debian_toolchain("/x/bin/bpf-linker".into());
        assert!(t
            .describe()
            .starts_with("eBPF toolchain: Debian rustc-web 1.96"));
        assert_eq!(t.bpf_linker_dir(), Path::new("/x/bin"));
    }

    #[test]
    fn keyring_package_is_required_on_every_route() {
        for nightly in [true, false] {
            assert!(required_packages(nightly).contains(&"debian-archive-keyring"));
        }
    }

    const UBUNTU: &str =
        "PRETTY_NAME=\"Ubuntu 24.04.3 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\n\
                          VERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n";
    const DEBIAN: &str =
        "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\n\
                          VERSION_CODENAME=bookworm\nID=debian\n";

    #[test]
    fn os_release_parsing() {
        let u = parse_os_release(UBUNTU);
        assert_eq!(
            u,
            Distro {
                id: "ubuntu".into(),
                codename: "noble".into(),
                pretty: "Ubuntu 24.04.3 LTS".into()
            }
        );
        assert!(!u.is_debian(), "ID_LIKE=debian does not make Ubuntu Debian");
        assert!(parse_os_release(DEBIAN).is_debian());
        assert_eq!(parse_os_release("ID='arch'\n").pretty, "arch");
        assert_eq!(parse_os_release("").pretty, "unknown Linux");
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

    #[test]
    fn llvm_hint_names_the_suite_off_debian_only() {
        let (u, d) = (parse_os_release(UBUNTU), parse_os_release(DEBIAN));
        let h = package_hint(&["kmod", "llvm-22-dev"], &u).expect("hint on Ubuntu");
        assert!(h.contains("llvm-toolchain-noble-22"), "{h}");
        assert_eq!(package_hint(&["kmod"], &u), None);
        assert_eq!(package_hint(&["llvm-22-dev"], &d), None);
    }

    #[test]
    fn pip_venv_counts_only_with_matching_marker() {
        let dir = tempfile::tempdir().unwrap();
        let v = PipVenv {
            dir: dir.path().join("v"),
            specs: vec!["a==1".into(), "b==2".into()],
            bin: "a",
        };
        std::fs::create_dir_all(v.dir.join("bin")).unwrap();
        std::fs::write(v.bin_path(), "").unwrap();
        assert!(!v.present(), "no marker: pip may have died half-way");
        std::fs::write(v.marker(), "a==1\n").unwrap();
        assert!(!v.present(), "marker of other pins");
        std::fs::write(v.marker(), "a==1\nb==2\n").unwrap();
        assert!(v.present());
        std::fs::remove_file(v.bin_path()).unwrap();
        assert!(!v.present(), "marker without the executable");
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
