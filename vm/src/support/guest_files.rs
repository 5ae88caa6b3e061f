//! Reading what the guest wrote into the shared directory. The guest runs a kernel that may
//! come from a pull request, so nothing it wrote is trusted: a file is read only when it is a
//! regular file (not a symlink to a host file, not a FIFO that would block the reader), only up
//! to a size limit, and as lossy UTF-8 (one byte that is not UTF-8 costs one character, not the
//! file). The whole directory is bounded too ([`check_usage`], polled while the guest runs).
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The most bpfvm reads of one guest file.
pub const MAX_FILE: u64 = 64 << 20;
/// The most the guest may write into the shared directory in one run, in bytes and entries.
pub const MAX_TOTAL: u64 = 256 << 20;
pub const MAX_ENTRIES: usize = 10_000;

/// Reads the guest file `path` (see the module doc).
pub fn read(path: &Path) -> io::Result<String> {
    Ok(String::from_utf8_lossy(&read_bytes(path)?).into_owned())
}

/// Reads the guest file `path` as bytes, bounded as [`read`] is (`bpfvm exec`'s stdout and
/// stderr, handed back byte for byte).
pub fn read_bytes(path: &Path) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is larger than the {} MiB bpfvm reads of a guest file",
                path.display(),
                MAX_FILE >> 20
            ),
        ));
    }
    Ok(bytes)
}

/// Opens `path` without following a symlink or blocking on a FIFO; fails unless it is a
/// regular file. For a reader that streams a file too big to [`read`], bounding itself.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// Fails, saying which limit, once the guest's files under `dir` pass [`MAX_TOTAL`] bytes or
/// [`MAX_ENTRIES`] entries. Symlinks are counted, never followed.
pub fn check_usage(dir: &Path) -> Result<(), String> {
    let (mut bytes, mut entries) = (0u64, 0usize);
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(list) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in list.flatten() {
            entries += 1;
            if entries > MAX_ENTRIES {
                return Err(format!(
                    "the guest created more than {MAX_ENTRIES} files in {}",
                    dir.display()
                ));
            }
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                todo.push(e.path());
            }
            bytes += meta.len();
            if bytes > MAX_TOTAL {
                return Err(format!(
                    "the guest wrote more than {} MiB into {}",
                    MAX_TOTAL >> 20,
                    dir.display()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_read_lossily() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("out.jsonl");
        std::fs::write(&f, b"{\"a\":1}\n\xff\n").unwrap();
        assert_eq!(read(&f).unwrap(), "{\"a\":1}\n\u{fffd}\n");
    }

    #[test]
    fn bytes_are_read_unchanged_and_a_symlink_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("exec.stdout");
        std::fs::write(&f, b"a\xff\x00b").unwrap();
        assert_eq!(read_bytes(&f).unwrap(), b"a\xff\x00b");
        let link = d.path().join("exec.stderr");
        std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
        assert!(read_bytes(&link).is_err());
    }

    #[test]
    fn symlinks_fifos_and_directories_are_refused_at_once() {
        let d = tempfile::tempdir().unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
        assert!(read(&link).is_err(), "a symlink to a host file");
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let start = std::time::Instant::now();
        let err = read(&fifo).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        assert!(read(d.path()).is_err(), "a directory");
    }

    #[test]
    fn a_file_past_the_limit_is_an_error_not_a_read() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("big");
        File::create(&f).unwrap().set_len(MAX_FILE + 1).unwrap();
        let err = read(&f).unwrap_err().to_string();
        assert!(err.contains("larger than the 64 MiB"), "{err}");
    }

    #[test]
    fn usage_counts_bytes_and_entries() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/a"), b"x").unwrap();
        assert_eq!(check_usage(d.path()), Ok(()));
        // Sparse: the size the guest claims is what counts.
        File::create(d.path().join("sub/big"))
            .unwrap()
            .set_len(MAX_TOTAL + 1)
            .unwrap();
        assert!(check_usage(d.path())
            .unwrap_err()
            .contains("more than 256 MiB"));
        std::fs::remove_file(d.path().join("sub/big")).unwrap();
        for i in 0..MAX_ENTRIES {
            File::create(d.path().join(format!("f{i}"))).unwrap();
        }
        assert!(check_usage(d.path())
            .unwrap_err()
            .contains("more than 10000 files"));
    }
}
