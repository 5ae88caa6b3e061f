//! Embeds the BPF objects: `src/object.rs` includes `$BPFVM_EBPF_DIR/<feature>` with
//! `include_bytes!`, and checks its list against the `[[bin]]`s of `ebpf/Cargo.toml`, whose
//! names this script writes to `$OUT_DIR/ebpf_bins.rs`. `cargo xtask vm-test` builds `ebpf/`
//! first and sets the variable, so no path is ever passed by hand and a stale object is never used: cargo reruns this script when
//! the variable or any object changes, and rustc's dep-info tracks the included files.
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=BPFVM_EBPF_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    let Some(dir) = std::env::var_os("BPFVM_EBPF_DIR") else {
        eprintln!(
            "error: BPFVM_EBPF_DIR is not set: build the guest tests through `cargo xtask vm-test`, \
             which builds ebpf/ first"
        );
        std::process::exit(1);
    };
    let dir = Path::new(&dir);
    let objects = match bpfvm_common::objects::list(dir) {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "error: BPFVM_EBPF_DIR={} cannot be read ({e}): build the guest tests through \
                 `cargo xtask vm-test`, which builds ebpf/ first",
                dir.display()
            );
            std::process::exit(1);
        }
    };
    for path in &objects {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    if objects.is_empty() {
        eprintln!(
            "error: BPFVM_EBPF_DIR={} holds no BPF object: build the guest tests through \
             `cargo xtask vm-test`, which builds ebpf/ first",
            dir.display()
        );
        std::process::exit(1);
    }
    // The objects `ebpf/` declares, for src/object.rs to check its list against at compile time.
    // At run time: `env!` would keep the path this script was compiled at, stale once the
    // checkout moves or another worktree sharing the target directory compiled it.
    let package = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let manifest = Path::new(&package).join("../ebpf/Cargo.toml");
    println!("cargo:rerun-if-changed={}", manifest.display());
    let manifest = std::fs::read_to_string(&manifest)
        .unwrap_or_else(|e| panic!("reading {}: {e}", manifest.display()));
    let names: Vec<String> = bpfvm_common::objects::bin_names(&manifest)
        .into_iter()
        .map(|n| format!("{n:?}"))
        .collect();
    let out =
        Path::new(&std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("ebpf_bins.rs");
    std::fs::write(&out, format!("&[{}]", names.join(", ")))
        .unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}
