//! Which files of a directory are BPF objects: regular files that start with the ELF magic.
//! One check for the guest crate's build script (which embeds them) and the host runner (which
//! lists what `ebpf/` built), so the two never disagree on what counts.
extern crate std;

use std::io::Read;
use std::path::{Path, PathBuf};
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
fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"\x7fELF")
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
}
