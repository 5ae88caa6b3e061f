//! Skips that the runner can tell from passes. libtest has no "skipped" outcome, so a test that
//! cannot run here records why in `$BPFVM_RESULTS/skips.jsonl` and returns; the runner turns
//! that pass into `skip` with the reason.
use std::io::Write;

/// What a skipped test returns: `()` or `Ok(())`.
pub trait Skipped {
    fn skipped() -> Self;
}

impl Skipped for () {
    fn skipped() {}
}

impl<E> Skipped for Result<(), E> {
    fn skipped() -> Self {
        Ok(())
    }
}

/// Records that the current test is skipped. libtest names each test's thread after the test.
pub fn record(reason: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("<unknown test>")
        .to_string();
    eprintln!("SKIP {test}: {reason}");
    let Some(dir) = std::env::var_os("BPFVM_RESULTS") else {
        return;
    };
    let line = serde_json::json!({ "test": test, "reason": reason }).to_string() + "\n";
    // One write of a short line with O_APPEND: concurrent tests never interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::path::Path::new(&dir).join("skips.jsonl"))
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        // Without the record the runner would report a pass: fail loudly instead.
        panic!("cannot record skip of {test}: {e}");
    }
}

/// Skips the current test with a reason and returns from it.
#[macro_export]
macro_rules! skip {
    ($($reason:tt)+) => {{
        $crate::skip::record(&format!($($reason)+));
        return $crate::skip::Skipped::skipped();
    }};
}

/// Skips the current test unless the running kernel has `feature` (probed once per process).
#[macro_export]
macro_rules! require {
    ($feature:expr) => {
        if let Err(reason) = $crate::features::require($feature) {
            $crate::skip!("{reason}");
        }
    };
}
