#!/usr/bin/env python3
"""Kernel-benchmark shares of peak from aiconfigurator's measured per-kernel tables.

Reads NVIDIA's per-kernel latency tables in a checkout of ai-dynamo/aiconfigurator (Apache-2.0;
`aic-core/src/aiconfigurator_core/systems/data/<gpu>/<op>/<engine>/<version>/*.parquet`, read at the
commit the checkout is on, 095f58a51c4c for the figures in capsim) and prints, per GPU, the share of
the GPU's dense tensor peak (models/gpus.toml) that each kind of kernel reaches:

- `gemm`: dense GEMMs under TensorRT-LLM 1.3.0rc20, m 1,024-8,192, n and k 4,096-16,384, the median
  over the table. The FP8 (per-tensor), NVFP4 and BF16 columns are src/catalog/gpu.rs
  `GEMM_REFERENCE_SHARE`, which this script reproduces digit for digit.
- `--moe`: the routed experts' fused MoE kernels of each engine's table (SGLang 0.5.10, TensorRT-LLM
  1.3.0rc20, vLLM 0.19.0), whole experts (no TP or EP split), balanced routing, 128-2,048 rows per
  expert: the median over the MoE shapes of each shape's median share, and that over the GPU's GEMM
  reference share. Measured, not used by capsim: as a per-(GPU, engine) reference for the learned
  grouped-GEMM share it made every corpus protocol worse (capsim's closing note of 2026-11-27).
- `--attention`: context attention (BF16, head dim 128, no window) and MLA context (BF16 KV) at
  prompts of 4,096-16,384 tokens, causal FLOPs over the BF16 peak. Measured, not used. A table more
  than a tenth of whose rows run faster than the peak allows (UNUSABLE) is reported, not summarized.

H100, H200, B200 and GB200 (the data-centre GPUs the corpus also measures) and the RTX PRO 6000
Blackwell Server and L40S (tables, no corpus points) are read. B300 and GB300 are not: the corpus keeps
them apart for checks of predictions on GPUs nobody calibrated on (calibration/corpus/README.md), so
capsim gives them their siblings' shares (src/catalog/gpu.rs `KERNEL_SIBLING`). AMD has no tables there.

Usage: python3 reference_shares.py /path/to/aiconfigurator [--moe] [--attention]
Needs pandas and pyarrow (`pip install pandas pyarrow`).
"""

import io
import subprocess
import sys

import pandas as pd

DATA = "aic-core/src/aiconfigurator_core/systems/data"
# Dense tensor peaks (TFLOP/s) as models/gpus.toml states them.
PEAK = {
    "h100_sxm": {"bf16": 989, "fp8": 1979, "fp4": None},
    "h200_sxm": {"bf16": 989, "fp8": 1979, "fp4": None},
    "b200_sxm": {"bf16": 2250, "fp8": 4500, "fp4": 9000},
    "gb200": {"bf16": 2500, "fp8": 5000, "fp4": 10000},
    "rtx_pro_6000_server": {"bf16": 467.8, "fp8": 935.6, "fp4": 1871.2},
    "l40s": {"bf16": 362, "fp8": 733, "fp4": None},
}
GEMM_DTYPES = {"fp8": "fp8", "nvfp4": "fp4", "bfloat16": "bf16"}
# The MoE kernels' dtype per column: FP8 is the block-scaled kernel (DeepSeek-R1, Qwen3-235B, GLM-5).
MOE_DTYPES = {"fp8_block": "fp8", "nvfp4": "fp4", "bfloat16": "bf16"}
# The engine releases whose tables both summaries read (MoE and context attention).
ENGINE_TABLES = {"sglang": "0.5.10", "trtllm": "1.3.0rc20", "vllm": "0.19.0"}
# A table with more than this share of rows faster than the peak allows measured something else
# (H200 vLLM 0.19 and B200 SGLang 0.5.10 context attention: 75% and 99% of rows): not summarized.
UNUSABLE = 0.1


def table(repo, gpu, path):
    """One parquet table at the checkout's HEAD, or None where the GPU has none."""
    out = subprocess.run(
        ["git", "-C", repo, "show", f"HEAD:{DATA}/{gpu}/{path}"], capture_output=True, check=False
    )
    if out.returncode != 0:
        return None
    return pd.read_parquet(io.BytesIO(out.stdout))


def gemm_shares(repo, gpu):
    df = table(repo, gpu, "gemm/trtllm/1.3.0rc20/gemm_perf.parquet")
    df = df[df.m.between(1024, 8192) & df.n.between(4096, 16384) & df.k.between(4096, 16384)]
    shares = {}
    for dtype, col in GEMM_DTYPES.items():
        s = df[df.gemm_dtype == dtype]
        peak = PEAK[gpu][col]
        if len(s) and peak:
            shares[col] = (2 * s.m * s.n * s.k / (s.latency * 1e-3) / 1e12 / peak).median()
    return shares


def moe_shares(repo, gpu, gemm):
    rows = []
    for engine, version in ENGINE_TABLES.items():
        df = table(repo, gpu, f"moe/{engine}/{version}/moe_perf.parquet")
        if df is None:
            continue
        df = df[(df.distribution == "balanced") & (df.moe_tp_size == 1) & (df.moe_ep_size == 1)]
        if "kernel_source" in df:
            df = df[~df.kernel_source.str.contains("min_latency|nongated")]
        for dtype, col in MOE_DTYPES.items():
            s = df[df.moe_dtype == dtype]
            s = s[(s.num_tokens * s.topk / s.num_experts).between(128, 2048)]
            peak = PEAK[gpu][col]
            if not len(s) or not peak:
                continue
            flops = s.num_tokens * s.topk * 6 * s.hidden_size * s.inter_size
            share = flops / (s.latency * 1e-3) / 1e12 / peak
            if (share > 1).mean() > UNUSABLE:
                continue
            shape = [s.hidden_size, s.inter_size, s.num_experts, s.topk]
            per_shape = share.groupby(shape).median().median()
            rows.append((engine, col, per_shape, per_shape / gemm[col] if col in gemm else float("nan")))
    return rows


def attention_shares(repo, gpu):
    rows = []
    for engine, version in ENGINE_TABLES.items():
        for kind, path in (
            ("gqa", f"attention/{engine}/{version}/context_attention_perf.parquet"),
            ("mla", f"mla/{engine}/{version}/context_mla_perf.parquet"),
        ):
            df = table(repo, gpu, path)
            if df is None:
                continue
            for c in ("batch_size", "isl", "num_heads"):
                df[c] = df[c].astype(int)
            df = df[df.isl.between(4096, 16384) & (df.num_heads >= 8) & (df.kv_cache_dtype == "bfloat16")]
            if kind == "mla":
                flops = 2 * df.batch_size * df.num_heads * df.isl**2 / 2 * (192 + 128)
            else:
                df = df[(df.attn_dtype == "bfloat16") & (df.head_dim.astype(int) == 128)]
                if "window_size" in df:
                    df = df[df.window_size.astype(int) == 0]
                flops = 4 * df.batch_size * df.num_heads * df.isl**2 / 2 * 128
            share = flops / (df.latency * 1e-3) / 1e12 / PEAK[gpu]["bf16"]
            if len(share):
                rows.append((kind, engine, share.median(), len(share), (share > 1).mean()))
    return rows


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        sys.exit(__doc__)
    repo = args[0]
    print("gemm reference share of peak (fp8, fp4, bf16):")
    gemms = {}
    for gpu in PEAK:
        gemms[gpu] = gemm_shares(repo, gpu)
        cells = ", ".join(f"{gemms[gpu][c]:.3f}" if c in gemms[gpu] else "NaN" for c in ("fp8", "fp4", "bf16"))
        print(f"  {gpu:19} [{cells}]")
    if "--moe" in sys.argv:
        print("fused MoE share of peak, and relative to the gemm reference (engine, column):")
        for gpu in PEAK:
            for engine, col, share, rel in moe_shares(repo, gpu, gemms[gpu]):
                print(f"  {gpu:9} {engine:7} {col:4} share {share:.3f} rel {rel:.3f}")
    if "--attention" in sys.argv:
        print("context attention share of the BF16 peak (kind, engine):")
        for gpu in PEAK:
            for kind, engine, share, n, over in attention_shares(repo, gpu):
                if over > UNUSABLE:
                    print(f"  {gpu:9} {kind} {engine:7} unusable: {over:.0%} of its {n} rows exceed the peak")
                else:
                    print(f"  {gpu:9} {kind} {engine:7} share {share:.3f} ({n} rows)")


if __name__ == "__main__":
    main()
