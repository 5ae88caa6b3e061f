//! Progress events. The library reports what it does through an [`Events`] sink; the terminal
//! rendering lives in `ui`, so no module of the library prints on its own.
use std::sync::{Arc, Mutex};
use std::time::Instant;

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

/// When each step of a run began (each [`Events::step`] through [`StepClock::watch`]), to say
/// in the report where the run's time went before its boot.
#[derive(Clone)]
pub struct StepClock {
    start: Instant,
    steps: Arc<Mutex<Vec<(String, Instant)>>>,
}

impl StepClock {
    pub fn start() -> Self {
        Self {
            start: Instant::now(),
            steps: Arc::default(),
        }
    }

    /// When the clock started.
    pub fn started(&self) -> Instant {
        self.start
    }

    /// `events`, recording here when each step begins.
    pub fn watch(&self, events: &Events) -> Events {
        let (inner, steps) = (events.clone(), self.steps.clone());
        Events::new(move |o| {
            if let Output::Step(s) = &o {
                let name = s.split(" (").next().unwrap_or(s).to_string();
                steps.lock().unwrap().push((name, Instant::now()));
            }
            inner.emit(o)
        })
    }

    /// Each step that began before `until`, named by its text up to its parenthesis, with the
    /// seconds until the next step began (or `until`); the time before the first step is
    /// `starting`.
    pub fn spans(&self, until: Instant) -> Vec<(String, f64)> {
        let steps = self.steps.lock().unwrap();
        let mut begins = vec![("starting".to_string(), self.start)];
        begins.extend(steps.iter().filter(|(_, t)| *t < until).cloned());
        let ends = begins.iter().skip(1).map(|(_, t)| *t).chain([until]);
        begins
            .iter()
            .zip(ends)
            .map(|((name, from), to)| (name.clone(), (to - *from).as_secs_f64()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_lasts_until_the_next_and_the_spans_add_up_to_the_whole() {
        let clock = StepClock::start();
        let seen = Arc::new(Mutex::new(vec![]));
        let sink = seen.clone();
        let events = clock.watch(&Events::new(move |o| sink.lock().unwrap().push(o)));
        events.step("checking host tools");
        events.note("Debian packages: all present");
        std::thread::sleep(std::time::Duration::from_millis(20));
        events.step("building BPF objects (/w/ebpf)");
        let until = Instant::now();
        events.step("booting 6.1 under TCG");

        let spans = clock.spans(until);
        let names: Vec<&str> = spans.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["starting", "checking host tools", "building BPF objects"]
        );
        assert!(spans[1].1 >= 0.02, "{spans:?}");
        let total: f64 = spans.iter().map(|(_, s)| s).sum();
        let whole = (until - clock.started()).as_secs_f64();
        assert!((total - whole).abs() < 1e-6, "{total} against {whole}");
        assert_eq!(seen.lock().unwrap().len(), 4, "every event passed on");
    }
}
