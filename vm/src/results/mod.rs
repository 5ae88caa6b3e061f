//! Results: the guest's files and kernel log turned into verdicts (`report`, `health`), and the report rendered.
pub mod health;
pub mod report;
