//! virtiofsd and bpf-linker via `cargo install --root`: it writes the binary and `.crates.toml`
//! only at the end, so a failed build leaves nothing that counts as present.
use std::path::Path;
use std::process::Command;

use anyhow::Result;

use super::{run_logged, scrub_cargo_env, Layout, BPF_LINKER_VERSION, VIRTIOFSD_VERSION};
use crate::support::output::Events;
use crate::support::shell;

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

/// `cargo install` arguments for virtiofsd. Its release profile asks for fat LTO, a long link on
/// one core at the end of the build; without it (a config profile overrides the manifest's)
/// the build took 67.6 and 74.2 s against 89.3 and 87.7 s, alternated on a quiet 2-core host,
/// and warm `vm-test --kernel 6.1` runs with either binary took the same (34.1-36.2 s without,
/// 35.7-38.4 s with, alternated). At opt-level 1 instead of 3 it built in 53.9 s against 62.4 s
/// (98 against 115 s of CPU), and warm `vm-test --kernel 6.1` runs alternated between the two
/// binaries, five each, showed no difference: tests 13.4-15.5 s against 13.7-20.5 s, boot
/// 9.3-11.6 s against 9.9-12.7 s. Its work is copying files to the guest, not computing.
pub fn virtiofsd_install_args(root: &Path) -> Vec<String> {
    let mut a: Vec<String> = [
        "install",
        "--locked",
        "virtiofsd",
        "--version",
        VIRTIOFSD_VERSION,
        "--config",
        "profile.release.lto=false",
        "--config",
        "profile.release.opt-level=1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push("--root".into());
    a.push(root.display().to_string());
    a
}

/// `cargo install` arguments for bpf-linker against Debian's LLVM 22 (env `LLVM_PREFIX`).
/// `--debug`: the linking is LLVM's (Debian's optimised library), so a debug build links the
/// same objects byte for byte (all 11 of `ebpf/`, compared) and costs half the CPU to build
/// (61 s against 133 s of user time, measured side by side on a busy host). Without the debug
/// profile's debug info, which nothing reads: 28.1 s against 30.5 s (46.6 against 54.3 s of
/// CPU), and a 8 MB binary instead of 38 MB.
pub fn bpf_linker_install_args(root: &Path) -> Vec<String> {
    let mut a: Vec<String> = [
        "install",
        "--debug",
        "--config",
        "profile.dev.debug=false",
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

pub(super) fn cargo_installed(l: &Layout, krate: &str, bin: &str, version: &str) -> bool {
    l.tool(bin).is_file()
        && std::fs::read_to_string(l.tools.join(".crates.toml"))
            .map(|s| crates_toml_has(&s, krate, version))
            .unwrap_or(false)
}

pub(super) fn cargo_install(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::provision::{apt_install_command, LLVM_PREFIX};

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
                "cargo install --locked virtiofsd --version {VIRTIOFSD_VERSION} --config \
                 profile.release.lto=false --config profile.release.opt-level=1 --root /c/tools"
            )
        );
        assert_eq!(
            shell::display(
                &[("LLVM_PREFIX", LLVM_PREFIX.into())],
                "cargo",
                &bpf_linker_install_args(root)
            ),
            "LLVM_PREFIX=/usr/lib/llvm-22 cargo install --debug --config profile.dev.debug=false \
             bpf-linker --version 0.13.0 --locked --no-default-features --features llvm-22 \
             --root /c/tools"
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
}
