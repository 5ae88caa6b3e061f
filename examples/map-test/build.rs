//! Builds the BPF program in `ebpf/` with `bpfvm build-ebpf` (the toolchain `bpfvm setup`
//! provisioned: -Z build-std=core, bpf-linker) into this build's OUT_DIR, so that plain
//! `cargo test` and `bpfvm test` rebuild it whenever it changes. The test embeds the object
//! from `$MAP_TEST_EBPF_DIR/counter`.
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn main() {
    for path in ["ebpf/src", "ebpf/Cargo.toml", "ebpf/Cargo.lock"] {
        println!("cargo:rerun-if-changed={path}");
    }
    let target =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("ebpf");
    // bpfvm's stdout goes to our stderr: a build script's stdout is read by cargo.
    let status = Command::new("bpfvm")
        .arg("build-ebpf")
        .arg("--target-dir")
        .arg(&target)
        .arg("ebpf")
        .stdout(Stdio::from(std::io::stderr()))
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("`bpfvm build-ebpf ebpf` failed ({s}); its output is above"),
        Err(e) => {
            panic!("cannot run bpfvm ({e}): install it (docs/own-crate.md in the bpfvm repository)")
        }
    }
    let objects = target.join("bpfel-unknown-none/release");
    println!("cargo:rustc-env=MAP_TEST_EBPF_DIR={}", objects.display());
}
