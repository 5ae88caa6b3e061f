//! Renders [`Output`] events on the terminal. Steps and notes go to stderr, so a command's
//! stdout (`vm-run`) stays exactly what the guest printed.
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};

use crate::output::{Events, Output};

/// A terminal sink. `verbose` also shows commands being run and the kernel console.
pub fn terminal(verbose: bool) -> Events {
    let bar: Mutex<Option<ProgressBar>> = Mutex::new(None);
    Events::new(move |o| {
        let mut bar = bar.lock().unwrap();
        let line = match o {
            Output::Progress { label, done, total } => {
                let b = bar.get_or_insert_with(|| {
                    let b = ProgressBar::new(total);
                    b.set_style(
                        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed}")
                            .expect("static template")
                            .progress_chars("=> "),
                    );
                    b
                });
                b.set_length(total);
                b.set_position(done);
                b.set_message(label);
                if done >= total {
                    b.finish_and_clear();
                    *bar = None;
                }
                return;
            }
            Output::Step(s) => format!("==> {s}"),
            Output::Note(s) => format!("    {s}"),
            Output::Warn(s) => format!("warning: {s}"),
            Output::Command(s) if verbose => format!("    $ {s}"),
            Output::Console(s) if verbose => format!("console: {s}"),
            Output::Command(_) | Output::Console(_) => return,
            Output::TestDone { name, outcome } => format!("    test {name} ... {outcome}"),
            Output::GuestStdout(s) => {
                // The guest's stdout is the command's stdout.
                match bar.as_ref() {
                    Some(b) => b.suspend(|| println!("{s}")),
                    None => println!("{s}"),
                }
                return;
            }
            Output::GuestStderr(s) => s,
        };
        match bar.as_ref() {
            Some(b) => b.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    })
}
