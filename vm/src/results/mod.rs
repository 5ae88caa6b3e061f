//! Results: the guest's files and kernel log turned into verdicts (`report`, `health`), and the report rendered;
//! the verifier's statistics per program (`verifier`); the kernel's own BPF selftests' output
//! (`upstream`).
pub mod costs;
pub mod health;
pub mod inventory;
pub mod merge;
pub mod plan;
pub mod report;
pub mod reuse;
pub mod upstream;
pub mod verifier;
