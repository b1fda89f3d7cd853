#!/usr/bin/env python3
"""Writes launch_settings.json: engine settings of InferenceX's single-node deployments that
metadata.json does not resolve. capsim's own file, not the corpus curators'.

- The SGLang settings InferenceX's B200 scripts pass through shell variables (metadata.json keeps
  `--scheduler-recv-interval $SCHEDULER_RECV_INTERVAL` verbatim but not the value): read by hand from
  each deployment's script at the commit its metadata.json records, written below with their lines.
- `trt_max_num_tokens_floor`: the floor under TensorRT-LLM's --max_num_tokens, which InferenceX's
  scripts size as (CONC + ISL + 64 + 63) / 64 x 64: 8192 in the later scripts, none (0) in the
  December 2025 slurm scripts. Found in each deployment's scripts. The MTP scripts size it by their
  batch, ((MTP + 1) x MAX_BATCH_SIZE + ISL + 64 + 63) / 64 x 64 with the batch each rank's share of
  CONC under DP attention, no floor: `trt_max_num_tokens_mtp: true`.
- `stream_interval` (tokens per streamed response: SGLang and vLLM `--stream-interval N`, TensorRT-LLM
  `stream_interval: N` in the YAML its scripts write): found in each deployment's scripts at the
  recorded commits; a deployment whose scripts never set it runs the engine's default, 1, and gets no
  entry for it. Its scripts must agree.

Needs a checkout of SemiAnalysisAI/InferenceX (Apache-2.0) holding those commits:
    python3 launch_settings.py /path/to/InferenceX
"""
import glob
import json
import re
import subprocess
import sys

# (script, commit, lines): the settings it gives. `scheduler_recv_interval` is a list of
# [from_concurrency, value]: the last pair whose concurrency is at most the point's applies.
RECV_BY_CONC = [[1, 10], [16, 30]]  # `if [[ $CONC -ge 16 ]]; then ...=30 else ...=10`
FP4 = dict(max_running_requests=256, chunked_prefill_size=16384, mem_fraction_static=0.85,
           scheduler_recv_interval=RECV_BY_CONC)
MTP = dict(max_running_requests=512, chunked_prefill_size=16384, max_prefill_tokens=16384,
           mem_fraction_static=0.82, scheduler_recv_interval=RECV_BY_CONC)
FP8_TP8 = dict(max_running_requests=128, chunked_prefill_size=32768, max_prefill_tokens=32768,
               mem_fraction_static=0.82, scheduler_recv_interval=RECV_BY_CONC)
# `elif [[ $TP -eq 4 ]]` branch: SCHEDULER_RECV_INTERVAL=10 whatever the concurrency.
FP8_TP4 = dict(max_running_requests=32, chunked_prefill_size=8192, max_prefill_tokens=8192,
               mem_fraction_static=0.95, scheduler_recv_interval=[[1, 10]])

SCRIPTS = {
    ("benchmarks/single_node/dsr1_fp4_b200_mtp.sh", "70bf3a25", "36-40, 60-62"): MTP,
    ("benchmarks/dsr1_fp4_b200_docker.sh", "7daaa8bb", "10-14, 22-24"): FP4,
    ("benchmarks/single_node/dsr1_fp4_b200.sh", "d4948f99", "27-31, 45-47"): FP4,
    ("benchmarks/dsr1_fp4_b200_docker.sh", "f6a9d0b6", "24-28, 36-38"): FP4,
    ("benchmarks/dsr1_fp4_b200_docker.sh", "d27433df", "24-28, 36-38"): FP4,
    ("benchmarks/single_node/dsr1_fp4_b200.sh", "12ba0ae0", "27-31, 40-42"): FP4,
    ("benchmarks/dsr1_fp4_b200_docker.sh", "e06929c7", "10-14, 22-24"): FP4,
    ("benchmarks/single_node/dsr1_fp8_b200_mtp.sh", "370a162f", "35-48"): MTP,
    ("benchmarks/single_node/dsr1_fp8_b200_mtp.sh", "d4948f99", "35-48"): MTP,
    ("benchmarks/dsr1_fp8_b200_mtp.sh", "ec912828", "35-48"): MTP,
    ("benchmarks/single_node/dsr1_fp8_b200_mtp.sh", "12ba0ae0", "35-48"): MTP,
    ("benchmarks/single_node/dsr1_fp8_b200.sh", "d4948f99", "29-59"): None,  # by TP
    ("benchmarks/dsr1_fp8_b200_docker.sh", "1d29967c", "29-59"): None,  # by TP
    ("benchmarks/single_node/dsr1_fp8_b200.sh", "370a162f", "29-59"): None,  # by TP
    ("benchmarks/dsr1_fp8_b200_docker.sh", "f6a9d0b6", "26-30, 38-40"): FP8_TP8,
    ("benchmarks/single_node/dsr1_fp8_b200.sh", "12ba0ae0", "29-59"): None,  # by TP
    ("benchmarks/dsr1_fp8_b200_docker.sh", "189ae51c", "22-26, 34-36"): FP8_TP8,
}

DEPLOYMENTS = {
    "dsr1-fp4-b200-sglang-mtp-tp8-v0.5.12-cu130": ("benchmarks/single_node/dsr1_fp4_b200_mtp.sh", "70bf3a25"),
    "dsr1-fp4-b200-sglang-tp4-v0.5.5-cu129-amd64": ("benchmarks/dsr1_fp4_b200_docker.sh", "7daaa8bb"),
    "dsr1-fp4-b200-sglang-tp8-v0.5.5-cu129-amd64": ("benchmarks/dsr1_fp4_b200_docker.sh", "7daaa8bb"),
    "dsr1-fp4-b200-sglang-tp4ep4-v0.5.12-cu130": ("benchmarks/single_node/dsr1_fp4_b200.sh", "d4948f99"),
    "dsr1-fp4-b200-sglang-tp8ep8-v0.5.12-cu130": ("benchmarks/single_node/dsr1_fp4_b200.sh", "d4948f99"),
    "dsr1-fp4-b200-sglang-tp4ep4-v0.5.5-cu129-amd64": ("benchmarks/dsr1_fp4_b200_docker.sh", "f6a9d0b6"),
    "dsr1-fp4-b200-sglang-tp8ep8-v0.5.5-cu129-amd64": ("benchmarks/dsr1_fp4_b200_docker.sh", "f6a9d0b6"),
    "dsr1-fp4-b200-sglang-tp4ep4-v0.5.6-cu129-amd64": ("benchmarks/dsr1_fp4_b200_docker.sh", "d27433df"),
    "dsr1-fp4-b200-sglang-tp8ep8-v0.5.6-cu129-amd64": ("benchmarks/dsr1_fp4_b200_docker.sh", "d27433df"),
    "dsr1-fp4-b200-sglang-tp4ep4-v0.5.9-cu130": ("benchmarks/single_node/dsr1_fp4_b200.sh", "12ba0ae0"),
    "dsr1-fp4-b200-sglang-tp8ep8-v0.5.9-cu130": ("benchmarks/single_node/dsr1_fp4_b200.sh", "12ba0ae0"),
    "dsr1-fp4-b200-sglang-tp8-unknown-2025-11-02": ("benchmarks/dsr1_fp4_b200_docker.sh", "e06929c7"),
    "dsr1-fp8-b200-sglang-mtp-tp8-v0.5.11-cu130": ("benchmarks/single_node/dsr1_fp8_b200_mtp.sh", "370a162f"),
    "dsr1-fp8-b200-sglang-mtp-tp8-v0.5.12-cu130": ("benchmarks/single_node/dsr1_fp8_b200_mtp.sh", "d4948f99"),
    "dsr1-fp8-b200-sglang-mtp-tp8-v0.5.8-cu130-amd64": ("benchmarks/dsr1_fp8_b200_mtp.sh", "ec912828"),
    "dsr1-fp8-b200-sglang-mtp-tp8-v0.5.9-cu130": ("benchmarks/single_node/dsr1_fp8_b200_mtp.sh", "12ba0ae0"),
    "dsr1-fp8-b200-sglang-tp4-v0.5.12-cu130": ("benchmarks/single_node/dsr1_fp8_b200.sh", "d4948f99"),
    "dsr1-fp8-b200-sglang-tp8-v0.5.12-cu130": ("benchmarks/single_node/dsr1_fp8_b200.sh", "d4948f99"),
    "dsr1-fp8-b200-sglang-tp4-v0.5.6-cu129-amd64": ("benchmarks/dsr1_fp8_b200_docker.sh", "1d29967c"),
    "dsr1-fp8-b200-sglang-tp8-v0.5.6-cu129-amd64": ("benchmarks/dsr1_fp8_b200_docker.sh", "1d29967c"),
    "dsr1-fp8-b200-sglang-tp8-v0.5.11-cu130": ("benchmarks/single_node/dsr1_fp8_b200.sh", "370a162f"),
    "dsr1-fp8-b200-sglang-tp8-v0.5.5-cu129-amd64": ("benchmarks/dsr1_fp8_b200_docker.sh", "f6a9d0b6"),
    "dsr1-fp8-b200-sglang-tp8-v0.5.9-cu130": ("benchmarks/single_node/dsr1_fp8_b200.sh", "12ba0ae0"),
    "dsr1-fp8-b200-sglang-tp8ep8-v0.5.5-cu129-amd64": ("benchmarks/dsr1_fp8_b200_docker.sh", "189ae51c"),
}


def single_node_scripts(repo, engines):
    """(deployment, script entry, script text) for every single-node deployment of `engines`, each of
    its scripts read at the commit its metadata.json records."""
    for meta_path in sorted(glob.glob("*/metadata.json")):
        dep = meta_path.split("/")[0]
        with open(meta_path) as f:
            m = json.load(f)
        if m.get("disagg") or m.get("engine") not in engines:
            continue
        for s in m.get("engine_scripts") or []:
            text = subprocess.run(
                ["git", "-C", repo, "show", f"{s['commit']}:{s['path']}"], capture_output=True, text=True, check=True
            ).stdout
            yield dep, s, text


def agreed(found_by_dep, what):
    """Deployment -> (value, where) where each deployment's scripts agree on one value."""
    found = {}
    for dep, values in found_by_dep.items():
        if len(values) > 1:
            sys.exit(f"{dep}: its scripts disagree on {what}: {values}")
        if values and None not in values:
            (v, where), = values.items()
            found[dep] = (v, where)
    return found


def stream_intervals(repo):
    """Deployment -> (stream_interval, where) for every single-node deployment whose scripts set it."""
    by_dep = {}
    for dep, s, text in single_node_scripts(repo, ("sglang", "trt", "vllm")):
        values = by_dep.setdefault(dep, {})
        for i, line in enumerate(text.split("\n"), 1):
            for v in re.findall(r"stream[-_]interval[\s=:]+(\d+)", line):
                values.setdefault(int(v), f"{s['path']} @ {s['commit'][:8]}, line {i}")
    return agreed(by_dep, "stream_interval")


# InferenceX's TensorRT-LLM scripts size --max_num_tokens from the client's concurrency:
# `MAX_NUM_TOKENS=$(( ($CONC+$ISL+64+63)/64*64 ))`, which the later scripts floor at 8192
# (`MAX_NUM_TOKENS=$(( MAX_NUM_TOKENS > 8192 ? MAX_NUM_TOKENS : 8192 ))`) and the December 2025
# slurm scripts do not.
TRT_TOKENS = re.compile(r"MAX_NUM_TOKENS=\$\(\( *\( *\$?CONC *\+ *\$?ISL *\+ *64 *\+ *63 *\) */ *64 *\* *64 *\)\)")
# The MTP scripts: `MAX_NUM_TOKENS=$(( ((MTP+1)*MAX_BATCH_SIZE+ISL+64+63)/64*64 ))`, their batch the
# client's CONC, or each rank's share of it under DP attention; no floor.
TRT_MTP_TOKENS = re.compile(r"MAX_NUM_TOKENS=\$\(\( *\( *\( *\$?MTP *\+ *1 *\) *\* *\$?MAX_BATCH_SIZE *\+ *\$?ISL *\+ *64 *\+ *63 *\) */ *64 *\* *64 *\)\)")
TRT_FLOOR = re.compile(r"MAX_NUM_TOKENS=\$\(\( *MAX_NUM_TOKENS *> *(\d+) *\? *MAX_NUM_TOKENS *: *(\d+) *\)\)")


def trt_token_floors(repo):
    """Deployment -> (floor, where) for every single-node TensorRT-LLM deployment whose scripts size
    max_num_tokens by CONC + ISL: the floor under it (0: none); ("mtp", where) for those sizing it by
    their batch."""
    by_dep = {}
    for dep, s, text in single_node_scripts(repo, ("trt",)):
        values = by_dep.setdefault(dep, {})
        lines = text.split("\n")
        rule = [i for i, line in enumerate(lines, 1) if TRT_TOKENS.search(line)]
        mtp = [i for i, line in enumerate(lines, 1) if TRT_MTP_TOKENS.search(line)]
        if mtp and not rule:
            values.setdefault("mtp", f"{s['path']} @ {s['commit'][:8]}, line {mtp[0]}")
        elif not rule:
            values.setdefault(None, f"{s['path']} @ {s['commit'][:8]}")
        else:
            floors = [(i, int(f.group(2))) for i, line in enumerate(lines, 1) for f in [TRT_FLOOR.search(line)] if f]
            floor = floors[0][1] if floors else 0
            where = f"{s['path']} @ {s['commit'][:8]}, line {rule[0]}" + (f" and {floors[0][0]}" if floors else "")
            values.setdefault(floor, where)
    return agreed(by_dep, "the max_num_tokens rule")


def stated_sglang_flags(dep):
    """The literal SGLang flags metadata.json states for `dep` where all its scripts agree (capsim's
    reader takes them from metadata.json itself: src/measured/launch.rs `stated_sglang_flags`)."""
    with open(f"{dep}/metadata.json") as f:
        m = json.load(f)
    if m.get("disagg") or m.get("engine") != "sglang":
        return {}
    out = {}
    for key in ("max_running_requests", "chunked_prefill_size", "max_prefill_tokens", "mem_fraction_static"):
        values = set()
        for s in m.get("engine_scripts") or []:
            v = (s.get("flags_found_in_script") or {}).get(key)
            try:
                values.add(float(v.strip()) if isinstance(v, str) else None)
            except ValueError:
                values.add(None)
        if len(values) == 1 and None not in values:
            (v,) = values
            if v > 0 and (key == "mem_fraction_static" and v <= 1 or key != "mem_fraction_static" and v == int(v)):
                out[key] = v if key == "mem_fraction_static" else int(v)
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python3 launch_settings.py /path/to/InferenceX")
    streams = stream_intervals(sys.argv[1])
    floors = trt_token_floors(sys.argv[1])
    out = {
        "about": "SGLang settings that InferenceX's B200 launch scripts pass through shell variables "
        "(metadata.json keeps the launch lines verbatim but not the variables' values), read by hand from "
        "each deployment's script at the commit its metadata.json records (SemiAnalysisAI/InferenceX, "
        "Apache-2.0). Written by launch_settings.py; capsim's own file. scheduler_recv_interval: "
        "[from_concurrency, value] pairs, the last whose concurrency is at most the point's applies. "
        "mem_fraction_static is SGLang's --mem-fraction-static. stream_interval: tokens per streamed "
        "response (SGLang/vLLM --stream-interval, TensorRT-LLM stream_interval), found in the scripts. "
        "layouts: for InferenceX's database rows in aic-e2e, which name no folder, the settings every "
        "folder of a plain layout (model-precision-gpu-engine-tpN) agrees on. trt_max_num_tokens_floor: "
        "the floor InferenceX's TensorRT-LLM scripts put under MAX_NUM_TOKENS = (CONC + ISL + 64 + 63) / 64 "
        "x 64 (8192 in the later scripts, 0 in the December 2025 slurm scripts). trt_max_num_tokens_mtp: the MTP "
        "scripts' rule instead, ((MTP + 1) x MAX_BATCH_SIZE + ISL + 64 + 63) / 64 x 64, MAX_BATCH_SIZE CONC or, "
        "under DP attention, each rank's share of it.",
        "deployments": {},
    }
    for dep in sorted(set(DEPLOYMENTS) | set(streams) | set(floors)):
        entry = {}
        where = []
        if dep in DEPLOYMENTS:
            script, commit = DEPLOYMENTS[dep]
            key = next(k for k in SCRIPTS if k[0] == script and k[1] == commit)
            settings = SCRIPTS[key]
            if settings is None:
                settings = FP8_TP4 if "-tp4-" in dep else FP8_TP8
            entry.update(settings)
            where.append(f"{script} @ {commit}, lines {key[2]}")
        if dep in streams:
            entry["stream_interval"] = streams[dep][0]
            where.append(f"stream_interval: {streams[dep][1]}")
        if dep in floors and floors[dep][0] == "mtp":
            entry["trt_max_num_tokens_mtp"] = True
            where.append(f"max_num_tokens: {floors[dep][1]}")
        elif dep in floors:
            entry["trt_max_num_tokens_floor"] = floors[dep][0]
            where.append(f"max_num_tokens: {floors[dep][1]}")
        out["deployments"][dep] = {"script": "; ".join(where), **entry}
    # InferenceX's own database rows in aic-e2e (`db-dump` in silicon_data_source) name no folder:
    # a plain layout (`<model>-<precision>-<gpu>-<engine>-tp<N>`, no EP, DP attention or MTP) takes
    # the settings every folder of that layout agrees on.
    by_layout = {}
    for dep in sorted(glob.glob("*/metadata.json")):
        dep = dep.split("/")[0]
        m = re.match(r"^([a-z0-9]+-(?:fp4|fp8)-[a-z0-9]+-(?:sglang|trt|vllm))-(tp\d+)-", dep)
        if not m:
            continue
        # The max_num_tokens floor belongs to a script version, not a layout: a database row of another
        # day may have run another version of the script, so it is not carried to the layouts.
        own = out["deployments"].get(dep, {})
        settings = {
            **stated_sglang_flags(dep),
            **{k: v for k, v in own.items() if k not in ("script", "trt_max_num_tokens_floor", "trt_max_num_tokens_mtp")},
        }
        by_layout.setdefault(f"{m.group(1)}-{m.group(2)}", []).append((dep, json.dumps(settings, sort_keys=True)))
    out["layouts"] = {}
    for key, deps in sorted(by_layout.items()):
        kinds = {s for _, s in deps}
        if len(kinds) == 1 and kinds != {"{}"}:
            out["layouts"][key] = {
                "script": f"the settings of all {len(deps)} folders of this layout ({deps[0][0]}, ...)",
                **json.loads(kinds.pop()),
            }
    with open("launch_settings.json", "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
