//! Where a checkout's kept guest lives and what a run and its keeper say to each other: one
//! JSON object a line over a Unix socket in a directory of the checkout's own under the target
//! directory (so two checkouts never share a guest, even through one `CARGO_TARGET_DIR`). The run asks ([`Request`]) as soon as it knows its VM, and the keeper checks
//! its guest while the run builds; once built, the run says what to run ([`Run`]). The keeper
//! answers with a [`Reply`]: a refusal, or the use of its guest followed by the guest's output
//! and how the run ended.
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::machine::vng::{Ending, RunOutcome};
use crate::machine::warm_guest::key::Key;
use crate::support::paths::{checkout_id, workspace_root};

/// This checkout's kept guest's directory under `target`: its socket, its lock and the
/// directory it shares.
pub fn dir(target: &Path) -> PathBuf {
    dir_of(target, &workspace_root())
}

/// The kept guest's directory of the checkout at `checkout` under `target`: named by the
/// checkout, since a target directory may be shared (`CARGO_TARGET_DIR`).
pub fn dir_of(target: &Path, checkout: &Path) -> PathBuf {
    target.join("vm-guest").join(checkout_id(checkout))
}

/// The keeper's socket in [`dir`].
pub const SOCKET: &str = "guest.sock";
/// The lock the keeper holds while it lives (one keeper a checkout).
pub const LOCK: &str = "lock";
/// The directory the guest shares with the host, in [`dir`]: a run's directory goes there.
pub const SHARE: &str = "share";

/// A run's question: may a VM of this key be the kept guest? The keeper checks its guest
/// and holds it for the run until the run's [`Run`], or its end of file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub key: Key,
}

/// What the run runs, sent after its [`Request`] whatever the answer: a refusal is said at
/// once, a use only after this, and the run reads neither until it is built.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    /// The run's guest script, in the share.
    pub script: PathBuf,
    /// The run's shared directory, where its script writes its exit status.
    pub shared: PathBuf,
    /// The run's own time limit, in seconds.
    pub timeout_s: u64,
}

/// What the keeper says, in order: `Refused` alone, or `Using`, then `Line`s, then `Ended`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Boot afresh: why.
    Refused(String),
    /// The guest is as its boot left it; the run's kernel log copy continues after `after`.
    Using { why: String, after: u64 },
    /// A line of the guest's output.
    Line { stream: Stream, text: String },
    /// How the run ended, as a booted VM's would have.
    Ended(Ended),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
    Console,
}

/// [`RunOutcome`] over the wire. `boot_s` is the time from the run's [`Run`] to its script's
/// first line (the handover), `guest_s` the script's own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ended {
    pub ending: WireEnding,
    pub console_tail: Vec<String>,
    pub elapsed_s: f64,
    pub boot_s: Option<f64>,
    pub guest_s: Option<f64>,
}

/// [`Ending`] over the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireEnding {
    Exited(i32),
    Panic,
    Timeout(u64),
    Interrupted,
    VmFailed(String),
    QemuCrashed(String),
    TooMuchOutput(String),
}

impl From<&Ending> for WireEnding {
    fn from(e: &Ending) -> Self {
        match e {
            Ending::Exited(c) => WireEnding::Exited(*c),
            Ending::Panic => WireEnding::Panic,
            Ending::Timeout(t) | Ending::BootHang(t) => WireEnding::Timeout(t.as_secs()),
            Ending::Interrupted => WireEnding::Interrupted,
            Ending::VmFailed(w) => WireEnding::VmFailed(w.clone()),
            Ending::QemuCrashed(w) => WireEnding::QemuCrashed(w.clone()),
            Ending::TooMuchOutput(w) => WireEnding::TooMuchOutput(w.clone()),
            Ending::TestHung { test, limit } => WireEnding::VmFailed(format!(
                "{test} was still running after {} s",
                limit.as_secs()
            )),
        }
    }
}

impl Ended {
    pub fn outcome(&self) -> RunOutcome {
        let secs = Duration::from_secs_f64;
        RunOutcome {
            ending: match &self.ending {
                WireEnding::Exited(c) => Ending::Exited(*c),
                WireEnding::Panic => Ending::Panic,
                WireEnding::Timeout(t) => Ending::Timeout(Duration::from_secs(*t)),
                WireEnding::Interrupted => Ending::Interrupted,
                WireEnding::VmFailed(w) => Ending::VmFailed(w.clone()),
                WireEnding::QemuCrashed(w) => Ending::QemuCrashed(w.clone()),
                WireEnding::TooMuchOutput(w) => Ending::TooMuchOutput(w.clone()),
            },
            console_tail: self.console_tail.clone(),
            elapsed: secs(self.elapsed_s),
            boot: self.boot_s.map(secs),
            guest: self.guest_s.map(secs),
            retries: vec![],
        }
    }
}

/// One message as its line.
pub fn line<T: Serialize>(m: &T) -> String {
    serde_json::to_string(m).expect("a wire message serializes") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two checkouts that share a target directory (`CARGO_TARGET_DIR`) each have their own
    /// kept guest: its socket, lock and share in a directory named by the checkout.
    #[test]
    fn two_checkouts_sharing_a_target_directory_do_not_share_a_kept_guest() {
        let d = tempfile::tempdir().unwrap();
        let (one, two) = (d.path().join("one"), d.path().join("two"));
        for c in [&one, &two] {
            std::fs::create_dir(c).unwrap();
        }
        let target = d.path().join("target");
        assert_ne!(dir_of(&target, &one), dir_of(&target, &two));
        assert_eq!(dir_of(&target, &one), dir_of(&target, &one));
        assert!(dir_of(&target, &one).starts_with(target.join("vm-guest")));
        std::os::unix::fs::symlink(&one, d.path().join("link")).unwrap();
        assert_eq!(
            dir_of(&target, &d.path().join("link")),
            dir_of(&target, &one),
            "one checkout, however it is reached"
        );
        assert_eq!(dir(&target), dir_of(&target, &workspace_root()));
    }

    #[test]
    fn an_ending_crosses_the_wire_as_it_was() {
        for e in [
            Ending::Exited(0),
            Ending::Exited(3),
            Ending::Panic,
            Ending::Timeout(Duration::from_secs(9)),
            Ending::VmFailed("x".into()),
            Ending::QemuCrashed("SIGABRT".into()),
            Ending::TooMuchOutput("y".into()),
        ] {
            let ended = Ended {
                ending: WireEnding::from(&e),
                console_tail: vec!["c".into()],
                elapsed_s: 1.5,
                boot_s: Some(0.25),
                guest_s: None,
            };
            let back: Reply = serde_json::from_str(&line(&Reply::Ended(ended))).unwrap();
            let Reply::Ended(back) = back else { panic!() };
            let o = back.outcome();
            assert_eq!(o.ending, e);
            assert_eq!(o.boot, Some(Duration::from_millis(250)));
            assert_eq!(o.console_tail, ["c"]);
        }
    }
}
