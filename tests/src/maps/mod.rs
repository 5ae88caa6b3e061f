//! Map commands aya 0.14 has no API for, as raw `bpf(2)` calls.
pub mod batch;
