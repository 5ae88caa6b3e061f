//! What a kernel must have, and the verdict on what its probes say. The table of features and
//! the release that brought each is `bpfvm_common::features::EXPECTED`; a pin lists the
//! features its kernel must have (`features` in `kernels/*.toml`, checked against the table by
//! a test below); a kernel image the user built is expected to have what its release's
//! mainline version has.
//!
//! A probe answers present, absent (the kernel's documented "no": EINVAL for an unknown map
//! type, "unknown func" for a helper) or error (anything else). An error, or "absent" for an
//! expected feature, fails the run with an entry named after the feature; so does a test
//! skipped for an expected feature.
use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use bpfvm_common::features::{self, Expected};
use serde::{Deserialize, Serialize};

pub use bpfvm_common::protocol::Probe;

use crate::kernel::pins::Pin;

/// The features one kernel must have, and where that expectation comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expectation {
    /// The mainline version the kernel is compared with, e.g. `6.1`.
    pub kernel: String,
    /// `pin kernels/6.1.toml` or `release 6.3.0-rc1 (mainline 6.3)`.
    pub source: String,
    pub features: Vec<String>,
}

/// A feature the kernel should have and does not, for `report.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mismatch {
    pub feature: String,
    /// The first release with the feature, e.g. `5.16`.
    pub since: String,
    /// What the probe answered.
    pub probe: String,
    pub message: String,
}

/// `(major, minor)` of a kernel release: `6.1.0-57-cloud-amd64` -> (6, 1),
/// `7.2.13+deb14-cloud-amd64` -> (7, 2).
pub fn mainline_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.splitn(3, '.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

fn dotted((major, minor): (u32, u32)) -> String {
    format!("{major}.{minor}")
}

/// The table's features for mainline `version`, in table order.
pub fn derived(version: (u32, u32)) -> Vec<String> {
    features::expected_in(version)
        .map(|e| e.name.to_string())
        .collect()
}

impl Expectation {
    /// A pin's own list (its names are checked against the table when the pin is parsed).
    pub fn for_pin(pin: &Pin) -> Result<Self> {
        let version = mainline_version(&pin.release).with_context(|| {
            format!(
                "{}: release {:?} has no MAJOR.MINOR",
                pin.path.display(),
                pin.release
            )
        })?;
        Ok(Self {
            kernel: dotted(version),
            source: format!(
                "pin {}",
                pin.path
                    .strip_prefix(crate::support::paths::workspace_root())
                    .unwrap_or(&pin.path)
                    .display()
            ),
            features: pin.features.clone(),
        })
    }

    /// A kernel image the user built: what mainline `release` has, by the table.
    pub fn for_release(release: &str) -> Result<Self> {
        let Some(version) = mainline_version(release) else {
            bail!("kernel release {release:?} does not start with MAJOR.MINOR: cannot tell which BPF features it must have");
        };
        Ok(Self {
            kernel: dotted(version),
            source: format!("release {release} (mainline {})", dotted(version)),
            features: derived(version),
        })
    }

    fn expects(&self, feature: &str) -> bool {
        self.features.iter().any(|f| f == feature)
    }

    /// "6.1 should have bloom_filter_map (since 5.16), but the probe says: absent (...)".
    fn should_have(&self, row: &Expected, probe: Option<&Probe>) -> String {
        format!(
            "{} should have {} (since {}), but the probe says: {}",
            self.kernel,
            row.name,
            dotted(row.since),
            probe.map_or("nothing (not probed)".into(), Probe::describe)
        )
    }
}

/// The name of the report entry for feature `name`.
pub fn entry_name(feature: &str) -> String {
    format!("feature:{feature}")
}

/// A feature entry that fails the run: the probe erred, the feature is expected but absent,
/// the guest did not probe it, or the table does not know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The report entry's name (`entry_name`).
    pub entry: String,
    pub reason: String,
}

fn failure(entry: String, reason: String) -> Failure {
    Failure { entry, reason }
}

/// The probes against the expectation: the mismatches for `report.json`, and a failing entry
/// for each feature whose probe erred, that is expected but absent, that the guest did not
/// probe, or that the table does not know.
pub fn check(exp: &Expectation, probes: &BTreeMap<String, Probe>) -> (Vec<Mismatch>, Vec<Failure>) {
    let mut mismatches = Vec::new();
    let mut entries = Vec::new();
    for row in features::EXPECTED {
        let probe = probes.get(row.name);
        match probe {
            Some(Probe::Error(e)) => entries.push(failure(
                entry_name(row.name),
                format!("the probe of {} failed: {e}", row.name),
            )),
            None => entries.push(failure(
                entry_name(row.name),
                format!(
                    "{} is in the expected-features table but the guest did not probe it",
                    row.name
                ),
            )),
            _ => {}
        }
        if exp.expects(row.name) && probe != Some(&Probe::Present) {
            let message = exp.should_have(row, probe);
            mismatches.push(Mismatch {
                feature: row.name.to_string(),
                since: dotted(row.since),
                probe: probe.map_or("not probed".into(), Probe::describe),
                message: message.clone(),
            });
            if matches!(probe, Some(Probe::Absent(_))) {
                entries.push(failure(entry_name(row.name), message));
            }
        }
    }
    for name in probes.keys().filter(|n| features::find(n).is_none()) {
        entries.push(failure(
            entry_name(name),
            format!("the guest probed {name}, which has no row in the expected-features table (common/src/features.rs)"),
        ));
    }
    (mismatches, entries)
}

/// A test skipped because feature `feature` is missing: `Err` (a failure, with its reason) when
/// the kernel should have it, else `Ok` with a skip reason that says why the kernel is not
/// expected to have it.
pub fn judge_skip(
    exp: &Expectation,
    probes: &BTreeMap<String, Probe>,
    feature: &str,
    reason: &str,
) -> Result<String, String> {
    let Some(row) = features::find(feature) else {
        return Err(format!(
            "skipped for {feature}, which has no row in the expected-features table: {reason}"
        ));
    };
    if exp.expects(feature) {
        let msg = exp.should_have(row, probes.get(feature));
        return Err(format!("{msg}; the test skipped: {reason}"));
    }
    Ok(format!(
        "{reason} ({feature} arrived in {}; {} is not expected to have it)",
        dotted(row.since),
        exp.source
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probes(present: &[&str]) -> BTreeMap<String, Probe> {
        features::EXPECTED
            .iter()
            .map(|e| {
                let p = if present.contains(&e.name) {
                    Probe::Present
                } else {
                    Probe::Absent("EINVAL from BPF_MAP_CREATE".into())
                };
                (e.name.to_string(), p)
            })
            .collect()
    }

    fn all() -> Vec<&'static str> {
        features::EXPECTED.iter().map(|e| e.name).collect()
    }

    #[test]
    fn every_pin_lists_exactly_what_the_table_gives_its_release() {
        let every = crate::domain::arch::Arch::EVERY.into_iter();
        for pin in every.flat_map(|a| crate::kernel::pins::pins_for(a).unwrap()) {
            let version = mainline_version(&pin.release).unwrap();
            let want = derived(version);
            assert_eq!(
                pin.features,
                want,
                "{}: `features` must list, in table order, every feature of \
                 common/src/features.rs up to {}: features = {want:?}",
                pin.path.display(),
                dotted(version)
            );
        }
    }

    #[test]
    fn the_table_has_unique_names_oldest_first() {
        let rows = features::EXPECTED;
        for (i, r) in rows.iter().enumerate() {
            assert!(
                rows[..i].iter().all(|o| o.name != r.name),
                "{} twice",
                r.name
            );
            assert!(!r.source.is_empty(), "{}: no source", r.name);
        }
        assert!(rows.windows(2).all(|w| w[0].since <= w[1].since));
    }

    #[test]
    fn releases_give_their_mainline_version() {
        assert_eq!(mainline_version("6.1.0-57-cloud-amd64"), Some((6, 1)));
        assert_eq!(mainline_version("7.2.13+deb14-cloud-amd64"), Some((7, 2)));
        assert_eq!(mainline_version("5.10.0-46-cloud-amd64"), Some((5, 10)));
        assert_eq!(mainline_version("6.3.0-rc1"), Some((6, 3)));
        assert_eq!(mainline_version("6"), None);
        assert_eq!(mainline_version("x.1"), None);
        let e = Expectation::for_release("5.17.3").unwrap();
        assert!(e.features.contains(&"bpf_loop_helper".to_string()));
        assert!(!e.features.contains(&"bpf_loop_inlining".to_string()));
        assert_eq!(e.kernel, "5.17");
        assert!(Expectation::for_release("custom").is_err());
    }

    #[test]
    fn an_expected_feature_the_probe_calls_absent_fails_with_its_name() {
        let exp = Expectation::for_release("6.1.0-57-cloud-amd64").unwrap();
        let mut p = probes(&all());
        p.insert(
            "bloom_filter_map".into(),
            Probe::Absent("EINVAL from BPF_MAP_CREATE".into()),
        );
        let (mismatches, entries) = check(&exp, &p);
        assert_eq!(mismatches.len(), 1);
        assert_eq!(
            mismatches[0].message,
            "6.1 should have bloom_filter_map (since 5.16), but the probe says: absent (EINVAL from BPF_MAP_CREATE)"
        );
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].entry, "feature:bloom_filter_map");
    }

    #[test]
    fn probe_errors_and_unknown_or_unprobed_features_fail_on_any_kernel() {
        let exp = Expectation::for_release("5.10.0-46-cloud-amd64").unwrap();
        let mut p = probes(&["batch_ops_hash"]);
        p.insert(
            "bpf_loop_helper".into(),
            Probe::Error("EPERM from BPF_PROG_LOAD".into()),
        );
        p.remove("bloom_filter_map");
        p.insert("frobnicator".into(), Probe::Present);
        let (_, entries) = check(&exp, &p);
        let names: Vec<&str> = entries.iter().map(|e| e.entry.as_str()).collect();
        assert!(names.contains(&"feature:bpf_loop_helper"), "{names:?}");
        assert!(names.contains(&"feature:bloom_filter_map"), "{names:?}");
        assert!(names.contains(&"feature:frobnicator"), "{names:?}");
        // Expected on 5.10 and absent here: batch ops on the other 5.6 map types.
        assert!(names.contains(&"feature:batch_ops_array"), "{names:?}");
    }

    #[test]
    fn a_matching_kernel_has_no_entries() {
        let exp = Expectation::for_release("5.10.0-46-cloud-amd64").unwrap();
        let present: Vec<&str> = exp.features.iter().map(String::as_str).collect();
        let (m, e) = check(&exp, &probes(&present));
        assert!(m.is_empty() && e.is_empty(), "{m:?} {e:?}");
    }

    #[test]
    fn skips_fail_for_expected_features_and_say_why_otherwise() {
        let exp = Expectation::for_release("5.10.0-46-cloud-amd64").unwrap();
        let p = probes(&["batch_ops_hash"]);
        let why = judge_skip(
            &exp,
            &p,
            "bloom_filter_map",
            "bloom filter map not supported",
        )
        .unwrap();
        assert!(why.contains("arrived in 5.16"), "{why}");
        let why = judge_skip(&exp, &p, "batch_ops_array", "not supported").unwrap_err();
        assert!(
            why.starts_with(
                "5.10 should have batch_ops_array (since 5.6), but the probe says: absent"
            ),
            "{why}"
        );
        assert!(judge_skip(&exp, &p, "frobnicator", "x").is_err());
    }
}
