//! Waits that Ctrl-C and SIGTERM end: a child process (apt-get, dpkg-deb, pip, cargo install)
//! and a file lock. The CLI's signal handler only sets [`crate::proc::interrupted`]; a wait
//! that blocked in `wait(2)` or `flock(2)` would not see it until the other side finished, so
//! these poll it every [`POLL`] and end with [`Interrupted`], killing the child they waited for.
use std::fmt;
use std::fs::{File, TryLockError};
use std::io::Read;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::Result;

/// How often a wait looks at the interrupt flag.
pub const POLL: Duration = Duration::from_millis(50);
/// How long an interrupted child has between SIGTERM (apt and pip clean up their partial
/// files) and SIGKILL.
const GRACE: Duration = Duration::from_secs(1);

/// The error of a wait that Ctrl-C or SIGTERM ended; the CLI then exits with 128 + the signal
/// ([`crate::proc::interrupt_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("interrupted (Ctrl-C or SIGTERM)")
    }
}

impl std::error::Error for Interrupted {}

fn interrupted() -> bool {
    crate::proc::interrupted()
}

/// Takes an exclusive lock on `file`, calling `on_wait` once if another process holds it.
pub fn lock(file: &File, on_wait: impl FnOnce()) -> Result<()> {
    lock_until(file, on_wait, interrupted)
}

fn lock_until(file: &File, on_wait: impl FnOnce(), stop: impl Fn() -> bool) -> Result<()> {
    let mut on_wait = Some(on_wait);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => return Err(e.into()),
        }
        if let Some(f) = on_wait.take() {
            f();
        }
        if stop() {
            return Err(Interrupted.into());
        }
        std::thread::sleep(POLL);
    }
}

/// Runs `cmd` (in its own process group) to its end, like [`Command::status`].
pub fn status(cmd: &mut Command) -> Result<ExitStatus> {
    let mut child = spawn(cmd)?;
    wait_until(&mut child, interrupted)
}

/// Runs `cmd` (in its own process group) capturing stdout and stderr, like
/// [`Command::output`].
pub fn output(cmd: &mut Command) -> Result<Output> {
    output_until(cmd, interrupted)
}

fn output_until(cmd: &mut Command, stop: impl Fn() -> bool) -> Result<Output> {
    let mut child = spawn(cmd.stdout(Stdio::piped()).stderr(Stdio::piped()))?;
    let readers = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ]
    .map(|pipe| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    });
    let status = wait_until(&mut child, stop)?;
    let [stdout, stderr] = readers.map(|r| r.join().unwrap_or_default());
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Its own process group, so that killing it reaches what it started (apt's methods, pip's
/// and cargo's children) and a Ctrl-C at the terminal reaches only us: we stop it.
fn spawn(cmd: &mut Command) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0).spawn()
}

fn wait_until(child: &mut Child, stop: impl Fn() -> bool) -> Result<ExitStatus> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if stop() {
            kill_group(child);
            return Err(Interrupted.into());
        }
        std::thread::sleep(POLL);
    }
}

/// SIGTERM to the child's group, SIGKILL after [`GRACE`], then reaps the leader. The leader
/// stays unreaped (a zombie holding the group id) until the SIGKILL, so no other process can
/// have taken that id.
fn kill_group(child: &mut Child) {
    let pgid = child.id() as libc::pid_t;
    // SAFETY: signals to the group we created; ESRCH (already gone) is fine.
    unsafe { libc::killpg(pgid, libc::SIGTERM) };
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline && !exited(pgid) {
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: as above.
    unsafe { libc::killpg(pgid, libc::SIGKILL) };
    let _ = child.wait();
}

/// Whether the child `pid` has exited, without reaping it.
fn exited(pid: libc::pid_t) -> bool {
    // SAFETY: a zeroed siginfo_t is valid; waitid with WNOHANG|WNOWAIT neither blocks nor reaps.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        r != 0 || info.si_pid() != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A flag raised after `after`, as the signal handler would.
    fn raised_after(after: Duration) -> impl Fn() -> bool {
        let start = Instant::now();
        move || start.elapsed() >= after
    }

    #[test]
    fn an_interrupt_kills_the_child_and_what_it_started_within_two_seconds() {
        let t = tempfile::tempdir().unwrap();
        let pidfile = t.path().join("grandchild");
        let start = Instant::now();
        // The child ignores SIGTERM (so it takes the SIGKILL) and starts a grandchild.
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                "trap '' TERM; sleep 60 & echo $! > {}; wait",
                pidfile.display()
            ))
            .stdin(Stdio::null());
        let e = output_until(&mut cmd, raised_after(Duration::from_millis(300))).unwrap_err();
        assert!(e.is::<Interrupted>(), "{e:#}");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: signal 0 only checks whether the pid exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        assert!(!alive, "the grandchild sleep {pid} outlived the interrupt");
    }

    #[test]
    fn an_uninterrupted_child_gives_its_output_and_status() {
        let out = output_until(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            || false,
        )
        .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn a_lock_wait_ends_on_an_interrupt_and_takes_a_free_lock() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join(".lock");
        let held = File::create(&path).unwrap();
        held.lock().unwrap();
        let waiting = File::create(&path).unwrap();
        let said = AtomicBool::new(false);
        let start = Instant::now();
        let e = lock_until(
            &waiting,
            || said.store(true, Ordering::SeqCst),
            raised_after(Duration::from_millis(200)),
        )
        .unwrap_err();
        assert!(e.is::<Interrupted>(), "{e:#}");
        assert!(said.load(Ordering::SeqCst), "the wait was not announced");
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        drop(held);
        lock_until(&waiting, || panic!("the lock is free"), || true).unwrap();
    }
}
