//! `vm-test`'s use of a kept guest (`machine::warm_guest`, docs/warm-guest.md): where the
//! run's files go, the question asked before the build, its binaries staged, and its boot, or
//! the kept guest's run instead.
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;

use super::boot::{boot_tests as boot, vm_spec, with_test_progress, Booted, BOOT_TIMEOUT};
use super::dir::RunDir;
use super::prepare::Prepared;
use crate::machine::build::TestBinary;
use crate::machine::guest::VerifierRun;
use crate::machine::vng::Ending;
use crate::machine::warm_guest::{client, key::Key, script, wire};
use crate::results::report::GuestUse;
use crate::support::output::Events;
use crate::support::paths::target_dir;

pub(super) const REUSED: &str = "reused";

/// The kept guest's share when a keeper listens in this checkout and the run may use it
/// (not `fresh`).
pub(super) fn share(fresh: bool) -> Option<PathBuf> {
    if fresh {
        return None;
    }
    client::share(&wire::dir(&target_dir()))
}

/// Asks the keeper whose share is `kept` for its guest, before the run builds: the guest's
/// check runs beside the build, and [`boot_tests`] reads the answer.
pub(super) fn ask(
    kept: &Option<PathBuf>,
    p: &Prepared,
    vm: &crate::domain::options::VmOptions,
    files: &RunDir,
) -> Result<Option<client::Asked>> {
    let Some(share) = kept else {
        return Ok(None);
    };
    let spec = vm_spec(p, vm, &files.shared, &files.script, BOOT_TIMEOUT);
    let loop_script = script::loop_script(share, p.kernel.arch);
    let req = wire::Request {
        key: Key::of(
            &spec,
            &p.kernel.bootable.release,
            &p.tools.vng,
            &loop_script,
        )?,
    };
    Ok(Some(client::ask(&wire::dir(&target_dir()), &req)))
}

/// The run's binaries and objects at paths in its own directory when a kept guest may
/// run it (`client::stage`), else as they are. A guest with a root of its own then reads that
/// directory alone, should the run boot its own VM (the keeper's refusal).
pub(super) fn stage(
    kept: &Option<PathBuf>,
    files: &RunDir,
    p: &mut Prepared,
    probe: PathBuf,
    verifier: VerifierRun,
    binaries: Vec<TestBinary>,
) -> Result<(PathBuf, VerifierRun, Vec<TestBinary>)> {
    if kept.is_none() {
        return Ok((probe, verifier, binaries));
    }
    let mut all = vec![probe, verifier.bin];
    all.extend(verifier.objects);
    all.extend(binaries.iter().map(|b| b.path.clone()));
    let bin = files.script.parent().unwrap_or(Path::new("/")).join("bin");
    let mut staged = client::stage(&all, &bin)?.into_iter();
    p.guest_reads = vec![bin];
    let probe = staged.next().expect("staged");
    let bin = staged.next().expect("staged");
    let objects = staged
        .by_ref()
        .take(all.len() - 2 - binaries.len())
        .collect();
    let binaries = binaries
        .into_iter()
        .zip(staged)
        .map(|(b, path)| TestBinary { path, ..b })
        .collect();
    Ok((probe, VerifierRun { bin, objects }, binaries))
}

/// The run in the kept guest when it takes it (`asked`, [`ask`]), else a boot of its own
/// ([`boot`]); how the run got its guest and why; the keeper's socket, to hold until the run
/// ends: a refusing keeper boots its guest again, and one whose guest stopped with the run
/// empties the share where the run's files are, only once it is dropped.
pub(super) fn boot_tests(
    p: &Prepared,
    vm: &crate::domain::options::VmOptions,
    fresh: bool,
    asked: Option<client::Asked>,
    files: RunDir,
    out_dir: &Path,
    events: &Events,
) -> Result<(Booted, GuestUse, Option<UnixStream>)> {
    let use_of = |how: &str, why: String| GuestUse {
        how: how.into(),
        why,
    };
    let why = match asked {
        None if fresh => "--fresh".to_string(),
        None => "no kept guest in this checkout (`cargo xtask vm-guest` keeps one)".into(),
        Some(asked) => {
            let run = wire::Run {
                script: files.script.clone(),
                shared: files.shared.clone(),
                timeout_s: vm.timeout.as_secs(),
            };
            let live = with_test_progress(
                events.clone(),
                files.shared.clone(),
                p.kernel.expected.clone(),
            );
            let started = Instant::now();
            match client::run(asked, &run, &live)? {
                client::Attempt::Ran {
                    why, outcome, hold, ..
                } => {
                    if outcome.ending == Ending::Interrupted {
                        anyhow::bail!(
                            "interrupted (Ctrl-C); the kept guest is stopped ({} left as it was)",
                            out_dir.join("report.json").display()
                        );
                    }
                    events.note(format!(
                        "the kept guest ran the tests in {:.1} s",
                        outcome.elapsed.as_secs_f64()
                    ));
                    let booted = Booted {
                        files,
                        outcome,
                        out_dir: out_dir.to_path_buf(),
                        started,
                        ended: Instant::now(),
                    };
                    return Ok((booted, use_of(REUSED, why), hold));
                }
                client::Attempt::Boot { why, hold } => {
                    events.note(format!("booting: {why}"));
                    let booted = boot(p, vm, files, out_dir, events)?;
                    return Ok((booted, use_of("booted", why), hold));
                }
            }
        }
    };
    Ok((
        boot(p, vm, files, out_dir, events)?,
        use_of("booted", why),
        None,
    ))
}
