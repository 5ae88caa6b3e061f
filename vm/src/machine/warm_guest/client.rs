//! A run's side of a kept guest: asks the checkout's keeper (`wire`) for its guest before it
//! builds ([`ask`], so that the guest's check runs beside the build), hands it its guest script
//! once built ([`run`]), and either gets how it ended, with the guest's output passed on as a
//! boot's would be, or is told to boot afresh, and why.
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::machine::vng::{Ending, RunOutcome};
use crate::machine::warm_guest::wire::{self, Reply, Request, Run, Stream};
use crate::support::output::{Events, Output};
use crate::support::proc;

/// What came of asking.
pub enum Attempt {
    /// Boot afresh: why. A refusing keeper waits for `hold` to be dropped (the end of the
    /// run that boots its own VM) before it boots its guest again, so that two boots do not
    /// share the host's CPUs.
    Boot {
        why: String,
        hold: Option<UnixStream>,
    },
    /// The run ran in the kept guest: why it could, the seq its kernel log continues after,
    /// and how it ended. A keeper whose guest stopped with the run empties the share for its
    /// next boot only once `hold` is dropped: hold it until the run has read its files there.
    Ran {
        why: String,
        after: u64,
        outcome: RunOutcome,
        hold: Option<UnixStream>,
    },
}

/// Where the run's directory goes when a keeper is listening in `dir`: its share, which the
/// guest sees at the same path.
pub fn share(dir: &Path) -> Option<PathBuf> {
    dir.join(wire::SOCKET)
        .exists()
        .then(|| dir.join(wire::SHARE))
}

/// Hard-links (or copies) each of `files` into `into` under its own name, and returns their
/// new paths: a kept guest has the host's root in its cache since its boot (virtme-ng mounts
/// it with `cache=always`), so a binary rebuilt at the same path may read as the old one
/// there; a path the guest never saw cannot. A relinked binary is a new file (the linker
/// writes a new one), so the link is the new content.
pub fn stage(files: &[PathBuf], into: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(into).with_context(|| format!("create {}", into.display()))?;
    let mut out = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let name = f.file_name().context("a file to stage has no name")?;
        // Objects of two directories may share a name: each file its own directory.
        let dir = into.join(i.to_string());
        std::fs::create_dir_all(&dir)?;
        let to = dir.join(name);
        if std::fs::hard_link(f, &to).is_err() {
            std::fs::copy(f, &to)
                .with_context(|| format!("copy {} to {}", f.display(), to.display()))?;
        }
        out.push(to);
    }
    Ok(out)
}

/// A question asked of a keeper, its answer not yet read.
pub enum Asked {
    /// The keeper has the question on this socket, and checks its guest.
    Keeper(UnixStream),
    /// No keeper took the question: why.
    Nobody(String),
}

/// Asks the keeper listening in `dir` for its guest, for a run with `req`'s key; reads no answer,
/// so that the run builds while the guest is checked.
pub fn ask(dir: &Path, req: &Request) -> Asked {
    let socket = dir.join(wire::SOCKET);
    match UnixStream::connect(&socket) {
        Ok(mut s) => match s.write_all(wire::line(req).as_bytes()) {
            Ok(()) => Asked::Keeper(s),
            Err(e) => Asked::Nobody(format!("the kept guest's keeper took no question ({e})")),
        },
        Err(e) => Asked::Nobody(format!(
            "no kept guest answers at {} ({e})",
            socket.display()
        )),
    }
}

/// Hands the keeper `asked` what to run; the guest's output goes to `events` as a boot's does.
pub fn run(asked: Asked, what: &Run, events: &Events) -> Result<Attempt> {
    let mut stream = match asked {
        Asked::Keeper(s) => s,
        Asked::Nobody(why) => return Ok(Attempt::Boot { why, hold: None }),
    };
    let handed = Instant::now();
    if let Err(e) = stream.write_all(wire::line(what).as_bytes()) {
        let why = format!("the kept guest's keeper went away before the run ({e})");
        return Ok(Attempt::Boot { why, hold: None });
    }
    // Short reads, so that Ctrl-C is seen at once; the keeper waits for a booting guest, its
    // check and the run itself.
    stream.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut buf = Vec::new();
    let mut using: Option<(String, u64)> = None;
    loop {
        if proc::interrupted() {
            let outcome = RunOutcome::stopped(Ending::Interrupted, handed);
            return Ok(ran(using, outcome, None));
        }
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => {
                let why = "the kept guest's keeper went away during the run (its VM with it)";
                return Ok(match using {
                    Some(_) => ran(
                        using,
                        RunOutcome::stopped(Ending::VmFailed(why.into()), handed),
                        None,
                    ),
                    None => Attempt::Boot {
                        why: why.into(),
                        hold: None,
                    },
                });
            }
            Ok(_) if buf.ends_with(b"\n") => {}
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e).context("read the kept guest's answer"),
        }
        let reply: Reply = serde_json::from_slice(&buf).context("read the kept guest's answer")?;
        buf.clear();
        match reply {
            Reply::Refused(why) => {
                return Ok(Attempt::Boot {
                    why: format!("the kept guest refused the run: {why}"),
                    hold: Some(stream),
                })
            }
            Reply::Using { why, after } => {
                events.note(format!("no boot: {why}"));
                using = Some((why, after));
            }
            Reply::Line { stream, text } => events.emit(match stream {
                Stream::Stdout => Output::GuestStdout(text),
                Stream::Stderr => Output::GuestStderr(text),
                Stream::Console => Output::Console(text),
            }),
            Reply::Ended(ended) => return Ok(ran(using, ended.outcome(), Some(stream))),
        }
    }
}

fn ran(using: Option<(String, u64)>, outcome: RunOutcome, hold: Option<UnixStream>) -> Attempt {
    let (why, after) = using.unwrap_or_default();
    Attempt::Ran {
        why,
        after,
        outcome,
        hold,
    }
}

impl RunOutcome {
    /// A run that ended `ending` without its script's end, `since` it was handed over.
    fn stopped(ending: Ending, since: Instant) -> Self {
        RunOutcome {
            ending,
            console_tail: vec![],
            elapsed: since.elapsed(),
            boot: None,
            guest: None,
            retries: vec![],
        }
    }
}
