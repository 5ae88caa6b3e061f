//! Child processes that run in their own process group, so that a timeout, a Ctrl-C or a
//! dropped handle kills the whole tree (vng -> virtme-run -> qemu, virtiofsd), not just the
//! first process.
//!
//! Hand-written rather than duct: duct builds pipelines and kills the processes it started,
//! but not a group's grandchildren (qemu and virtiofsd are started by vng's Python), it
//! does not make us their subreaper, and its readers merge or capture whole streams, where a
//! run needs each stdout and stderr line as it comes, tagged by stream, beside a timeout and
//! Ctrl-C poll. The other children bpfvm starts (cargo, apt-get, dpkg-deb, pip) are single
//! commands that `std::process::Command` runs as well as duct would.
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Called from the CLI's Ctrl-C handler: running groups are killed at their next poll.
pub fn request_interrupt() {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Makes this process the reaper of its orphaned descendants, so a killed VM's qemu and
/// virtiofsd are reaped here instead of lingering as zombies under init.
fn become_subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: prctl with an integer argument; failure only means init reaps them later.
    ONCE.call_once(|| unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    });
}

/// Which pipe a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A running process group whose stdout and stderr arrive line by line on `lines`.
pub struct Group {
    child: Child,
    pgid: i32,
    pub lines: Receiver<(Stream, String)>,
    readers: Vec<thread::JoinHandle<()>>,
}

impl Group {
    /// Spawns `cmd` as the leader of a new process group with piped stdout/stderr and no stdin.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<Self> {
        use std::os::unix::process::CommandExt;
        become_subreaper();
        let mut child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let pgid = child.id() as i32;
        let (tx, rx) = mpsc::channel();
        let mut readers = Vec::new();
        let out = child.stdout.take().expect("piped stdout");
        let err = child.stderr.take().expect("piped stderr");
        for (stream, pipe) in [
            (Stream::Stdout, Box::new(out) as Box<dyn Read + Send>),
            (Stream::Stderr, Box::new(err)),
        ] {
            let tx = tx.clone();
            readers.push(thread::spawn(move || {
                for line in BufReader::new(pipe).split(b'\n') {
                    let Ok(line) = line else { break };
                    let text = String::from_utf8_lossy(&line)
                        .trim_end_matches('\r')
                        .to_string();
                    if tx.send((stream, text)).is_err() {
                        break;
                    }
                }
            }));
        }
        Ok(Self {
            child,
            pgid,
            lines: rx,
            readers,
        })
    }

    /// The leader's exit status, if it has exited.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Kills every process of the group (leftovers too, after the leader exited) and reaps
    /// them all, so none is left even as a zombie. Safe to call more than once.
    pub fn kill(&mut self) {
        // SAFETY: killpg on our own group id; ESRCH (already gone) is fine.
        unsafe { libc::killpg(self.pgid, libc::SIGKILL) };
        let _ = self.child.wait();
        // As subreaper we inherit the group's orphans (qemu, virtiofsd): reap them until none
        // is left. They were sent SIGKILL, so this takes milliseconds; bound it anyway.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            let mut status = 0;
            // SAFETY: waitpid on our own children of the group; WNOHANG never blocks.
            match unsafe { libc::waitpid(-self.pgid, &mut status, libc::WNOHANG) } {
                -1 => break, // ECHILD: none left
                0 => std::thread::sleep(std::time::Duration::from_millis(10)),
                _ => {}
            }
        }
    }

    /// Kills leftovers and waits until both pipes are drained; returns the remaining lines.
    pub fn finish(mut self) -> Vec<(Stream, String)> {
        self.kill();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        self.lines.try_iter().collect()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.readers.is_empty() {
            self.kill();
        }
    }
}
