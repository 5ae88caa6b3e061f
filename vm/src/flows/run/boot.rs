//! A run's boot: the VM of the prepared kernel, retried once under TCG when it failed before
//! the guest script started, with live per-test progress for a test run.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::domain::options::VmOptions;
use crate::kernel::expect::Expectation;
use crate::machine::accel::Accel;
use crate::machine::own_root::{self, OwnRoot};
use crate::machine::vng::{self, Ending, RunOutcome, VmSpec};
use crate::results::report::{self, Outcome};
use crate::support::output::{Events, Output, TestProgress};

use super::dir::RunDir;
use super::prepare::Prepared;

/// How long a boot may take to reach the guest script before it counts as hung. A TCG boot
/// takes 7-10 s here, about 30 s on a host busy with other builds.
pub(crate) const BOOT_TIMEOUT: Duration = Duration::from_secs(180);

/// Boots the VM; under TCG, a boot that panics or hangs before the guest script starts is
/// retried once (see [`retry_boot`]).
pub(crate) fn boot(
    p: &Prepared,
    opts: &VmOptions,
    rwdir: &Path,
    script: &Path,
    events: &Events,
) -> Result<RunOutcome> {
    let first = boot_once(p, opts, rwdir, script, events)?;
    if !retry_boot(&first, &p.accel, opts.retry) {
        return Ok(first);
    }
    events.warn(format!(
        "the boot failed before the guest script started; booting once more (a boot under \
         TCG on a busy host can hit a kernel race that says nothing about the tests; \
         --no-retry turns this off). The first attempt: {}",
        first.diagnosis()
    ));
    let mut second = boot_once(p, opts, rwdir, script, events)?;
    second.retries.push(first.as_failed_boot());
    Ok(second)
}

/// Whether to boot again: only under TCG, only for a panic or hang before the guest script
/// started (nothing of the user's ran), only once, and not with `--no-retry`.
///
/// Why TCG only: a starved vCPU under multi-threaded TCG can meet the int3 that live text
/// patching plants while a static key flips (`text_poke_bp`, arch/x86/kernel/alternative.c);
/// under KVM a boot failure is the kernel's own and is reported at once. Why it is retried
/// rather than prevented: docs/hosts.md.
pub(crate) fn retry_boot(first: &RunOutcome, accel: &Accel, allowed: bool) -> bool {
    allowed && !accel.is_kvm() && first.retries.is_empty() && first.failed_before_start()
}

fn boot_once(
    p: &Prepared,
    opts: &VmOptions,
    rwdir: &Path,
    script: &Path,
    events: &Events,
) -> Result<RunOutcome> {
    let spec = vm_spec(p, opts, rwdir, script, BOOT_TIMEOUT.min(opts.timeout));
    events.step(format!(
        "booting {} under {}",
        p.kernel.bootable.release,
        p.accel.kind.name().to_uppercase()
    ));
    let outcome = vng::run(&spec, &p.tools.vng, &p.tools.path_prefix, events)?;
    let phases = match (outcome.boot, outcome.guest, outcome.shutdown()) {
        (Some(b), Some(g), Some(d)) => format!(
            " (boot {:.1} s, guest script {:.1} s, shutdown {:.1} s)",
            b.as_secs_f64(),
            g.as_secs_f64(),
            d.as_secs_f64()
        ),
        _ => String::new(),
    };
    events.note(format!(
        "VM finished in {:.1} s{phases}",
        outcome.elapsed.as_secs_f64()
    ));
    Ok(outcome)
}

/// The VM of `p`'s kernel with `opts`, sharing `rwdir` and running `script`: every flow's.
pub(crate) fn vm_spec(
    p: &Prepared,
    opts: &VmOptions,
    rwdir: &Path,
    script: &Path,
    boot_timeout: Duration,
) -> VmSpec {
    VmSpec {
        arch: p.kernel.arch,
        vmlinuz: p.kernel.bootable.vmlinuz.clone(),
        accel: p.accel.clone(),
        cpus: opts.cpus,
        memory: opts.memory.clone(),
        append: opts.append.clone(),
        rwdir: rwdir.to_path_buf(),
        script: script.to_path_buf(),
        timeout: opts.timeout,
        boot_timeout,
        qemu_opts: opts.qemu_opts.clone(),
        own_root: p.kernel.guest_root.as_ref().map(|root| OwnRoot {
            root: root.clone(),
            reads: own_root::outermost(&p.guest_reads),
        }),
        watchdog: p.watchdog.clone(),
        stop: None,
        input: None,
    }
}

/// A test run's boot that ended (vm-test's suite, `bpfvm test`'s crate): its files and how
/// the VM ended.
pub(crate) struct Booted {
    pub(crate) files: RunDir,
    pub(crate) outcome: RunOutcome,
    pub(super) out_dir: PathBuf,
    /// When the boot began and when vng exited.
    pub(super) started: Instant,
    pub(super) ended: Instant,
}

impl Booted {
    /// The guest script ran to its end with status 0.
    pub(crate) fn vm_ok(&self) -> bool {
        self.outcome.ending == Ending::Exited(0)
    }

    /// How the VM ended, in one line.
    pub(crate) fn ending(&self) -> String {
        self.outcome
            .diagnosis()
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    }
}

/// Boots a test run's guest script (written into `files`) with live per-test progress; an
/// interrupted run judged nothing and leaves `out_dir`'s last report as it was.
pub(crate) fn boot_tests(
    p: &Prepared,
    vm: &VmOptions,
    files: RunDir,
    out_dir: &Path,
    events: &Events,
) -> Result<Booted> {
    let live = with_test_progress(
        events.clone(),
        files.shared.clone(),
        p.kernel.expected.clone(),
    );
    let started = Instant::now();
    let outcome = boot(p, vm, &files.shared, &files.script, &live)?;
    let ended = Instant::now();
    if outcome.ending == Ending::Interrupted {
        anyhow::bail!(
            "{} ({} left as it was)",
            outcome.diagnosis().lines().next().unwrap_or_default(),
            out_dir.join("report.json").display()
        );
    }
    Ok(Booted {
        files,
        outcome,
        out_dir: out_dir.to_path_buf(),
        started,
        ended,
    })
}

/// Turns libtest's JSON events on the guest's stdout into per-test progress; other guest
/// output passes through unchanged. A pass that recorded a skip shows as the final report will
/// judge it: `skip` with the reason, or `FAILED` when the kernel should have had the feature.
pub(crate) fn with_test_progress(events: Events, shared: PathBuf, expected: Expectation) -> Events {
    Events::new(move |o| match o {
        Output::GuestStdout(line) => match report::test_finished(&line) {
            Some((name, event)) => {
                let outcome = match event.as_str() {
                    "ok" => match report::judge_live_pass(&shared, &expected, &name) {
                        Some((Outcome::Fail, why)) => TestProgress::Failed(Some(why)),
                        Some(_) => TestProgress::Skip,
                        None => TestProgress::Ok,
                    },
                    "failed" => TestProgress::Failed(None),
                    _ => TestProgress::Ignored,
                };
                events.emit(Output::TestDone { name, outcome })
            }
            None if line.starts_with("{ \"type\"") => {}
            None => events.emit(Output::GuestStdout(line)),
        },
        other => events.emit(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::accel;

    fn panicked_before_start() -> RunOutcome {
        RunOutcome {
            ending: Ending::Panic,
            console_tail: vec![],
            elapsed: Duration::from_secs(2),
            boot: None,
            guest: None,
            retries: vec![],
        }
    }

    fn accel(kind: accel::Kind) -> Accel {
        Accel {
            kind,
            reason: String::new(),
            tcg_thread: None,
        }
    }

    #[test]
    fn a_boot_is_retried_once_under_tcg_unless_told_not_to() {
        let first = panicked_before_start();
        assert!(retry_boot(&first, &accel(accel::Kind::Tcg), true));
        assert!(
            !retry_boot(&first, &accel(accel::Kind::Tcg), false),
            "--no-retry"
        );
        assert!(
            !retry_boot(&first, &accel(accel::Kind::Kvm), true),
            "KVM: the kernel's own"
        );
        let mut second = panicked_before_start();
        second.retries.push(first.as_failed_boot());
        assert!(
            !retry_boot(&second, &accel(accel::Kind::Tcg), true),
            "once only"
        );
        let mut late = panicked_before_start();
        late.boot = Some(Duration::from_secs(8));
        assert!(
            !retry_boot(&late, &accel(accel::Kind::Tcg), true),
            "after the start marker"
        );
    }
}
