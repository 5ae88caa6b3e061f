//! The environment a command starts in, and Ctrl-C/SIGTERM while it waits outside a VM: clear
//! errors before any work, and an interrupted wait ends the command promptly with exit
//! 128 + the signal.
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn xtask() -> Command {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
}

fn stderr_of(cmd: &mut Command) -> (i32, String) {
    let out = cmd.output().expect("run xtask");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_cache_path_with_a_colon_is_refused_before_provisioning() {
    let (code, err) = stderr_of(
        xtask()
            .env("XDG_CACHE_HOME", "/tmp/x:y")
            .args(["vm-run", "--kernel", "6.1", "--", "true"]),
    );
    assert_eq!(code, 255, "{err}");
    assert!(
        err.contains("\"/tmp/x:y/bpfvm\" holds the character ':'"),
        "{err}"
    );
    assert!(
        err.contains("set XDG_CACHE_HOME to another directory"),
        "{err}"
    );
    assert!(!err.contains("==>"), "no work was started: {err}");
}

#[test]
fn no_home_and_no_xdg_cache_home_is_an_error() {
    let (code, err) = stderr_of(
        xtask()
            .env_remove("HOME")
            .env_remove("XDG_CACHE_HOME")
            .args(["kernels", "list"]),
    );
    assert_eq!(code, 255, "{err}");
    assert!(err.contains("neither HOME nor XDG_CACHE_HOME"), "{err}");
}

/// `kernels fetch` waiting for a cache lock another process holds: SIGINT or SIGTERM ends it
/// within 2 s with exit 130 or 143, and downloads nothing.
#[test]
fn an_interrupt_ends_a_lock_wait_within_two_seconds() {
    let t = tempfile::tempdir().unwrap();
    let kernels = t.path().join("bpfvm/kernels");
    std::fs::create_dir_all(&kernels).unwrap();
    let held = std::fs::File::create(kernels.join(".lock")).unwrap();
    held.lock().unwrap();
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let mut child = xtask()
            .env("XDG_CACHE_HOME", t.path())
            .args(["kernels", "fetch", "6.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // It announces the wait on stderr; read until then.
        let mut err = child.stderr.take().unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        while !String::from_utf8_lossy(&seen).contains("waiting for its lock") {
            let n = std::io::Read::read(&mut err, &mut buf).unwrap();
            assert!(n > 0, "{}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        let start = Instant::now();
        // SAFETY: a signal to the child we started.
        unsafe { libc::kill(child.id() as i32, signal) };
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "signal {signal}: still waiting after 2 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(128 + signal), "signal {signal}");
    }
    assert!(
        std::fs::read_dir(t.path().join("bpfvm/debs")).map_or(true, |d| d.count() == 0),
        "nothing was downloaded"
    );
}
