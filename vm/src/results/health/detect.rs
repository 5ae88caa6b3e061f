//! Finds splats (the kernel's reports of something wrong that it survived) in the kernel log,
//! each as a whole block, and names their kind.
//!
//! What starts a splat, with the kernel source that prints it:
//! - `------------[ cut here ]------------`: `CUT_HERE` (include/asm-generic/bug.h), printed
//!   by `report_bug` (lib/bug.c) and `__warn_printk` (kernel/panic.c) before a WARN, and by
//!   `ubsan_prologue` (lib/ubsan.c); the block ends with `---[ end trace ... ]---`
//!   (`print_oops_end_marker`/`__warn`, kernel/panic.c; `ubsan_epilogue`).
//! - a `=====` banner followed by a report's first line: KASAN (`start_report`/`end_report`,
//!   mm/kasan/report.c, which close it with a second banner), lockdep and suspicious RCU usage
//!   (`print_circular_bug_header`, `print_deadlock_bug`, `print_usage_bug`,
//!   `lockdep_rcu_suspicious`, ..., kernel/locking/lockdep.c), older UBSAN.
//! - a first line alone: `WARNING: CPU: ...` (`__warn`, kernel/panic.c), `BUG: ...` (many:
//!   `__might_resched` kernel/sched/core.c, `page_fault_oops` arch/x86/mm/fault.c, the soft
//!   lockup watchdog), `kernel BUG at` (`report_bug`, lib/bug.c), `Oops` and
//!   `general protection fault` (`__die_header` arch/x86/kernel/dumpstack.c,
//!   `exc_general_protection` arch/x86/kernel/traps.c), `rcu: INFO: ... stall`
//!   (`print_other_cpu_stall`/`print_cpu_stall`, kernel/rcu/tree_stall.h),
//!   `INFO: task ... blocked for more than N seconds` (`check_hung_task`, kernel/hung_task.c),
//!   `refcount_t:` (`refcount_warn_saturate`, lib/refcount.c), `verifier bug` /
//!   `verifier backtracking bug` (kernel/bpf/verifier.c).
//!
//! A block without an end line ends where its stack dump does (the first unindented line
//! after `Call Trace:`; `show_trace_log_lvl`, arch/x86/kernel/dumpstack.c, indents each
//! frame), and every block is bounded in lines and bytes.
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::log::{Marker, Record};

/// What the kernel reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Warning,
    Bug,
    Oops,
    Lockdep,
    Rcu,
    SoftLockup,
    HungTask,
    Kasan,
    Ubsan,
    VerifierBug,
    Refcount,
    /// A taint flag that appeared after boot (see `health::taint`).
    Taint,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Warning => "warning",
            Kind::Bug => "bug",
            Kind::Oops => "oops",
            Kind::Lockdep => "lockdep",
            Kind::Rcu => "rcu",
            Kind::SoftLockup => "soft-lockup",
            Kind::HungTask => "hung-task",
            Kind::Kasan => "kasan",
            Kind::Ubsan => "ubsan",
            Kind::VerifierBug => "verifier-bug",
            Kind::Refcount => "refcount",
            Kind::Taint => "taint",
        }
    }
}

/// One splat block as found in the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub kind: Kind,
    /// Index (into the records) of its first line: where it is blamed.
    pub first: usize,
    /// Its lines, joined; markers the guest wrote meanwhile are left out.
    pub text: String,
}

/// A block keeps at most this many lines...
pub const MAX_LINES: usize = 150;
/// ...and this many bytes.
pub const MAX_BYTES: usize = 16 * 1024;
/// A block that has shown no `Call Trace:` after this many lines ends there.
const MAX_LINES_BEFORE_TRACE: usize = 40;

const CUT_HERE: &str = "------------[ cut here ]------------";
const END_TRACE: &str = "---[ end trace";

/// The header of an oops (`__die_header`, arch/x86/kernel/dumpstack.c).
static DIE_HEADER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^Oops|: [0-9a-f]{4} \[#\d+\]").unwrap());

/// First lines of a splat with no cut-here or banner before it.
static HEADLINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"^WARNING: |(?:^|: )BUG: |^kernel BUG at |^Oops|^general protection fault",
        r"|KASAN: |^UBSAN: |rcu: INFO: .*stall|^INFO: rcu_\S+ (?:self-)?detected stall",
        r"|^INFO: task .* blocked for more than \d+ seconds",
        r"|^refcount_t: |verifier (?:backtracking )?bug",
    ))
    .unwrap()
});

/// A report's first line after a `====` banner.
static BANNER_HEADER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(?:WARNING: |BUG: |UBSAN: )").unwrap());

/// The kind of a block, by the first rule (in this order) its text matches: a KASAN report
/// also says `BUG:`, a lockdep report `WARNING:`, a `kernel BUG` ends in an `Oops`.
static KINDS: LazyLock<Vec<(Kind, Regex)>> = LazyLock::new(|| {
    [
        (Kind::Kasan, r"KASAN: "),
        (Kind::Ubsan, r"(?m)^UBSAN: "),
        (
            Kind::Lockdep,
            concat!(
                r"possible circular locking dependency|possible recursive locking",
                r"|inconsistent lock state|bad unlock balance|held lock freed",
                r"|lock held when returning to user space|possible irq lock inversion",
                r"|-safe -> \S+-unsafe lock order|lock held at task exit",
            ),
        ),
        (
            Kind::Rcu,
            r"suspicious RCU usage|rcu: INFO: .*stall|(?m)^INFO: rcu_\S+ (?:self-)?detected stall",
        ),
        (Kind::SoftLockup, r"soft lockup - CPU#"),
        (Kind::HungTask, r"blocked for more than \d+ seconds"),
        (Kind::VerifierBug, r"verifier (?:backtracking )?bug"),
        (Kind::Refcount, r"refcount_t: "),
        (Kind::Bug, r"(?m)^kernel BUG at "),
        (Kind::Oops, r"(?m)^Oops|(?m)^general protection fault"),
        (Kind::Bug, r"(?m)(?:^|: )BUG: "),
        (Kind::Warning, r"(?m)^WARNING: "),
    ]
    .into_iter()
    .map(|(k, r)| (k, Regex::new(r).unwrap()))
    .collect()
});

/// How a block started, which decides how it ends.
#[derive(Clone, Copy, PartialEq)]
enum Opener {
    /// A WARN's cut-here line, or an oops: the block ends with `---[ end trace`.
    CutHere,
    /// A banner before a KASAN or UBSAN report, which closes with a second banner.
    ClosedBanner,
    /// A banner before a report that ends with its stack dump (lockdep, RCU usage).
    Banner,
    Headline,
}

fn is_banner(text: &str) -> bool {
    text.len() >= 20 && text.bytes().all(|b| b == b'=')
}

fn is_marker(r: &Record) -> bool {
    Marker::parse(&r.text).is_some()
}

/// Whether record `i` opens a splat, and how.
fn opener(records: &[Record], i: usize) -> Option<Opener> {
    let text = records[i].text.as_str();
    if text.contains(CUT_HERE) {
        return Some(Opener::CutHere);
    }
    if is_banner(text) {
        let next = records[i + 1..].iter().find(|r| !is_marker(r))?;
        if !BANNER_HEADER.is_match(&next.text) {
            return None;
        }
        let closed = next.text.contains("KASAN: ") || next.text.starts_with("UBSAN: ");
        return Some(if closed {
            Opener::ClosedBanner
        } else {
            Opener::Banner
        });
    }
    HEADLINE.is_match(text).then_some(Opener::Headline)
}

/// The index one past the last record of the block that `how` opened at `first`.
fn block_end(records: &[Record], first: usize, mut how: Opener) -> usize {
    if DIE_HEADER.is_match(&records[first].text) {
        how = Opener::CutHere;
    }
    let mut seen_trace = false;
    let mut lines = 1;
    for (i, r) in records.iter().enumerate().skip(first + 1) {
        if is_marker(r) {
            continue;
        }
        let text = r.text.as_str();
        if lines == MAX_LINES {
            return i;
        }
        lines += 1;
        if text.starts_with(END_TRACE) {
            return i + 1;
        }
        // A WARN's cut-here line opens a splat of its own, never a line of another's report:
        // a WARN logged inside a stall's report is not folded into it.
        if text.contains(CUT_HERE) && how != Opener::CutHere {
            return i;
        }
        if DIE_HEADER.is_match(text) {
            how = Opener::CutHere;
        }
        match how {
            Opener::CutHere => continue,
            Opener::ClosedBanner if is_banner(text) => return i + 1,
            Opener::ClosedBanner => continue,
            Opener::Banner | Opener::Headline => {}
        }
        if seen_trace && !text.starts_with([' ', '\t']) {
            return i;
        }
        seen_trace |= text.starts_with("Call Trace:");
        if !seen_trace && lines > MAX_LINES_BEFORE_TRACE {
            return i + 1;
        }
    }
    records.len()
}

/// The block's text, bounded to [`MAX_BYTES`]; markers left out.
fn block_text(records: &[Record]) -> String {
    let mut text = String::new();
    for r in records.iter().filter(|r| !is_marker(r)) {
        if text.len() + r.text.len() + 1 > MAX_BYTES {
            text.push_str("[... cut: the splat is longer than bpfvm keeps]\n");
            break;
        }
        text.push_str(&r.text);
        text.push('\n');
    }
    text
}

fn kind_of(text: &str) -> Kind {
    KINDS
        .iter()
        .find(|(_, re)| re.is_match(text))
        .map_or(Kind::Warning, |(k, _)| *k)
}

/// Every splat block in `records`, in log order. Markers are never splats.
pub fn blocks(records: &[Record]) -> Vec<Block> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < records.len() {
        let Some(how) = (!is_marker(&records[i]))
            .then(|| opener(records, i))
            .flatten()
        else {
            i += 1;
            continue;
        };
        let end = block_end(records, i, how);
        let text = block_text(&records[i..end]);
        out.push(Block {
            kind: kind_of(&text),
            first: i,
            text,
        });
        i = end;
    }
    out
}
