//! What the verifier thought of one program: the record the guest's `verifier` binary writes
//! (`files::VERIFIER`, one JSON array per kernel) and the host turns into `verifier.csv`, and
//! the parser of the verifier log's statistics lines it is filled from.
//!
//! The log lines, from `print_verification_stats` (kernel/bpf/verifier.c), written at the end
//! of `bpf_check` whether the program verified or not:
//! - with `BPF_LOG_STATS` (log level 4) only: `verification time N usec` and `stack depth
//!   D0+D1+...` (one depth per subprogram; the 7.2 pin writes `stack depth D0+D1 max M` and a
//!   line `insns processed N` more);
//! - at any log level: `processed N insns (limit L) max_states_per_insn M total_states T
//!   peak_states P mark_read R`. The fields after `(limit L)` are read by name, so a kernel
//!   that drops or renames one leaves only that field empty.
extern crate std;

use serde::{Deserialize, Serialize};
use std::string::{String, ToString};
use std::vec::Vec;

/// How a program fared. `Rejected` and `NotLoaded` are both veristat's `failure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// `BPF_PROG_LOAD` returned a program.
    Success,
    /// The verifier refused it; [`ProgStats::reason`] is its last error line.
    Rejected,
    /// The program never reached the verifier: its object's maps or BTF could not be created
    /// (a map type or feature the kernel lacks), or its type needs what bpfvm does not load.
    NotLoaded,
}

impl Verdict {
    /// veristat's verdict column (`success` or `failure`).
    pub fn veristat(self) -> &'static str {
        match self {
            Verdict::Success => "success",
            Verdict::Rejected | Verdict::NotLoaded => "failure",
        }
    }
}

/// One program on one kernel. Every count is the kernel's own; `None` where this kernel does
/// not report it (e.g. `verified_insns` before 5.16) or the program never reached the
/// verifier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgStats {
    /// The object's file name (veristat's `file_name`).
    pub file_name: String,
    pub prog_name: String,
    pub verdict: Verdict,
    /// For a rejection, the verifier's last error line (`unknown func bpf_loop#181`); for a
    /// program not loaded, why.
    pub reason: Option<String>,
    /// `bpf_prog_info.verified_insns` (`bpf_prog_get_info_by_fd`, kernel/bpf/syscall.c; 5.16).
    pub verified_insns: Option<u64>,
    /// The statistics lines of the log ([`LogStats`]).
    #[serde(flatten)]
    pub log: LogStats,
    /// `bpf_prog_info.xlated_prog_len / 8`: instructions after the verifier's rewrites.
    pub xlated_insns: Option<u64>,
    /// `bpf_prog_info.jited_prog_len`: bytes of machine code.
    pub jited_bytes: Option<u64>,
    /// Helper calls left in the xlated program (`BPF_JMP | BPF_CALL` with `src_reg` 0): an
    /// inlined helper (`bpf_loop`, array lookups) leaves none.
    pub helper_calls: Option<u64>,
    /// Of those, calls to `bpf_loop` (its address from /proc/kallsyms; `None` when kallsyms
    /// hides addresses or the kernel has no `bpf_loop`).
    pub bpf_loop_calls: Option<u64>,
    /// Calls to `bpf_loop` in the instructions handed to the kernel, callbacks included:
    /// against [`Self::bpf_loop_calls`], how many the verifier inlined (`optimize_bpf_loop`,
    /// kernel/bpf/verifier.c).
    #[serde(default)]
    pub bpf_loop_calls_loaded: u64,
    /// The whole log at `BPF_LOG_STATS`: the error messages and the statistics lines, as the
    /// kernel wrote them (a few lines; empty for a program not loaded).
    #[serde(default)]
    pub verifier_log: String,
}

impl ProgStats {
    /// A program that never reached the verifier.
    pub fn not_loaded(file_name: &str, prog_name: &str, why: String) -> Self {
        Self {
            file_name: file_name.to_string(),
            prog_name: prog_name.to_string(),
            verdict: Verdict::NotLoaded,
            reason: Some(why),
            verified_insns: None,
            log: LogStats::default(),
            xlated_insns: None,
            jited_bytes: None,
            helper_calls: None,
            bpf_loop_calls: None,
            bpf_loop_calls_loaded: 0,
            verifier_log: String::new(),
        }
    }

    /// The verdict as a person reads it: `success`, `rejected: <the verifier's last line>`,
    /// `not loaded: <why>`.
    pub fn describe(&self) -> String {
        match (self.verdict, &self.reason) {
            (Verdict::Success, _) => "success".into(),
            (Verdict::Rejected, Some(r)) => std::format!("rejected: {r}"),
            (Verdict::Rejected, None) => "rejected".into(),
            (Verdict::NotLoaded, r) => {
                std::format!("not loaded: {}", r.as_deref().unwrap_or("unknown"))
            }
        }
    }
}

/// What the statistics lines of a verifier log say (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogStats {
    pub processed_insns: Option<u64>,
    pub insn_limit: Option<u64>,
    pub max_states_per_insn: Option<u64>,
    pub total_states: Option<u64>,
    pub peak_states: Option<u64>,
    pub mark_read: Option<u64>,
    /// `verification time N usec` (veristat's `duration`): wall time, not deterministic.
    pub duration_us: Option<u64>,
    /// `stack depth`: bytes of stack per subprogram, the main program first.
    pub stack_depth: Option<Vec<u64>>,
}

impl LogStats {
    /// Reads the statistics lines of `log` (the last of each, as the kernel writes them once).
    pub fn parse(log: &str) -> Self {
        let mut s = Self::default();
        for line in log.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("verification time ") {
                s.duration_us = rest.strip_suffix(" usec").and_then(|n| n.parse().ok());
            } else if let Some(rest) = line.strip_prefix("stack depth ") {
                // `24+64`, or on 7.2 `24+64 max 0`: the depths are the first word.
                let depths = rest.split_whitespace().next().unwrap_or("");
                s.stack_depth = depths.split('+').map(|d| d.parse().ok()).collect();
            } else if let Some(rest) = line.strip_prefix("processed ") {
                s.processed(rest);
            }
        }
        s
    }

    /// `N insns (limit L) name value name value ...`.
    fn processed(&mut self, rest: &str) {
        let mut words = rest.split_whitespace();
        let (Some(n), Some("insns")) = (words.next(), words.next()) else {
            return;
        };
        self.processed_insns = n.parse().ok();
        let rest: Vec<&str> = words.collect();
        let mut i = 0;
        while i + 1 < rest.len() {
            let value = rest[i + 1].trim_end_matches(')').parse().ok();
            match rest[i].trim_start_matches('(') {
                "limit" => self.insn_limit = value,
                "max_states_per_insn" => self.max_states_per_insn = value,
                "total_states" => self.total_states = value,
                "peak_states" => self.peak_states = value,
                "mark_read" => self.mark_read = value,
                _ => {}
            }
            i += 2;
        }
    }
}

/// The verifier's last error line of a rejected program's log: the last line before the
/// statistics lines, which `print_verification_stats` writes after the error.
pub fn last_error_line(log: &str) -> Option<String> {
    log.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !is_stats_line(l))
        .map(str::to_string)
}

fn is_stats_line(line: &str) -> bool {
    // 7.2 adds `insns processed N` before the `processed` line.
    [
        "verification time ",
        "stack depth ",
        "processed ",
        "insns processed ",
    ]
    .iter()
    .any(|p| line.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 6.1 log at level 4 of a program calling a helper 5.10 lacks (recorded from the
    /// `bpf_loop` object on the 5.10 pin).
    const REJECTED: &str = "unknown func bpf_loop#181\n\
                            verification time 35 usec\n\
                            stack depth 16\n\
                            processed 12 insns (limit 1000000) max_states_per_insn 0 \
                            total_states 1 peak_states 1 mark_read 1\n";

    #[test]
    fn reads_every_field_of_the_statistics_lines() {
        let s = LogStats::parse(
            "verification time 1234 usec\nstack depth 24+0+8\n\
             processed 1791 insns (limit 1000000) max_states_per_insn 4 total_states 120 \
             peak_states 98 mark_read 12\n",
        );
        assert_eq!(
            s,
            LogStats {
                processed_insns: Some(1791),
                insn_limit: Some(1_000_000),
                max_states_per_insn: Some(4),
                total_states: Some(120),
                peak_states: Some(98),
                mark_read: Some(12),
                duration_us: Some(1234),
                stack_depth: Some(std::vec![24, 0, 8]),
            }
        );
    }

    #[test]
    fn a_field_a_kernel_drops_or_renames_stays_empty_and_the_others_are_read() {
        let s = LogStats::parse(
            "processed 7 insns (limit 1000000) max_states_per_insn 0 total_states 0 \
             peak_states 0 mark_read_walk 3 new_field 9\n",
        );
        assert_eq!(s.processed_insns, Some(7));
        assert_eq!(s.peak_states, Some(0));
        assert_eq!(s.mark_read, None);
        assert_eq!(s.duration_us, None, "no BPF_LOG_STATS lines");
        assert_eq!(s.stack_depth, None);
    }

    /// Recorded on the 7.2 pin (`bench`'s `bloom_fp`, which 7.2 rejects).
    #[test]
    fn reads_the_7_2_lines_and_finds_the_error_before_them() {
        let log = "reading from stack R2 off -64+0 size 64, slot poisoned by dead code \
                   elimination\nverification time 11948 usec\nstack depth 24+64 max 0\n\
                   insns processed 71\nprocessed 71 insns (limit 1000000) max_states_per_insn 0 \
                   total_states 5 peak_states 5 mark_read 0\n";
        let s = LogStats::parse(log);
        assert_eq!(s.stack_depth, Some(std::vec![24, 64]));
        assert_eq!(s.processed_insns, Some(71));
        assert_eq!(s.duration_us, Some(11948));
        assert_eq!(
            last_error_line(log).as_deref(),
            Some("reading from stack R2 off -64+0 size 64, slot poisoned by dead code elimination")
        );
    }

    #[test]
    fn the_last_error_line_is_the_one_before_the_statistics() {
        assert_eq!(
            last_error_line(REJECTED).as_deref(),
            Some("unknown func bpf_loop#181")
        );
        assert_eq!(LogStats::parse(REJECTED).processed_insns, Some(12));
        let multi = "0: (b7) r0 = 0\nR1 invalid mem access 'scalar'\n\
                     processed 3 insns (limit 1000000) max_states_per_insn 0 total_states 0 \
                     peak_states 0 mark_read 0\n";
        assert_eq!(
            last_error_line(multi).as_deref(),
            Some("R1 invalid mem access 'scalar'")
        );
        assert_eq!(last_error_line("processed 1 insns (limit 1)\n"), None);
    }

    #[test]
    fn rejected_and_not_loaded_are_both_veristat_failures() {
        assert_eq!(Verdict::Success.veristat(), "success");
        assert_eq!(Verdict::Rejected.veristat(), "failure");
        assert_eq!(Verdict::NotLoaded.veristat(), "failure");
        let p = ProgStats::not_loaded("smoke", "smoke", "feature absent: map type".into());
        assert_eq!(p.describe(), "not loaded: feature absent: map type");
    }

    #[test]
    fn the_record_is_flat_json() {
        let p = ProgStats::not_loaded("o", "p", "why".into());
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["verdict"], "not-loaded");
        assert!(v["processed_insns"].is_null(), "{v}");
        let back: ProgStats = serde_json::from_value(v).unwrap();
        assert_eq!(back, p);
    }
}
