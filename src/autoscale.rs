//! An autoscaling policy (issue 26): how a fleet's replica count follows its load over simulated
//! time, as a Kubernetes HorizontalPodAutoscaler (or KEDA, which drives one) scales a serving
//! deployment on a per-replica metric. The file (`capsim simulate --autoscale POLICY.toml`) says
//! what the operator configures; [`AutoscalePolicy`] is it validated, with every default filled, so
//! the simulation (sim/autoscale.rs) cannot meet a bad value.
//!
//! Defaults are the HPA's (Kubernetes documentation, "Horizontal Pod Autoscaling", algorithm
//! details and configurable scaling behavior, autoscaling/v2): a 15 s sync period
//! (`--horizontal-pod-autoscaler-sync-period`), a 0.1 tolerance on the metric's ratio to its target,
//! desired = ceil(current x metric / target); scale-up unstabilized and limited per period to the
//! larger of +100% and +4 replicas; scale-down stabilized over 300 s (the highest recommendation of
//! the window wins). The delay before a new replica serves is made of its parts: provisioning (a node
//! or pod scheduled, the image pulled), reading the weights at a stated storage bandwidth, the
//! engine's start and its CUDA-graph capture; each is an input, none a measured constant.

use crate::error::{toml_error, Error, Result};
use serde::Deserialize;

/// What the fleet scales on, per ready replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScaleMetric {
    /// Requests inside the replica (running and waiting): the concurrency per replica that the Dynamo
    /// planner and llm-d size against, and KEDA's queue-length scalers count.
    Outstanding,
    /// Requests waiting for the engine (the queue alone, vLLM's `num_requests_waiting`).
    Waiting,
}

/// The policy file as written (TOML). Unknown keys are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoscalePolicyFile {
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// Replicas ready at t = 0 (default: `min_replicas`).
    pub initial_replicas: Option<u32>,
    pub metric: ScaleMetric,
    /// Target value of the metric per ready replica.
    pub target: f64,
    pub interval_s: Option<f64>,
    pub tolerance: Option<f64>,
    pub scale_down_stabilization_s: Option<f64>,
    /// Most replicas one period may add: the larger of this many and `scale_up_max_percent` of the
    /// current count (HPA defaults 4 and 100).
    pub scale_up_max_replicas: Option<u32>,
    pub scale_up_max_percent: Option<f64>,
    /// Scale-up delay parts (s, GB/s).
    pub provisioning_s: f64,
    pub storage_gb_s: f64,
    pub engine_start_s: f64,
    pub cuda_graph_capture_s: f64,
    /// Price of one GPU-hour (any currency); GPU-hours are priced when given.
    pub price_per_gpu_hour: Option<f64>,
    /// Length of a reporting bucket (default one hour).
    pub bucket_s: Option<f64>,
    /// How often the router learns of completions (s; default 0.05, llm-d's endpoint-picker polling).
    pub router_refresh_s: Option<f64>,
}

/// A validated policy.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AutoscalePolicy {
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub initial_replicas: u32,
    pub metric: ScaleMetric,
    pub target: f64,
    pub interval_s: f64,
    pub tolerance: f64,
    pub scale_down_stabilization_s: f64,
    pub scale_up_max_replicas: u32,
    pub scale_up_max_percent: f64,
    pub provisioning_s: f64,
    pub storage_gb_s: f64,
    pub engine_start_s: f64,
    pub cuda_graph_capture_s: f64,
    pub price_per_gpu_hour: Option<f64>,
    pub bucket_s: f64,
    /// How often the router learns of completions (s). The router counts the requests it sends at
    /// once and learns which finished at these looks, as llm-d's endpoint picker polls every
    /// replica's metrics (every 50 ms by default: llm-d/llm-d-inference-scheduler@520af478
    /// pkg/epp/datalayer/runtime.go `defaultRefreshInterval`). Between looks the replicas run apart,
    /// which lets a fleet's day be simulated in parallel.
    pub router_refresh_s: f64,
}

/// A bound on replicas: a fleet of a million engines is a typo, and each replica is simulated.
pub const MAX_REPLICAS: u32 = 100_000;

impl AutoscalePolicy {
    /// Parse and validate a policy file's text; errors name `source` and the key.
    pub fn parse(source: &str, text: &str) -> Result<AutoscalePolicy> {
        let f: AutoscalePolicyFile = toml::from_str(text).map_err(|e| toml_error(source, text, e))?;
        f.validate(source)
    }

    /// Seconds from the decision to scale up until the new replica serves, for a model of
    /// `weight_bytes` (the weights of one replica, all its GPUs).
    pub fn startup_delay_s(&self, weight_bytes: f64) -> f64 {
        self.provisioning_s + weight_bytes / (self.storage_gb_s * 1e9) + self.engine_start_s + self.cuda_graph_capture_s
    }
}

impl AutoscalePolicyFile {
    pub fn validate(&self, source: &str) -> Result<AutoscalePolicy> {
        let bad = |field: &str, msg: String| Error::input(source, None, Some(field), msg);
        if self.min_replicas == 0 {
            return Err(bad("min_replicas", "must be at least 1 (a fleet of none serves nothing)".into()));
        }
        if self.max_replicas > MAX_REPLICAS {
            return Err(bad("max_replicas", format!("must be at most {MAX_REPLICAS}, got {}", self.max_replicas)));
        }
        if self.min_replicas > self.max_replicas {
            return Err(bad(
                "min_replicas",
                format!("min_replicas {} is above max_replicas {}", self.min_replicas, self.max_replicas),
            ));
        }
        let initial = self.initial_replicas.unwrap_or(self.min_replicas);
        if initial < self.min_replicas || initial > self.max_replicas {
            return Err(bad(
                "initial_replicas",
                format!(
                    "must be within [min_replicas, max_replicas] = [{}, {}], got {initial}",
                    self.min_replicas, self.max_replicas
                ),
            ));
        }
        let positive = |field: &str, v: f64, hi: f64| -> Result<f64> {
            if v.is_finite() && v > 0.0 && v <= hi {
                Ok(v)
            } else {
                Err(bad(field, format!("must be a positive number at most {hi}, got {v}")))
            }
        };
        let non_negative = |field: &str, v: f64, hi: f64| -> Result<f64> {
            if v.is_finite() && (0.0..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(bad(field, format!("must be a number in [0, {hi}], got {v}")))
            }
        };
        // Periods a day's simulation steps through: a floor keeps their count in hand (a decision
        // interval of 1e-9 s took 24 GB before the system killed it).
        let period = |field: &str, v: f64, lo: f64, hi: f64| -> Result<f64> {
            if v.is_finite() && (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(bad(
                    field,
                    format!("must be a number of seconds in [{lo}, {hi}], got {}", crate::error::fmt_num(v)),
                ))
            }
        };
        const DAY_S: f64 = 86_400.0;
        let p = AutoscalePolicy {
            min_replicas: self.min_replicas,
            max_replicas: self.max_replicas,
            initial_replicas: initial,
            metric: self.metric,
            target: positive("target", self.target, 1e9)?,
            interval_s: period("interval_s", self.interval_s.unwrap_or(15.0), 1.0, DAY_S)?,
            tolerance: non_negative("tolerance", self.tolerance.unwrap_or(0.1), 1.0)?,
            scale_down_stabilization_s: non_negative(
                "scale_down_stabilization_s",
                self.scale_down_stabilization_s.unwrap_or(300.0),
                DAY_S,
            )?,
            scale_up_max_replicas: self.scale_up_max_replicas.unwrap_or(4),
            scale_up_max_percent: non_negative(
                "scale_up_max_percent",
                self.scale_up_max_percent.unwrap_or(100.0),
                1e6,
            )?,
            provisioning_s: non_negative("provisioning_s", self.provisioning_s, DAY_S)?,
            storage_gb_s: positive("storage_gb_s", self.storage_gb_s, 1e6)?,
            engine_start_s: non_negative("engine_start_s", self.engine_start_s, DAY_S)?,
            cuda_graph_capture_s: non_negative("cuda_graph_capture_s", self.cuda_graph_capture_s, DAY_S)?,
            price_per_gpu_hour: match self.price_per_gpu_hour {
                None => None,
                Some(v) => Some(non_negative("price_per_gpu_hour", v, 1e6)?),
            },
            bucket_s: period("bucket_s", self.bucket_s.unwrap_or(3600.0), 1.0, 365.0 * DAY_S)?,
            router_refresh_s: period("router_refresh_s", self.router_refresh_s.unwrap_or(0.05), 1e-3, 60.0)?,
        };
        if p.scale_up_max_replicas == 0 && p.scale_up_max_percent == 0.0 {
            return Err(bad(
                "scale_up_max_replicas",
                "scale_up_max_replicas and scale_up_max_percent are both 0: the fleet could never grow".into(),
            ));
        }
        Ok(p)
    }
}
