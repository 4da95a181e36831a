//! Pacer's fuzz targets and the stable-toolchain driver that runs them.
//!
//! Every input a guest or a user controls has a target ([`targets`]): the
//! config parser, the port-I/O devices, the interrupt controller and the
//! MMIO bus, the result-port record parser, and the ELF kernel loader.
//! [`driver`] generates and mutates inputs for them (no nightly toolchain
//! needed) and reports panics, broken invariants, hangs and memory growth.
//! `ci/fuzz.sh N` runs every target for N inputs; `tests/` runs a short
//! pass and replays every saved finding (`regressions/<target>/`).

pub mod driver;
pub mod targets;

pub use driver::{fuzz, run_one, Options, Report, Target};
