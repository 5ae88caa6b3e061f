//! Bad input fails fast with an error that names the problem and the fix, and a non-zero exit,
//! before anything is installed, downloaded or booted.
use std::process::Command;

fn xtask(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .expect("run xtask");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_unknown_kernel_lists_the_pins() {
    let (code, err) = xtask(&["vm-test", "--kernel", "9.9"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown kernel 9.9"), "{err}");
    assert!(err.contains("6.1"), "the pins are listed: {err}");
    assert!(
        !err.contains("==> checking host tools"),
        "failed before provisioning: {err}"
    );
}

#[test]
fn a_missing_kernel_image_is_named() {
    let (code, err) = xtask(&["vm-run", "--kernel", "/nonexistent/bzImage", "--", "true"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("/nonexistent/bzImage: cannot read the image"),
        "{err}"
    );
}

#[test]
fn a_file_that_is_not_a_bzimage_says_what_to_pass() {
    let (code, err) = xtask(&["vm-run", "--kernel", "Cargo.toml", "--", "true"]);
    assert_eq!(code, 1);
    assert!(err.contains("pass arch/x86/boot/bzImage"), "{err}");
}

#[test]
fn modules_with_a_pinned_kernel_are_refused() {
    let (code, err) = xtask(&["vm-test", "--kernel", "6.1", "--modules", "/tmp"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--modules is for a kernel image you built"),
        "{err}"
    );
}

#[test]
fn vm_run_needs_a_command() {
    let (code, err) = xtask(&["vm-run"]);
    assert_eq!(code, 2, "clap's usage error");
    assert!(err.contains("<COMMAND>"), "{err}");
}

#[test]
fn an_unknown_benchmark_group_is_refused_before_booting() {
    let (code, err) = xtask(&["bench-vm", "--smoke", "--only", "nonsense"]);
    assert_eq!(code, 2, "clap's usage error: {err}");
    assert!(
        err.contains("possible values: bloom, bpf_loop, batch"),
        "{err}"
    );
}

#[test]
fn more_producers_than_guest_cpus_are_refused_before_booting() {
    let (code, err) = xtask(&["bench-vm", "--smoke", "-p", "3", "--cpus", "2"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("-p 3: the guest runs one producer per CPU"),
        "{err}"
    );
    assert!(!err.contains("==> checking host tools"), "{err}");
}

#[test]
fn bench_compare_names_a_missing_report() {
    let (code, err) = xtask(&[
        "bench-compare",
        "/nonexistent/a.json",
        "/nonexistent/b.json",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("read /nonexistent/a.json"), "{err}");
}
