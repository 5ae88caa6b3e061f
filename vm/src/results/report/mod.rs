//! Reads what the guest wrote into the shared directory and turns it into `report.json`,
//! `junit.xml` and the terminal summary. The serial console is never parsed for results.
//!
//! The four steps live apart: `collect` reads the guest's files, `judge` makes verdicts of
//! them, `model` is the data (`report.json`'s shape), `render` writes and prints it.
mod collect;
mod judge;
mod model;
mod render;
#[cfg(test)]
mod tests;

pub use collect::*;
pub use judge::*;
pub use model::*;
pub use render::*;
