//! Results: the guest's files and kernel log turned into verdicts (`report`, `health`), and the report rendered;
//! the verifier's statistics per program (`verifier`); the kernel's own BPF selftests' output
//! (`upstream`); each test's measured cost (`costs`), a run cut into pieces by it (`plan`) and
//! the pieces' reports merged (`merge`); the benchmarks' figures, statistics and comparisons
//! (`bench`).
pub mod bench;
pub mod change;
pub mod costs;
pub mod denylist;
pub mod freshness;
pub mod health;
pub mod inventory;
pub mod merge;
pub mod plan;
pub mod report;
pub mod reuse;
pub mod upstream;
pub mod verifier;
