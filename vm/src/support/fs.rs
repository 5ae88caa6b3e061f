//! The file-system operations every layer needs: replacing a file whole, checking that a
//! directory bpfvm will write into is writable before any work starts, and a file's hash.

use std::path::Path;

use anyhow::{anyhow, Context, Result};

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("create a temporary file in {}", dir.display()))?;
    tmp.write_all(bytes)?;
    tmp.persist(path)
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// Fails unless `dir` can be created and written into: `what` names it for the user and
/// `moved_by` is the environment variable that puts it elsewhere.
pub fn writable(dir: &Path, what: &str, moved_by: &str) -> Result<()> {
    std::fs::create_dir_all(dir)
        .and_then(|()| tempfile::tempfile_in(dir).map(drop))
        .map_err(|e| {
            anyhow!(
                "{what} {} is not writable ({e}); make it writable or set {moved_by} to a \
                 directory that is",
                dir.display()
            )
        })
}

/// Lowercase hex sha256 of a file.
pub fn sha256_file(path: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unwritable_directory_is_named_with_the_fix() {
        let t = tempfile::tempdir().unwrap();
        writable(&t.path().join("new/dir"), "the cache", "XDG_CACHE_HOME").unwrap();
        let file = t.path().join("file");
        std::fs::write(&file, "").unwrap();
        let e = writable(&file.join("sub"), "the cache", "XDG_CACHE_HOME")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "the cache {}/sub is not writable (",
                file.display()
            )),
            "{e}"
        );
        assert!(
            e.ends_with("set XDG_CACHE_HOME to a directory that is"),
            "{e}"
        );
    }
}
