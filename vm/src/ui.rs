//! Renders [`Output`] events on the terminal. Steps and notes go to stderr, so a command's
//! stdout (`vm-run`) stays exactly what the guest printed.
//!
//! Much of what is shown came from the guest (console lines, test names, reasons, the
//! command's stderr), so every line is made inert first ([`inert`]): control characters are
//! escaped (a kernel could otherwise move the cursor, retitle the terminal or hide text) and
//! a line that GitHub Actions would read as a workflow command (`::set-output ...`) is
//! defused. The guest command's stdout is its output and passes byte for byte, except on a
//! terminal (escaped) and under GitHub Actions (workflow commands defused).
//!
//! A closed stdout or stderr (`vm-run -- dmesg | head -1`) is not an error of the run: what
//! cannot be written is dropped and the run goes on to its own end and exit status.
use std::borrow::Cow;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};

use crate::support::output::{Events, Output};

/// A terminal sink. `verbose` also shows commands being run and the kernel console.
pub fn terminal(verbose: bool) -> Events {
    let bar: Mutex<Option<ProgressBar>> = Mutex::new(None);
    let stdout_is_terminal = std::io::stdout().is_terminal();
    let in_github_actions = std::env::var_os("GITHUB_ACTIONS").is_some_and(|v| v == "true");
    Events::new(move |o| {
        let mut bar = bar.lock().unwrap_or_else(|e| e.into_inner());
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
                b.set_message(inert(&label).into_owned());
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
                let s = if stdout_is_terminal {
                    inert(&s)
                } else if in_github_actions {
                    defuse_workflow_command(&s)
                } else {
                    Cow::Borrowed(s.as_str())
                };
                let print = || {
                    let _ = writeln!(std::io::stdout().lock(), "{s}");
                };
                match bar.as_ref() {
                    Some(b) => b.suspend(print),
                    None => print(),
                }
                return;
            }
            Output::GuestStderr(s) => s,
        };
        let text = inert_lines(&line);
        let print = || {
            let _ = writeln!(std::io::stderr().lock(), "{text}");
        };
        match bar.as_ref() {
            Some(b) => b.suspend(print),
            None => print(),
        }
    })
}

/// Text of several lines, each made [`inert`].
pub fn inert_lines(text: &str) -> String {
    text.lines().map(inert).collect::<Vec<_>>().join("\n")
}

/// Prints `text` on stdout, made inert; a closed stdout drops it (see the module doc).
pub fn print_stdout(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{}", inert_lines(text));
}

/// Prints `text` on stderr, made inert; a closed stderr drops it.
pub fn print_stderr(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{}", inert_lines(text));
}

/// One line as it is safe to print: control characters (but tab) escaped as `\u{..}`, and
/// a workflow command defused.
pub fn inert(line: &str) -> Cow<'_, str> {
    let line = defuse_workflow_command(line);
    if !line.chars().any(|c| c.is_control() && c != '\t') {
        return line;
    }
    Cow::Owned(
        line.chars()
            .map(|c| match c {
                c if c.is_control() && c != '\t' => c.escape_unicode().to_string(),
                c => c.to_string(),
            })
            .collect(),
    )
}

/// GitHub Actions runs a log line that starts with `::` (after blanks) as a workflow command;
/// a leading backslash makes it plain text.
fn defuse_workflow_command(line: &str) -> Cow<'_, str> {
    if line.trim_start().starts_with("::") {
        Cow::Owned(format!("\\{line}"))
    } else {
        Cow::Borrowed(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_tabs_kept() {
        assert_eq!(inert("plain\ttext"), "plain\ttext");
        assert_eq!(inert("\x1b]0;pwned\x07red"), "\\u{1b}]0;pwned\\u{7}red");
        assert_eq!(inert("a\rb"), "a\\u{d}b");
    }

    #[test]
    fn workflow_commands_are_defused() {
        assert_eq!(inert("::add-mask::x"), "\\::add-mask::x");
        assert_eq!(inert("  ::error::x"), "\\  ::error::x");
        assert_eq!(inert("a ::error::x"), "a ::error::x");
    }
}
