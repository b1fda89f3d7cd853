//! Is an open loop in a steady state? The verdict of a rate (or a fleet) is judged on the trend of the
//! number of requests waiting over the last quarter of the sending period, not on how many are
//! unfinished when the last one is sent: at high rates the sending period is seconds long, shorter than
//! one request's own latency, and a count at its end says nothing about stability.
//!
//! The window judged is the last quarter of the sending period: the running batch fills over the
//! first part of a run near saturation, and a longer window would dilute the growth that follows.
//!
//! The queue judged is the requests waiting for their first step (sent, not yet scheduled), not all
//! requests in the system: a continuous-batching engine absorbs more load into a larger running batch
//! (slower tokens, which the ITL and E2E SLOs judge), and its running batch fills over a transient as
//! long as a few request lifetimes (20 s and more near saturation); only when the batch is full (KV
//! cache or max_num_seqs) does the waiting queue grow without bound. In a stable engine the waiting
//! queue W(t) fluctuates around its mean; in an overloaded one it grows at (arrival rate - service
//! rate). The least-squares slope of W(t) over [3T/4, T] (T = last send) times T/4 is the growth over
//! the last quarter; compared with the requests sent in that window it is the share of arrivals the
//! engines did not keep up with. The shares are relative, so the verdict means the same at one
//! replica as at a thousand with the same per-replica run length.

use super::Stability;
use crate::error::Result;
use crate::profile::Profile;
use crate::sim::SimOutput;
use crate::workload::{LoadAxis, LoadTemplate};

/// Share of the last quarter's arrivals left waiting above which the load is overloaded.
pub const OVERLOADED_SHARE: f64 = 0.01;
/// Where the judged window starts, as a share of the sending period.
pub const WINDOW_FROM: f64 = 0.75;
/// Share above which it is backlogged: growing, a long transient or a fraction of a percent short.
pub const BACKLOGGED_SHARE: f64 = 0.003;
/// Growths below this many requests are noise whatever the share.
const MIN_GROWTH: f64 = 8.0;
/// Samples of N(t) over the last quarter.
const SAMPLES: usize = 65;

/// The trend of the requests waiting for their first step over the last quarter of the sending period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trend {
    /// Growth of the number waiting for a first step over [3T/4, T] (least-squares slope x T/2).
    pub growth: f64,
    /// Requests sent in (T/2, T].
    pub sent_in_window: u64,
}

impl Trend {
    /// Of one engine's run or of every replica of a fleet (the outputs of one simulation).
    pub fn of(outs: &[SimOutput]) -> Trend {
        let t_end = outs.iter().map(|o| o.last_send.0).max().unwrap_or(0) as f64;
        let mut arrivals: Vec<u64> = outs.iter().flat_map(|o| o.records.iter().map(|r| r.arrival.0)).collect();
        let mut scheduled: Vec<u64> = outs.iter().flat_map(|o| o.records.iter().map(|r| r.first_scheduled.0)).collect();
        arrivals.sort_unstable();
        scheduled.sort_unstable();
        let from = t_end * WINDOW_FROM;
        let span = t_end - from;
        let in_system = |t: f64| {
            let t = t as u64;
            arrivals.partition_point(|&a| a <= t) as f64 - scheduled.partition_point(|&f| f <= t) as f64
        };
        let (mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0);
        for k in 0..SAMPLES {
            let x = from + span * k as f64 / (SAMPLES - 1) as f64;
            let y = in_system(x);
            sx += x;
            sy += y;
            sxx += x * x;
            sxy += x * y;
        }
        let n = SAMPLES as f64;
        let var = sxx - sx * sx / n;
        let slope = if var > 0.0 { (sxy - sx * sy / n) / var } else { 0.0 };
        let sent_in_window = (arrivals.len() - arrivals.partition_point(|&a| (a as f64) <= from)) as u64;
        Trend { growth: slope * span, sent_in_window }
    }
    /// Growth as a share of the last quarter's arrivals.
    pub fn share(&self) -> f64 {
        self.growth / self.sent_in_window.max(1) as f64
    }
    pub fn verdict(&self) -> Stability {
        let sent = self.sent_in_window as f64;
        if self.growth > (OVERLOADED_SHARE * sent).max(MIN_GROWTH) {
            Stability::Overloaded
        } else if self.growth > (BACKLOGGED_SHARE * sent).max(MIN_GROWTH) {
            Stability::Backlogged
        } else {
            Stability::Stable
        }
    }
}

/// Requests per replica that reach a steady state: eight times the running batch the engine holds
/// for the workload's mean request (its KV cache over the prompt plus half the output, or
/// max_num_seqs), between 1,000 and 20,000. Near saturation a continuous-batching engine fills its
/// batch over a few request lifetimes before its waiting queue shows whether it keeps up (2,048 in /
/// 256 out on an H200: about 550 running, 68 replicas for 1,000 requests/s with 4,000 per replica
/// and 69 with 16,000, but 61 with 1,000).
pub fn steady_state_requests(p: &Profile, t: &LoadTemplate) -> Result<u64> {
    let w = t.at(LoadAxis::Rate, 1.0)?;
    let e = &p.engine;
    let per_request = w.mean_input_tokens()
        + w.mean_output_tokens() / 2.0
        + (e.per_seq_reserved_blocks as f64 * e.block_size_tokens as f64);
    let batch = (e.kv_capacity_tokens as f64 / per_request.max(1.0)).min(e.max_num_seqs as f64);
    Ok(((8.0 * batch / 100.0).ceil() as u64 * 100).clamp(1000, 20_000))
}
