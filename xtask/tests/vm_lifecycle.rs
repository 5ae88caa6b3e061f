//! The VM's life from the user's side: exit statuses and output come back exactly, and a
//! panic, a hang or Ctrl-C ends the run with the whole process tree (vng, virtme-run, qemu,
//! virtiofsd) gone. Each test boots the 6.1 guest, so they are `#[ignore]`d for plain
//! `cargo test`; `cargo xtask ci` runs them: `cargo test -p xtask -- --ignored`.
//!
//! Each test gives its guest a distinct memory size, and its runner an environment variable
//! (`TAG`) naming it: every process the run starts (vng, virtme-run, qemu, virtiofsd) inherits
//! it, which identifies that test's processes in `/proc` when checking that none is left.
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The environment variable that marks a test's processes.
const TAG: &str = "BPFVM_LIFECYCLE_TEST";

/// `cargo xtask vm-run` for the test that owns `memory`, its processes tagged.
fn xtask_vm_run(memory: &str, extra: &[&str], command: &[&str]) -> Command {
    let mut args = vec!["vm-run", "--kernel", "6.1", "--memory", memory];
    args.extend(extra);
    args.push("--");
    args.extend(command);
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    c.args(&args).env(TAG, memory);
    c
}

fn vm_run(memory: &str, extra: &[&str], command: &[&str]) -> Output {
    xtask_vm_run(memory, extra, command)
        .output()
        .expect("run xtask vm-run")
}

/// Processes whose environment carries the tag of the test that owns `memory`, but the runner
/// itself (`xtask`), with their command lines.
fn leftovers(memory: &str) -> Vec<String> {
    tagged(memory)
        .into_iter()
        .map(|(_, cmdline)| cmdline)
        .collect()
}

/// [`leftovers`] with each process's pid.
fn tagged(memory: &str) -> Vec<(i32, String)> {
    let needle = format!("{TAG}={memory}\0");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        let (Ok(environ), Ok(cmdline)) = (
            std::fs::read(entry.path().join("environ")),
            std::fs::read(entry.path().join("cmdline")),
        ) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let runner = cmdline
            .split(' ')
            .next()
            .is_some_and(|p| p.ends_with("/xtask"));
        if String::from_utf8_lossy(&environ).contains(&needle) && !runner {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Waits up to `limit` for the test's processes to be gone; returns what is left.
fn leftovers_after(memory: &str, limit: Duration) -> Vec<String> {
    let start = Instant::now();
    loop {
        let left = leftovers(memory);
        if left.is_empty() || start.elapsed() > limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The leftover check can fail: a process left on purpose with a test's tag is reported.
#[test]
fn the_leftover_check_sees_a_process_left_behind() {
    let mut sleeper = Command::new("sleep")
        .arg("30")
        .env(TAG, "leftover-check")
        .spawn()
        .unwrap();
    // Until the child has exec'd, /proc shows the test's own command line and environment.
    let start = Instant::now();
    let mut found = leftovers("leftover-check");
    while found.is_empty() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
        found = leftovers("leftover-check");
    }
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert_eq!(found, ["sleep 30 "]);
    assert_eq!(leftovers("leftover-check"), Vec::<String>::new());
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// What goes in reaches the guest whole, and what comes out comes back exactly: an argument
/// longer than the ~1 KB the kernel command line carries inline, `--append` values with quotes
/// and shell syntax, the exit status, stdout and stderr apart.
#[test]
#[ignore = "boots a VM"]
fn arguments_and_append_values_go_in_whole_and_status_and_streams_come_back_exactly() {
    let long = "x".repeat(4000);
    let script = "echo out; echo err >&2; cat /proc/cmdline >&2; test ${#1} -eq 4000 && exit 7";
    let o = vm_run(
        "1021M",
        &["--append", "bpfvm.words=\"a b;$(c)\" bpfvm.single='x y'"],
        &["sh", "-c", script, "sh", &long],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(7), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "out\n");
    assert!(err.lines().any(|l| l == "err"), "{err}");
    assert!(!err.contains("out\n"), "stdout leaked into stderr");
    assert!(err.contains("\"bpfvm.words=a b;$(c)\""), "{err}");
    assert!(err.contains("\"bpfvm.single=x y\""), "{err}");
}

/// A panic after the guest script started: reported with the console tail, and never retried
/// (`--accel tcg`: only a TCG boot is ever retried, and only one that failed before the guest
/// script, as `a_boot_that_dies_before_the_guest_script_is_retried_once_unless_no_retry` shows).
#[test]
#[ignore = "boots a VM"]
fn a_kernel_panic_is_reported_with_the_console_tail_and_never_retried() {
    let o = vm_run(
        "1023M",
        &["--accel", "tcg"],
        &["sh", "-c", "echo c > /proc/sysrq-trigger; sleep 600"],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    // Judged: the kernel is to blame (exit 1, a warning, not an error that judged nothing).
    assert!(err.contains("warning: the guest kernel panicked"), "{err}");
    assert!(
        err.contains("Kernel panic - not syncing: sysrq triggered crash"),
        "{err}"
    );
    assert!(!err.contains("booting once more"), "{err}");
    assert_eq!(err.matches("==> booting").count(), 1, "{err}");
    assert_eq!(leftovers("1023M"), Vec::<String>::new());
}

/// A guest that hangs without a word is killed at the timeout. 20 s: a TCG boot takes 7-10 s
/// on a quiet host (see `BOOT_TIMEOUT` in `vm`), so the guest sits in `sleep`; on a busy host
/// the boot itself may be what hangs, which the runner stops the same way (`--no-retry`, so
/// that it is not booted twice).
#[test]
#[ignore = "boots a VM"]
fn a_hang_is_killed_at_the_timeout() {
    let start = Instant::now();
    let o = vm_run(
        "1025M",
        &["--timeout", "20", "--no-retry"],
        &["sleep", "600"],
    );
    assert!(
        start.elapsed() < Duration::from_secs(40),
        "took {:?}",
        start.elapsed()
    );
    // Nothing judged: the host may be slow (docs/exit-status.md).
    assert_eq!(o.status.code(), Some(255));
    assert!(
        stderr(&o).contains("did not finish within 20 s"),
        "{}",
        stderr(&o)
    );
    assert_eq!(leftovers("1025M"), Vec::<String>::new());
}

/// Starts `vm-run -- sleep 600`, waits until the VM runs, sends `signal`, and checks the run
/// ends as interrupted with nothing left.
fn signal_kills_the_whole_vm(signal: i32, memory: &str) {
    let mut child = xtask_vm_run(memory, &[], &["sleep", "600"])
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
    wait_for_the_vm(memory);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, signal) };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(128 + signal),
        "as a shell reports the signal"
    );
    assert!(
        rest.iter().any(|l| l.contains("interrupted (Ctrl-C)")),
        "{rest:?}"
    );
    assert_eq!(leftovers(memory), Vec::<String>::new());
}

/// Waits until the run's qemu and virtiofsd are up (the leftover check must see both).
fn wait_for_the_vm(memory: &str) {
    let start = Instant::now();
    loop {
        let procs = leftovers(memory);
        let has = |what: &str| procs.iter().any(|p| p.contains(what));
        if has("qemu-system") && has("virtiofsd") {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no qemu and virtiofsd after 120 s: {procs:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// SIGKILL cannot be handled: the VM must die with the runner all the same.
#[test]
#[ignore = "boots a VM"]
fn a_sigkilled_runner_leaves_no_vm_behind() {
    let memory = "1043M";
    let mut child = xtask_vm_run(memory, &[], &["sleep", "600"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run xtask vm-run");
    wait_for_the_vm(memory);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        leftovers_after(memory, Duration::from_secs(10)),
        Vec::<String>::new()
    );
}

/// qemu's own crash is named as such: qemu killed with SIGABRT while the guest boots (as an
/// assertion in qemu ends it: Debian 13's qemu 10.0 did, `hw/pci/msix.c:228`) is reported as
/// `qemu crashed` with the signal, not as a guest failure, and is not booted again.
#[test]
#[ignore = "boots a VM"]
fn a_qemu_crash_is_named_with_its_signal_and_not_retried() {
    let memory = "1055M";
    let child = xtask_vm_run(memory, &["--accel", "tcg"], &["sleep", "600"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run xtask vm-run");
    wait_for_the_vm(memory);
    let (qemu, _) = tagged(memory)
        .into_iter()
        .find(|(_, cmdline)| cmdline.starts_with("qemu-system-x86_64 "))
        .expect("qemu runs");
    // SAFETY: signalling a process of this test's own VM.
    assert_eq!(unsafe { libc::kill(qemu, libc::SIGABRT) }, 0);
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    // qemu's failure, not the kernel's: 255 stops a bisect.
    assert_eq!(o.status.code(), Some(255), "{err}");
    assert!(
        err.contains("error: qemu crashed: signal 6 (SIGABRT), with no message of its own"),
        "{err}"
    );
    assert!(!err.contains("booting once more"), "{err}");
    assert_eq!(
        leftovers_after(memory, Duration::from_secs(10)),
        Vec::<String>::new()
    );
}

/// A guest that prints without end: the timeout still holds (the event loop checks it on
/// every line), and the runner's memory stays bounded. The guest's output is counted, so that a
/// boot slow enough to reach the timeout first fails the test rather than passing untested.
#[test]
#[ignore = "boots a VM"]
fn a_guest_printing_forever_is_stopped_at_the_timeout() {
    let memory = "1045M";
    let start = Instant::now();
    // --no-retry: a boot that the timeout cuts short would otherwise boot twice.
    // 30 s: under TCG on a loaded 2-core host, 20 s have ended before `yes` printed a byte.
    let mut child = xtask_vm_run(memory, &["--timeout", "30", "--no-retry"], &["yes"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run xtask vm-run");
    let mut out = child.stdout.take().unwrap();
    let counter = std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let (o, peak) = with_peak_rss(child);
    let printed = counter.join().unwrap().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(45),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(o.status.code(), Some(255));
    assert!(
        stderr(&o).contains("did not finish within 30 s"),
        "{}",
        stderr(&o)
    );
    // `yes` ran: at least a megabyte of "y" lines came back before the timeout.
    assert!(printed > 1 << 20, "only {printed} bytes came back");
    assert!(peak < 100 << 20, "runner peak RSS {} MiB", peak >> 20);
    assert_eq!(leftovers(memory), Vec::<String>::new());
}

/// One endless line (no newline): the runner holds at most a bounded piece of it. 200 MB, twice
/// the bound, so a runner that kept the line whole would fail.
#[test]
#[ignore = "boots a VM"]
fn one_endless_line_keeps_the_runner_small() {
    let memory = "1047M";
    let child = xtask_vm_run(memory, &[], &["head", "-c", "200000000", "/dev/zero"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run xtask vm-run");
    let (o, peak) = with_peak_rss(child);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(peak < 100 << 20, "runner peak RSS {} MiB", peak >> 20);
}

/// A closed stdout (`vm-run ... | head -n1`) is not a crash: the run goes on to its status.
#[test]
#[ignore = "boots a VM"]
fn a_closed_stdout_does_not_crash_the_runner() {
    let mut child = xtask_vm_run("1049M", &[], &["sh", "-c", "seq 1 5000; exit 3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run xtask vm-run");
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

/// Waits for `child`, sampling its high-water RSS (`VmHWM`, which only grows) while it runs.
fn with_peak_rss(child: std::process::Child) -> (Output, u64) {
    let status = format!("/proc/{}/status", child.id());
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let peak = peak.clone();
        std::thread::spawn(move || {
            while let Ok(s) = std::fs::read_to_string(&status) {
                if let Some(kb) = s
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                {
                    peak.fetch_max(kb << 10, std::sync::atomic::Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let o = child.wait_with_output().unwrap();
    sampler.join().unwrap();
    (o, peak.load(std::sync::atomic::Ordering::SeqCst))
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

/// A boot that has not reached the guest script when it is stopped (here by a 3 s timeout;
/// a TCG boot takes 7 s or more) is retried once under TCG, with the first attempt's console
/// in the output, and never with `--no-retry`. A panic before the guest script takes the same
/// path (`RunOutcome::failed_before_start`, unit-tested in `vm`); a panic after it is never
/// retried (`a_kernel_panic_is_reported_with_the_console_tail_and_never_retried`).
#[test]
#[ignore = "boots a VM"]
fn a_boot_that_dies_before_the_guest_script_is_retried_once_unless_no_retry() {
    let cut_short = ["--accel", "tcg", "--timeout", "3"];
    let o = vm_run("1033M", &cut_short, &["true"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(255), "{err}");
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
    assert_eq!(o.status.code(), Some(255), "{err}");
    assert!(!err.contains("booting once more"), "{err}");
    assert_eq!(err.matches("==> booting").count(), 1, "{err}");
    assert_eq!(leftovers("1033M"), Vec::<String>::new());
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
    // A filter that matches nothing judged nothing.
    assert_eq!(o.status.code(), Some(255), "{err}");
    assert!(
        err.contains(&format!("no test name contains `{filter}`")),
        "{err}"
    );
    // The run's shared directory (the guest's $BPFVM_RESULTS), kept under guest/.
    let guest = bpfvm_host::support::paths::target_dir().join("vm-test/6.1/guest/shared");
    assert!(guest.join("uname-r").is_file(), "the guest files were kept");
    assert!(!guest.join("pwned").exists(), "the filter ran as a command");
}

/// Two `vm-test` runs in one checkout at once: both finish, and the report they leave is
/// whole (written atomically; the last one wins). One TCG thread each: what is tested is the
/// two runs sharing a checkout, and with a thread per vCPU (four on this test's 2-core hosts)
/// qemu 7.2.22 once died of SIGSEGV 1 s into one of the boots, with no message of its own.
#[test]
#[ignore = "boots two VMs at once"]
fn two_vm_test_runs_at_once_both_finish_and_the_report_is_whole() {
    let args = ["--filter", "smoke", "--tcg-thread", "single"];
    let runs: Vec<Output> = std::thread::scope(|s| {
        let a = s.spawn(|| vm_test("1039M", &args));
        let b = s.spawn(|| vm_test("1041M", &args));
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    for o in &runs {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    }
    let dir = bpfvm_host::support::paths::target_dir().join("vm-test/6.1");
    let json = std::fs::read_to_string(dir.join("report.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&json).expect("a whole report.json");
    assert_eq!(report["summary"]["failed"], 0, "{json}");
    assert!(report["summary"]["passed"].as_u64().unwrap() > 0, "{json}");
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    assert!(junit.trim_end().ends_with("</testsuites>"), "{junit}");
}

/// Paths with spaces and shell syntax reach virtme-ng whole and run nothing on the host (vng
/// runs its command line with `sh -c`): the run directory and the staged kernel under a
/// `CARGO_TARGET_DIR` with a space (virtme-run takes only `[a-zA-Z0-9_+ /.-]` there, so that is
/// all a checkout needs), and the guest's working directory, a kernel image and its modules
/// under `a dir $(touch pwned)`.
#[test]
#[ignore = "boots a VM"]
fn paths_with_spaces_and_shell_syntax_work_and_run_nothing() {
    let fetch = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["kernels", "fetch", "6.1"])
        .output()
        .unwrap();
    assert!(fetch.status.success(), "{}", stderr(&fetch));
    let vmlinuz = std::path::PathBuf::from(String::from_utf8(fetch.stdout).unwrap().trim());
    let release = vmlinuz.file_name().unwrap().to_str().unwrap()["vmlinuz-".len()..].to_string();
    let tree = vmlinuz.parent().unwrap().parent().unwrap();

    let t = tempfile::tempdir().unwrap();
    let odd = t.path().join("a dir $(touch pwned)");
    let mods = odd.join("mods/lib/modules");
    std::fs::create_dir_all(&mods).unwrap();
    let copy = Command::new("cp")
        .arg("-a")
        .arg(tree.join("lib/modules").join(&release))
        .arg(&mods)
        .status()
        .unwrap();
    assert!(copy.success());
    let image = odd.join("bz Image");
    std::fs::copy(&vmlinuz, &image).unwrap();

    let o = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["vm-run", "--memory", "1051M", "--kernel"])
        .arg(&image)
        .arg("--modules")
        .arg(odd.join("mods"))
        .args(["--", "sh", "-c", "pwd"])
        .current_dir(&odd)
        .env("CARGO_TARGET_DIR", t.path().join("my proj/target"))
        .env(TAG, "1051M")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        odd.to_str().unwrap()
    );
    let pwned: Vec<_> = walk(t.path())
        .into_iter()
        .filter(|p| p.ends_with("pwned"))
        .collect();
    assert_eq!(
        pwned,
        Vec::<std::path::PathBuf>::new(),
        "shell syntax ran on the host"
    );
    assert_eq!(leftovers("1051M"), Vec::<String>::new());
}

/// Every path under `dir` (files and directories).
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            all.extend(walk(&p));
        }
        all.push(p);
    }
    all
}

/// Ctrl-C during `bench-vm`'s first boot: exit 130 at once (the second boot never starts),
/// nothing left running, the last complete report untouched and the boots done so far in
/// `interrupted/`.
#[test]
#[ignore = "boots a VM"]
fn ctrl_c_stops_bench_vm_and_keeps_the_last_report() {
    let memory = "1053M";
    let dir = bpfvm_host::support::paths::target_dir().join("bench-vm/6.1-smoke");
    let before = std::fs::read(dir.join("report.json")).ok();
    let kept = std::fs::read(dir.join("guest-1-retpoline/shared/bench.json")).ok();
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bench-vm", "--smoke", "--kernel", "6.1", "--memory", memory])
        .env(TAG, memory)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run xtask bench-vm");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains("==> booting") {
            break;
        }
    }
    wait_for_the_vm(memory);
    let t = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert_eq!(status.code(), Some(130), "{rest:?}");
    // Under TCG both smoke boots run at once, so the second may or may not have started.
    assert!(
        rest.iter()
            .any(|l| l.contains("interrupted with ") && l.contains(" of 2 boots not run")),
        "{rest:?}"
    );
    // No boot after Ctrl-C: nothing repeated, nothing queued.
    let boots = 1 + rest.iter().filter(|l| l.contains("==> booting")).count();
    assert!(boots <= 2, "{boots} boots: {rest:?}");
    assert_eq!(std::fs::read(dir.join("report.json")).ok(), before);
    assert_eq!(
        std::fs::read(dir.join("guest-1-retpoline/shared/bench.json")).ok(),
        kept
    );
    assert!(dir.join("interrupted/report.json").is_file());
    assert!(dir.join("interrupted/guest-1-retpoline").is_dir());
    assert_eq!(
        leftovers_after(memory, Duration::from_secs(5)),
        Vec::<String>::new()
    );
}
