//! capsim: a capacity simulator for LLM inference serving.
//!
//! The pipeline, one module a stage: measured benchmark data ([`data`]) is fitted by the calibrator
//! ([`calibrate`]) into a [`profile`] (architecture + GPU + engine + physical step-time coefficients);
//! the simulator ([`sim`]) runs a profile against a [`workload`] and produces per-request records that
//! [`metrics`] summarizes; [`sweep`] and [`capacity`] run many simulations in parallel on top. The CLI
//! ([`cli`], run by src/main.rs) is the only part that prints. See ARCHITECTURE.md.

#![warn(clippy::print_stdout)]

// The command line lives in the library so that a second front end (the Python binding, python/)
// parses the same flags and runs the same code paths; its files name the crate `capsim::` as the
// binary did.
extern crate self as capsim;

pub mod autoscale;
pub mod calibrate;
pub mod capacity;
pub mod catalog;
pub mod cli;
pub mod corpus;
pub mod data;
pub mod datasheet;
pub mod error;
pub mod experiment;
pub mod hardware;
pub mod measured;
pub mod memory;
pub mod metrics;
pub mod plan;
pub mod profile;
pub mod report;
pub mod sim;
pub mod sweep;
pub mod units;
pub mod validate;
pub mod workload;

pub use error::{Error, Result};
