//! bench-vm's figures: what a report holds (`model`), the figures each benchmark group gives,
//! the statistics over boots (`stats`), two reports compared row by row (`compare`, and the
//! A/B verdict `ab`), the threads' reference figures (`reference`), the kernel's own `bench`
//! rows (`upstream`), and the renderings (`markdown`, `plot`). The boots are `flows::bench`.
pub mod ab;
pub mod compare;
pub mod markdown;
pub mod model;
pub mod plot;
pub mod reference;
pub mod stats;
pub mod upstream;
