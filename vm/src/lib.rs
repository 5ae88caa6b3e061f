//! Host side of bpfvm. Each module does one step of a run; see the README's "How a run flows".
pub mod kernels;
pub mod output;
pub mod paths;
pub mod build;
pub mod provision;
