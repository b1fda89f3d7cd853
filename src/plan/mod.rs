//! The fleet plan a buyer signs (issue 26): prices and power per GPU (models/prices.toml, or the
//! user's file), and the cost, power and energy of a fleet. The search itself is capacity's fleet
//! sizing (crate::capacity::size_fleet) on each GPU and tensor-parallel degree asked about; over a
//! rate curve (a day), [`day`] checks each fleet by simulating the whole curve.

pub mod day;
pub mod mixed;

use crate::error::{toml_error, Error, Result};
use serde::{Deserialize, Serialize};

pub const DEFAULT_PRICES_PATH: &str = "models/prices.toml";
pub const DEFAULT_PRICES: &str = include_str!("../../models/prices.toml");

/// One GPU's price and power.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuPrice {
    pub name: String,
    /// Per GPU-hour.
    pub price_per_hour: f64,
    /// Power of a GPU holding a loaded model with no work (W).
    pub idle_w: f64,
    /// Power of a GPU kept fully busy (W).
    pub busy_w: f64,
}

/// A price file: the date its prices were read, the currency, one entry per GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceTable {
    pub date: String,
    pub currency: String,
    pub gpu: Vec<GpuPrice>,
    /// Where it was read from (not in the file).
    #[serde(skip_deserializing, default)]
    pub source: String,
}

impl PriceTable {
    /// Parse and check a price file: every number finite, prices not negative, idle power at most
    /// busy power, no GPU twice. Errors name `source`, the GPU and the key.
    pub fn parse(source: &str, text: &str) -> Result<PriceTable> {
        let mut t: PriceTable = toml::from_str(text).map_err(|e| toml_error(source, text, e))?;
        t.source = source.to_string();
        for (i, g) in t.gpu.iter().enumerate() {
            let bad =
                |key: &str, msg: String| Error::input(source, None, Some(&format!("gpu[{i}] ({}).{key}", g.name)), msg);
            if !(g.price_per_hour.is_finite() && (0.0..=1e6).contains(&g.price_per_hour)) {
                return Err(bad("price_per_hour", format!("must be a number in [0, 1e6], got {}", g.price_per_hour)));
            }
            for (key, v) in [("idle_w", g.idle_w), ("busy_w", g.busy_w)] {
                if !(v.is_finite() && (0.0..=1e5).contains(&v)) {
                    return Err(bad(key, format!("must be a number of watts in [0, 1e5], got {v}")));
                }
            }
            if g.idle_w > g.busy_w {
                return Err(bad("idle_w", format!("{} W idle is above {} W busy", g.idle_w, g.busy_w)));
            }
            if t.gpu[..i].iter().any(|o| o.name == g.name) {
                return Err(bad("name", "listed twice".into()));
            }
        }
        Ok(t)
    }

    /// The built-in table.
    pub fn builtin() -> PriceTable {
        PriceTable::parse(DEFAULT_PRICES_PATH, DEFAULT_PRICES).expect("the built-in price table parses")
    }

    /// The entry for a catalog GPU; an error naming the file and the GPU when it has none.
    pub fn get(&self, gpu: &str) -> Result<&GpuPrice> {
        self.gpu.iter().find(|g| g.name == gpu).ok_or_else(|| {
            Error::input(
                &self.source,
                None,
                Some("gpu"),
                format!(
                    "no price for {gpu}: the plan needs one for every GPU it considers (add a [[gpu]] entry with name = \"{gpu}\", price_per_hour, idle_w and busy_w); listed: {}",
                    self.gpu.iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            )
        })
    }
}

/// Power (W) of `gpus` GPUs busy a share `utilization` of the time: idle + (busy - idle) x share.
pub fn fleet_power_w(price: &GpuPrice, gpus: u32, utilization: f64) -> f64 {
    gpus as f64 * (price.idle_w + (price.busy_w - price.idle_w) * utilization.clamp(0.0, 1.0))
}

/// Energy (kWh) of replicas of `gpus_per_replica` GPUs held `replica_s` replica-seconds, of which
/// `busy_replica_s` were spent stepping: idle power all the time held, plus (busy - idle) while
/// stepping. A step of a small decode batch draws less than `busy_w`, so this is an upper bound when
/// the batches are small.
pub fn energy_kwh(price: &GpuPrice, gpus_per_replica: u32, replica_s: f64, busy_replica_s: f64) -> f64 {
    let busy = busy_replica_s.clamp(0.0, replica_s.max(0.0));
    gpus_per_replica as f64 * (price.idle_w * replica_s.max(0.0) + (price.busy_w - price.idle_w) * busy) / 3.6e6
}

/// A plan's band from the profile's uncertainty, as capacity's bands: the replicas the same search
/// finds with the profile one sigma faster (`low`) and one sigma slower (`high`)
/// (crate::capacity::perturbed), widened to hold the nominal answer; `high` is None where the slow
/// profile needs more than the limit allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReplicaBand {
    pub low: Option<u32>,
    pub high: Option<u32>,
    /// Whether any profile involved carries an uncertainty (a fit's sigmas or covariance); without
    /// one the band is the nominal answer and nothing is searched.
    pub from_sigmas: bool,
}

impl ReplicaBand {
    /// `search(sign)` answers the question with every profile moved one sigma (`sign` +1 faster,
    /// -1 slower); `nominal` is the plan's own answer.
    pub fn find(
        nominal: u32,
        profiles: &[&crate::profile::Profile],
        mut search: impl FnMut(f64) -> Result<Option<u32>>,
    ) -> Result<ReplicaBand> {
        let from_sigmas = profiles.iter().any(|p| p.file.sigmas.is_some() || p.file.covariance.is_some());
        if !from_sigmas {
            return Ok(ReplicaBand { low: Some(nominal), high: Some(nominal), from_sigmas });
        }
        let fast = search(1.0)?;
        let slow = search(-1.0)?;
        Ok(ReplicaBand {
            low: Some(fast.map_or(nominal, |f| f.min(nominal))),
            high: slow.map(|s| s.max(nominal)),
            from_sigmas,
        })
    }
}
