//! One command at a time per checkout: two clients (or two calls of one) on the same checkout
//! would race for its `target/` (the guest build, the reports' directories). A call holds
//! `target/bpfvm-mcp.lock` (flock(2), released with the file, so a server that dies never
//! leaves it held) while its command runs; the next one queues, and its progress names the
//! holder (the client's name, its server's pid, the tool). The build slots' and the kept
//! guest's own locks hold beneath, as they do for two terminals.
use std::fs::{File, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often a queued call tries the lock again.
const RETRY: Duration = Duration::from_millis(500);

/// The checkout's lock, held while alive.
#[derive(Debug)]
pub(super) struct Turn {
    _file: File,
}

/// The lock file of the checkout whose target directory is `target`.
pub(super) fn lock_path(target: &Path) -> PathBuf {
    target.join("bpfvm-mcp.lock")
}

/// Whoever holds the lock, as they wrote it into the file.
fn holder(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(s) if !s.trim().is_empty() => s.trim().to_string(),
        _ => "another client".into(),
    }
}

/// Takes the lock at `path` for `who` at once, or says who holds it.
pub(super) fn try_take(path: &Path, who: &str) -> Result<Option<Turn>, String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| format!("cannot open the lock {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {
            file.set_len(0)
                .and_then(|_| (&file).write_all(who.as_bytes()))
                .map_err(|e| format!("cannot write the lock {}: {e}", path.display()))?;
            Ok(Some(Turn { _file: file }))
        }
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}

/// Waits for the lock at `path`, telling `waiting` who holds it (once per holder), until
/// `stop` is cancelled (then `None`).
pub(super) async fn take(
    path: &Path,
    who: &str,
    stop: &CancellationToken,
    mut waiting: impl FnMut(&str),
) -> Result<Option<Turn>, String> {
    let mut told = String::new();
    loop {
        if let Some(turn) = try_take(path, who)? {
            return Ok(Some(turn));
        }
        let now = holder(path);
        if now != told {
            waiting(&now);
            told = now;
        }
        tokio::select! {
            _ = stop.cancelled() => return Ok(None),
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_waits_and_is_told_who_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(dir.path());
        let first = try_take(&path, "client A (server pid 1), run")
            .unwrap()
            .unwrap();
        assert!(try_take(&path, "client B").unwrap().is_none());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let stop = CancellationToken::new();
        let mut told = vec![];
        let got = rt.block_on(async {
            let s = stop.clone();
            let t = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(1200)).await;
                s.cancel();
            });
            let got = take(&path, "client B", &stop, |h| told.push(h.to_string())).await;
            t.await.unwrap();
            got
        });
        assert!(got.unwrap().is_none(), "cancelled while queued");
        assert_eq!(told, ["client A (server pid 1), run"]);
        drop(first);
        let second = try_take(&path, "client B").unwrap();
        assert!(second.is_some(), "free once the holder let go");
        assert_eq!(holder(&path), "client B");
    }
}
