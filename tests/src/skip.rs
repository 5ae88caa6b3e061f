//! Skips that the runner can tell from passes. libtest has no "skipped" outcome, so a test that
//! cannot run here records why in `$BPFVM_RESULTS/skips.jsonl` and returns; the runner turns
//! that pass into `skip` with the reason.
use std::io::Write;

use bpfvm_common::protocol;

use crate::features::Feature;

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
    write_record(reason, None);
}

/// Records that the current test is skipped because the kernel lacks `feature`: the runner
/// turns the skip into a failure when the kernel is expected to have it.
pub fn record_missing(feature: Feature, reason: &str) {
    write_record(reason, Some(feature));
}

fn write_record(reason: &str, feature: Option<Feature>) {
    let test = std::thread::current()
        .name()
        .unwrap_or("<unknown test>")
        .to_string();
    eprintln!("SKIP {test}: {reason}");
    let Some(dir) = std::env::var_os(protocol::RESULTS_ENV) else {
        return;
    };
    let record = protocol::SkipRecord {
        test: test.clone(),
        reason: reason.to_string(),
        feature: feature.map(Feature::name),
    };
    let line = serde_json::to_string(&record).expect("a skip record is JSON") + "\n";
    // One write of a short line with O_APPEND: concurrent tests never interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::path::Path::new(&dir).join(protocol::files::SKIPS))
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

/// Skips the current test unless the running kernel has `feature` (probed once per process);
/// fails it if the probe erred.
#[macro_export]
macro_rules! require {
    ($feature:expr) => {{
        let feature = $feature;
        if let Err(reason) = $crate::features::require(feature) {
            $crate::skip::record_missing(feature, &reason);
            return $crate::skip::Skipped::skipped();
        }
    }};
}

/// Skips the current test unless the running kernel has every feature the BPF object `bytes`
/// needs (read from the object: `features::needed_by`).
#[macro_export]
macro_rules! require_object {
    ($bytes:expr) => {
        for feature in $crate::features::needed_by($bytes) {
            $crate::require!(feature);
        }
    };
}
