//! The guest side of bpfvm: tests (in `tests/`, one module per kernel feature), the benchmark
//! runner (`src/bin/`), and the helpers they share. Everything here runs inside the guest
//! kernel as root; `cargo xtask vm-test` builds it and boots the VM.
pub mod bench;
/// The bitmap sizing and false-positive theory, shared with the host report.
pub use bpfvm_common::bloom_theory as bloom_filter;
pub mod features;
pub mod maps;
pub mod object;
pub mod skip;
pub mod sys;
pub mod verifier;

#[cfg(test)]
mod tests;
