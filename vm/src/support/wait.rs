//! Waits that Ctrl-C and SIGTERM end: a child process (apt-get, dpkg-deb, pip, cargo install)
//! and a file lock. The CLI's signal handler only sets [`crate::support::proc::interrupted`]; a wait
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
/// ([`crate::support::proc::interrupt_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("interrupted (Ctrl-C or SIGTERM)")
    }
}

impl std::error::Error for Interrupted {}

fn interrupted() -> bool {
    crate::support::proc::interrupted()
}

/// Takes an exclusive lock on `file`, calling `on_wait` once if another process holds it.
pub fn lock(file: &File, on_wait: impl FnOnce()) -> Result<()> {
    lock_until(file, on_wait, interrupted)
}

/// Takes an exclusive lock on `dir/.lock` (created if missing), calling `on_wait` once if
/// another process holds it; the lock lasts as long as the returned file.
pub fn lock_dir(dir: &std::path::Path, on_wait: impl FnOnce()) -> Result<File> {
    use anyhow::Context as _;
    let path = dir.join(".lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    lock(&file, on_wait).with_context(|| format!("lock {}", path.display()))?;
    Ok(file)
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

/// Runs `cmd` (in its own process group) to its end, like [`Command::status`], its stdout
/// and stderr to `out` and `err`.
pub fn status(cmd: &Command, out: Stdio, err: Stdio) -> Result<ExitStatus> {
    let mut child = spawn(cmd, out, err)?;
    wait_until(&mut child, interrupted)
}

/// [`status`] with a time limit: `None` when `cmd` had not ended after `limit` (it and what it
/// started are then killed).
pub fn status_within(
    cmd: &Command,
    out: Stdio,
    err: Stdio,
    limit: Duration,
) -> Result<Option<ExitStatus>> {
    let mut child = spawn(cmd, out, err)?;
    let deadline = Instant::now() + limit;
    match wait_until(&mut child, || interrupted() || Instant::now() > deadline) {
        Err(e) if e.is::<Interrupted>() && !interrupted() => Ok(None),
        ended => ended.map(Some),
    }
}

/// Runs `cmd` (in its own process group) capturing stdout and stderr, like
/// [`Command::output`].
pub fn output(cmd: &Command) -> Result<Output> {
    output_until(cmd, interrupted)
}

fn output_until(cmd: &Command, stop: impl Fn() -> bool) -> Result<Output> {
    let mut child = spawn(cmd, Stdio::piped(), Stdio::piped())?;
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
/// and cargo's children) and a Ctrl-C at the terminal reaches only us: we stop it. And it
/// dies with us ([`crate::support::proc::dies_with_us`]): a SIGKILLed runner leaves no dpkg-deb's tar
/// extracting into the cache behind it. No stdin: none of these tools may ask.
fn spawn(cmd: &Command, out: Stdio, err: Stdio) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    crate::support::proc::dies_with_us(cmd)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
}

/// Waits for `child` to end, or `stop` (then kills its group). The first looks come after 1,
/// 2, 4 ... ms, up to [`POLL`]: a child that ends at once is not kept waiting for a whole poll.
fn wait_until(child: &mut Child, stop: impl Fn() -> bool) -> Result<ExitStatus> {
    let mut nap = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if stop() {
            kill_group(child);
            return Err(Interrupted.into());
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(POLL);
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

    /// The processes whose command line is `argv` (NULs between words), but zombies.
    fn running(argv: &str) -> Vec<String> {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            if cmdline == argv.as_bytes() && !stat.contains(") Z ") {
                found.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        found
    }

    /// A child that ends in time gives its status; one that does not is killed with what it
    /// started, and gives `None`.
    #[test]
    fn a_time_limit_ends_a_child_and_what_it_started() {
        let secs = format!("600.{}2", std::process::id());
        let argv = format!("sleep\0{secs}\0");
        let limit = Duration::from_millis(300);
        let done = status_within(
            Command::new("sh").args(["-c", "exit 3"]),
            Stdio::null(),
            Stdio::null(),
            limit,
        )
        .unwrap();
        assert_eq!(done.and_then(|s| s.code()), Some(3));
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!("sleep {secs} & wait"));
        let start = Instant::now();
        let late = status_within(&cmd, Stdio::null(), Stdio::null(), limit).unwrap();
        assert_eq!(late, None);
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(running(&argv), Vec::<String>::new(), "outlived its limit");
    }

    #[test]
    fn an_interrupt_kills_the_child_and_what_it_started_within_two_seconds() {
        // A grandchild known by its argument (its pid may be another PID namespace's).
        let secs = format!("600.{}", std::process::id());
        let argv = format!("sleep\0{secs}\0");
        let start = Instant::now();
        // The child ignores SIGTERM (so it takes the SIGKILL) and starts a grandchild.
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("trap '' TERM; sleep {secs} & wait"));
        let stop = || {
            // Interrupt once the grandchild runs.
            !running(&argv).is_empty() || start.elapsed() > Duration::from_secs(5)
        };
        let e = output_until(&cmd, stop).unwrap_err();
        assert!(e.is::<Interrupted>(), "{e:#}");
        assert!(
            start.elapsed() < Duration::from_secs(7),
            "{:?}",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            running(&argv),
            Vec::<String>::new(),
            "the grandchild outlived the interrupt"
        );
    }

    /// A runner killed outright (SIGKILL, no chance to clean up) takes its child and what
    /// the child started with it: dpkg-deb's tar must not go on writing into the cache. The
    /// runner is this test binary again, running [`stand_in_runner`].
    #[test]
    fn a_child_dies_with_its_runner_and_takes_its_own_children() {
        let secs = format!("600.{}1", std::process::id());
        let argv = format!("sleep\0{secs}\0");
        let mut runner = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "support::wait::tests::stand_in_runner",
                "--ignored",
            ])
            .env(RUNNER_SECS, &secs)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while running(&argv).is_empty() {
            if start.elapsed() > Duration::from_secs(10) {
                runner.kill().unwrap();
                panic!("the grandchild never ran");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        runner.kill().unwrap();
        runner.wait().unwrap();
        let start = Instant::now();
        while !running(&argv).is_empty() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(running(&argv), Vec::<String>::new(), "outlived the runner");
    }

    const RUNNER_SECS: &str = "BPFVM_TEST_STAND_IN_RUNNER";

    /// Not a test: the runner of the test above, which starts a child as `spawn` does and
    /// waits to be killed.
    #[test]
    #[ignore = "run by a_child_dies_with_its_runner_and_takes_its_own_children"]
    fn stand_in_runner() {
        let Some(secs) = std::env::var_os(RUNNER_SECS) else {
            return;
        };
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!("sleep {} & wait", secs.to_string_lossy()));
        // Waits for what is never going to end: the test kills this process meanwhile.
        let mut child = spawn(&c, Stdio::null(), Stdio::null()).unwrap();
        child.wait().unwrap();
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
