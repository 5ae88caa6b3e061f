//! bench-vm's figures: what a report holds (`model`), the figures each benchmark group gives
//! (`groups`, declared once each) and all of a report's (`figures`), the statistics over boots (`stats`), two reports compared row by row (`compare`, and the
//! A/B verdict `ab`), the threads' reference figures (`reference`), the kernel's own `bench`
//! rows (`upstream`), and the renderings (`markdown`, `plot`). The boots are `flows::bench`.
pub mod ab;
pub mod compare;
pub mod figures;
pub mod groups;
pub mod markdown;
pub mod model;
pub mod plot;
pub mod reference;
pub mod side;
pub mod stats;
pub mod upstream;
