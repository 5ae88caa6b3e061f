//! A kept guest (`cargo xtask vm-guest`, docs/warm-guest.md) from the user's side: a run with
//! the same VM options uses it without booting; a run after one that left a pinned object in
//! bpffs boots afresh and says why; a run that passes its time limit after a WARN has its
//! kernel log whole, kept until it lets go; a SIGKILLed keeper leaves no VM behind. Boots the 6.1
//! guest, so `#[ignore]`d for plain `cargo test` (`cargo xtask ci` runs the ignored tests).
//! The keeper lives in this checkout's directory under `target/vm-guest/`: stop your own first.
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// This test's guest memory, which also keys its kept guest apart from other runs'.
const MEMORY: &str = "1536M";
/// Marks the keeper's processes (vng, qemu, virtiofsd inherit it).
const TAG: &str = "BPFVM_WARM_GUEST_TEST";

fn target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    )
}

/// This checkout's kept guest's directory (`wire::dir`).
fn kept() -> PathBuf {
    bpfvm_host::machine::warm_guest::wire::dir(&target())
}

fn keeper() -> Child {
    let _ = std::fs::remove_file(kept().join("share/state.boot"));
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "vm-guest", "--kernel", "6.1", "--memory", MEMORY, "--idle", "5",
        ])
        .env(TAG, "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start xtask vm-guest")
}

/// Waits for the kept guest to record its boot (it is up then).
fn wait_up() {
    let boot = kept().join("share/state.boot");
    let start = Instant::now();
    while !boot.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the kept guest never came up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
}

fn vm_test() -> (Output, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["vm-test", "--kernel", "6.1", "--memory", MEMORY])
        .args(["--filter", "bloom_filter::creation"])
        .output()
        .expect("run xtask vm-test");
    let report = std::fs::read_to_string(target().join("vm-test/6.1/report.json")).unwrap();
    (out, serde_json::from_str(&report).unwrap())
}

/// Runs `snippet` in the kept guest as a run of its own would (the protocol of
/// `machine::warm_guest::wire`), with the key the keeper wrote.
fn run_in_kept_guest(snippet: &str) -> String {
    run_held(snippet, 60).0
}

/// [`run_in_kept_guest`] with a time limit of `timeout_s`: what the keeper said, the run's
/// shared directory and its socket, still held (the keeper keeps the share until it goes).
fn run_held(snippet: &str, timeout_s: u64) -> (String, PathBuf, UnixStream) {
    let dir = kept();
    let run = tempfile::Builder::new()
        .prefix("bpfvm-run-")
        .tempdir_in(dir.join("share"))
        .unwrap()
        .keep();
    let shared = run.join("shared");
    std::fs::create_dir(&shared).unwrap();
    let script = run.join("guest.sh");
    let status = shared.join("exit-status");
    std::fs::write(
        &script,
        format!("{snippet}\necho 0 > {}\n", status.display()),
    )
    .unwrap();
    let key: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("key.json")).unwrap()).unwrap();
    let mut s = UnixStream::connect(dir.join("guest.sock")).unwrap();
    let req = serde_json::json!({"key": key});
    let run = serde_json::json!({"script": script, "shared": shared, "timeout_s": timeout_s});
    s.write_all(format!("{req}\n{run}\n").as_bytes()).unwrap();
    let mut said = String::new();
    for line in BufReader::new(s.try_clone().unwrap()).lines() {
        let line = line.unwrap();
        said += &line;
        if line.starts_with("{\"ended\"") || line.starts_with("{\"refused\"") {
            break;
        }
    }
    (said, shared, s)
}

/// Waits for the kept guest's next boot: the keeper empties its share before it.
fn wait_next_boot() {
    let boot = kept().join("share/state.boot");
    let start = Instant::now();
    while boot.exists() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_up();
}

/// Processes carrying the keeper's tag (the test runner's own are not tagged).
fn tagged() -> Vec<String> {
    let needle = format!("{TAG}=1\0");
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if e.file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
            .is_none()
        {
            continue;
        }
        if let (Ok(env), Ok(cmd)) = (
            std::fs::read(e.path().join("environ")),
            std::fs::read(e.path().join("cmdline")),
        ) {
            if String::from_utf8_lossy(&env).contains(&needle) {
                found.push(String::from_utf8_lossy(&cmd).replace('\0', " "));
            }
        }
    }
    found
}

#[test]
#[ignore = "boots a VM"]
fn a_kept_guest_is_reused_refused_after_a_pin_keeps_a_stopped_runs_log_and_dies_with_its_keeper() {
    let mut k = keeper();
    wait_up();
    let (out, report) = vm_test();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["vm"]["guest"]["how"], "reused", "{}", report["vm"]);

    let said = run_in_kept_guest("mkdir /sys/fs/bpf/planted_by_the_test");
    assert!(said.contains("\"exited\":0"), "{said}");
    let (out, report) = vm_test();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["vm"]["guest"]["how"], "booted", "{}", report["vm"]);
    let why = report["vm"]["guest"]["why"].as_str().unwrap();
    assert!(
        why.contains("an object pinned in bpffs left: /sys/fs/bpf/planted_by_the_test"),
        "{why}"
    );

    // A run that outlives its time limit after a WARN: the keeper stops the guest, and the
    // run's kernel log holds the WARN and is still there after the answer, until the run lets go
    // of the socket (the keeper empties the share before its next boot).
    wait_next_boot();
    let warn = "for l in '------------[ cut here ]------------' \
        'WARNING: CPU: 0 PID: 1 at kernel/bpf/syscall.c:512 planted_before_a_timeout+0x1/0x2' \
        '---[ end trace 0000000000000000 ]---'; do echo \"$l\" > /dev/kmsg; done; sleep 600";
    let (said, shared, held) = run_held(warn, 20);
    assert!(said.contains("\"timeout\":20"), "{said}");
    std::thread::sleep(Duration::from_secs(2));
    let log = std::fs::read_to_string(shared.join("kernel.log")).unwrap();
    assert!(log.contains("planted_before_a_timeout"), "{log}");
    drop(held);

    // The keeper boots its guest again after the stopped run; SIGKILL takes it all.
    wait_next_boot();
    k.kill().unwrap();
    k.wait().unwrap();
    let start = Instant::now();
    while !tagged().is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        tagged(),
        Vec::<String>::new(),
        "left running after the keeper died"
    );
}
