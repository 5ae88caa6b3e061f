//! Which files of a directory are BPF objects: regular files that start with the ELF magic.
//! One check for the guest crate's build script (which embeds them) and the host runner (which
//! lists what `ebpf/` built), so the two never disagree on what counts. And which objects
//! `ebpf/` declares ([`bin_names`]), for the guest crate's build script to check its own list
//! against.
extern crate std;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::string::{String, ToString};
use std::vec::Vec;

/// The ELF objects directly in `dir`, sorted by path.
pub fn list(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_file() && is_elf(&path) {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// Whether the file starts with `\x7fELF`; unreadable or shorter files are not objects.
pub fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"\x7fELF")
}

/// The `name`s of the `[[bin]]` tables of a Cargo manifest (`ebpf/Cargo.toml`: one object
/// each), in order. Read line by line rather than with a TOML parser, which would be the guest
/// build's slowest build dependency: it takes `name = "..."` lines, as cargo and rustfmt-style
/// manifests write them, between a `[[bin]]` header and the next header.
pub fn bin_names(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if let Some(value) = line.strip_prefix("name").map(str::trim_start) {
            if let (true, Some(value)) = (in_bin, value.strip_prefix('=')) {
                names.push(value.trim().trim_matches('"').to_string());
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_with_the_elf_magic_count() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::create_dir(d.join("dir")).unwrap();
        std::fs::write(d.join("b"), b"\x7fELF\x02\x01").unwrap();
        std::fs::write(d.join("a"), b"\x7fELF").unwrap();
        std::fs::write(d.join("short"), b"\x7fEL").unwrap();
        std::fs::write(d.join("a.d"), b"target/a: src/a.rs").unwrap();
        assert_eq!(list(d).unwrap(), [d.join("a"), d.join("b")]);
    }

    #[test]
    fn bin_names_are_the_names_of_the_bin_tables_only() {
        let manifest = r#"
[package]
name = "bpfvm-ebpf"

[[bin]]
name = "smoke"
path = "src/smoke.rs"

[dependencies]
aya-ebpf = "0.1"

[[bin]]
path = "src/bench.rs"
name="bench"
"#;
        assert_eq!(bin_names(manifest), ["smoke", "bench"]);
    }

    #[test]
    fn every_bin_of_the_ebpf_crate_is_read() {
        let package = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets it");
        let ebpf = Path::new(&package).join("../ebpf");
        let manifest = std::fs::read_to_string(ebpf.join("Cargo.toml")).unwrap();
        let names = bin_names(&manifest);
        let headers = manifest.lines().filter(|l| l.trim() == "[[bin]]").count();
        assert_eq!(names.len(), headers, "{names:?}");
        for name in &names {
            assert!(
                ebpf.join("src").join(std::format!("{name}.rs")).is_file(),
                "{name}"
            );
        }
    }
}
