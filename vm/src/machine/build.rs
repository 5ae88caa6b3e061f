//! Building: the BPF objects in `ebpf/`, then the guest tests (which embed those objects).
//!
//! `build_ebpf` returns the directory holding one object per feature; `build_guest_tests` and
//! `build_guest_bin` pass it to the `bpfvm-tests` build as `BPFVM_EBPF_DIR`, whose build script
//! and `include_bytes!` dep-info make cargo rebuild the tests whenever an object changes.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::domain::arch::Arch;
use crate::machine::provision::{run_logged, scrub_cargo_env, tail_lines, EbpfToolchain};
use crate::support::output::Events;
use crate::support::paths::{target_dir, workspace_root};
use crate::support::shell;

/// The BPF target.
pub const BPF_TARGET: &str = "bpfel-unknown-none";
/// Flags for the BPF crate: debug info and `--btf` so BTF maps (and `map_extra`) are emitted.
pub const EBPF_RUSTFLAGS: &str = "-C debuginfo=2 -C link-arg=--btf";

/// The cargo invocation that builds `ebpf/`: program, args, env to set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EbpfCommand {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(&'static str, String)>,
}

/// The command line for `tc` (pure: unit-tested). `path` is the PATH to start from.
pub fn ebpf_command(tc: &EbpfToolchain, target_dir: &Path, path: &str) -> EbpfCommand {
    let mut args: Vec<String> = Vec::new();
    let program = match tc {
        EbpfToolchain::RustupNightly { .. } => {
            args.push(format!(
                "+{}",
                crate::machine::provision::nightly_toolchain()
            ));
            "cargo".to_string()
        }
        EbpfToolchain::Debian { cargo, .. } => cargo.display().to_string(),
    };
    args.extend(
        [
            "build",
            "--release",
            "-Z",
            "build-std=core",
            "--target",
            BPF_TARGET,
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let linker_dir = tc.bpf_linker_dir().display().to_string();
    let path = if path.is_empty() {
        linker_dir
    } else {
        format!("{linker_dir}:{path}")
    };
    let mut env = vec![
        ("CARGO_TARGET_DIR", target_dir.display().to_string()),
        ("RUSTFLAGS", EBPF_RUSTFLAGS.to_string()),
        ("PATH", path),
    ];
    if let EbpfToolchain::Debian { rustc, .. } = tc {
        env.push(("RUSTC", rustc.display().to_string()));
        env.push(("RUSTC_BOOTSTRAP", "1".to_string()));
    }
    EbpfCommand { program, args, env }
}

/// Builds `ebpf/` and returns the directory with one object per feature
/// (`target/ebpf/bpfel-unknown-none/release`).
pub fn build_ebpf(tc: &EbpfToolchain, events: &Events) -> Result<PathBuf> {
    build_ebpf_crate(
        tc,
        &workspace_root().join("ebpf"),
        &target_dir().join("ebpf"),
        events,
    )
}

/// Builds the BPF crate in `crate_dir` (this repository's `ebpf/`, or a user's through
/// `bpfvm build-ebpf`) into `target` and returns the directory with its objects
/// (`<target>/bpfel-unknown-none/release`); the build's output goes to `<target>/build.log`.
pub fn build_ebpf_crate(
    tc: &EbpfToolchain,
    crate_dir: &Path,
    target: &Path,
    events: &Events,
) -> Result<PathBuf> {
    events.step(format!("building BPF objects ({})", crate_dir.display()));
    events.note(tc.describe());
    let path = std::env::var("PATH").unwrap_or_default();
    let c = ebpf_command(tc, target, &path);
    // Show the command without the (long) inherited PATH.
    let shown_env: Vec<(&str, String)> = c
        .env
        .iter()
        .map(|(k, v)| {
            if *k == "PATH" {
                (*k, format!("{}:$PATH", tc.bpf_linker_dir().display()))
            } else {
                (*k, v.clone())
            }
        })
        .collect();
    let shown = format!(
        "cd {} && {}",
        shell::quote(&crate_dir.display().to_string()),
        shell::display(&shown_env, &c.program, &c.args)
    );
    events.command(&shown);
    let mut cmd = Command::new(&c.program);
    scrub_cargo_env(&mut cmd);
    cmd.args(&c.args).current_dir(crate_dir);
    for (k, v) in &c.env {
        cmd.env(k, v);
    }
    std::fs::create_dir_all(target)?;
    run_logged(&mut cmd, &shown, &target.join("build.log"))?;
    let dir = target.join(BPF_TARGET).join("release");
    let objects = list_objects(&dir)?;
    if objects.is_empty() {
        bail!(
            "the eBPF build succeeded but {} holds no BPF object",
            dir.display()
        );
    }
    events.note(format!(
        "BPF objects in {}: {}",
        dir.display(),
        objects
            .iter()
            .map(|p| file_name(p))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(dir)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The BPF objects (ELF files) directly in `dir`.
pub fn list_objects(dir: &Path) -> Result<Vec<PathBuf>> {
    bpfvm_common::objects::list(dir).with_context(|| format!("reading {}", dir.display()))
}

/// A test executable of `bpfvm-tests`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestBinary {
    /// The test target's name (`bpfvm_tests` for the lib's unit tests, else the file stem).
    pub name: String,
    pub path: PathBuf,
}

/// One artifact of `cargo --message-format=json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub name: String,
    pub kinds: Vec<String>,
    pub test: bool,
    pub executable: PathBuf,
    /// The `Cargo.toml` of its package (cargo runs a test from that directory).
    pub manifest_path: PathBuf,
}

/// Parses cargo's JSON messages: the artifacts with an executable, and the rendered compiler
/// errors.
pub fn parse_cargo_messages(stdout: &str) -> (Vec<Artifact>, Vec<String>) {
    let mut arts = Vec::new();
    let mut errors = Vec::new();
    for line in stdout.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        match v["reason"].as_str() {
            Some("compiler-artifact") => {
                let Some(exe) = v["executable"].as_str() else {
                    continue;
                };
                arts.push(Artifact {
                    name: v["target"]["name"].as_str().unwrap_or_default().to_string(),
                    kinds: v["target"]["kind"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|k| k.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default(),
                    test: v["profile"]["test"].as_bool().unwrap_or(false),
                    executable: PathBuf::from(exe),
                    manifest_path: PathBuf::from(v["manifest_path"].as_str().unwrap_or_default()),
                });
            }
            Some("compiler-message") if v["message"]["level"].as_str() == Some("error") => {
                if let Some(r) = v["message"]["rendered"].as_str() {
                    errors.push(r.to_string());
                }
            }
            _ => {}
        }
    }
    (arts, errors)
}

/// How the guest binaries of an architecture are built: natively with the cargo on PATH, or
/// for another architecture with `-Z build-std=std` by the toolchain that builds the BPF
/// objects (rustup's nightly with `rust-src`, or Debian's `rustc-web` with its library sources
/// where rustup has none and cannot download targets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestCommand {
    pub program: String,
    /// Before the subcommand (`+nightly`).
    pub toolchain: Vec<String>,
    /// After the build's own arguments.
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl GuestCommand {
    /// The whole argument list around a build's own arguments `build` (`test --no-run ...`).
    pub fn argv<S: AsRef<str>>(&self, build: &[S]) -> Vec<String> {
        let build = build.iter().map(|s| s.as_ref().to_string());
        let toolchain = self.toolchain.iter().cloned();
        toolchain
            .chain(build)
            .chain(self.args.iter().cloned())
            .collect()
    }
}

/// The normal cargo on PATH (for bpfvm's own guest binaries, the parent's toolchain, so the
/// shared target dir stays warm).
pub fn native_command() -> GuestCommand {
    GuestCommand {
        program: "cargo".into(),
        toolchain: vec![],
        args: vec![],
        env: vec![],
    }
}

/// The cargo that builds guest binaries for `arch` (pure: unit-tested); a cross build goes to
/// `cross_dir`, its own directory: another rustc's artifacts beside the native build's.
pub fn guest_command(arch: Arch, cross_dir: &Path, tc: &EbpfToolchain) -> GuestCommand {
    if arch.is_host() {
        return native_command();
    }
    let target = arch.rust_target();
    let linker_var = format!(
        "CARGO_TARGET_{}_LINKER",
        target.to_uppercase().replace('-', "_")
    );
    let mut env = vec![
        (
            "CARGO_TARGET_DIR".to_string(),
            cross_dir.display().to_string(),
        ),
        (linker_var, arch.cross_gcc().into()),
    ];
    let (program, toolchain) = match tc {
        EbpfToolchain::RustupNightly { .. } => (
            "cargo".to_string(),
            vec![format!(
                "+{}",
                crate::machine::provision::nightly_toolchain()
            )],
        ),
        EbpfToolchain::Debian { cargo, rustc, .. } => {
            env.push(("RUSTC".into(), rustc.display().to_string()));
            env.push(("RUSTC_BOOTSTRAP".into(), "1".into()));
            (cargo.display().to_string(), vec![])
        }
    };
    GuestCommand {
        program,
        toolchain,
        args: vec![
            "-Z".into(),
            "build-std=std,panic_unwind".into(),
            "--target".into(),
            target.into(),
        ],
        env,
    }
}

/// Where bpfvm's own guest binaries for another architecture are built.
pub fn cross_target_dir() -> PathBuf {
    target_dir().join("cross")
}

/// Runs a cargo JSON build of the root workspace with `BPFVM_EBPF_DIR` set, as `how` says.
fn cargo_json(
    args: &[&str],
    ebpf_dir: &Path,
    how: &GuestCommand,
    events: &Events,
) -> Result<Vec<Artifact>> {
    let args = how.argv(args);
    let mut env = vec![("BPFVM_EBPF_DIR".to_string(), ebpf_dir.display().to_string())];
    env.extend(how.env.iter().cloned());
    let shown = shell::display(
        &env.iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect::<Vec<_>>(),
        &how.program,
        &args,
    );
    events.command(&shown);
    let mut cmd = Command::new(&how.program);
    if !how.env.is_empty() {
        scrub_cargo_env(&mut cmd);
    }
    let out = cmd
        .args(&args)
        .current_dir(workspace_root())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting `{shown}`"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (arts, errors) = parse_cargo_messages(&stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut msg = format!("`{shown}` failed ({})", out.status);
        if !errors.is_empty() {
            msg.push_str(":\n");
            msg.push_str(&errors.join("\n"));
        }
        msg.push_str("\nlast lines of cargo's stderr:\n");
        msg.push_str(&tail_lines(&stderr, 30));
        bail!(msg);
    }
    Ok(arts)
}

/// The cargo profile of the guest tests and probe (see `[profile.guest]` in `Cargo.toml`).
pub const GUEST_PROFILE: &str = "guest";

/// The guest binary that loads every program of the objects it is given for the verifier's
/// statistics (`bpfvm_tests::verifier`).
pub const VERIFIER_BIN: &str = "verifier";

/// What `vm-test` runs in the guest: the test executables and the feature probe.
#[derive(Debug, Clone)]
pub struct GuestBuild {
    pub tests: Vec<TestBinary>,
    pub probe: PathBuf,
    /// The verifier statistics of every program of given objects (`tests/src/bin/verifier.rs`).
    pub verifier: PathBuf,
    /// The directory holding them all (what a guest with its own root mounts).
    pub dir: PathBuf,
}

/// Builds the guest tests, the probe and the verifier statistics binary embedding the objects
/// in `ebpf_dir`, in one cargo invocation (`cargo build --profile guest -p bpfvm-tests --tests
/// --bin probe --bin verifier`): built apart,
/// the probe resolves its dependencies' features without the tests' dev-dependencies, and cargo
/// built syn, serde, aya-obj and aya a second time (170 s of a fresh run).
pub fn build_guest(
    ebpf_dir: &Path,
    arch: Arch,
    tc: &EbpfToolchain,
    events: &Events,
) -> Result<GuestBuild> {
    events.step(format!(
        "building guest tests and probe (bpfvm-tests, {})",
        arch.rust_target()
    ));
    let arts = cargo_json(
        &[
            "build",
            "--profile",
            GUEST_PROFILE,
            "--message-format=json",
            "-p",
            "bpfvm-tests",
            "--tests",
            "--bin",
            "probe",
            "--bin",
            VERIFIER_BIN,
        ],
        ebpf_dir,
        &guest_command(arch, &cross_target_dir(), tc),
        events,
    )?;
    let tests = test_binaries(&arts);
    if tests.is_empty() {
        bail!("cargo built bpfvm-tests but reported no test executable");
    }
    let probe = bin_of(arts.clone(), "probe")?;
    let verifier = bin_of(arts, VERIFIER_BIN)?;
    // `<target dir>[/<triple>]/guest/probe`: the profile's directory's parent holds them all.
    let dir = probe
        .parent()
        .and_then(Path::parent)
        .context("the probe's path has no directory")?
        .to_path_buf();
    Ok(GuestBuild {
        tests,
        probe,
        verifier,
        dir,
    })
}

/// The test executables among `arts` (deduplicated, in cargo's order).
pub fn test_binaries(arts: &[Artifact]) -> Vec<TestBinary> {
    let mut out: Vec<TestBinary> = Vec::new();
    for a in arts.iter().filter(|a| a.test) {
        if !out.iter().any(|b| b.path == a.executable) {
            out.push(TestBinary {
                name: a.name.clone(),
                path: a.executable.clone(),
            });
        }
    }
    out
}

/// Builds the `[[bin]]` `bin` of `bpfvm-tests` with cargo profile `profile` (`release` for
/// benchmarks) embedding the objects in `ebpf_dir`, and
/// returns its path.
pub fn build_guest_bin(
    ebpf_dir: &Path,
    bin: &str,
    profile: &str,
    arch: Arch,
    tc: &EbpfToolchain,
    events: &Events,
) -> Result<PathBuf> {
    events.step(format!(
        "building guest binary {bin} (bpfvm-tests, {profile})"
    ));
    let arts = cargo_json(
        &[
            "build",
            "--profile",
            profile,
            "--message-format=json",
            "-p",
            "bpfvm-tests",
            "--bin",
            bin,
        ],
        ebpf_dir,
        &guest_command(arch, &cross_target_dir(), tc),
        events,
    )?;
    bin_of(arts, bin)
}

/// The executable of `[[bin]]` `bin` among `arts`.
fn bin_of(arts: Vec<Artifact>, bin: &str) -> Result<PathBuf> {
    arts.into_iter()
        .find(|a| !a.test && a.name == bin && a.kinds.iter().any(|k| k == "bin"))
        .map(|a| a.executable)
        .with_context(|| {
            format!("cargo built bpfvm-tests but reported no executable for bin {bin}")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debian_command() {
        let tc = EbpfToolchain::Debian {
            cargo: "/usr/bin/cargo".into(),
            rustc: "/usr/bin/rustc".into(),
            bpf_linker: "/c/tools/bin/bpf-linker".into(),
        };
        let c = ebpf_command(&tc, Path::new("/t/ebpf"), "/usr/bin");
        assert_eq!(c.program, "/usr/bin/cargo");
        assert_eq!(
            c.args.join(" "),
            "build --release -Z build-std=core --target bpfel-unknown-none"
        );
        let env: std::collections::BTreeMap<_, _> = c.env.into_iter().collect();
        assert_eq!(env["PATH"], "/c/tools/bin:/usr/bin");
        assert_eq!(env["RUSTC"], "/usr/bin/rustc");
        assert_eq!(env["RUSTC_BOOTSTRAP"], "1");
        assert_eq!(env["CARGO_TARGET_DIR"], "/t/ebpf");
        assert_eq!(env["RUSTFLAGS"], "-C debuginfo=2 -C link-arg=--btf");
    }

    #[test]
    fn an_arm64_guest_is_built_by_debian_rust_with_its_std_and_the_cross_linker() {
        let tc = EbpfToolchain::Debian {
            cargo: "/usr/bin/cargo".into(),
            rustc: "/usr/bin/rustc".into(),
            bpf_linker: "/c/tools/bin/bpf-linker".into(),
        };
        let c = guest_command(Arch::Arm64, Path::new("/t/cross"), &tc);
        assert_eq!(c.program, "/usr/bin/cargo");
        assert!(c.toolchain.is_empty());
        assert_eq!(
            c.args.join(" "),
            "-Z build-std=std,panic_unwind --target aarch64-unknown-linux-gnu"
        );
        let env: std::collections::BTreeMap<_, _> = c.env.into_iter().collect();
        assert_eq!(
            env["CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER"],
            "aarch64-linux-gnu-gcc"
        );
        assert_eq!(env["RUSTC_BOOTSTRAP"], "1");
        assert_eq!(env["CARGO_TARGET_DIR"], "/t/cross");
        let native = guest_command(Arch::X86_64, Path::new("/t/cross"), &tc);
        assert_eq!((native.program.as_str(), native.env.len()), ("cargo", 0));
        // rustup's nightly with rust-src, where it is the BPF toolchain, builds std too.
        let nightly = EbpfToolchain::RustupNightly {
            bpf_linker: "/c/tools/bin/bpf-linker".into(),
        };
        let c = guest_command(Arch::Arm64, Path::new("/t/cross"), &nightly);
        assert_eq!(c.program, "cargo");
        assert!(c.toolchain[0].starts_with('+'), "{:?}", c.toolchain);
        assert!(!c.env.iter().any(|(k, _)| k == "RUSTC"));
    }

    #[test]
    fn nightly_command() {
        let tc = EbpfToolchain::RustupNightly {
            bpf_linker: "/c/tools/bin/bpf-linker".into(),
        };
        let c = ebpf_command(&tc, Path::new("/t/ebpf"), "");
        assert_eq!(c.program, "cargo");
        assert_eq!(c.args[0], "+nightly");
        assert!(c.args.iter().any(|a| a == "build-std=core"));
        assert!(!c
            .env
            .iter()
            .any(|(k, _)| *k == "RUSTC" || *k == "RUSTC_BOOTSTRAP"));
        assert!(c.env.contains(&("PATH", "/c/tools/bin".to_string())));
    }

    #[test]
    fn cargo_json_parsing() {
        let out = r#"{"reason":"compiler-artifact","package_id":"x","target":{"kind":["lib"],"crate_types":["lib"],"name":"bpfvm_tests","src_path":"/w/tests/src/lib.rs","test":true},"profile":{"test":true},"filenames":["/w/target/debug/deps/bpfvm_tests-1"],"executable":"/w/target/debug/deps/bpfvm_tests-1","fresh":false}
{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"aya","test":true},"profile":{"test":false},"filenames":["/w/x.rlib"],"executable":null}
{"reason":"compiler-artifact","target":{"kind":["test"],"name":"bloom","test":true},"profile":{"test":true},"executable":"/w/target/debug/deps/bloom-2"}
{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"bench","test":true},"profile":{"test":false},"executable":"/w/target/release/bench"}
{"reason":"compiler-message","message":{"level":"error","rendered":"error[E0425]: nope"}}
{"reason":"compiler-message","message":{"level":"warning","rendered":"warning: meh"}}
{"reason":"build-finished","success":false}
not json
"#;
        let (arts, errors) = parse_cargo_messages(out);
        assert_eq!(arts.len(), 3);
        assert_eq!(errors, vec!["error[E0425]: nope".to_string()]);
        let bins = test_binaries(&arts);
        assert_eq!(
            bins,
            vec![
                TestBinary {
                    name: "bpfvm_tests".into(),
                    path: "/w/target/debug/deps/bpfvm_tests-1".into()
                },
                TestBinary {
                    name: "bloom".into(),
                    path: "/w/target/debug/deps/bloom-2".into()
                },
            ]
        );
        assert!(arts.iter().any(|a| a.name == "bench" && !a.test));
    }

    #[test]
    fn objects_are_elf_files_only() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("smoke"), b"\x7fELF\x02\x01").unwrap();
        std::fs::write(d.path().join("smoke.d"), b"smoke: src/smoke.rs").unwrap();
        std::fs::write(d.path().join("libx.rlib"), b"!<arch>\n").unwrap();
        std::fs::create_dir(d.path().join("deps")).unwrap();
        let objs = list_objects(d.path()).unwrap();
        assert_eq!(objs, vec![d.path().join("smoke")]);
    }
}
