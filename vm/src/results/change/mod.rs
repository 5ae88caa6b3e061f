//! What a change did (`--against BASE`): every test of every kernel at the base and at head,
//! classified so that only the change is blamed ([`classify`]), the verifier's statistics per
//! program and kernel side by side ([`verifier`]), and the result written as a pull-request
//! comment, JSON, JUnit and a step summary ([`render`]); with `--bench`, the two kernels' A/B
//! beside them ([`cost`]). The model is [`model`]; the rules are
//! docs/change.md's.
pub mod classify;
pub mod cost;
pub mod merge;
pub mod model;
pub mod render;
#[cfg(test)]
mod tests;
pub mod verifier;

pub use classify::*;
pub use model::*;
