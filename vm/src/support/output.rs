//! Progress events. The library reports what it does through an [`Events`] sink; the terminal
//! rendering lives in `ui`, so no module of the library prints on its own.
use std::sync::Arc;

/// One thing worth telling the user.
#[derive(Debug, Clone)]
pub enum Output {
    /// A step of the run begins ("fetching kernel 6.1").
    Step(String),
    /// A fact about the run ("accelerator: TCG (KVM probe failed: ...)").
    Note(String),
    /// Something the user should look at but that does not stop the run.
    Warn(String),
    /// An external command about to run, shown so the user can rerun it by hand.
    Command(String),
    /// A line the guest wrote to its stdout.
    GuestStdout(String),
    /// A line the guest (or qemu/virtme-ng) wrote to stderr.
    GuestStderr(String),
    /// A kernel console line (shown with --verbose; its tail is kept for diagnosis).
    Console(String),
    /// Progress of a long step: `done` of `total` units, with a label.
    Progress {
        label: String,
        done: u64,
        total: u64,
    },
    /// A test finished in the guest.
    TestDone { name: String, outcome: TestProgress },
}

/// A finished test as the live progress shows it, before the final report judges it whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestProgress {
    Ok,
    /// Skipped, for a feature this kernel is not expected to have.
    Skip,
    /// Failed; or passed after skipping for a feature the kernel must have (with why).
    Failed(Option<String>),
    Ignored,
}

impl std::fmt::Display for TestProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TestProgress::Ok => f.write_str("ok"),
            TestProgress::Skip => f.write_str("skip"),
            TestProgress::Failed(None) => f.write_str("FAILED"),
            TestProgress::Failed(Some(why)) => write!(f, "FAILED ({why})"),
            TestProgress::Ignored => f.write_str("ignored"),
        }
    }
}

/// A cheap, clonable sink for [`Output`] events.
#[derive(Clone)]
pub struct Events(Arc<dyn Fn(Output) + Send + Sync>);

impl Events {
    pub fn new(f: impl Fn(Output) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// A sink that drops everything (host-side tests).
    pub fn silent() -> Self {
        Self::new(|_| {})
    }

    pub fn emit(&self, o: Output) {
        (self.0)(o)
    }

    pub fn step(&self, s: impl Into<String>) {
        self.emit(Output::Step(s.into()))
    }

    pub fn note(&self, s: impl Into<String>) {
        self.emit(Output::Note(s.into()))
    }

    pub fn warn(&self, s: impl Into<String>) {
        self.emit(Output::Warn(s.into()))
    }

    pub fn command(&self, s: impl Into<String>) {
        self.emit(Output::Command(s.into()))
    }
}
