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

/// Starts `vm-run -- sleep 600`, waits until the VM runs, sends `signal`, and checks the run
/// ends as interrupted with nothing left.
fn signal_kills_the_whole_vm(signal: i32, memory: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "vm-run", "--kernel", "6.1", "--memory", memory, "--", "sleep", "600",
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
        !leftovers(memory).is_empty(),
        "the VM should be running by now"
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, signal) };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    assert!(
        rest.iter().any(|l| l.contains("interrupted (Ctrl-C)")),
        "{rest:?}"
    );
    assert_eq!(leftovers(memory), Vec::<String>::new());
}

#[test]
#[ignore = "boots a VM"]
fn ctrl_c_kills_the_whole_vm() {
    signal_kills_the_whole_vm(libc::SIGINT, "1027M");
}

#[test]
#[ignore = "boots a VM"]
fn sigterm_is_ctrl_c() {
    signal_kills_the_whole_vm(libc::SIGTERM, "1029M");
}

#[test]
#[ignore = "boots a VM"]
fn quoted_append_values_reach_the_kernel_whole() {
    let o = vm_run(
        "1031M",
        &["--append", "bpfvm.words=\"a b;$(c)\" bpfvm.single='x y'"],
        &["cat", "/proc/cmdline"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let cmdline = String::from_utf8_lossy(&o.stdout);
    assert!(cmdline.contains("\"bpfvm.words=a b;$(c)\""), "{cmdline}");
    assert!(cmdline.contains("\"bpfvm.single=x y\""), "{cmdline}");
}

/// A boot that has not reached the guest script when it is stopped (here by a 3 s timeout;
/// a TCG boot takes 7 s or more) is retried once under TCG, with the first attempt's console
/// in the output, and never with `--no-retry`. A panic before the guest script takes the same
/// path (`RunOutcome::failed_before_start`, unit-tested in `vm`); a panic after it is never
/// retried (the next test).
#[test]
#[ignore = "boots a VM"]
fn a_boot_that_dies_before_the_guest_script_is_retried_once_unless_no_retry() {
    let cut_short = ["--accel", "tcg", "--timeout", "3"];
    let o = vm_run("1033M", &cut_short, &["true"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("booting once more").count(), 1, "{err}");
    assert!(
        err.contains("The first attempt: the guest did not finish within 3 s"),
        "{err}"
    );
    assert_eq!(err.matches("==> booting").count(), 2, "{err}");
    assert!(
        err.contains("error: the guest did not finish within 3 s"),
        "{err}"
    );
    let mut once = cut_short.to_vec();
    once.push("--no-retry");
    let o = vm_run("1033M", &once, &["true"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("booting once more"), "{err}");
    assert_eq!(err.matches("==> booting").count(), 1, "{err}");
    assert_eq!(leftovers("1033M"), Vec::<String>::new());
}

#[test]
#[ignore = "boots a VM"]
fn a_panic_after_the_guest_script_started_is_never_retried() {
    let o = vm_run(
        "1035M",
        &["--accel", "tcg"],
        &["sh", "-c", "echo c > /proc/sysrq-trigger"],
    );
    let err = stderr(&o);
    assert!(err.contains("error: the guest kernel panicked"), "{err}");
    assert!(!err.contains("booting once more"), "{err}");
    assert_eq!(err.matches("==> booting").count(), 1, "{err}");
}

fn vm_test(memory: &str, extra: &[&str]) -> Output {
    let mut args = vec!["vm-test", "--kernel", "6.1", "--memory", memory];
    args.extend(extra);
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(&args)
        .output()
        .expect("run xtask vm-test")
}

/// The filter reaches libtest as one argument: its shell syntax is a test name to match,
/// never a command. The guest's shared directory is writable, so a command run from the
/// filter would leave `pwned` in the kept guest files.
#[test]
#[ignore = "boots a VM"]
fn a_filter_with_shell_syntax_is_never_run() {
    let filter = "x$(touch \"$BPFVM_RESULTS/pwned\");touch \"$BPFVM_RESULTS/pwned\"`touch /x`";
    let o = vm_test("1037M", &["--filter", filter]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("no test name contains `{filter}`")),
        "{err}"
    );
    // The run's shared directory (the guest's $BPFVM_RESULTS), kept under guest/.
    let guest =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/vm-test/6.1/guest/shared");
    assert!(guest.join("uname-r").is_file(), "the guest files were kept");
    assert!(!guest.join("pwned").exists(), "the filter ran as a command");
}

/// Two `vm-test` runs in one checkout at once: both finish, and the report they leave is
/// whole (written atomically; the last one wins).
#[test]
#[ignore = "boots two VMs at once"]
fn two_vm_test_runs_at_once_both_finish_and_the_report_is_whole() {
    let runs: Vec<Output> = std::thread::scope(|s| {
        let a = s.spawn(|| vm_test("1039M", &["--filter", "smoke"]));
        let b = s.spawn(|| vm_test("1041M", &["--filter", "smoke"]));
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    for o in &runs {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/vm-test/6.1");
    let json = std::fs::read_to_string(dir.join("report.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&json).expect("a whole report.json");
    assert_eq!(report["summary"]["failed"], 0, "{json}");
    assert!(report["summary"]["passed"].as_u64().unwrap() > 0, "{json}");
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    assert!(junit.trim_end().ends_with("</testsuites>"), "{junit}");
}
