"""The Python API against the command line: each function's result is the CLI's `--json` on the same
inputs (the text byte for byte, the value equal), errors name their field, the stubs are current.

The CLI binary compared with is $CAPSIM_BIN, else target/release/capsim (under $CARGO_TARGET_DIR if
set): build it with `cargo build --release` first (`.ci/run` does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import capsim

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "vllm" / "sweep"
MODEL = "Qwen3-Coder-30B-A3B-Instruct"


def cli_binary() -> Path:
    if "CAPSIM_BIN" in os.environ:
        return Path(os.environ["CAPSIM_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "release" / "capsim"


@pytest.fixture(scope="session")
def cli():
    binary = cli_binary()
    if not binary.exists():
        pytest.fail(f"no capsim binary at {binary}: run `cargo build --release` or set CAPSIM_BIN")

    def run(*args: str, ok=(0,)) -> str:
        p = subprocess.run([str(binary), *args], cwd=ROOT, capture_output=True, text=True)
        assert p.returncode in ok, f"capsim {' '.join(args)} exited {p.returncode}: {p.stderr}"
        return p.stdout

    return run


@pytest.fixture(autouse=True)
def in_root(monkeypatch):
    # Relative paths (the fixtures) as the CLI sees them.
    monkeypatch.chdir(ROOT)


# Each case: the function, its keywords, and the same question as the command line's flags.
CASES = [
    (
        "simulate",
        dict(concurrency=8, input_len=1024, output_len=256, requests=200, seed=1),
        ["--concurrency", "8", "--input-len", "1024", "--output-len", "256", "--requests", "200", "--seed", "1"],
    ),
    (
        "simulate",
        dict(model=MODEL, gpu="H100 SXM", tp=2, engine="vllm", precision="fp8", rate=4.5, requests=100,
             input_len="lognormal:2000:800", output_len=128, max_num_seqs=64, expert_parallel=True),
        ["--model", MODEL, "--gpu", "H100 SXM", "--tp", "2", "--engine", "vllm", "--precision", "fp8",
         "--rate", "4.5", "--requests", "100", "--input-len", "lognormal:2000:800", "--output-len", "128",
         "--max-num-seqs", "64", "--expert-parallel"],
    ),
    (
        "sweep",
        dict(concurrency=[1, 2, 4, 8], input_len=1024, output_len=128, requests=64),
        ["--concurrency", "1,2,4,8", "--input-len", "1024", "--output-len", "128", "--requests", "64"],
    ),
    (
        "capacity",
        dict(load="concurrency", input_len=2048, output_len=128, slo=["ttft_p95_s=2.0"], requests=64),
        ["--load", "concurrency", "--input-len", "2048", "--output-len", "128", "--slo", "ttft_p95_s=2.0",
         "--requests", "64"],
    ),
    (
        "plan",
        dict(target_rate=2, input_len=1024, output_len=128, slo="ttft_p95_s=2.0", gpus="H200 SXM", tps=1),
        ["--target-rate", "2", "--input-len", "1024", "--output-len", "128", "--slo", "ttft_p95_s=2.0",
         "--gpus", "H200 SXM", "--tps", "1"],
    ),
    (
        "validate",
        dict(runs=[str(FIXTURE / "high")], model=MODEL, gpu="H200 SXM", engine="vllm", precision="fp8"),
        ["--runs", str(FIXTURE / "high"), "--model", MODEL, "--gpu", "H200 SXM", "--engine", "vllm",
         "--precision", "fp8"],
    ),
    (
        "explain",
        dict(model="Llama-3.1-70B", gpu="H200 SXM", tp=4, engine="vllm", decode=64, context=1500),
        ["--model", "Llama-3.1-70B", "--gpu", "H200 SXM", "--tp", "4", "--engine", "vllm", "--decode", "64",
         "--context", "1500"],
    ),
]


@pytest.mark.parametrize("command,kwargs,argv", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_matches_cli_json(cli, command, kwargs, argv):
    expected = cli(command, *argv, "--json")
    # The text, byte for byte ...
    assert capsim.run(command, json=True, **kwargs) == expected
    # ... and the function's value is that JSON.
    result = getattr(capsim, command)(**kwargs)
    assert result == json.loads(expected)


def test_calibrate_matches_cli(cli, tmp_path):
    args = dict(runs=[str(FIXTURE / "low")], model=MODEL, gpu="H200 SXM", engine="vllm", precision="fp8",
                kv_dtype="bf16", name="my-h200")
    expected = cli("calibrate", "--runs", str(FIXTURE / "low"), "--model", MODEL, "--gpu", "H200 SXM",
                   "--engine", "vllm", "--precision", "fp8", "--kv-dtype", "bf16", "--name", "my-h200",
                   "--out", str(tmp_path / "cli"), "--json")
    cli_profile = (tmp_path / "cli" / "my-h200.toml").read_text()
    assert capsim.run("calibrate", json=True, out=tmp_path / "py", **args) == expected
    # The profile it writes is the CLI's too (its header names the command line it was made by).
    assert (tmp_path / "py" / "my-h200.toml").read_text() == cli_profile.replace(
        str(tmp_path / "cli"), str(tmp_path / "py"))
    assert capsim.calibrate(out=tmp_path / "py2", **args) == json.loads(expected)


def test_deployment_and_workload_objects_are_their_flags(cli):
    d = capsim.Deployment(model=MODEL, gpu="H100 SXM", tp=2, engine="vllm", precision="fp8")
    w = capsim.Workload(input_len=4096, output_len=256)
    assert d.extrapolation and d.resolved["gpu"] == "H100 SXM" and d.resolved["tensor_parallel"] == 2
    expected = cli("simulate", "--model", MODEL, "--gpu", "H100 SXM", "--tp", "2", "--engine", "vllm",
                   "--precision", "fp8", "--input-len", "4096", "--output-len", "256", "--concurrency", "16",
                   "--requests", "64", "--json")
    assert capsim.simulate(d, w, concurrency=16, requests=64) == json.loads(expected)
    assert capsim.run("simulate", d, w, concurrency=16, requests=64, json=True) == expected


def test_the_cli_defaults_apply(cli):
    # Nothing but the load given: every other flag takes the CLI's default, defined once (clap).
    assert capsim.simulate(concurrency=4, requests=20) == json.loads(cli("simulate", "--concurrency", "4",
                                                                         "--requests", "20", "--json"))
    defaults = {f["key"]: f["defaults"] for f in capsim.flags("simulate")}
    assert defaults["seed"] == ["0"] and defaults["horizon"] == ["10000000"]


def test_bad_values_raise_naming_the_field():
    with pytest.raises(capsim.InputError) as e:
        capsim.simulate(concurrency=8, input_len="abc")
    assert e.value.field == "--input-len" and e.value.kwarg == "input_len" and e.value.exit_code == 2
    assert "--input-len" in str(e.value)
    with pytest.raises(capsim.InputError) as e:
        capsim.simulate(concurrency=8, input_lenn=100)
    assert e.value.kwarg == "input_lenn" and "no flag --input-lenn" in str(e.value)
    with pytest.raises(capsim.InputError) as e:
        capsim.simulate(concurrency=-3)
    assert e.value.kwarg == "concurrency"
    with pytest.raises(capsim.InputError) as e:
        capsim.sweep(concurrency=[1, {"x": 2}])
    assert e.value.kwarg == "concurrency"
    with pytest.raises(capsim.InputError) as e:
        capsim.simulate(concurrency=8, json=True)
    assert e.value.kwarg == "json"


def test_deployment_and_workload_are_checked_when_made():
    with pytest.raises(capsim.Error) as e:
        capsim.Deployment(gpu="H900")
    assert e.value.kwarg == "gpu" and "H900" in str(e.value)
    with pytest.raises(capsim.InputError) as e:
        capsim.Deployment(model=MODEL, gpu="H200 SXM", tp=3)
    assert e.value.kwarg == "tp"
    with pytest.raises(capsim.InputError) as e:
        capsim.Deployment(gpu="H200 SXM", concurrency=3)
    assert e.value.kwarg == "concurrency"
    with pytest.raises(capsim.InputError) as e:
        capsim.Workload(output_len="uniform:9:1")
    assert e.value.kwarg == "output_len"
    with pytest.raises(capsim.InputError) as e:
        capsim.simulate(capsim.Deployment(gpu="H100 SXM"), gpu="B200", concurrency=1)
    assert e.value.kwarg == "gpu" and "twice" in str(e.value)


def test_file_errors_carry_file_and_line(tmp_path):
    bad = tmp_path / "mix.toml"
    bad.write_text('duration_s = 600.0\nwarmup_s = 5.0\nbogus = 1\n')
    with pytest.raises(capsim.InputError) as e:
        capsim.simulate(workload=bad)
    assert e.value.file == str(bad) and e.value.line == 3 and "bogus" in str(e.value)
    with pytest.raises(capsim.FileError) as e:
        capsim.validate(runs=[str(tmp_path / "missing.json")], gpu="H200 SXM")
    assert e.value.file is not None and "missing.json" in e.value.file


def test_no_answer_raises_with_the_result(cli):
    args = dict(load="concurrency", input_len=2048, output_len=128, slo=["ttft_p95_s=0.0001"], requests=64)
    expected = cli("capacity", "--load", "concurrency", "--input-len", "2048", "--output-len", "128", "--slo",
                   "ttft_p95_s=0.0001", "--requests", "64", "--json", ok=(3,))
    with pytest.raises(capsim.NoAnswerError) as e:
        capsim.capacity(**args)
    assert e.value.exit_code == 3 and e.value.result == json.loads(expected)


def test_sweep_to_pandas():
    pd = pytest.importorskip("pandas")
    r = capsim.sweep(concurrency=[1, 4, 16], input_len=512, output_len=64, requests=32)
    assert isinstance(r, dict)
    df = r.to_pandas()
    assert isinstance(df, pd.DataFrame) and len(df) == 3
    assert any(c.startswith("summary.ttft_s") or c.startswith("ttft_s") for c in df.columns), list(df.columns)


def test_long_runs_release_the_gil():
    # While a sweep runs on another Python thread, this thread keeps running Python code.
    done = threading.Event()
    out = {}

    def work():
        out["r"] = capsim.sweep(concurrency=[64, 128, 256, 512], input_len=4096, output_len=512, requests=200000,
                                progress=False)
        done.set()

    t = threading.Thread(target=work)
    start = time.monotonic()
    t.start()
    spins = 0
    while not done.is_set():
        spins += 1
        time.sleep(0.001)
    t.join()
    elapsed = time.monotonic() - start
    assert len(out["r"]["points"]) == 4
    # At least a third of the 1 ms sleeps fit in the run: the wait does not hold the interpreter.
    assert elapsed > 0.05, f"the sweep took {elapsed:.3f} s: too short to tell"
    assert spins > elapsed / 0.001 / 3, (spins, elapsed)


def test_progress_is_reported():
    job = capsim._capsim.start("sweep", json.dumps(dict(concurrency=[8, 16, 32, 64], input_len=4096,
                                                        output_len=512, requests=1000, json=True)))
    seen = None
    while not job.wait(0.01):
        seen = job.progress() or seen
    seen = job.progress() or seen
    stdout, err = job.result()
    assert err is None and seen is not None and seen[1] == 4 and seen[0] <= 4


def test_no_function_keyword_shadows_a_flag():
    for c in capsim.commands():
        keys = {f["key"] for f in capsim.flags(c["name"])}
        assert not keys & set(capsim._OWN), c["name"]


def test_stubs_are_current():
    from capsim import _stubs

    shipped = (Path(capsim.__file__).parent / "__init__.pyi").read_text()
    assert shipped == _stubs.render(), "regenerate: python -m capsim._stubs > python/capsim/__init__.pyi"
    assert (Path(capsim.__file__).parent / "py.typed").exists()


def test_console_script_is_the_cli(cli):
    script = Path(sys.executable).parent / "capsim"
    assert script.exists(), "the wheel installs the capsim command"
    args = ["simulate", "--concurrency", "8", "--requests", "50", "--input-len", "2048"]
    p = subprocess.run([str(script), *args], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout == cli(*args)
    p = subprocess.run([str(script), "simulate", "--gpu", "H900", "--concurrency", "1"], capture_output=True,
                       text=True)
    assert p.returncode == 2 and "--gpu" in p.stderr


NOTEBOOK = ROOT / "examples" / "notebook.ipynb"


def test_notebook_is_saved_executed():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None and c.outputs for c in code)
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), "the plot's output is kept"


def test_notebook_executes():
    # nbclient, nbformat, ipykernel and matplotlib are the test's requirements (.ci/run installs
    # them); a missing one fails here rather than skipping the notebook.
    import nbclient
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


def test_the_api_prints_nothing(capfd):
    # Only the command line prints: through the API its output is captured and returned, at the level
    # of the process's file descriptors too.
    text = capsim.run("simulate", concurrency=2, requests=10)
    out, _ = capfd.readouterr()
    assert out == "" and "ttft_s" in text
