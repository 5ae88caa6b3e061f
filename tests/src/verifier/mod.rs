//! The verifier's statistics of every program of a BPF object on the running kernel: each
//! program loaded once, for this alone, with a log buffer of its own ([`load`]), and what the
//! kernel reports of it (`bpf_prog_info`, the log's statistics lines). The `verifier` binary
//! writes them for `vm-test` and `bpfvm test --verifier-stats`.
pub mod load;

use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use bpfvm_common::verifier::{last_error_line, LogStats, ProgStats, Verdict};

use crate::{features, sys};

/// The statistics of every program of the object at `path`, sorted by program name.
pub fn of_object(path: &Path) -> Result<Vec<ProgStats>> {
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    of_bytes(&file, &bytes).with_context(|| path.display().to_string())
}

/// The statistics of every program of object `bytes`, named `file`.
pub fn of_bytes(file: &str, bytes: &[u8]) -> Result<Vec<ProgStats>> {
    let parsed = aya_obj::Object::parse(bytes)
        .map_err(|e| anyhow!("not a BPF object aya can parse: {e}"))?;
    let mut names: Vec<String> = parsed.programs.keys().cloned().collect();
    names.sort();
    let prepared = match load::prepare(bytes) {
        Ok(p) => p,
        Err(e) => {
            let why = not_loaded_reason(bytes, &e);
            return Ok(names
                .iter()
                .map(|n| ProgStats::not_loaded(file, n, why.clone()))
                .collect());
        }
    };
    let bpf_loop = sys::helper_call_imm("bpf_loop").ok().flatten();
    Ok(names
        .iter()
        .map(|n| match prepared.load(n) {
            Ok(loaded) => stats_of(file, n, loaded, bpf_loop),
            Err(e) => ProgStats::not_loaded(file, n, format!("{e:#}")),
        })
        .collect())
}

/// Why an object's maps or BTF could not be created: the features this kernel lacks, when
/// the probes name any (not aya's error then: it names whichever map it created first, and aya
/// creates them in hash order), else aya's error.
fn not_loaded_reason(bytes: &[u8], e: &anyhow::Error) -> String {
    let absent = features::absent_map_features(bytes);
    if absent.is_empty() {
        format!("{e:#}")
    } else {
        format!("feature absent: {}", absent.join("; "))
    }
}

/// The record of one load: the log's statistics, and for a loaded program what
/// `bpf_prog_info` says of it.
fn stats_of(file: &str, prog: &str, loaded: load::Loaded, bpf_loop: Option<i32>) -> ProgStats {
    let log = LogStats::parse(&loaded.log);
    let mut s = ProgStats {
        file_name: file.to_string(),
        prog_name: prog.to_string(),
        verdict: Verdict::Success,
        reason: None,
        verified_insns: None,
        log,
        xlated_insns: None,
        jited_bytes: None,
        helper_calls: None,
        bpf_loop_calls: None,
        bpf_loop_calls_loaded: loaded.bpf_loop_calls,
        verifier_log: loaded.log.clone(),
    };
    let fd = match loaded.fd {
        Ok(fd) => fd,
        Err(e) => {
            s.verdict = Verdict::Rejected;
            let last = last_error_line(&loaded.log).unwrap_or_else(|| e.to_string());
            // The verifier names the symptom (5.10, before `BPF_PSEUDO_FUNC`, counts the
            // callback of a `bpf_loop` call as no subprogram); the probes name the cause.
            let absent = features::absent_helper_features(&loaded.helpers);
            s.reason = Some(match absent.is_empty() {
                true => last,
                false => format!("{last} (feature absent: {})", absent.join("; ")),
            });
            return s;
        }
    };
    match sys::prog_info(fd.as_fd()) {
        Ok(info) => {
            // `verified_insns` is `env->insn_processed` (`bpf_check`, kernel/bpf/verifier.c),
            // the count the log prints: before 5.16 the log is its only source.
            s.verified_insns = match info.verified_insns {
                0 => s.log.processed_insns,
                n => Some(u64::from(n)),
            };
            s.xlated_insns = Some(u64::from(info.xlated_prog_len / 8));
            s.jited_bytes = Some(u64::from(info.jited_prog_len));
        }
        Err(e) => s.reason = Some(format!("BPF_OBJ_GET_INFO_BY_FD: {e}")),
    }
    if let Ok(insns) = sys::xlated(fd.as_raw_fd()) {
        let calls: Vec<i32> = insns.iter().filter_map(|&i| sys::helper_call(i)).collect();
        s.helper_calls = Some(calls.len() as u64);
        s.bpf_loop_calls = bpf_loop.map(|imm| calls.iter().filter(|&&c| c == imm).count() as u64);
    }
    s
}
