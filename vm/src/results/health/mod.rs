//! The kernel's health during a run: the splats in its log (`detect`), the taint flags that
//! appeared (`taint`), the tests that were running when each was logged, and the splats a
//! committed allowlist excuses (`allow`).
//!
//! The guest script writes markers into the same log (`log::Marker`: the phase, each test's
//! start and end, the taint mask after each), so that ordering is the kernel's own. A test
//! is marked running from libtest's `started` event to its result; the script writes the
//! marker after reading the event, so a splat in a test's first instants can precede its
//! start marker: a taint is blamed on the tests running on either side of the marker after
//! which it was seen, and a splat that falls between tests says so.
pub mod allow;
pub mod detect;
pub mod log;
pub mod taint;

use std::collections::BTreeSet;

pub use detect::Kind;
use log::Marker;
use serde::{Deserialize, Serialize};

/// Where the guest script was when a splat was logged, before any test ran or after.
pub const BOOT: &str = "boot";

/// One splat, with the tests it is blamed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splat {
    pub kind: Kind,
    /// The whole block (bounded), or the new taint flags in words.
    pub text: String,
    /// The script's phase when it was logged (`boot`, `probe`, `tests`, `shutdown`).
    pub phase: String,
    /// The tests running when it was logged (several when tests ran in parallel).
    pub running: Vec<String>,
    /// The new taint flags of a `Kind::Taint` splat (0 for the others).
    pub taint: u64,
}

impl Splat {
    /// "while a ran", "while tests ran in parallel: a, b", "during boot (no test running)".
    pub fn when(&self) -> String {
        when(&self.phase, &self.running)
    }
}

/// Where the script was: see [`Splat::when`].
fn when(phase: &str, running: &[String]) -> String {
    match running {
        [] => format!("during {phase} (no test running)"),
        [one] => format!("while {one} ran"),
        many => format!("while tests ran in parallel: {}", many.join(", ")),
    }
}

/// Records the guest's copy of the log lost (`log::Gap`), with where the script was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    pub gap: log::Gap,
    /// The script's phase at the record before the gap.
    pub phase: String,
    /// The tests running on either side of the gap: any of them may have splatted unseen.
    pub running: Vec<String>,
    /// Tests' markers may be among the lost records: the gap is in the tests phase, or the
    /// `phase tests` marker was never read (lost in a gap that began before it).
    pub may_hold_tests: bool,
}

impl Lost {
    /// "3 records lost between seq 41 and 45 while a ran".
    pub fn describe(&self) -> String {
        format!(
            "{} {}",
            self.gap.describe(),
            when(&self.phase, &self.running)
        )
    }
}

/// What one reading of the kernel log found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    pub splats: Vec<Splat>,
    pub lost: Vec<Lost>,
    /// The tests that have a start or end marker in the log.
    pub marked: BTreeSet<String>,
}

/// The kernel log and taint markers, read in order: every splat, every taint flag that
/// appeared after the first taint marker (the boot's mask), and every gap in the records.
pub fn scan(kernel_log: &str) -> Scan {
    let records = log::records(kernel_log);
    let blocks = detect::blocks(&records);
    let mut next_block = blocks.iter().peekable();
    let mut out = Scan::default();
    let mut phase = BOOT.to_string();
    let mut running = BTreeSet::new();
    let mut before_marker = BTreeSet::new();
    let mut mask = None;
    let mut last_seq = None;
    for (i, r) in records.iter().enumerate() {
        if r.kmsg {
            if let Some(gap) = log::gap(last_seq, r) {
                out.lost.push(Lost {
                    gap,
                    may_hold_tests: phase == TESTS_PHASE,
                    phase: phase.clone(),
                    running: running.iter().cloned().collect(),
                });
            }
            last_seq = Some(r.seq);
        }
        if let Some(b) = next_block.next_if(|b| b.first == i) {
            out.splats.push(Splat {
                kind: b.kind,
                text: b.text.clone(),
                phase: phase.clone(),
                running: running.iter().cloned().collect(),
                taint: 0,
            });
        }
        let Some(m) = Marker::parse(&r.text) else {
            continue;
        };
        if !matches!(m, Marker::Tainted(_) | Marker::Continues(_)) {
            before_marker = running.clone();
        }
        match m {
            // Only as the copy's first record: later, a jump in seq is a loss all the same.
            Marker::Continues(s) if last_seq.is_none() => last_seq = Some(s),
            Marker::Continues(_) => {}
            Marker::Phase(p) => phase = p,
            Marker::TestStart(t) => {
                out.marked.insert(t.clone());
                running.insert(t);
            }
            Marker::TestEnd(t) => {
                // Its start marker was lost: it ran across the last gap.
                if !running.remove(&t) {
                    if let Some(l) = out.lost.last_mut().filter(|l| !l.running.contains(&t)) {
                        l.running.push(t.clone());
                        l.running.sort();
                    }
                }
                out.marked.insert(t);
            }
            Marker::Tainted(now) => {
                let new = mask.map_or(0, |was| taint::added(was, now));
                mask = Some(mask.unwrap_or(0) | now);
                if new != 0 {
                    out.splats.push(Splat {
                        kind: Kind::Taint,
                        text: format!("new taint flags: {}", taint::describe(new)),
                        phase: phase.clone(),
                        running: before_marker.union(&running).cloned().collect(),
                        taint: new,
                    });
                }
            }
        }
    }
    if phase_seen(&records, TESTS_PHASE) {
        return out;
    }
    for l in &mut out.lost {
        l.may_hold_tests = true;
    }
    out
}

/// Whether the log holds the marker of `phase`.
fn phase_seen(records: &[log::Record], phase: &str) -> bool {
    let marker = Marker::Phase(phase.into());
    records
        .iter()
        .any(|r| Marker::parse(&r.text).as_ref() == Some(&marker))
}

/// A splat as `report.json` records it: blamed, and allowed or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judged {
    pub kind: Kind,
    pub phase: String,
    /// The tests running when it was logged.
    pub running: Vec<String>,
    pub text: String,
    /// The allowlist's reason, when an entry allows it: then it fails nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<String>,
    /// Why it judges nothing, when a stall detector reported it under TCG
    /// ([`Health::under_tcg`]): the tests it ran in are not judged, the kernel is not blamed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_clock: Option<String>,
    /// The new taint flags of a `Kind::Taint` splat (0 for the others, and not written).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub taint: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why a stall detector's report under TCG judges nothing: said plainly, with what to run
/// instead (docs/kernel-log.md, "Stalls under TCG").
const HOST_CLOCK: &str = "under TCG bpfvm cannot judge a stall: each vCPU is a host thread the \
     host can stop or starve while the others run, and this detector times the guest's CPUs \
     against each other and the clock, so a busy host fires it as a kernel that really stalls \
     (a loop without cond_resched, a lock inversion) does, and the log cannot tell them apart; \
     to judge it, run it again under KVM (--accel kvm), where a stall is the kernel's";

impl Judged {
    /// A report of a detector that times the guest's CPUs: an RCU stall
    /// (kernel/rcu/tree_stall.h), a soft lockup (kernel/watchdog.c), a hung task
    /// (kernel/hung_task.c). Not "suspicious RCU usage", which is lockdep's and timeless.
    pub fn timed(&self) -> bool {
        match self.kind {
            Kind::SoftLockup | Kind::HungTask => true,
            Kind::Rcu => self.headline().contains("stall"),
            _ => false,
        }
    }

    /// The line that says what happened (`WARNING: CPU: ...`), not the cut-here or banner.
    pub fn headline(&self) -> &str {
        self.text
            .lines()
            .find(|l| {
                let l = l.trim();
                !l.is_empty() && !l.contains("[ cut here ]") && !l.bytes().all(|b| b == b'=')
            })
            .unwrap_or("")
    }

    /// "kernel warning while a ran: WARNING: CPU: ...".
    pub fn describe(&self) -> String {
        format!(
            "kernel {} {}: {}",
            self.kind.name(),
            when(&self.phase, &self.running),
            self.headline()
        )
    }
}

/// What the kernel log of a run says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub splats: Vec<Judged>,
    /// The log reaches the guest script's last marker (`phase end`).
    pub complete: bool,
    /// Records the copy lost on the way: splats may be among them.
    pub lost: Vec<Lost>,
    /// The tests with a marker in the log (a test with none may have run inside a gap).
    pub marked: BTreeSet<String>,
    /// The guest booted another release than the one asked for (`uname -r`, what it booted;
    /// set by the flow, which knows what it asked for).
    pub wrong_release: Option<String>,
    /// Why the guest's copy of the log could not be read, once the guest script ran
    /// ([`GuestLog`]; set by the flow, which read it).
    pub unread: Option<String>,
    /// The guest script's phases with the kernel's time of each, in microseconds since it
    /// started (`log::phase_times`).
    pub phases: Vec<(String, u64)>,
}

impl Health {
    /// A splat no allow entry excuses and no host clock explains: evidence against the kernel,
    /// whatever else went wrong.
    pub fn blames_the_kernel(&self) -> bool {
        self.splats
            .iter()
            .any(|s| s.allowed.is_none() && s.host_clock.is_none())
    }

    /// Under TCG, a stall detector's report ([`Judged::timed`]) judges nothing: the host's
    /// scheduling of the vCPU threads can make it. A run whose only evidence it is stops a
    /// bisect (255) rather than blame the commit; under KVM it stays the kernel's. So does the
    /// taint such a report sets (a soft lockup's `L`), when every new flag of it was set by
    /// that report or by an allowed splat since the last taint ([`judge`]'s rule for allowed
    /// splats): the taint is the same evidence again, not more.
    pub fn under_tcg(&mut self) {
        // The flags set since the last taint by splats that fail nothing here.
        let mut excused_flags = 0u64;
        for s in self.splats.iter_mut() {
            if s.kind == Kind::Taint {
                if s.allowed.is_none() && s.taint & !excused_flags == 0 {
                    s.host_clock = Some(format!(
                        "set by the stall report before it, which judges nothing: {HOST_CLOCK}"
                    ));
                }
                excused_flags = 0;
                continue;
            }
            if s.allowed.is_none() && s.timed() {
                s.host_clock = Some(HOST_CLOCK.into());
            }
            if s.allowed.is_some() || s.host_clock.is_some() {
                excused_flags |= taint_set_by(s.kind);
            }
        }
    }

    /// The log fails the run only for splats the kernel logged in its own start-up, before
    /// the guest script's first phase (nothing of the run's had run): the whole log read, the
    /// release asked for. A benchmark boot so spoiled may be repeated (`flows::bench`); a splat
    /// logged once anything of ours ran is evidence against the kernel, never repeated away.
    pub fn spoiled_at_boot(&self) -> bool {
        self.blames_the_kernel()
            && self
                .splats
                .iter()
                .filter(|s| s.allowed.is_none())
                .all(|s| s.phase == BOOT && s.running.is_empty())
            && self.complete
            && self.lost.is_empty()
            && self.wrong_release.is_none()
            && self.unread.is_none()
    }
}

/// The kernel log a run is judged on and keeps: the guest's copy, or when that cannot be read
/// the console's last lines, for diagnosis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestLog {
    pub text: String,
    /// Why the copy could not be read, when the guest script ran (so it should have written
    /// one). The console's tail holds the script's last marker but no record numbers and only
    /// its last lines: judged alone, it would pass a log whose splats scrolled out of it.
    pub unread: Option<String>,
}

/// The log to judge from the guest's copy as read (`copy`), the console's last lines and
/// whether the guest script ran.
pub fn guest_log(
    copy: std::io::Result<String>,
    console_tail: &[String],
    script_ran: bool,
) -> GuestLog {
    match copy {
        Ok(text) => GuestLog { text, unread: None },
        Err(e) => GuestLog {
            text: console_tail.join("\n") + "\n",
            unread: script_ran.then(|| {
                format!(
                    "the guest's kernel log could not be read ({e}): only the console's last {} \
                     lines were judged (kept as the kernel log)",
                    console_tail.len()
                )
            }),
        },
    }
}

/// Scans `kernel_log` and judges each splat against the allowlist for this kernel (its pin
/// version or label, and release). A taint whose every new flag an allowed splat logged
/// before it sets (`taint_set_by`) is allowed with that splat's reason, and only then: an
/// allowed WARN still taints the kernel `W`, which would fail the run on its own.
pub fn judge(
    kernel_log: &str,
    allow: &allow::Allowlist,
    version: &str,
    release: Option<&str>,
) -> Health {
    let scan = scan(kernel_log);
    // The flags set by allowed splats since the last taint, and the last one's reason.
    let (mut allowed_flags, mut last_reason) = (0u64, None::<String>);
    let splats = scan
        .splats
        .into_iter()
        .map(|s| {
            let allowed = if s.kind == Kind::Taint {
                let covered = s.taint & !allowed_flags == 0;
                allowed_flags = 0;
                last_reason
                    .take()
                    .filter(|_| covered)
                    .map(|r| format!("set by the allowed splat before it ({r})"))
            } else {
                let reason = allow
                    .allowing(&s.text, version, release)
                    .map(|e| e.reason.clone());
                if let Some(r) = &reason {
                    allowed_flags |= taint_set_by(s.kind);
                    last_reason = Some(r.clone());
                }
                reason
            };
            Judged {
                allowed,
                kind: s.kind,
                phase: s.phase,
                running: s.running,
                text: s.text,
                host_clock: None,
                taint: s.taint,
            }
        })
        .collect();
    let complete = phase_seen(&log::records(kernel_log), END_PHASE);
    Health {
        splats,
        complete,
        lost: scan.lost,
        marked: scan.marked,
        wrong_release: None,
        unread: None,
        phases: log::phase_times(kernel_log),
    }
}

/// The taint flag a splat of `kind` sets: `W` for a WARN (`__warn`, kernel/panic.c), a
/// refcount or verifier warning (both `WARN_ONCE`: `refcount_warn_saturate`, lib/refcount.c;
/// kernel/bpf/verifier.c) and a `BUG: sleeping function called...` (`__might_resched`,
/// kernel/sched/core.c); `D` for an oops (`oops_end`, arch/x86/kernel/dumpstack.c); `L` for a
/// soft lockup (`watchdog_timer_fn`, kernel/watchdog.c); none known for the others.
fn taint_set_by(kind: Kind) -> u64 {
    match kind {
        Kind::Warning | Kind::Refcount | Kind::VerifierBug | Kind::Bug => taint::WARN,
        Kind::Oops => taint::DIE,
        Kind::SoftLockup => taint::SOFTLOCKUP,
        _ => 0,
    }
}

/// The phase the guest script marks last, once everything else is in the log.
pub const END_PHASE: &str = "end";

/// The phase in which the guest script runs the tests.
pub const TESTS_PHASE: &str = "tests";

#[cfg(test)]
mod tests;
