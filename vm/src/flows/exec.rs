//! `bpfvm exec`, the cargo runner: one command as root in the guest from the host's working
//! directory, with the environment a test binary reads, its stdout and stderr handed back byte
//! for byte. cargo runs it as `runner = ["bpfvm", "exec", "--kernel", "6.1", "--"]`, so that
//! `cargo test` runs each test binary in the guest, in place: the guest sees the host's root
//! read-only, the binary under the user's target directory included.
use std::ffi::OsString;

use anyhow::{bail, Result};

use crate::domain::options::VmOptions;
use crate::flows::run::{boot, kernel_health, prepare_any_arch, run_dir_reading};
use crate::kernel::choice::KernelChoice;
use crate::machine::guest;
use crate::machine::vng::RunOutcome;
use crate::results::health::{self, Health};
use crate::results::report;
use crate::support::output::Events;
use crate::support::paths::target_dir;

/// Variables passed to the guest as they are: what libtest, std and cargo's test environment
/// read. Any other is passed only when named (`--env NAME`).
const PASSED: [&str; 6] = [
    "RUST_BACKTRACE",
    "RUST_LIB_BACKTRACE",
    "RUST_LOG",
    "RUST_LOG_STYLE",
    "RUST_MIN_STACK",
    "RUSTC_BOOTSTRAP",
];
/// Prefixes of the variables passed too: cargo's (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, ...)
/// and libtest's (`RUST_TEST_THREADS`, `RUST_TEST_NOCAPTURE`, ...).
const PASSED_PREFIXES: [&str; 2] = ["CARGO_", "RUST_TEST_"];

/// How the command ended, what it wrote, and the kernel's health (`vm::health`).
pub struct Exec {
    pub outcome: RunOutcome,
    pub health: Health,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// The host variables `vars` that the guest gets: those [`PASSED`] and [`PASSED_PREFIXES`]
/// name, and those in `extra`. A name a shell cannot export, or a value that is not UTF-8, is
/// left out (silently for the automatic ones, an error for one named in `extra`).
pub fn passed_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    extra: &[String],
) -> Result<Vec<(String, String)>> {
    for name in extra {
        if !is_shell_name(name) {
            bail!("--env {name:?}: not a variable name (letters, digits and _, not first a digit)");
        }
    }
    let mut out = Vec::new();
    for (k, v) in vars {
        let (Some(k), Some(v)) = (k.to_str(), v.to_str()) else {
            continue;
        };
        let named = extra.iter().any(|e| e == k);
        let automatic = PASSED.contains(&k) || PASSED_PREFIXES.iter().any(|p| k.starts_with(p));
        if (named || automatic) && is_shell_name(k) {
            out.push((k.to_string(), v.to_string()));
        }
    }
    out.sort();
    Ok(out)
}

fn is_shell_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Runs `argv` as root in the guest from the current directory with `env` set; returns how
/// the VM ended, the command's stdout and stderr, and the kernel's health, its log kept as
/// `target/vm-exec/kernel.log` (as `vm-run` does).
pub fn vm_exec(
    kernel: &KernelChoice,
    opts: &VmOptions,
    argv: &[String],
    env: &[(String, String)],
    events: &Events,
) -> Result<Exec> {
    let allow = health::allow::load(&health::allow::path())?;
    let cwd = crate::support::paths::guest_cwd()?;
    let mut p = prepare_any_arch(kernel, opts, events)?;
    let parent = target_dir().join("vm-exec");
    let files = run_dir_reading(&mut p, vec![cwd.clone()], &parent)?;
    guest::write(
        &files.script,
        &guest::exec_script(&files.shared, &cwd, env, argv),
    )?;
    let outcome = boot(&p, opts, &files.shared, &files.script, events)?;
    let release = report::read_fact(&files.shared, guest::files::RELEASE);
    let health = kernel_health(&files.shared, &parent, &outcome, &allow, &p, &release)?;
    // Missing when the VM died before the command ran: nothing to hand back. Bounded and
    // never through a symlink, as every guest file (`guest_files`).
    let read = |name| match crate::support::guest_files::read_bytes(&files.shared.join(name)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
        Err(e) => {
            events.warn(format!("the command's {name} is not handed back: {e}"));
            vec![]
        }
    };
    Ok(Exec {
        stdout: read(guest::EXEC_STDOUT),
        stderr: read(guest::EXEC_STDERR),
        outcome,
        health,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn test_variables_pass_and_the_hosts_others_do_not() {
        let env = passed_env(
            vars(&[
                ("RUST_LOG", "debug"),
                ("CARGO_MANIFEST_DIR", "/u"),
                ("RUST_TEST_THREADS", "1"),
                ("PATH", "/usr/bin"),
                ("HOME", "/root"),
                ("RUSTFLAGS", "-g"),
                ("MY_VAR", "x"),
            ]),
            &[],
        )
        .unwrap();
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            ["CARGO_MANIFEST_DIR", "RUST_LOG", "RUST_TEST_THREADS"]
        );
    }

    #[test]
    fn a_named_variable_passes_and_a_bad_name_is_refused() {
        let env = passed_env(
            vars(&[("MY_VAR", "a b"), ("OTHER", "y")]),
            &["MY_VAR".into()],
        )
        .unwrap();
        assert_eq!(env, [("MY_VAR".to_string(), "a b".to_string())]);
        let e = passed_env(vars(&[]), &["A-B".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--env \"A-B\": not a variable name"), "{e}");
    }

    #[test]
    fn a_name_the_shell_cannot_export_is_left_out() {
        let env = passed_env(vars(&[("CARGO_X-Y", "1"), ("CARGO_OK", "2")]), &[]).unwrap();
        assert_eq!(env, [("CARGO_OK".to_string(), "2".to_string())]);
    }
}
