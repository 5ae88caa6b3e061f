//! Results: the guest's files and kernel log turned into verdicts (`report`, `health`), and the report rendered;
//! the verifier's statistics per program (`verifier`).
pub mod health;
pub mod inventory;
pub mod report;
pub mod reuse;
pub mod verifier;
