//! The VM's life from the user's side: exit statuses and output come back exactly, and a
//! panic, a hang or Ctrl-C ends the run with the whole process tree (vng, virtme-run, qemu,
//! virtiofsd) gone. Each test boots the 6.1 guest, so they are `#[ignore]`d for plain
//! `cargo test`; `cargo xtask ci` runs them: `cargo test -p xtask -- --ignored`.
//!
//! Each test gives its guest a distinct memory size: qemu's `-m <size>` then identifies that
//! test's processes in `/proc` when checking that none is left behind.
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn vm_run(memory: &str, extra: &[&str], command: &[&str]) -> Output {
    let mut args = vec!["vm-run", "--kernel", "6.1", "--memory", memory];
    args.extend(extra);
    args.push("--");
    args.extend(command);
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(&args)
        .output()
        .expect("run xtask vm-run")
}

/// Processes whose command line mentions qemu's `-m <memory>` argument.
fn leftovers(memory: &str) -> Vec<String> {
    let needle = format!("\0{memory}\0");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains(&needle) && !cmdline.contains("vm_lifecycle") {
            found.push(cmdline.replace('\0', " "));
        }
    }
    found
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
#[ignore = "boots a VM"]
fn exit_status_and_both_streams_come_back_exactly() {
    // Longer than the ~1 KB the kernel command line can carry inline.
    let long = "x".repeat(4000);
    let script = "echo out; echo err >&2; test ${#1} -eq 4000 && exit 7";
    let o = vm_run("1021M", &[], &["sh", "-c", script, "sh", &long]);
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "out\n");
    assert!(stderr(&o).lines().any(|l| l == "err"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("out\n"), "stdout leaked into stderr");
}

#[test]
#[ignore = "boots a VM"]
fn a_kernel_panic_is_reported_with_the_console_tail() {
    let o = vm_run(
        "1023M",
        &[],
        &["sh", "-c", "echo c > /proc/sysrq-trigger; sleep 600"],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("error: the guest kernel panicked"), "{err}");
    assert!(
        err.contains("Kernel panic - not syncing: sysrq triggered crash"),
        "{err}"
    );
    assert_eq!(leftovers("1023M"), Vec::<String>::new());
}

#[test]
#[ignore = "boots a VM"]
fn a_hang_is_killed_at_the_timeout() {
    let start = Instant::now();
    let o = vm_run("1025M", &["--timeout", "45"], &["sleep", "600"]);
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("did not finish within 45 s"),
        "{}",
        stderr(&o)
    );
    assert_eq!(leftovers("1025M"), Vec::<String>::new());
}

#[test]
#[ignore = "boots a VM"]
fn ctrl_c_kills_the_whole_vm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "vm-run", "--kernel", "6.1", "--memory", "1027M", "--", "sleep", "600",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run xtask vm-run");
    // Wait until the guest is booting, then give qemu and virtiofsd time to start.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains("==> booting") {
            break;
        }
    }
    std::thread::sleep(Duration::from_secs(8));
    assert!(
        !leftovers("1027M").is_empty(),
        "the VM should be running by now"
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    assert!(
        rest.iter().any(|l| l.contains("interrupted (Ctrl-C)")),
        "{rest:?}"
    );
    assert_eq!(leftovers("1027M"), Vec::<String>::new());
}
