//! The exit status of every command that boots a kernel, chosen so that `git bisect run` never
//! blames the wrong commit: 1 only when a kernel was judged and found bad, 125 when this commit
//! cannot be judged (git skips it), and [`STOP`] (above 127: git stops the bisect) when
//! bpfvm could not judge for a reason that is not the commit's (the input, the host, qemu or
//! the tools). `docs/exit-status.md` is the table.
use serde::{Deserialize, Serialize};

/// git bisect run: "exit code 125 [...] the current source code cannot be tested".
pub const UNTESTABLE: u8 = 125;

/// git bisect run stops on an exit status above 127 (other than a signal's 128 + N, which an
/// interrupted run exits with); 255 is also what `exit(-1)` gives.
pub const STOP: u8 = 255;

/// What a run established about the kernel it booted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Judged, and every verdict passed: exit 0.
    Good,
    /// This commit cannot be judged: its kernel does not build, or cannot have the config the
    /// suite needs: exit 125.
    Untestable,
    /// bpfvm could not judge (bad input, the host, qemu or the tools failed): exit [`STOP`].
    Stopped,
    /// Judged, and the kernel is to blame for a failure (a test failed, a splat, a panic):
    /// exit 1.
    Bad,
}

impl Status {
    pub fn code(self) -> u8 {
        match self {
            Status::Good => 0,
            Status::Bad => 1,
            Status::Untestable => UNTESTABLE,
            Status::Stopped => STOP,
        }
    }

    /// The status of a run that ended with the error `e`: untestable when its chain holds an
    /// [`Untestable`], else stopped (an error is never evidence against the commit).
    pub fn of_error(e: &anyhow::Error) -> Status {
        if e.chain().any(|c| c.is::<Untestable>()) {
            Status::Untestable
        } else {
            Status::Stopped
        }
    }

    /// The status of several kernels' runs (`--kernel all`, `bpfvm test` on a list): evidence
    /// of a bad kernel first, then a run that could not judge, then one that could not build.
    pub fn combine(all: impl IntoIterator<Item = Status>) -> Status {
        all.into_iter().max().unwrap_or(Status::Good)
    }
}

/// The error of a kernel that cannot be judged at this commit: it did not build, or its final
/// config lost an option the suite needs. Its text says what and where.
#[derive(Debug)]
pub struct Untestable(pub String);

impl std::fmt::Display for Untestable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (exit status {UNTESTABLE}: `git bisect run` skips this commit)",
            self.0
        )
    }
}

impl std::error::Error for Untestable {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_untestable_only_when_it_says_so_and_never_bad() {
        let plain = anyhow::anyhow!("qemu crashed");
        assert_eq!(Status::of_error(&plain), Status::Stopped);
        let build = anyhow::Error::new(Untestable("make failed".into())).context("tree");
        assert_eq!(Status::of_error(&build), Status::Untestable);
        assert!(format!("{build:#}").contains("exit status 125"));
    }

    #[test]
    fn codes_and_their_order() {
        assert_eq!(
            [
                Status::Good,
                Status::Bad,
                Status::Untestable,
                Status::Stopped
            ]
            .map(Status::code),
            [0, 1, 125, 255]
        );
        use Status::*;
        assert_eq!(Status::combine([Good, Untestable, Stopped, Bad]), Bad);
        assert_eq!(Status::combine([Good, Untestable, Stopped]), Stopped);
        assert_eq!(Status::combine([Good, Untestable]), Untestable);
        assert_eq!(Status::combine([]), Good);
    }
}
