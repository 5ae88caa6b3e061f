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

/// How long a queued call waits for a holder that has the lock but has not yet written its
/// name (the moment between its flock(2) and its write) before calling it "another client".
const NAMING: Duration = Duration::from_millis(200);

/// The checkout's lock, held while alive.
#[derive(Debug)]
pub(super) struct Turn {
    file: File,
}

/// The name is cleared before the lock goes (with the file), so a waiter never reads a holder
/// that has let go; a server that dies leaves its name, which the next holder overwrites.
impl Drop for Turn {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
    }
}

/// The lock file of the checkout whose target directory is `target`.
pub(super) fn lock_path(target: &Path) -> PathBuf {
    target.join("bpfvm-mcp.lock")
}

/// Whoever holds the lock, as they wrote it into the file; `None` until they have.
fn holder(path: &Path) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    Some(s.trim().to_string()).filter(|s| !s.is_empty())
}

/// The holder's name, waited for a moment when it has not written it yet.
async fn named_holder(path: &Path) -> String {
    let start = std::time::Instant::now();
    loop {
        if let Some(name) = holder(path) {
            return name;
        }
        if start.elapsed() >= NAMING {
            return "another client".into();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
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
            Ok(Some(Turn { file }))
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
        let now = named_holder(path).await;
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
        assert_eq!(holder(&path).as_deref(), Some("client B"));
        drop(second);
        assert_eq!(
            holder(&path),
            None,
            "a holder that let go is no longer named"
        );
    }

    /// A waiter that comes between the holder's flock(2) and its write is told the holder's
    /// name, not "another client" (two clients that start at once).
    #[test]
    fn a_holder_that_has_not_written_its_name_yet_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(dir.path());
        let file = std::fs::File::create(&path).unwrap();
        file.try_lock().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let stop = CancellationToken::new();
        let mut told = vec![];
        rt.block_on(async {
            let (p, s) = (path.clone(), stop.clone());
            let t = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                std::fs::write(&p, "client A (bpfvm mcp pid 1), run").unwrap();
                tokio::time::sleep(Duration::from_millis(700)).await;
                s.cancel();
            });
            let got = take(&path, "client B", &stop, |h| told.push(h.to_string())).await;
            t.await.unwrap();
            assert!(got.unwrap().is_none(), "cancelled while queued");
        });
        assert_eq!(told, ["client A (bpfvm mcp pid 1), run"]);
    }
}
