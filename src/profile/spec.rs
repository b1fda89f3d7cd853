//! Speculative decoding as a deployment states it (issue 25): the draft method, the tokens drafted
//! per step (K) and the acceptance of each drafted position. Validated once here; the simulator
//! (sim/spec.rs) and the step model (sim/step.rs `draft_s`) read the validated value.
//!
//! Acceptance: `accept_rate[i]` is the probability that drafted position i+1 is accepted given that
//! position i was (one number means the same for every position). The expected tokens a decoding
//! sequence emits per verification step are 1 + sum_i prod_{j<=i} a_j (the accepted run plus the
//! target model's own token).

use serde::{Deserialize, Serialize};

/// Most tokens drafted per step capsim accepts: the engines' recipes draft 1 to 7 (SGLang's EAGLE
/// `--speculative-num-draft-tokens` up to 8 with top-k 1); 16 leaves room and keeps a step's query
/// tokens per sequence small against any token budget.
pub const MAX_SPEC_TOKENS: u32 = 16;

/// DeepSeek-V3's MTP acceptance: "the acceptance rate of the second token prediction ranges between
/// 85% and 90%" (DeepSeek-V3 Technical Report, arXiv:2412.19437, section 5.4.3, "Multi-Token
/// Prediction Evaluation"). capsim takes the low end, 0.85, for every drafted position: the report
/// measured the first drafted position only (one MTP module); applying the same conditional
/// acceptance to the later positions of a recursively applied MTP layer is an assumption (it is
/// likely optimistic for positions 2 and 3), and a user's runs replace it (`calibrate --runs
/// --spec-method mtp`).
pub const MTP_DEFAULT_ACCEPT: f64 = 0.85;

/// Where the MTP default comes from, as written into profiles and notes.
pub const MTP_DEFAULT_SOURCE: &str =
    "default 0.85 per position: DeepSeek-V3 Technical Report (arXiv:2412.19437) section 5.4.3, second-token acceptance 85-90%; later positions assumed equal";

/// Host cost of the n-gram proposer per decoding sequence and step (s). An assumption, not a
/// measurement: vLLM's `NgramProposer` (vllm/v1/spec_decode/ngram_proposer.py) matches the last n
/// tokens against the sequence's own history on the CPU with a numba-compiled KMP search, a few
/// microseconds for contexts of thousands of tokens; 10 us per sequence is taken.
pub const NGRAM_S_PER_SEQ: f64 = 10e-6;

/// The draft method. No engine is refused a method: vLLM (`--speculative-config` methods `ngram`,
/// `eagle`/`eagle3`, `deepseek_mtp`), SGLang (`--speculative-algorithm` NEXTN/EAGLE/EAGLE3/NGRAM) and
/// TensorRT-LLM (`decoding_type` MTP, Eagle3, NGram) each list all three kinds in their documentation
/// as read before this session; their sources were not re-read here (the mirrors were too large to
/// fetch), so no refusal is built on a claim unchecked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpecMethod {
    /// The model's own multi-token-prediction module (DeepSeek-V3/R1 `num_nextn_predict_layers`),
    /// applied K times (vLLM `deepseek_mtp`, SGLang EAGLE with the NextN layer, TensorRT-LLM MTP).
    Mtp,
    /// An EAGLE head: one decoder layer over the target's hidden state plus the LM head.
    Eagle,
    /// Prompt lookup: a host-side n-gram match, no model pass.
    Ngram,
}

impl SpecMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            SpecMethod::Mtp => "mtp",
            SpecMethod::Eagle => "eagle",
            SpecMethod::Ngram => "ngram",
        }
    }
}

/// A deployment's speculative decoding: the `[speculative]` table of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculative {
    pub method: SpecMethod,
    /// Tokens drafted per step (K): vLLM `num_speculative_tokens`, SGLang
    /// `--speculative-num-draft-tokens` minus 1 (its count includes the verified token),
    /// TensorRT-LLM `num_nextn_predict_layers`.
    pub tokens: u32,
    /// Conditional acceptance per drafted position: one value for all, or K values.
    pub accept_rate: Vec<f64>,
    /// Where the acceptance came from (a cited default, a flag, a fit).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub accept_rate_source: String,
    /// A fitted acceptance's quality: median |TPOT error| (%) of the runs at the fitted rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit_tpot_median_abs_error_pct: Option<f64>,
    /// Runs (statistics) the acceptance was fitted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit_points: Option<usize>,
}

impl Speculative {
    /// A speculative decoding of `tokens` drafts at `accept_rate` (one value or one per position),
    /// with nothing about its provenance.
    pub fn new(method: SpecMethod, tokens: u32, accept_rate: Vec<f64>) -> Speculative {
        Speculative {
            method,
            tokens,
            accept_rate,
            accept_rate_source: String::new(),
            fit_tpot_median_abs_error_pct: None,
            fit_points: None,
        }
    }

    /// What is wrong with it, as (field, message): `tokens` in 1..=MAX_SPEC_TOKENS, every rate a
    /// number in [0, 1], one rate or K of them.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if self.tokens == 0 || self.tokens > MAX_SPEC_TOKENS {
            return Some(("tokens", format!("must be in 1..={MAX_SPEC_TOKENS}, got {}", self.tokens)));
        }
        if let Some(a) = self.accept_rate.iter().find(|a| !(a.is_finite() && (0.0..=1.0).contains(*a))) {
            return Some(("accept_rate", format!("each rate must be in [0, 1], got {}", crate::error::fmt_num(*a))));
        }
        let n = self.accept_rate.len();
        if n != 1 && n != self.tokens as usize {
            return Some(("accept_rate", format!("give one rate or one per drafted token ({}), got {n}", self.tokens)));
        }
        None
    }

    /// Conditional acceptance of drafted position `i` (0-based).
    pub fn rate(&self, i: usize) -> f64 {
        if self.accept_rate.len() == 1 {
            self.accept_rate[0]
        } else {
            self.accept_rate[i]
        }
    }

    /// Expected tokens a sequence emits per verification step when `drafted` tokens were drafted:
    /// 1 + sum_{i<drafted} prod_{j<=i} a_j, in [1, drafted + 1].
    pub fn expected_tokens(&self, drafted: u32) -> f64 {
        let (mut e, mut p) = (1.0, 1.0);
        for i in 0..drafted as usize {
            p *= self.rate(i);
            e += p;
        }
        e
    }

    /// The same speculation at another acceptance (one value for every position).
    pub fn with_rate(&self, a: f64) -> Speculative {
        Speculative { accept_rate: vec![a], ..self.clone() }
    }
}

/// Parse `--spec-accept-rate`: one number or a comma list.
pub fn parse_rates(s: &str) -> std::result::Result<Vec<f64>, String> {
    s.split(',')
        .map(|x| {
            let t = x.trim();
            t.parse::<f64>().map_err(|_| format!("`{t}` is not a number (give A or a1,...,aK, each in [0, 1])"))
        })
        .collect()
}
