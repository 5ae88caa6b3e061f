//! Child processes that run in their own process group, so that a timeout, a Ctrl-C or a
//! dropped handle kills the whole tree (vng -> virtme-run -> qemu, virtiofsd), not just the
//! first process; and that die with the runner even when it is SIGKILLed.
//!
//! Hand-written rather than duct: duct builds pipelines and kills the processes it started,
//! but not a group's grandchildren (qemu and virtiofsd are started by vng's Python), it
//! cannot put them in a PID namespace, and its readers merge or capture whole streams, where a
//! run needs each stdout and stderr line as it comes, tagged by stream, beside a timeout and
//! Ctrl-C poll. The other children bpfvm starts (cargo, apt-get, dpkg-deb, pip) are single
//! commands that `std::process::Command` runs as well as duct would.
//!
//! What a child prints is bounded: a line longer than [`MAX_LINE`] bytes arrives as several,
//! and at most [`QUEUED_LINES`] wait for the caller, so a child that prints forever, or one
//! endless line, costs the host a fixed amount of memory (the child waits on its full pipe).
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

/// The exit status the interrupting signal asks for (128 + its number), 0 while none came.
static INTERRUPTED: AtomicU8 = AtomicU8::new(0);

/// Called from the CLI's SIGINT/SIGTERM/SIGHUP handler (so it only stores an atomic): running
/// groups are killed at their next poll, and waits and loops stop at their next turn.
pub fn request_interrupt(signal: i32) {
    let _ = INTERRUPTED.compare_exchange(
        0,
        (128 + signal).clamp(129, 255) as u8,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
}

pub fn interrupted() -> bool {
    interrupt_status().is_some()
}

/// The exit status of a run ended by a signal, as a shell reports it: 130 for Ctrl-C (SIGINT),
/// 143 for SIGTERM.
pub fn interrupt_status() -> Option<u8> {
    Some(INTERRUPTED.load(Ordering::SeqCst)).filter(|&s| s != 0)
}

/// The longest line passed on whole; longer ones are cut into lines of this size.
pub const MAX_LINE: usize = 64 * 1024;
/// Lines read ahead of the caller; beyond that the reader (and so the child) waits.
pub const QUEUED_LINES: usize = 256;
/// How long [`Group::finish`] waits for the pipes to close after the kill.
const DRAIN: Duration = Duration::from_secs(2);

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
    pid: i32,
    /// The leader's status once it exited; it stays unreaped (a zombie holding its pid and so
    /// the group id) until [`Group::kill`], so that `killpg` can never reach a reused id.
    exited: Option<ExitStatus>,
    pub lines: Receiver<(Stream, String)>,
    finished: bool,
    /// The terminal handed to the group ([`Group::spawn_on_terminal`]), taken back on kill.
    terminal: Option<Terminal>,
}

impl Group {
    /// Spawns `cmd` as the leader of a new process group with piped stdout/stderr and no stdin.
    ///
    /// The command dies with the runner ([`dies_with_us`]): a SIGKILLed runner takes the VM
    /// with it.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<Self> {
        Self::spawn_with(cmd, Stdio::null()).map(|(group, _)| group)
    }

    /// [`Group::spawn`] with a pipe to the leader's stdin, returned beside the group.
    pub fn spawn_fed(cmd: &mut Command) -> std::io::Result<(Self, ChildStdin)> {
        let (group, stdin) = Self::spawn_with(cmd, Stdio::piped())?;
        Ok((group, stdin.expect("piped stdin")))
    }

    fn spawn_with(cmd: &mut Command, stdin: Stdio) -> std::io::Result<(Self, Option<ChildStdin>)> {
        become_subreaper();
        let mut cmd = dies_with_us(cmd);
        let mut child = cmd
            .process_group(0)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let pid = child.id() as i32;
        let (tx, rx) = mpsc::sync_channel(QUEUED_LINES);
        let out = child.stdout.take().expect("piped stdout");
        let err = child.stderr.take().expect("piped stderr");
        for (stream, pipe) in [
            (Stream::Stdout, Box::new(out) as Box<dyn Read + Send>),
            (Stream::Stderr, Box::new(err)),
        ] {
            let tx = tx.clone();
            // Detached: each ends at end of file or when the receiver is gone.
            thread::spawn(move || {
                let mut reader = LineReader::new(pipe, MAX_LINE);
                while let Ok(Some(line)) = reader.next_line() {
                    if tx.send((stream, line)).is_err() {
                        break;
                    }
                }
            });
        }
        let stdin = child.stdin.take();
        let group = Self {
            child,
            pid,
            exited: None,
            lines: rx,
            finished: false,
            terminal: None,
        };
        Ok((group, stdin))
    }

    /// Spawns `cmd` as the leader of a new process group on this process's terminal, for an
    /// interactive VM: stdin, stdout and stderr are inherited and, when this process is in
    /// the foreground of a terminal on stdin, the group is made its foreground (so the VM
    /// reads it and gets its Ctrl-C, and this process does not); [`Group::kill`] gives the
    /// terminal back with the settings it had (qemu leaves it raw when killed). Dies with
    /// the runner as [`Group::spawn`]'s do.
    pub fn spawn_on_terminal(cmd: &mut Command) -> std::io::Result<Self> {
        become_subreaper();
        let mut cmd = dies_with_us(cmd);
        let terminal = Terminal::foreground();
        let child = cmd
            .process_group(0)
            .stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn()?;
        let pid = child.id() as i32;
        if let Some(t) = &terminal {
            t.hand_to(pid);
        }
        // Nothing is piped: the receiver is disconnected from the start.
        let (_, lines) = mpsc::sync_channel(0);
        Ok(Self {
            child,
            pid,
            exited: None,
            lines,
            finished: false,
            terminal,
        })
    }

    /// The leader's exit status, if it has exited (it is not reaped yet: see `exited`).
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.exited.is_none() {
            self.exited = peek_exit(self.pid)?;
        }
        Ok(self.exited)
    }

    /// Kills every process of the group (leftovers too, after the leader exited) and reaps
    /// them all, so none is left even as a zombie. Safe to call more than once.
    pub fn kill(&mut self) {
        // SAFETY: killpg on our own group, whose leader we have not reaped yet, so the id
        // cannot belong to anyone else; ESRCH (already gone) is fine.
        unsafe { libc::killpg(self.pid, libc::SIGKILL) };
        let _ = self.child.wait();
        // As subreaper we inherit the group's orphans (qemu, virtiofsd, when not in a PID
        // namespace): reap them until none is left. They were sent SIGKILL, so this takes
        // milliseconds; bound it anyway.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let mut status = 0;
            // SAFETY: waitpid on our own children of the group; WNOHANG never blocks.
            match unsafe { libc::waitpid(-self.pid, &mut status, libc::WNOHANG) } {
                -1 => break, // ECHILD: none left
                0 => thread::sleep(Duration::from_millis(10)),
                _ => {}
            }
        }
        if let Some(t) = self.terminal.take() {
            t.take_back();
        }
    }

    /// Kills leftovers and collects what is left in the pipes, for at most a few seconds (a
    /// process that escaped the group may hold a pipe open forever).
    pub fn finish(mut self) -> Vec<(Stream, String)> {
        self.kill();
        self.finished = true;
        let deadline = Instant::now() + DRAIN;
        let mut rest = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => rest.push(line),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        rest
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.finished {
            self.kill();
        }
    }
}

/// The terminal on stdin while this process is its foreground group, and its settings then.
struct Terminal {
    settings: libc::termios,
    ours: libc::pid_t,
}

impl Terminal {
    /// `Some` when stdin is a terminal whose foreground group is ours.
    fn foreground() -> Option<Self> {
        // SAFETY: plain queries on fd 0 with a zeroed out-parameter termios.
        unsafe {
            let ours = libc::getpgrp();
            if libc::isatty(0) != 1 || libc::tcgetpgrp(0) != ours {
                return None;
            }
            let mut settings: libc::termios = std::mem::zeroed();
            (libc::tcgetattr(0, &mut settings) == 0).then_some(Self { settings, ours })
        }
    }

    /// Makes `pgid` the foreground group; SIGCONT wakes it if it touched the terminal before
    /// (it was stopped with SIGTTIN or SIGTTOU then).
    fn hand_to(&self, pgid: libc::pid_t) {
        set_foreground(pgid);
        // SAFETY: killpg on the group we just started.
        unsafe { libc::killpg(pgid, libc::SIGCONT) };
    }

    /// Our group in the foreground again, with the settings it had.
    fn take_back(self) {
        set_foreground(self.ours);
        // SAFETY: tcsetattr on fd 0 with the settings tcgetattr gave.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &self.settings) };
    }
}

/// tcsetpgrp from a group that may be in the background, where it would raise SIGTTOU.
fn set_foreground(pgid: libc::pid_t) {
    // SAFETY: SIGTTOU is ignored around the call and its old disposition restored.
    unsafe {
        let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        libc::tcsetpgrp(0, pgid);
        libc::signal(libc::SIGTTOU, old);
    }
}

/// `cmd` (its program, arguments, environment and directory; not its stdio, which the caller
/// sets) rebuilt so that it and what it starts die with this process, even by SIGKILL: as
/// root in a new PID namespace (util-linux `unshare --pid --fork --kill-child`), which the
/// kernel tears down with its first process (`zap_pid_ns_processes`, kernel/pid_namespace.c),
/// and with a parent-death signal on the process we start. Without root only that process
/// gets the signal. The thread that spawns it must outlive it (the signal follows the
/// thread): every caller waits for its child on the thread that started it.
pub(crate) fn dies_with_us(cmd: &Command) -> Command {
    // SAFETY: geteuid has no preconditions.
    let mut wrapped = if unsafe { libc::geteuid() } == 0 {
        let mut w = Command::new("unshare");
        w.args(["--pid", "--fork", "--kill-child", "--"])
            .arg(cmd.get_program());
        w
    } else {
        Command::new(cmd.get_program())
    };
    wrapped.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    // SAFETY: getpid is async-signal-safe; read before the fork.
    let parent = unsafe { libc::getpid() };
    // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid).
    unsafe {
        wrapped.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            // The parent may have died before the prctl: then nobody would kill us.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("the parent exited"));
            }
            Ok(())
        });
    }
    wrapped
}

/// Whether `pid` exited, without reaping it (`WNOWAIT`).
fn peek_exit(pid: i32) -> std::io::Result<Option<ExitStatus>> {
    // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on our own child; WNOHANG never blocks, WNOWAIT leaves it a zombie.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if r == -1 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: waitid filled in (or left zero) the SIGCHLD fields.
    let (who, status) = unsafe { (info.si_pid(), info.si_status()) };
    if who == 0 {
        return Ok(None);
    }
    // Back to wait(2)'s encoding, which ExitStatus understands.
    let raw = match info.si_code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_DUMPED => status | 0x80,
        _ => status,
    };
    Ok(Some(ExitStatus::from_raw(raw)))
}

/// Reads a stream as lines of at most `max` bytes (without their `\n` and a trailing `\r`),
/// as lossy UTF-8; a longer line comes back in pieces, cut before a character cut short.
pub struct LineReader<R> {
    inner: BufReader<R>,
    max: usize,
    /// The start of a character cut off the previous piece.
    carry: Vec<u8>,
}

impl<R: Read> LineReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        Self {
            inner: BufReader::new(inner),
            max: max.max(4),
            carry: Vec::new(),
        }
    }

    /// The next line or piece; `None` at end of file.
    pub fn next_line(&mut self) -> std::io::Result<Option<String>> {
        let mut line = std::mem::take(&mut self.carry);
        loop {
            let buf = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                return Ok((!line.is_empty()).then(|| text(&line)));
            }
            let take = &buf[..buf.len().min(self.max - line.len())];
            if let Some(nl) = take.iter().position(|&b| b == b'\n') {
                line.extend_from_slice(&take[..nl]);
                self.inner.consume(nl + 1);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(text(&line)));
            }
            let n = take.len();
            line.extend_from_slice(take);
            self.inner.consume(n);
            if line.len() == self.max {
                self.carry = line.split_off(char_boundary(&line));
                return Ok(Some(text(&line)));
            }
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Where to cut a full buffer: before the start of a multi-byte character cut short, if the
/// last three bytes hold one; else at its end.
fn char_boundary(line: &[u8]) -> usize {
    let n = line.len();
    for back in 1..=3.min(n) {
        let b = line[n - back];
        if b & 0xc0 != 0x80 {
            // A lead byte: does its character fit in the bytes after it?
            let len = match b {
                0x00..=0x7f => 1,
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                _ => 4,
            };
            return if len > back { n - back } else { n };
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<String> {
        let mut r = LineReader::new(input, max);
        std::iter::from_fn(|| r.next_line().unwrap()).collect()
    }

    #[test]
    fn lines_come_back_without_their_ends() {
        assert_eq!(lines(b"a\r\nb\n\nc", 64), ["a", "b", "", "c"]);
        assert_eq!(lines(b"", 64), Vec::<String>::new());
    }

    #[test]
    fn an_endless_line_comes_back_in_bounded_pieces_and_nothing_is_lost() {
        let input = vec![b'x'; 10_000];
        let got = lines(&input, 4096);
        assert_eq!(
            got.iter().map(String::len).collect::<Vec<_>>(),
            [4096, 4096, 1808]
        );
    }

    #[test]
    fn a_piece_is_never_cut_inside_a_character() {
        // 3 ASCII bytes then a 3-byte character: a 4-byte piece would cut it.
        let got = lines("abc\u{20ac}def\n".as_bytes(), 4);
        assert_eq!(got, ["abc", "\u{20ac}d", "ef"]);
    }

    #[test]
    fn bytes_that_are_not_utf8_are_replaced_not_fatal() {
        assert_eq!(lines(b"a\xffb\nok\n", 64), ["a\u{fffd}b", "ok"]);
    }

    proptest::proptest! {
        /// Any bytes: every piece is within the bound, and without `\r` and the `\n`s the
        /// pieces are the input (valid UTF-8 input comes back unchanged).
        #[test]
        fn pieces_are_bounded_and_lossless(s in "[a-z\u{e9}\u{20ac}\n]{0,300}", max in 4usize..40) {
            let got = lines(s.as_bytes(), max);
            proptest::prop_assert!(got.iter().all(|l| l.len() <= max));
            proptest::prop_assert_eq!(got.concat(), s.replace('\n', ""));
        }
    }
}
