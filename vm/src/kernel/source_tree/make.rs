//! Running make on the tree: its output to a log, a progress line while it runs, and a failed
//! build as [`Untestable`] (exit status 125, which `git bisect run` reads as "skip this
//! commit") when the sources failed, or as a plain error (the run stops) when the host did: a
//! tool missing, the disk full, the compiler killed.
use std::fs::File;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::support::output::Events;
use crate::support::proc::{interrupted, Group};
use crate::support::status::Untestable;

/// A kernel that did not build: make's status, the compiler's error lines, the full log.
#[derive(Debug)]
struct BuildFailed {
    what: String,
    status: String,
    errors: Vec<String>,
    log: PathBuf,
}

impl std::fmt::Display for BuildFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} failed ({}); its errors:", self.what, self.status)?;
        for e in &self.errors {
            writeln!(f, "  {e}")?;
        }
        write!(f, "full log: {}", self.log.display())
    }
}

/// How often the progress line is repeated while make runs.
const PROGRESS_EVERY: Duration = Duration::from_secs(20);

/// Runs `cmd` (a make command line, `shown` as the user could type it) in its own process
/// group, every line to `log`; `label` names the step in the progress line. Ctrl-C kills the
/// whole group. A non-zero exit is an [`Untestable`] or, when [`host_failure`] says so, a
/// plain error.
pub(crate) fn run(
    cmd: &mut Command,
    shown: &str,
    label: &str,
    log: &Path,
    events: &Events,
    unmap: impl Fn(&str) -> String,
) -> Result<()> {
    events.command(shown);
    let mut file = File::create(log).with_context(|| format!("create {}", log.display()))?;
    writeln!(file, "$ {shown}")?;
    let mut group = Group::spawn(cmd).with_context(|| format!("starting `{shown}`"))?;
    let start = Instant::now();
    let mut last_report = start;
    let mut last_line = String::new();
    let mut lines = 0u64;
    let status = loop {
        if interrupted() {
            group.kill();
            bail!("interrupted during `{shown}`");
        }
        match group.lines.recv_timeout(Duration::from_millis(200)) {
            Ok((_, line)) => {
                let line = unmap(&line);
                writeln!(file, "{line}")?;
                lines += 1;
                if is_step(&line) {
                    last_line = line;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                if let Some(status) = group.try_wait()? {
                    break status;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if last_report.elapsed() >= PROGRESS_EVERY {
            last_report = Instant::now();
            events.note(format!(
                "{label}: {} elapsed, {lines} lines; at {}",
                elapsed(start.elapsed()),
                last_line.trim()
            ));
        }
    };
    for (_, line) in group.finish() {
        writeln!(file, "{}", unmap(&line))?;
    }
    file.flush()?;
    if !status.success() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let failed = BuildFailed {
            what: format!("`{shown}`"),
            status: status.to_string(),
            errors: error_lines(&text),
            log: log.to_path_buf(),
        };
        return Err(match host_failure(status, &text) {
            Some(why) => anyhow::anyhow!(
                "{failed}\nthe host failed, not the sources ({why}): fix the host and run again \
                 (a bisect stops here rather than skip or blame the commit)"
            ),
            None => Untestable(failed.to_string()).into(),
        });
    }
    events.note(format!("{label}: done in {}", elapsed(start.elapsed())));
    Ok(())
}

/// What says a failed build's host failed rather than its sources: make itself killed by a
/// signal (nothing is logged then), or its log: a tool make ran is missing (the shell's 127),
/// the host out of memory or processes (a compiler killed by the OOM killer: make reports
/// `Error 137` or `Killed`), the disk full, over quota, read-only or failing, a file the build
/// may not write or run. A commit can cause a `Permission denied` (a script that lost its
/// execute bit); stopping the bisect for a person to look costs less than skipping every
/// commit on a host that cannot build any.
pub(crate) fn host_failure(status: ExitStatus, log: &str) -> Option<String> {
    if let Some(signal) = status.signal() {
        return Some(format!("make was killed by signal {signal}"));
    }
    let has = |s: &str| log.lines().any(|l| l.contains(s));
    let why = if has("Error 127") || has(": not found") || has("command not found") {
        "a tool the build runs is missing"
    } else if has("Error 137") || has("Killed signal terminated program") || has("] Killed") {
        "a compiler was killed, e.g. by the OOM killer"
    } else if has(": out of memory") || has("Cannot allocate memory") {
        "the host is out of memory"
    } else if has("Resource temporarily unavailable") {
        "the host cannot start more processes"
    } else if has("No space left on device") {
        "the disk is full"
    } else if has("Disk quota exceeded") {
        "the disk quota is exceeded"
    } else if has("Read-only file system") {
        "a file system the build writes is read-only"
    } else if has("Input/output error") {
        "a disk failed (input/output error)"
    } else if has("Permission denied") {
        "the build may not write or run a file (permission denied)"
    } else if log.lines().any(|l| {
        ["unshare: ", "mount: ", "mkdir: "]
            .iter()
            .any(|p| l.starts_with(p))
    }) {
        // `env::Mapped`'s namespace and bind mounts, set up before make runs.
        "the build's mount namespace could not be set up"
    } else {
        return None;
    };
    Some(why.to_string())
}

/// A kbuild step line: `  CC      kernel/bpf/bloom_filter.o`.
fn is_step(line: &str) -> bool {
    line.starts_with("  ") && line.split_whitespace().count() >= 2
}

/// `4m05s`.
pub(crate) fn elapsed(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}m{:02}s", s / 60, s % 60)
}

/// At most this many error lines are shown; the log has them all.
const MAX_ERRORS: usize = 30;

/// The lines of a build log that say what went wrong: the compiler's and linker's errors,
/// with the source excerpt gcc prints under them, and make's `***` lines.
pub(crate) fn error_lines(log: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut context = 0;
    for line in log.lines() {
        let error = line.contains(": error:")
            || line.contains(": fatal error:")
            || line.contains("undefined reference to")
            || line.contains("*** ")
            || line.starts_with("ERROR:");
        if error {
            out.push(line.to_string());
            context = 3;
        } else if context > 0 && line.contains(" | ") {
            // gcc's excerpt of the source under its error line.
            out.push(line.to_string());
            context -= 1;
        } else {
            context = 0;
        }
    }
    if out.len() > MAX_ERRORS {
        out.drain(..out.len() - MAX_ERRORS);
    }
    if out.is_empty() {
        // No line looked like an error: the last lines say what happened.
        let all: Vec<&str> = log.lines().collect();
        out = all[all.len().saturating_sub(10)..]
            .iter()
            .map(|s| s.to_string())
            .collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded from a build of linux-source-6.12 with a syntax error planted in
    /// kernel/bpf/bloom_filter.c.
    const FAILED: &str = "  CC      kernel/bpf/core.o
  CC      kernel/bpf/bloom_filter.o
/work/trees/linux-source-6.12/kernel/bpf/bloom_filter.c: In function 'hash':
/work/trees/linux-source-6.12/kernel/bpf/bloom_filter.c:23:17: error: expected ';' before 'if'
   23 |         h = 1
      |              ^
      |              ;
make[4]: *** [/work/trees/linux-source-6.12/scripts/Makefile.build:229: kernel/bpf/bloom_filter.o] Error 1
make[3]: *** [/work/trees/linux-source-6.12/scripts/Makefile.build:478: kernel/bpf] Error 2
  CC      kernel/sched/core.o
make: *** [Makefile:224: __sub-make] Error 2
";

    #[test]
    fn the_compiler_errors_are_picked_out_of_the_log() {
        let e = error_lines(FAILED);
        assert!(
            e[0].ends_with("bloom_filter.c:23:17: error: expected ';' before 'if'"),
            "{e:?}"
        );
        assert!(e.iter().any(|l| l.contains("h = 1")), "{e:?}");
        assert!(e.iter().any(|l| l.starts_with("make: ***")), "{e:?}");
        assert!(!e.iter().any(|l| l.contains("sched/core.o")), "{e:?}");
    }

    #[test]
    fn a_log_without_error_lines_shows_its_tail() {
        let log: String = (0..30).map(|i| format!("line {i}\n")).collect();
        let e = error_lines(&log);
        assert_eq!(e.len(), 10);
        assert_eq!(e[9], "line 29");
    }

    /// `run` of make on a Makefile of `text`: how it ended and its log's text.
    fn make(text: &str) -> (Result<()>, String) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("Makefile"), text).unwrap();
        let log = d.path().join("build.log");
        let mut cmd = Command::new("make");
        cmd.arg("-C").arg(d.path());
        let ended = run(
            &mut cmd,
            "make",
            "building",
            &log,
            &Events::silent(),
            str::to_string,
        );
        (ended, std::fs::read_to_string(&log).unwrap())
    }

    /// `make` of a Makefile that fails: its error and its log's text.
    fn failed_make(text: &str) -> (anyhow::Error, String) {
        let (ended, log) = make(text);
        (ended.unwrap_err(), log)
    }

    #[test]
    fn a_failing_make_is_a_build_failure_with_its_errors() {
        let (err, log) = failed_make(
            "all:\n\t@echo '  CC      x.o'\n\t@echo 'x.c:1:1: error: boom' >&2\n\t@false\n",
        );
        let failed = err.downcast_ref::<Untestable>().expect("an Untestable");
        assert!(
            failed
                .0
                .contains("x.c:1:1: error: boom\n  make: *** [Makefile:4: all] Error 1"),
            "{}",
            failed.0
        );
        let shown = err.to_string();
        assert!(shown.contains("exit status 125"), "{shown}");
        assert!(log.contains("CC      x.o"));
    }

    /// A missing host tool (here `LLVM=1` on a host without clang: fixdep's 127) is the host's
    /// failure: the run stops instead of skipping every commit of a bisect.
    #[test]
    fn a_missing_tool_is_the_hosts_failure_not_the_commits() {
        let (err, _) = failed_make("all:\n\t@clang-not-installed-here -c x.c\n");
        assert!(err.downcast_ref::<Untestable>().is_none(), "{err:#}");
        assert!(
            format!("{err:#}").contains("a tool the build runs is missing"),
            "{err:#}"
        );
        let failed = ExitStatus::from_raw(2 << 8);
        assert_eq!(host_failure(failed, "make[2]: *** [x] Error 1\n"), None);
        assert!(host_failure(failed, "ld: final link failed: No space left on device\n").is_some());
        assert!(host_failure(
            failed,
            "mkdir: cannot create directory '/run/bpfvm': Read-only file system\n"
        )
        .is_some());
    }

    /// The host's faults that a bisect must not skip every commit for: make killed by a
    /// signal with nothing logged, memory or processes exhausted, a file system that cannot be
    /// written, a disk that fails.
    #[test]
    fn a_killed_make_and_an_exhausted_or_failing_host_are_the_hosts_failure() {
        let killed = ExitStatus::from_raw(libc::SIGKILL);
        assert_eq!(
            host_failure(killed, "  CC      kernel/bpf/core.o\n").as_deref(),
            Some("make was killed by signal 9")
        );
        let failed = ExitStatus::from_raw(2 << 8);
        for line in [
            "cc1: out of memory allocating 65536 bytes after a total of 1052672 bytes",
            "/bin/sh: 1: Cannot fork: Cannot allocate memory",
            "make[3]: fork: Resource temporarily unavailable",
            "/bin/sh: 1: cannot create kernel/bpf/.core.o.d: Permission denied",
            "as: kernel/bpf/core.o: Read-only file system",
            "ld: final link failed: Disk quota exceeded",
            "cc1: error: kernel/bpf/core.c: Input/output error",
        ] {
            let log =
                format!("  CC      kernel/bpf/core.o\n{line}\nmake: *** [Makefile:2] Error 2\n");
            assert!(host_failure(failed, &log).is_some(), "{line}");
        }
        let source = "kernel/bpf/core.c:1:1: error: unknown type name 'x'\n";
        assert_eq!(host_failure(failed, source), None);
    }

    #[test]
    fn a_passing_make_logs_its_output() {
        let (ended, log) = make("all:\n\t@echo built\n");
        ended.unwrap();
        assert!(log.contains("built"));
    }
}
