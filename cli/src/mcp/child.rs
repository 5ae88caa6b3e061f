//! One tool call's command, run as a child in a process group of its own: its stdout and
//! stderr come back line by line (never onto the server's stdout, the JSON-RPC stream), and
//! stopping it is per call. A stop is what Ctrl-C is to a terminal run: SIGTERM to the group,
//! whose command (bpfvm's signal handlers, `support::proc`) kills its VM's process group,
//! stops its build and exits 143; SIGKILL to the group after [`GRACE`], and the VM dies with
//! its runner then (`support::proc::dies_with_us`). The child gets SIGTERM too when the
//! server dies without stopping it (`PR_SET_PDEATHSIG`).
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::args::Invocation;

/// How long a stopped command has to stop its VM and exit before SIGKILL.
const GRACE: Duration = Duration::from_secs(30);
/// How long the pipes are read after the command exited.
const DRAIN: Duration = Duration::from_secs(3);

/// Which stream a line came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stream {
    Stdout,
    Stderr,
}

/// How the command ended.
#[derive(Debug)]
pub(super) struct Ended {
    /// Its exit status; `None` when a signal ended it.
    pub(super) code: Option<i32>,
    /// Stopped because the call was cancelled (or the server is stopping).
    pub(super) cancelled: bool,
    /// Every line, in order, with its stream: the call's log.
    pub(super) lines: Vec<(Stream, String)>,
}

impl Ended {
    /// The lines of one stream.
    pub(super) fn of(&self, stream: Stream) -> impl Iterator<Item = &str> {
        self.lines
            .iter()
            .filter(move |(s, _)| *s == stream)
            .map(|(_, l)| l.as_str())
    }

    /// The command's error, as it printed it (`error: ...` on stderr, and what follows).
    pub(super) fn error(&self) -> Option<String> {
        let err: Vec<&str> = self
            .of(Stream::Stderr)
            .skip_while(|l| !l.starts_with("error:"))
            .collect();
        (!err.is_empty()).then(|| err.join("\n"))
    }
}

/// The commands running now, so that the server waits for them to stop before it exits.
#[derive(Debug, Clone, Default)]
pub(super) struct Running(Arc<AtomicUsize>);

impl Running {
    pub(super) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Counts one running command while alive.
struct Counted(Running);

impl Counted {
    fn new(r: &Running) -> Self {
        r.0.fetch_add(1, Ordering::SeqCst);
        Self(r.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        (self.0).0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `inv` to its end, or until `stop` is cancelled; `on_line` sees each line as it comes.
pub(super) async fn run(
    inv: &Invocation,
    stop: &CancellationToken,
    running: &Running,
    mut on_line: impl FnMut(Stream, &str),
) -> std::io::Result<Ended> {
    let _counted = Counted::new(running);
    let mut cmd = Command::new(&inv.program);
    cmd.args(&inv.args)
        .current_dir(&inv.dir)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only prctl, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| {
        std::io::Error::new(e.kind(), format!("cannot start `{}`: {e}", inv.shown()))
    })?;
    let pgid = child.id().expect("a child not yet waited for has its pid") as i32;
    let mut out = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut err = BufReader::new(child.stderr.take().expect("piped")).lines();
    let (mut out_open, mut err_open) = (true, true);
    let mut lines = Vec::new();
    let mut cancelled = false;
    let mut status = None;
    // After SIGTERM: when to send SIGKILL. After the exit: how long the pipes may stay open
    // (a process that left the group may hold them forever).
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut drain_until: Option<tokio::time::Instant> = None;
    let far = tokio::time::Instant::now() + Duration::from_secs(365 * 86_400);
    while out_open || err_open {
        tokio::select! {
            l = out.next_line(), if out_open => match l {
                Ok(Some(l)) => { on_line(Stream::Stdout, &l); lines.push((Stream::Stdout, l)); }
                _ => out_open = false,
            },
            l = err.next_line(), if err_open => match l {
                Ok(Some(l)) => { on_line(Stream::Stderr, &l); lines.push((Stream::Stderr, l)); }
                _ => err_open = false,
            },
            s = child.wait(), if status.is_none() => {
                status = Some(s?);
                drain_until = Some(tokio::time::Instant::now() + DRAIN);
            }
            // Signalled only before the leader is reaped, so the group id is still ours.
            _ = stop.cancelled(), if !cancelled && status.is_none() => {
                cancelled = true;
                signal_group(pgid, libc::SIGTERM);
                kill_at = Some(tokio::time::Instant::now() + GRACE);
            }
            _ = tokio::time::sleep_until(kill_at.unwrap_or(far)), if kill_at.is_some() && status.is_none() => {
                signal_group(pgid, libc::SIGKILL);
                kill_at = None;
            }
            _ = tokio::time::sleep_until(drain_until.unwrap_or(far)), if drain_until.is_some() => break,
        }
    }
    let status = match status {
        Some(s) => s,
        None => child.wait().await?,
    };
    Ok(Ended {
        code: status.code(),
        cancelled,
        lines,
    })
}

/// Sends `sig` to the group `pgid`, whose leader we have not reaped yet (so the id is ours).
fn signal_group(pgid: i32, sig: i32) {
    // SAFETY: killpg on our own child's group; ESRCH (gone) is fine.
    unsafe { libc::killpg(pgid, sig) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Invocation {
        Invocation {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            dir: "/".into(),
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn lines_come_back_in_order_with_the_status_and_the_error() {
        let running = Running::default();
        let ended = block_on(run(
            &sh("echo table; echo '==> booting' >&2; echo 'error: no such pin' >&2; echo 'fix: x' >&2; exit 255"),
            &CancellationToken::new(),
            &running,
            |_, _| {},
        ))
        .unwrap();
        assert_eq!(ended.code, Some(255));
        assert!(!ended.cancelled);
        assert_eq!(ended.of(Stream::Stdout).collect::<Vec<_>>(), ["table"]);
        assert_eq!(ended.error().unwrap(), "error: no such pin\nfix: x");
        assert_eq!(running.count(), 0);
    }

    /// A cancelled call's command gets SIGTERM (as bpfvm's handlers stop a VM on it) and
    /// what it started in its group goes with it.
    #[test]
    fn a_cancel_terminates_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let script = format!(
            "sleep 300 & echo $! > {}; trap 'echo stopping >&2; exit 143' TERM; echo '==> booting' >&2; wait",
            pidfile.display()
        );
        let stop = CancellationToken::new();
        let running = Running::default();
        let ended = block_on(async {
            let s = stop.clone();
            run(&sh(&script), &stop, &running, move |_, l| {
                if l.starts_with("==>") {
                    s.cancel();
                }
            })
            .await
        })
        .unwrap();
        assert!(ended.cancelled);
        assert_eq!(ended.code, Some(143));
        assert!(ended.of(Stream::Stderr).any(|l| l == "stopping"));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The sleep was in the group: SIGTERM ended it too (give the kernel a moment).
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: signal 0 only checks that the pid exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        assert!(!alive, "the group's sleep {pid} is still running");
    }
}
