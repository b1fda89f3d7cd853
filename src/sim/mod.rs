//! The discrete-event simulation of one serving engine doing continuous batching with chunked prefill
//! (DESIGN.md section 2).
//!
//! Time is integer nanoseconds ([`SimTime`]). The engine advances in steps; between steps, arrivals
//! whose time has come join the waiting queue; when the engine is idle, time jumps to the next arrival.
//! Arrivals that share a time keep their insertion order (a sequence number breaks ties).
//!
//! Invariants, as absences: this module does no I/O, reads no clock and draws randomness only from
//! streams derived from the seed it is given. A run is a pure function of (profile, workload, seed).

mod arrivals;
mod autoscale;
mod disagg;
mod drive;
mod engine;
mod fastforward;
pub mod gaps;
mod helper;
mod memory;
mod mixed;
mod offload;
mod pool;
mod prefix;
mod run;
mod sglang;
pub mod spec;
pub mod step;
mod step_large;
mod trtllm;
mod vllm;

pub use autoscale::{simulate_autoscaled, AutoscaleBucket, AutoscaleOutput, ScaleSample};
pub use disagg::{simulate_disaggregated, DisaggReport, PoolOutput};
pub use drive::{simulate, simulate_fleet, simulate_observed, Routing};
pub use engine::StepView;
pub use gaps::GapHistogram;
pub use memory::{memory_estimate, MemoryEstimate};
pub use mixed::{replica_speed, simulate_mixed};
pub use offload::OffloadStats;
pub use run::{Sample, SimOptions, SimOutput};
pub use spec::{add_draft_prompt, add_verification, DraftModel, DraftShape};
pub use step::{BatchShape, FixedParts, StepModel};

use crate::units::SimTime;
use serde::Serialize;

/// What happened to one request. Times are nanoseconds of simulated time; `arrival` is when the
/// client sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RequestRecord {
    /// Send order (0 = first request sent).
    pub id: u32,
    pub class: u16,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub arrival: SimTime,
    /// When the engine received it: after the serial front-end and the request overhead.
    pub enqueued: SimTime,
    /// First step that scheduled any of its tokens.
    pub first_scheduled: SimTime,
    pub first_token: SimTime,
    pub finish: SimTime,
    pub preemptions: u32,
    /// Prompt tokens its first admission found in the prefix cache (0 without a hit).
    pub cached_tokens: u32,
}

impl RequestRecord {
    pub fn ttft_s(&self) -> f64 {
        (self.first_token.0 - self.arrival.0) as f64 * 1e-9
    }
    pub fn e2e_s(&self) -> f64 {
        (self.finish.0 - self.arrival.0) as f64 * 1e-9
    }
    /// Time waiting for the GPU: from reaching the engine to the first step that schedules it (the
    /// reports' "queue wait", which is zero at one user).
    pub fn queue_wait_s(&self) -> f64 {
        (self.first_scheduled.0 - self.enqueued.0) as f64 * 1e-9
    }
    /// Decode time: from the first to the last token.
    pub fn decode_s(&self) -> f64 {
        (self.finish.0 - self.first_token.0) as f64 * 1e-9
    }
}
