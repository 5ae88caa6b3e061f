//! Bad input fails fast with an error that names the problem and the fix, and exit status 255
//! (what judged nothing: `git bisect run` stops rather than blame a commit; docs/exit-status.md),
//! before anything is installed, downloaded or booted.
use std::process::Command;

/// The exit status of a run that judged nothing, a usage error included.
const STOP: i32 = 255;

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
    assert_eq!(code, STOP);
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
    assert_eq!(code, STOP);
    assert!(
        err.contains("/nonexistent/bzImage: cannot read the image"),
        "{err}"
    );
}

#[test]
fn a_file_that_is_not_a_bzimage_says_what_to_pass() {
    let (code, err) = xtask(&["vm-run", "--kernel", "./Cargo.toml", "--", "true"]);
    assert_eq!(code, STOP);
    assert!(err.contains("pass arch/x86/boot/bzImage"), "{err}");
    // Without a slash it is a pin name, even when a file has that name: the error says so.
    let (code, err) = xtask(&["vm-run", "--kernel", "Cargo.toml", "--", "true"]);
    assert_eq!(code, STOP);
    assert!(err.contains("pass ./Cargo.toml"), "{err}");
}

#[test]
fn modules_with_a_pinned_kernel_are_refused() {
    let (code, err) = xtask(&["vm-test", "--kernel", "6.1", "--modules", "/tmp"]);
    assert_eq!(code, STOP);
    assert!(
        err.contains("--modules is for a kernel image you built"),
        "{err}"
    );
}

#[test]
fn vm_run_needs_a_command() {
    let (code, err) = xtask(&["vm-run"]);
    assert_eq!(code, STOP, "a usage error");
    assert!(err.contains("<COMMAND>"), "{err}");
}

#[test]
fn an_unknown_benchmark_group_is_refused_before_booting() {
    let (code, err) = xtask(&["bench-vm", "--smoke", "--only", "nonsense"]);
    assert_eq!(code, STOP, "a usage error: {err}");
    assert!(
        err.contains("possible values: bloom, bpf_loop, batch"),
        "{err}"
    );
}

/// Fails with exit status 1 and `want` in the error, before anything is installed or booted.
fn refused_before_provisioning(args: &[&str], want: &str) {
    let (code, err) = xtask(args);
    assert_eq!(code, STOP, "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: {err}");
    assert!(
        !err.contains("==> checking host tools"),
        "{args:?} failed only after provisioning: {err}"
    );
}

#[test]
fn zero_cpus_are_refused() {
    refused_before_provisioning(
        &["vm-run", "--cpus", "0", "--", "true"],
        "--cpus 0: a VM needs at least one CPU",
    );
}

#[test]
fn more_cpus_than_the_host_has_are_refused() {
    let host = std::thread::available_parallelism().unwrap().get();
    let cpus = (host + 1).to_string();
    refused_before_provisioning(
        &["vm-test", "--cpus", &cpus],
        &format!("--cpus {cpus} is more than the {host} CPUs"),
    );
}

#[test]
fn memory_that_is_no_size_or_more_than_the_host_has_is_refused() {
    refused_before_provisioning(
        &["vm-run", "--memory", "lots", "--", "true"],
        "--memory \"lots\" is not a size",
    );
    refused_before_provisioning(
        &["vm-test", "--memory", "64T"],
        "--memory 64T is more than this machine's",
    );
}

#[test]
fn a_zero_timeout_is_refused() {
    refused_before_provisioning(
        &["vm-run", "--timeout", "0", "--", "true"],
        "--timeout 0 would kill the VM before it boots",
    );
}

#[test]
fn an_append_with_a_line_break_or_an_open_quote_is_refused() {
    refused_before_provisioning(
        &["vm-run", "--append", "a=1\nb=2", "--", "true"],
        "contains a line break",
    );
    refused_before_provisioning(
        &["vm-test", "--append", "foo=\"a b"],
        "has an unmatched quote",
    );
}

#[test]
fn the_matrix_refuses_bad_options_before_the_first_kernel() {
    refused_before_provisioning(&["vm-test", "--kernel", "all", "--cpus", "0"], "--cpus 0");
}

/// Runs `script` with `sh` in a private mount namespace (so it can mount tmpfs without
/// touching the host's mounts), with `$XTASK` set to this build's binary.
fn in_mount_namespace(script: &str) -> std::process::Output {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = Command::new("unshare");
    cmd.arg("--mount");
    if !root {
        cmd.arg("--map-root-user");
    }
    cmd.args(["sh", "-c", script])
        .env("XTASK", env!("CARGO_BIN_EXE_xtask"))
        .output()
        .expect("run unshare (util-linux)")
}

#[test]
fn a_cache_directory_that_cannot_be_written_is_named() {
    let d = tempfile::tempdir().unwrap();
    let script = format!(
        "mount -t tmpfs -o ro tmpfs {d} || exit 99\n\
         XDG_CACHE_HOME={d} \"$XTASK\" kernels fetch 6.1; echo \"fetch=$?\"\n\
         XDG_CACHE_HOME={d} \"$XTASK\" vm-run -- true; echo \"vm-run=$?\"",
        d = d.path().display()
    );
    let o = in_mount_namespace(&script);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(out.contains("fetch=255\n"), "{out}{err}");
    assert!(out.contains("vm-run=255\n"), "{out}{err}");
    let cache = d.path().join("bpfvm");
    assert!(
        err.contains(&format!(
            "error: the kernel cache {}/kernels is not writable (Read-only file system",
            cache.display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "error: the cache {} is not writable (Read-only file system",
            cache.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("set XDG_CACHE_HOME to a directory that is"),
        "{err}"
    );
    assert!(!err.contains("==> checking host tools"), "{err}");
}

#[test]
fn a_read_only_target_directory_is_named() {
    let d = tempfile::tempdir().unwrap();
    let script = format!(
        "mount -t tmpfs -o ro tmpfs {d} || exit 99\n\
         CARGO_TARGET_DIR={d} \"$XTASK\" vm-test --kernel 6.1; echo \"vm-test=$?\"",
        d = d.path().display()
    );
    let o = in_mount_namespace(&script);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(out.contains("vm-test=255\n"), "{out}{err}");
    assert!(
        err.contains(&format!(
            "error: the build directory {} is not writable (Read-only file system",
            d.path().display()
        )),
        "{err}"
    );
    assert!(
        err.contains("set CARGO_TARGET_DIR to a directory that is"),
        "{err}"
    );
    assert!(!err.contains("==> checking host tools"), "{err}");
}

#[test]
fn an_unknown_accelerator_is_refused() {
    let (code, err) = xtask(&["vm-test", "--accel", "nope"]);
    assert_eq!(code, STOP, "a usage error: {err}");
    assert!(
        err.contains("\"nope\" is not an accelerator: auto, kvm or tcg"),
        "{err}"
    );
}

#[test]
fn an_unknown_tcg_threading_is_refused() {
    let (code, err) = xtask(&["vm-run", "--tcg-thread", "both", "--", "true"]);
    assert_eq!(code, STOP, "a usage error: {err}");
    assert!(
        err.contains("\"both\" is not a TCG threading: auto, single or multi"),
        "{err}"
    );
}

#[test]
fn more_producers_than_guest_cpus_are_refused_before_booting() {
    let (code, err) = xtask(&["bench-vm", "--smoke", "-p", "3", "--cpus", "2"]);
    assert_eq!(code, STOP);
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
    assert_eq!(code, STOP);
    assert!(err.contains("read /nonexistent/a.json"), "{err}");
}

/// An image's release string names files and reaches vng's shell: one holding shell syntax is
/// refused before anything runs, and the syntax never runs.
#[test]
fn an_image_whose_release_holds_shell_syntax_runs_nothing() {
    let d = tempfile::tempdir().unwrap();
    // A bzImage setup header ("HdrS" at 0x202) whose kernel_version points at the release.
    let mut img = vec![0u8; 0x1000];
    img[0x202..0x206].copy_from_slice(b"HdrS");
    img[0x20e..0x210].copy_from_slice(&0x600u16.to_le_bytes());
    let release = b"6.1$(touch pwned) #1 SMP";
    img[0x800..0x800 + release.len()].copy_from_slice(release);
    let image = d.path().join("bzImage");
    std::fs::write(&image, img).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["vm-run", "--kernel", image.to_str().unwrap(), "--", "true"])
        .current_dir(d.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(STOP), "{err}");
    assert!(err.contains("kernel version string"), "{err}");
    assert!(err.contains("'$' is not allowed"), "{err}");
    assert!(!d.path().join("pwned").exists());
    assert!(
        !err.contains("==> checking host tools"),
        "refused before any work: {err}"
    );
}

/// The recorded bench-vm report the host tests use.
fn recorded() -> String {
    // At run time, not `env!`: cargo does not rebuild a moved checkout's tests.
    let package = std::env::var("CARGO_MANIFEST_DIR").expect("cargo test sets it");
    format!("{package}/../vm/tests/data/bench-6.1-quick.json")
}

#[test]
fn bench_compare_refuses_a_nonsense_threshold() {
    for t in ["nan", "inf", "-5", "0"] {
        let arg = format!("--threshold={t}");
        let (code, err) = xtask(&["bench-compare", &recorded(), &recorded(), &arg]);
        assert_eq!(code, STOP, "{t}");
        assert!(
            err.contains("must be a percentage above 0, e.g. --threshold 5"),
            "{t}: {err}"
        );
    }
}

#[test]
fn bench_compare_refuses_a_vm_test_report_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let vm_test = dir.path().join("report.json");
    std::fs::write(&vm_test, r#"{"kernel": {}, "tests": [], "summary": {}}"#).unwrap();
    let (code, err) = xtask(&["bench-compare", &recorded(), vm_test.to_str().unwrap()]);
    assert_eq!(code, STOP);
    assert!(err.contains("is a vm-test report"), "{err}");
}

#[test]
fn bench_compare_of_a_report_with_itself_passes() {
    let (code, err) = xtask(&["bench-compare", &recorded(), &recorded()]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn bench_vm_boots_out_of_range_are_refused_before_anything_runs() {
    for (boots, says) in [
        (
            "0",
            "--boots 0: each mode needs at least one boot (two for an interval); e.g. --boots 5",
        ),
        (
            "4294967295",
            "--boots 4294967295 is more than 100 boots per mode",
        ),
    ] {
        let (code, err) = xtask(&["bench-vm", "--smoke", "--boots", boots]);
        assert_eq!(code, STOP, "{boots}: {err}");
        assert!(err.contains(says), "{boots}: {err}");
        assert!(!err.contains("==> checking host tools"), "{err}");
    }
}

#[test]
fn bench_vm_zero_producers_are_refused_before_anything_runs() {
    let (code, err) = xtask(&["bench-vm", "--smoke", "-p", "0"]);
    assert_eq!(code, STOP, "{err}");
    assert!(
        err.contains("-p 0: the guest runs one producer per CPU"),
        "{err}"
    );
    assert!(!err.contains("==> checking host tools"), "{err}");
}

/// The smallest directory `--kernel-tree` takes for a kernel source tree.
fn fake_kernel_tree(dir: &std::path::Path) {
    std::fs::write(
        dir.join("Makefile"),
        "VERSION = 6\nPATCHLEVEL = 12\nSUBLEVEL = 118\nEXTRAVERSION =\n",
    )
    .unwrap();
    std::fs::write(dir.join("Kbuild"), "").unwrap();
    for d in ["scripts/kconfig", "kernel/bpf", "arch/x86"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(dir.join("scripts/kconfig/merge_config.sh"), "").unwrap();
    std::fs::write(dir.join("arch/x86/Kconfig"), "").unwrap();
}

#[test]
fn a_kernel_tree_that_is_none_is_refused_before_anything_is_built() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_str().unwrap();
    refused_before_provisioning(
        &["vm-test", "--kernel-tree", "/nonexistent/linux"],
        "--kernel-tree /nonexistent/linux: no such directory",
    );
    refused_before_provisioning(
        &["vm-run", "--kernel-tree", dir, "--", "true"],
        "is not a kernel source tree",
    );
    fake_kernel_tree(d.path());
    std::fs::write(d.path().join(".config"), "CONFIG_X86_64=y\n").unwrap();
    refused_before_provisioning(
        &["bench-vm", "--smoke", "--kernel-tree", dir],
        "holds an in-tree build (.config)",
    );
    std::fs::remove_file(d.path().join(".config")).unwrap();
    let frag = d.path().join("mine.config");
    std::fs::write(&frag, "CONFIG_BPF=y\nBPF_JIT=y\n").unwrap();
    refused_before_provisioning(
        &[
            "vm-test",
            "--kernel-tree",
            dir,
            "--kconfig",
            frag.to_str().unwrap(),
        ],
        "mine.config:2: `BPF_JIT=y` is not a config line",
    );
    // A line against the suite's, found "lost" at every commit after a full configure (125
    // each time), and a module a tree never stages: refused before anything is built.
    for (line, want) in [
        (
            "# CONFIG_BPF_JIT is not set",
            "mine.config:1: `# CONFIG_BPF_JIT is not set` contradicts `CONFIG_BPF_JIT=y`",
        ),
        (
            "CONFIG_TEST_BPF=m",
            "bpfvm builds and stages no modules of a tree",
        ),
    ] {
        std::fs::write(&frag, format!("{line}\n")).unwrap();
        refused_before_provisioning(
            &[
                "vm-test",
                "--kernel-tree",
                dir,
                "--kconfig",
                frag.to_str().unwrap(),
            ],
            want,
        );
    }
}

#[test]
fn kernel_tree_options_that_do_not_go_together_are_usage_errors() {
    // BPFVM_KERNEL is a default: with --kernel-tree it is no conflict (the tree is checked).
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["vm-test", "--kernel-tree", "/nonexistent/linux"])
        .env("BPFVM_KERNEL", "6.12")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(STOP), "{err}");
    assert!(
        err.contains("/nonexistent/linux: no such directory"),
        "{err}"
    );
    let (code, err) = xtask(&["vm-test", "--kernel-tree", "/tmp", "--kernel", "6.1"]);
    assert_eq!(code, STOP, "{err}");
    assert!(
        err.contains("--kernel-tree") && err.contains("--kernel"),
        "{err}"
    );
    let (code, err) = xtask(&["vm-test", "--kconfig", "x.config"]);
    assert_eq!(code, STOP, "{err}");
    assert!(err.contains("--kernel-tree"), "{err}");
    let (code, err) = xtask(&["bench-vm", "--against", "6.1", "--null"]);
    assert_eq!(code, STOP, "{err}");
}

/// `--bench` measures a kernel change: without `--kernel-tree` and `--against` it is refused,
/// naming both, before anything is built or booted; so is a threshold that is no percentage.
#[test]
fn bench_needs_a_kernel_tree_and_against() {
    for args in [
        &["vm-test", "--bench"][..],
        &[
            "vm-test",
            "--kernel",
            "6.1",
            "--against",
            "main",
            "--bench",
            "smoke",
        ],
        &["vm-test", "--kernel-tree", "/tmp", "--bench=quick"],
        &["selftests", "--kernel-tree", "/tmp", "--bench"],
    ] {
        let (code, err) = xtask(args);
        assert_eq!(code, STOP, "{args:?}: {err}");
        assert!(
            err.contains("give --kernel-tree DIR --against REF"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("==> "), "failed before any step: {err}");
    }
    let (code, err) = xtask(&[
        "vm-test",
        "--kernel-tree",
        "/tmp",
        "--against",
        "v1",
        "--bench",
        "--bench-threshold",
        "0",
    ]);
    assert_eq!(code, STOP, "{err}");
    assert!(
        err.contains("--bench-threshold 0: give a percent above 0"),
        "{err}"
    );
    let (code, err) = xtask(&["vm-test", "--bench", "huge"]);
    assert_eq!(code, STOP, "{err}");
    assert!(
        err.contains("[possible values: smoke, quick, full]"),
        "{err}"
    );
}

/// A variable kbuild would read (`LLVM=1`, `KCFLAGS`, ...) is refused before anything is built:
/// bpfvm builds in a clean environment, and the cached gcc kernel is never taken for it.
#[test]
fn a_variable_kbuild_would_read_is_refused_before_building() {
    for (var, value) in [("LLVM", "1"), ("KCFLAGS", "-DX"), ("KCONFIG_CONFIG", "x")] {
        let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args([
                "vm-run",
                "--kernel-tree",
                "/nonexistent/linux",
                "--",
                "true",
            ])
            .env(var, value)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(STOP), "{err}");
        assert!(
            err.contains(&format!(
                "the environment sets what kbuild would read: {var}={value}"
            )),
            "{err}"
        );
        assert!(!err.contains("==> checking host tools"), "{err}");
    }
}

/// virtme-ng's guest covers /var/tmp (and /var/cache, /run, ...) with an empty tmpfs: a build
/// directory or a working directory there is refused before anything runs, naming why.
#[test]
fn a_directory_the_guest_cannot_see_is_refused_before_anything_runs() {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["vm-run", "--", "true"])
        .env("CARGO_TARGET_DIR", "/var/tmp/bpfvm-target")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(STOP), "{err}");
    assert!(
        err.contains("the build directory /var/tmp/bpfvm-target is under /var/tmp"),
        "{err}"
    );
    assert!(!err.contains("==> checking host tools"), "{err}");
    let cwd = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["vm-run", "--", "true"])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(STOP), "{err}");
    assert!(err.contains("the current directory /var/tmp/"), "{err}");
}

/// `selftests` refuses what cannot build the kernel's selftests before anything is installed
/// or booted: a tree without them, a clang the kernel's series does not take, an image, a
/// deny list that is not there.
#[test]
fn selftests_refuse_a_tree_without_them_and_a_clang_the_series_does_not_take() {
    let empty = tempfile::tempdir().unwrap();
    let tree = empty.path().display().to_string();
    let (code, err) = xtask(&["selftests", "--kernel-tree", &tree]);
    assert_eq!(code, STOP, "{err}");
    assert!(
        err.contains("has no tools/testing/selftests/bpf/Makefile"),
        "{err}"
    );
    assert!(!err.contains("==> "), "failed before any step: {err}");
    let (code, err) = xtask(&["selftests", "--kernel", "6.1", "--clang", "22"]);
    assert_eq!(code, STOP, "{err}");
    assert!(
        err.contains("--clang 22: the selftests of kernel 6.1 are built with clang 16"),
        "{err}"
    );
    assert!(!err.contains("==> "), "failed before any step: {err}");
    let (code, err) = xtask(&["selftests", "--kernel", "./Cargo.toml"]);
    assert_eq!(code, STOP, "{err}");
    let (code, err) = xtask(&["selftests", "--kernel", "6.1", "--denylist", "/nonexistent"]);
    assert_eq!(code, STOP, "{err}");
    assert!(
        err.contains("cannot read the deny list /nonexistent"),
        "{err}"
    );
    assert!(!err.contains("==> "), "failed before any step: {err}");
}

#[test]
fn an_architecture_bpfvm_does_not_boot_is_refused() {
    refused_before_provisioning(
        &["vm-test", "--kernel", "6.1", "--arch", "riscv64"],
        "--arch \"riscv64\": not an architecture bpfvm boots; use x86_64, arm64 or all",
    );
}

#[test]
fn an_arm64_image_or_tree_is_refused() {
    refused_before_provisioning(
        &[
            "vm-test",
            "--kernel-tree",
            "/nonexistent",
            "--arch",
            "arm64",
        ],
        "kernels of another architecture boot from pins only",
    );
    refused_before_provisioning(
        &[
            "vm-run",
            "--kernel",
            "./bzImage",
            "--arch",
            "arm64",
            "--",
            "true",
        ],
        "kernels of another architecture boot from pins only",
    );
}

/// The arm64 pins' selftests are cross-built (each pin names its headers' `.deb`): the run
/// reaches the series' clang rule, as on x86_64; the kernel's `bench` runs on x86_64 only.
#[test]
fn what_arm64_cannot_run_is_refused_before_fetching() {
    refused_before_provisioning(
        &[
            "selftests",
            "--kernel",
            "6.1",
            "--arch",
            "arm64",
            "--clang",
            "22",
        ],
        "--clang 22: the selftests of kernel 6.1 are built with clang 16",
    );
    refused_before_provisioning(
        &[
            "selftests",
            "--kernel",
            "6.12",
            "--arch",
            "arm64",
            "--clang",
            "16",
        ],
        "--clang 16: the selftests of kernel 6.12 are built with clang 19 or 22",
    );
    refused_before_provisioning(
        &[
            "bench-vm",
            "--kernel",
            "6.12",
            "--arch",
            "arm64",
            "--upstream",
        ],
        "the kernel's selftests are built for x86_64 only",
    );
}

#[test]
fn kvm_for_an_arm64_guest_is_refused_before_fetching() {
    refused_before_provisioning(
        &[
            "vm-test", "--kernel", "6.12", "--arch", "arm64", "--accel", "kvm",
        ],
        "--accel kvm with an arm64 kernel: KVM runs guests of the host's architecture",
    );
}

#[test]
fn one_kernel_commands_refuse_every_architecture() {
    refused_before_provisioning(
        &["vm-run", "--kernel", "6.1", "--arch", "all", "--", "true"],
        "this command boots one kernel; name one architecture",
    );
}
