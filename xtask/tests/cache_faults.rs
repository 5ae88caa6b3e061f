//! The kernel cache survives the faults a user's machine throws at it: a full disk during
//! extraction, and SIGKILL during a download or an extraction. Each test works in its own
//! `XDG_CACHE_HOME` (a fresh directory or a small tmpfs) and then checks that a rerun
//! succeeds and leaves nothing half-made behind.
//!
//! They need the 6.1 kernel's `.deb` (taken from the user's cache, else downloaded, ~27 MB),
//! so they are `#[ignore]`d for plain `cargo test`; `cargo xtask ci` runs them.
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn xtask_fetch(cache: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.args(["kernels", "fetch", "6.1"])
        .env("XDG_CACHE_HOME", cache);
    cmd
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The 6.1 pin's `.deb` in the user's cache, fetched there first if need be.
fn deb_6_1() -> PathBuf {
    let pin = bpfvm_host::kernel::pins::resolve("6.1").unwrap();
    let [pkg] = pin.packages.as_slice() else {
        panic!("the 6.1 pin has one package")
    };
    let deb = bpfvm_host::support::paths::cache_dir()
        .join("debs")
        .join(pkg.deb_file_name(pin.arch));
    if !deb.is_file() {
        // The tree may be cached without its .deb: fetch into a cache of our own.
        let own = bpfvm_host::support::paths::target_dir().join("test-debs");
        let o = xtask_fetch(&own).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        return own.join("bpfvm/debs").join(pkg.deb_file_name(pin.arch));
    }
    deb
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The one complete tree, and nothing else but the lock.
fn assert_one_complete_tree(cache: &Path) {
    let kernels = cache.join("bpfvm/kernels");
    let mut names = entries(&kernels);
    names.retain(|n| n != ".lock");
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("6.1-"), "{names:?}");
    assert!(kernels.join(&names[0]).join(".bpfvm-complete").is_file());
    assert!(
        !entries(&cache.join("bpfvm/debs"))
            .iter()
            .any(|n| n.starts_with(".tmp")),
        "temporary downloads left"
    );
}

#[test]
#[ignore = "needs the 6.1 kernel .deb (from the cache, else downloads ~27 MB)"]
fn a_full_disk_during_extraction_fails_clearly_and_a_rerun_with_room_succeeds() {
    let deb = deb_6_1();
    let d = tempfile::tempdir().unwrap();
    let log = tempfile::tempdir().unwrap();
    // Room for the .deb plus 20 MB; the extracted tree needs about 110 MB.
    let size_kib = std::fs::metadata(&deb).unwrap().len() / 1024 + 20 * 1024;
    let script = format!(
        "set -u\n\
         mount -t tmpfs -o size={size_kib}k tmpfs {d} || exit 99\n\
         mkdir -p {d}/bpfvm/debs && cp {deb} {d}/bpfvm/debs/ || exit 98\n\
         XDG_CACHE_HOME={d} \"$XTASK\" kernels fetch 6.1 > {log}/first 2>&1; echo \"first=$?\"\n\
         ls -A {d}/bpfvm/kernels > {log}/after-first\n\
         mount -o remount,size=400m {d} || exit 97\n\
         XDG_CACHE_HOME={d} \"$XTASK\" kernels fetch 6.1 > {log}/second 2>&1; echo \"second=$?\"\n\
         ls -A {d}/bpfvm/kernels {d}/bpfvm/kernels/6.1-* > {log}/after-second",
        d = d.path().display(),
        deb = deb.display(),
        log = log.path().display(),
    );
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = Command::new("unshare");
    cmd.arg("--mount");
    if !root {
        cmd.arg("--map-root-user");
    }
    let o = cmd
        .args(["sh", "-c", &script])
        .env("XTASK", env!("CARGO_BIN_EXE_xtask"))
        .output()
        .unwrap();
    let read = |n: &str| std::fs::read_to_string(log.path().join(n)).unwrap_or_default();
    let out = text(&o);
    assert!(out.contains("first=255\n"), "{out}\n{}", read("first"));
    let first = read("first");
    assert!(first.contains("No space left on device"), "{first}");
    assert!(
        first.contains("is full: free space there or set XDG_CACHE_HOME"),
        "{first}"
    );
    assert_eq!(
        read("after-first"),
        ".lock\n",
        "nothing half-extracted is kept"
    );
    assert!(out.contains("second=0\n"), "{out}\n{}", read("second"));
    let after = read("after-second");
    assert!(after.contains(".bpfvm-complete"), "{after}");
    assert!(!after.lines().any(|l| l.starts_with(".tmp")), "{after}");
}

/// Starts a fetch in its own process group, waits until `busy` says it is mid-way, and
/// SIGKILLs the whole group (the fetch and its apt-get or dpkg-deb).
fn kill_mid_way(cache: &Path, busy: impl Fn() -> bool) {
    let mut child: Child = xtask_fetch(cache)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !busy() {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the fetch never got there"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the fetch finished before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: killing the process group of our own child.
    unsafe { libc::killpg(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
}

#[test]
#[ignore = "needs the 6.1 kernel .deb (from the cache, else downloads ~27 MB)"]
fn sigkill_during_extraction_then_a_rerun_gives_a_complete_tree() {
    let deb = deb_6_1();
    let d = tempfile::tempdir().unwrap();
    let debs = d.path().join("bpfvm/debs");
    std::fs::create_dir_all(&debs).unwrap();
    std::fs::copy(&deb, debs.join(deb.file_name().unwrap())).unwrap();
    let kernels = d.path().join("bpfvm/kernels");
    // Mid-way: dpkg-deb has written modules into the temporary tree.
    kill_mid_way(d.path(), || {
        entries(&kernels)
            .iter()
            .any(|n| n.starts_with(".tmp-6.1-") && kernels.join(n).join("lib/modules").is_dir())
    });
    assert!(
        entries(&kernels)
            .iter()
            .all(|n| n == ".lock" || n.starts_with(".tmp")),
        "no tree may count as cached after the kill: {:?}",
        entries(&kernels)
    );
    let o = xtask_fetch(d.path()).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("removed leftover"), "{}", text(&o));
    assert_one_complete_tree(d.path());
}

#[test]
#[ignore = "downloads the 6.1 kernel (~27 MB) twice"]
fn sigkill_during_a_download_then_a_rerun_gives_a_complete_tree() {
    let d = tempfile::tempdir().unwrap();
    let debs = d.path().join("bpfvm/debs");
    kill_mid_way(d.path(), || {
        entries(&debs)
            .iter()
            .any(|n| n.starts_with(".tmp-download-"))
    });
    assert!(
        entries(&debs).iter().all(|n| n.starts_with(".tmp")),
        "no .deb may count as downloaded after the kill: {:?}",
        entries(&debs)
    );
    let o = xtask_fetch(d.path()).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_one_complete_tree(d.path());
}
