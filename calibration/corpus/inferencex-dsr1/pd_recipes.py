#!/usr/bin/env python3
"""Writes pd_recipes.json: each disaggregated InferenceX point's per-pool engine settings, as the
recipe its benchmark launched gives them. capsim's own file, not the corpus curators'.

metadata.json gives a disaggregated deployment's pools as its config key states them (workers, tp,
ep, dp-attn), and, under `config_entry.search_space[]`, each entry's `additional-settings`: either
`CONFIG_FILE=recipes/...`, an NVIDIA srt-slurm recipe (a YAML file with the engine flags of both
pools), or the flags as variables (`PREFILL_MAX_BATCH_SIZE=4`, `DECODE_MTP_SIZE=2`, ...). A point's
entry is the one whose `conc-list` holds its concurrency, whose prefill and decode workers and tp
match the deployment's, and whose `spec-decoding` agrees with it (metadata.json's own rule for
which entry ran a point).

Where the recipe is read:
- InferenceX's runners clone a srt-slurm fork (runners/launch_gb200-nv.sh @ 4e9a376b:
  `git clone https://github.com/ishandhanani/srt-slurm.git; git checkout sa-submission-q1-2026`),
  which is not available here. The same path is read from InferenceX's own staged copy,
  benchmarks/multi_node/srt-slurm-recipes/<path without recipes/>, at the commit metadata.json
  records for the point's date (`main_commit_at_date`); else from NVIDIA/srt-slurm at the newest
  commit on or before the point's date; else at the first commit that has it (after the run: noted
  in the entry's `source`, as its content may have changed).
- An entry that names no recipe and no engine variable but node counts (`PREFILL_NODES=4`,
  `DECODE_NODES=8`, with or without `SCRIPT_MODE=1k1k-max-tpt`: InferenceX's GB200 Dynamo SGLang
  runs of December 2025) ran ai-dynamo/dynamo's frozen SGLang slurm scripts, not available here;
  their configs moved to srt-slurm as recipes stating the same resources, and the recipe read is the
  one with the entry's nodes and workers (`node_recipe` says how it is chosen). metadata.json states
  these pools as `tp: 1, ep: 1, dp-attn: true`, the config key's placeholders: the recipes run
  each decode worker as one engine over all its GPUs with DP attention and DeepEP (`tp-size: 32,
  dp-size: 32, ep-size: 32, moe-a2a-backend: deepep`), or TP4 without DP attention at low latency.
- A recipe whose resources (prefill/decode workers) or pool sizes (GPUs per worker) differ from
  metadata.json's is not used: the point is listed under `skipped` with the difference.

Per pool (`prefill`, `decode`), every value per attention-DP rank as capsim's engine settings are
(ENGINES.md, "Attention DP"); a key is absent where the recipe leaves the engine's default:
- `tensor_parallel` (a worker's GPUs), `attention_dp` (ranks; 1 without DP attention),
  `expert_parallel` (the MoE's EP size), `redundant_experts` (expert slots beyond DeepSeek-R1's 256
  routed experts: SGLang's `ep-num-redundant-experts`, TensorRT-LLM's
  `moe_config.load_balancer.num_slots` minus 256);
- TensorRT-LLM (`backend.trtllm_config.<pool>`): `max_batch_size`, `max_num_tokens` (each rank's:
  TensorRT-LLM's executor per rank), `enable_chunked_prefill`, `free_gpu_memory_fraction`
  (kv_cache_config), `kv_dtype` (kv_cache_config.dtype), `stream_interval`, with attention DP
  `attention_dp_balance` (attention_dp_config.enable_balance; false where the recipe has no
  attention_dp_config, TensorRT-LLM's default) and, when on, `attention_dp_timeout_iters` and
  `attention_dp_batching_wait_iters` where the recipe states them (else capsim's engine defaults,
  TensorRT-LLM's 50 and 10), and for decode
  `spec_tokens` (speculative_config.num_nextn_predict_layers, 0 without a speculative_config);
- SGLang (`backend.sglang_config.<pool>`): `max_running_requests` and `chunked_prefill_size` divided
  by the DP size under DP attention (SGLang splits both over the ranks: ENGINES.md cites
  server_args.py `_handle_data_parallelism` for the chunk; the recipes size them so, e.g. 8k1k
  prefill `max-running-requests: 8`, `chunked-prefill-size: 65536` over 8 ranks is one 8K prompt
  per rank; InferenceX's AMD launcher sizes the flag the same way, engine-wide:
  benchmarks/multi_node/amd_utils/server_sglang.sh @ 843c6254, line 221,
  `decode_max_running_requests=$((DECODE_CUDA_GRAPH_BS_DP_END * DECODE_TP_SIZE))`, each rank's
  CUDA-graph batch times the ranks), `max_prefill_tokens`, `mem_fraction_static`, `kv_dtype` (kv-cache-dtype),
  `stream_interval`, `scheduler_recv_interval` (each rank's scheduler polls for new requests every
  that many iterations), and for decode `spec_tokens` (speculative-num-steps: EAGLE with topk 1 drafts
  that many tokens; 0 without a speculative-algorithm); `moe-a2a-backend: deepep` without an
  ep-size is EP over the worker's tp (SGLang sets ep_size = tp_size for DeepEP, server_args.py);
- variables: PREFILL_/DECODE_MAX_BATCH_SIZE, PREFILL_/DECODE_MAX_NUM_TOKENS,
  DECODE_GPU_MEM_FRACTION (TensorRT-LLM's dynamo scripts, free_gpu_memory_fraction), and
  DECODE_MTP_SIZE as the decode's `spec_tokens` (InferenceX benchmarks/multi_node/amd_utils/
  server_sglang.sh @ 843c6254, line 403: `--speculative-num-steps ${decode_mtp_size}
  --speculative-num-draft-tokens $((decode_mtp_size + 1))`; 0: MTP off).

Needs the two repositories (Apache-2.0) as git directories:
    python3 pd_recipes.py /path/to/InferenceX /path/to/srt-slurm
"""
import json
import os
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
STAGED = "benchmarks/multi_node/srt-slurm-recipes/"


def git(repo, *args):
    r = subprocess.run(["git", "--git-dir", repo, *args], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def git_dir(path):
    for cand in (os.path.join(path, ".git"), os.path.join(path, "repo"), path):
        if os.path.isdir(os.path.join(cand, "objects")):
            return cand
    sys.exit(f"{path}: not a git directory")


def recipe(ix, srt, path, date, main_commit):
    """(text, source) of the recipe `path` as of the point's date, or (None, None)."""
    if main_commit:
        staged = STAGED + path.removeprefix("recipes/")
        text = git(ix, "show", f"{main_commit}:{staged}")
        if text:
            return text, f"SemiAnalysisAI/InferenceX {staged} @ {main_commit[:10]}"
    h = git(srt, "log", "-1", "--format=%H", f"--before={date} 23:59:59", "--all", "--", path)
    if h and h.strip():
        h = h.strip()
        return git(srt, "show", f"{h}:{path}"), f"NVIDIA/srt-slurm {path} @ {h[:10]} (newest on or before {date})"
    h = git(srt, "log", "--reverse", "--format=%H", "--all", "--", path)
    if h and h.strip():
        h = h.split()[0]
        return git(srt, "show", f"{h}:{path}"), f"NVIDIA/srt-slurm {path} @ {h[:10]} (first commit that has it, after the run on {date})"
    return None, None


def first(d, *keys):
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return None


def kv(v):
    if v is None or v == "auto":
        return None
    return "fp8" if str(v).startswith("fp8") else str(v)


# DeepSeek-R1's routed experts (the only model of this set): ../configs/deepseek-ai__DeepSeek-R1.json.
ROUTED_EXPERTS = json.load(open(os.path.join(HERE, "..", "configs", "deepseek-ai__DeepSeek-R1.json")))["n_routed_experts"]


def trt_pool(c, decode):
    tp = c.get("tensor_parallel_size", 1)
    kc = c.get("kv_cache_config") or {}
    slots = ((c.get("moe_config") or {}).get("load_balancer") or {}).get("num_slots")
    # Attention-DP balancing is off unless the recipe's attention_dp_config turns it on; waits the
    # recipe does not state are left to capsim's engine defaults, TensorRT-LLM's (profile/engine.rs:
    # llm_args.py AttentionDpConfig timeout_iters 50, batching_wait_iters 10).
    adp = c.get("attention_dp_config") or {}
    balance = bool(adp.get("enable_balance")) if c.get("enable_attention_dp") else None
    out = {
        "tensor_parallel": tp,
        "attention_dp": tp if c.get("enable_attention_dp") else 1,
        "expert_parallel": c.get("moe_expert_parallel_size"),
        "max_batch_size": c.get("max_batch_size"),
        "max_num_tokens": c.get("max_num_tokens"),
        "enable_chunked_prefill": c.get("enable_chunked_prefill"),
        "free_gpu_memory_fraction": kc.get("free_gpu_memory_fraction"),
        "kv_dtype": kv(kc.get("dtype")),
        "stream_interval": c.get("stream_interval"),
        "redundant_experts": None if slots is None else int(slots) - ROUTED_EXPERTS,
        "attention_dp_balance": balance,
        "attention_dp_timeout_iters": adp.get("timeout_iters") if balance else None,
        "attention_dp_batching_wait_iters": adp.get("batching_wait_iters") if balance else None,
    }
    if decode:
        sc = c.get("speculative_config") or {}
        out["spec_tokens"] = sc.get("num_nextn_predict_layers", 0) if sc else 0
    return out


def sglang_pool(c, decode):
    tp = first(c, "tensor-parallel-size", "tp-size") or 1
    dp = first(c, "data-parallel-size", "dp-size") or 1
    ranks = dp if c.get("enable-dp-attention") else 1
    per_rank = lambda v: None if v is None else max(1, int(v) // ranks)
    out = {
        "tensor_parallel": tp,
        "attention_dp": ranks,
        "expert_parallel": first(c, "expert-parallel-size", "ep-size"),
        "max_running_requests": per_rank(c.get("max-running-requests")),
        "chunked_prefill_size": per_rank(c.get("chunked-prefill-size")),
        "max_prefill_tokens": c.get("max-prefill-tokens"),
        "mem_fraction_static": c.get("mem-fraction-static"),
        "kv_dtype": kv(c.get("kv-cache-dtype")),
        "stream_interval": c.get("stream-interval"),
        "scheduler_recv_interval": c.get("scheduler-recv-interval"),
        "redundant_experts": c.get("ep-num-redundant-experts"),
    }
    if out["expert_parallel"] is None and c.get("moe-a2a-backend") == "deepep":
        out["expert_parallel"] = tp
    if decode:
        out["spec_tokens"] = c.get("speculative-num-steps", 0) if c.get("speculative-algorithm") else 0
    return out


def node_recipes(srt):
    """Every version of every srt-slurm SGLang recipe that states its resources and ISL/OSL:
    (date, commit, path, yaml), oldest first."""
    log = git(srt, "log", "--all", "--reverse", "--format=@%H %ad", "--date=short", "--name-only", "--", "recipies", "recipes")
    out, commit, date = [], None, None
    for line in (log or "").splitlines():
        if line.startswith("@"):
            commit, date = line[1:].split()
        elif line.endswith(".yaml") and "trtllm" not in line:
            text = git(srt, "show", f"{commit}:{line}")
            try:
                y = yaml.safe_load(text) if text else None
            except yaml.YAMLError:
                y = None
            if isinstance(y, dict) and "sglang_config" in (y.get("backend") or {}):
                out.append((date, commit, line, y))
    return out


def node_recipe(versions, m, e, p, spec):
    """(yaml, source) of the srt-slurm recipe an entry launched by node counts (settings
    PREFILL_NODES / DECODE_NODES and a SCRIPT_MODE or none, no CONFIG_FILE) ran, or (None, reason).
    Those entries ran ai-dynamo/dynamo's frozen SGLang slurm scripts (InferenceX
    benchmarks/dsr1_fp8_gb200_dynamo-sglang_slurm.sh: `git checkout b7107d00...  # All configs are
    frozen in this branch`, then `submit_disagg.sh PREFILL_NODES PREFILL_WORKERS DECODE_NODES
    DECODE_WORKERS ... GPU_TYPE SCRIPT_MODE`), which are not available here; srt-slurm is where
    those scripts' configs moved as recipes, each stating the same resources. The recipe is the one
    for the point's GPU, precision and ISL/OSL whose prefill/decode nodes and workers are the
    entry's and whose decode drafts tokens (speculative-algorithm) where the point's does: the newest version on or before the run's date, else the first after it."""
    v = dict(s.split("=", 1) for s in (e["prefill"].get("additional-settings") or []) + (e["decode"].get("additional-settings") or []) if "=" in s)
    want = (int(v["PREFILL_NODES"]), m["prefill"]["workers"], int(v["DECODE_NODES"]), m["decode"]["workers"])
    hits = []
    for date, commit, path, y in versions:
        r, mo, b = y.get("resources") or {}, y.get("model") or {}, y.get("benchmark") or {}
        if (
            r.get("gpu_type") == m["gpu"]
            and str(mo.get("precision")) == m["precision"]
            and (b.get("isl"), b.get("osl")) == (p["isl"], p["osl"])
            and (r.get("prefill_nodes"), r.get("prefill_workers"), r.get("decode_nodes"), r.get("decode_workers")) == want
            and bool((y["backend"]["sglang_config"].get("decode") or {}).get("speculative-algorithm")) == spec
        ):
            hits.append((date, commit, path, y))
    if not hits:
        mtp = "with" if spec else "without"
        return None, f"no NVIDIA/srt-slurm {m['gpu']} {m['precision']} {p['isl']}x{p['osl']} recipe {mtp} speculative decoding has prefill/decode nodes and workers {want}"
    before = [h for h in hits if h[0] <= p["date"]]
    date, commit, path, y = before[-1] if before else hits[0]
    when = f"newest on or before {p['date']}" if before else f"first that has these resources, after the run on {p['date']}"
    mode = v.get("SCRIPT_MODE", "none")
    return y, f"NVIDIA/srt-slurm {path} @ {commit[:10]} ({when}; the recipe with the entry's nodes and workers {want}, SCRIPT_MODE {mode})"


def from_variables(settings):
    v = dict(s.split("=", 1) for s in settings if "=" in s)
    num = lambda k, f=int: f(v[k]) if k in v else None
    pre = {"max_batch_size": num("PREFILL_MAX_BATCH_SIZE"), "max_num_tokens": num("PREFILL_MAX_NUM_TOKENS")}
    dec = {
        "max_batch_size": num("DECODE_MAX_BATCH_SIZE"),
        "max_num_tokens": num("DECODE_MAX_NUM_TOKENS"),
        "free_gpu_memory_fraction": num("DECODE_GPU_MEM_FRACTION", float),
        "spec_tokens": num("DECODE_MTP_SIZE"),
    }
    return pre, dec


def clean(d):
    return {k: v for k, v in d.items() if v is not None}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ix, srt = git_dir(sys.argv[1]), git_dir(sys.argv[2])
    points, skipped, versions = {}, {}, None
    for d in sorted(os.listdir(HERE)):
        mp = os.path.join(HERE, d, "metadata.json")
        if not os.path.isfile(mp):
            continue
        m = json.load(open(mp))
        if not m.get("disagg"):
            continue
        entry = m.get("config_entry") or {}
        spec = m.get("spec_decoding") not in (None, "none")
        for p in m["points"]:
            key = f"{d}/{p['file']}"
            ents = [
                e for e in entry.get("search_space") or []
                if p["conc"] in (e.get("conc-list") or [])
                and e["prefill"].get("num-worker") == m["prefill"]["workers"]
                and e["decode"].get("num-worker") == m["decode"]["workers"]
                and e["prefill"].get("tp") == m["prefill"]["tp"]
                and e["decode"].get("tp") == m["decode"]["tp"]
                and (e.get("spec-decoding", "none") != "none") == spec
            ]
            if not ents:
                continue
            e = ents[0]
            settings = (e["prefill"].get("additional-settings") or []) + (e["decode"].get("additional-settings") or [])
            where = f"{entry.get('path')} key {entry.get('key')} @ {str(entry.get('commit'))[:10]}, search-space entry conc-list {e.get('conc-list')}"
            files = [s.split("=", 1)[1] for s in settings if s.startswith("CONFIG_FILE=")]
            names = {s.split("=", 1)[0] for s in settings if "=" in s}
            pre, dec = from_variables(settings)
            stated = any(v is not None for v in list(pre.values()) + list(dec.values()))
            if not files and not stated and {"PREFILL_NODES", "DECODE_NODES"} <= names and "sglang" in m["engine"]:
                if versions is None:
                    versions = node_recipes(srt)
                y, source = node_recipe(versions, m, e, p, spec)
                if y is None:
                    skipped[key] = f"{source} ({where})"
                    continue
                text = None
            elif not files:
                if stated:
                    points[key] = {"source": f"additional-settings of {where}", "prefill": clean(pre), "decode": clean(dec)}
                continue
            else:
                text, source = recipe(ix, srt, files[0], p["date"], p.get("main_commit_at_date"))
                if text is None:
                    skipped[key] = f"{files[0]} ({where}) is in neither InferenceX's staged recipes nor NVIDIA/srt-slurm"
                    continue
                y = yaml.safe_load(text)
            res = y.get("resources") or {}
            b = y.get("backend") or {}
            if "trtllm_config" in b:
                pre, dec = trt_pool(b["trtllm_config"]["prefill"], False), trt_pool(b["trtllm_config"]["decode"], True)
            elif "sglang_config" in b:
                pre, dec = sglang_pool(b["sglang_config"]["prefill"], False), sglang_pool(b["sglang_config"]["decode"], True)
            else:
                skipped[key] = f"{source}: no trtllm_config or sglang_config"
                continue
            diffs = []
            for pool, cfg, mine in (("prefill", pre, m["prefill"]), ("decode", dec, m["decode"])):
                workers = res.get(f"{pool}_workers")
                if workers is not None and workers != mine["workers"]:
                    diffs.append(f"{pool} workers {workers} against {mine['workers']}")
                gpus = mine["num_gpus"] // mine["workers"] if mine["workers"] else mine["tp"]
                if cfg["tensor_parallel"] not in (mine["tp"], gpus):
                    diffs.append(f"{pool} GPUs per worker {cfg['tensor_parallel']} against tp {mine['tp']}")
            if diffs:
                skipped[key] = f"{source}: {'; '.join(diffs)} in metadata.json"
                continue
            points[key] = {"source": source, "prefill": clean(pre), "decode": clean(dec)}
    about = (
        "Per-pool engine settings of InferenceX's disaggregated points, from the srt-slurm recipe or the "
        "variables their config entry names (NVIDIA/srt-slurm and SemiAnalysisAI/InferenceX, Apache-2.0). "
        "Written by pd_recipes.py, whose docstring says how each value is read; capsim's own file. "
        "Values are per attention-DP rank."
    )
    out = {"about": about, "points": points, "skipped": skipped}
    with open(os.path.join(HERE, "pd_recipes.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{len(points)} points with settings, {len(skipped)} skipped")


if __name__ == "__main__":
    main()
