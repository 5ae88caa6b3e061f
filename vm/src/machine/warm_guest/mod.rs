//! A guest kept up between runs (`cargo xtask vm-guest`), which `vm-test` uses instead of
//! booting when the guest is provably in the state its boot left it in (docs/warm-guest.md).
//!
//! - `key`: what makes a boot (kernel image, release, accelerator, VM options, virtme-ng,
//!   the guest loop): a run uses only a guest of its own key;
//! - `script`: the guest's side, a loop that records its state when asked, then runs one
//!   run's guest script and says when it ended;
//! - `wire`: where a checkout's kept guest listens, and the messages of a run;
//! - `keeper`: the host's side, which owns the VM and serves one run at a time, refusing one
//!   when the check fails (and then booting again);
//! - `client`: a run's side: ask, stream the guest's output, get how the run ended.
//!
//! Judging a check is the results layer's (`results::freshness`): the keeper is handed it.
pub mod client;
pub mod keeper;
pub mod key;
pub mod script;
pub mod wire;
