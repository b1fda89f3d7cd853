"""capsim from Python: the command line's commands as functions that return their ``--json``.

Every function takes the flags of its command as keyword arguments, named as the flags are with
``_`` for ``-`` (``max_num_seqs=256`` is ``--max-num-seqs 256``; ``True`` turns a switch on; a list
is a repeated or comma-separated flag, as the flag takes it). The flags are not defined here: they
are handed to the command line's own definitions (clap, in the Rust library), which check them and
fill the defaults, and the command runs on the same code path as ``capsim COMMAND --json``. The
result is that JSON parsed into plain dicts and lists, with the same keys; :func:`run` gives the
exact text. ``capsim.flags("simulate")`` lists a command's flags with their defaults and help.

A :class:`Deployment` (model, GPU, TP, engine, precision, engine settings) and a :class:`Workload`
(lengths, a workload file, a trace) are checked when made, as every command resolves them, and can be
passed to any command that takes their flags. Errors are :class:`Error` subclasses carrying the
file, line and field the command line names. Commands run on a thread of their own without the
interpreter lock, with a progress bar (tqdm, where it is installed) for the long ones.
"""

from __future__ import annotations

import json as _json
import os as _os
import time as _time
from typing import Any, Dict, List, Mapping, Optional

from . import _capsim

__all__ = [
    "Error",
    "InputError",
    "UnknownNameError",
    "FileError",
    "InfeasibleError",
    "NothingMeasuredError",
    "NoAnswerError",
    "Deployment",
    "Workload",
    "SweepResult",
    "simulate",
    "sweep",
    "capacity",
    "plan",
    "calibrate",
    "validate",
    "explain",
    "run",
    "flags",
    "commands",
    "version",
]

__version__ = "0.1.0"


# ----------------------------------------------------------------------------------------- errors


class Error(Exception):
    """An error capsim refused a call with. ``file``, ``line`` and ``field`` say where, as the
    command line's message does (``file`` is "command line" or "arguments" for a flag, a path for a
    file's content); ``kwarg`` is ``field`` spelled as a keyword argument; ``exit_code`` is the
    command line's (2 refused, 3 no answer)."""

    def __init__(
        self,
        message: str,
        *,
        kind: str = "input",
        file: Optional[str] = None,
        line: Optional[int] = None,
        field: Optional[str] = None,
        exit_code: int = 2,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.file = file
        self.line = line
        self.field = field
        self.exit_code = exit_code

    @property
    def kwarg(self) -> Optional[str]:
        """The field as a keyword argument: ``--input-len`` and ``input-len`` are ``input_len``."""
        if self.field is None:
            return None
        return self.field.lstrip("-").replace("-", "_")


class InputError(Error, ValueError):
    """Malformed or out-of-range input: a flag, a key, a field of a file."""


class UnknownNameError(InputError):
    """A name no catalog knows (a GPU, a model, a profile); ``field`` is the kind of name."""


class FileError(Error, OSError):
    """A file that could not be read or written; ``file`` is its path."""


class InfeasibleError(Error):
    """A well-formed request that cannot be answered (a model that does not fit the GPU)."""


class NothingMeasuredError(Error):
    """The run finished but measured no request; ``result`` holds what it returned."""

    result: Any = None


class NoAnswerError(Error):
    """The question was asked well and has no answer (no load meets the SLO); ``result`` holds what
    the command returned, the search's points included."""

    result: Any = None


_KINDS = {
    "input": InputError,
    "unknown": UnknownNameError,
    "io": FileError,
    "infeasible": InfeasibleError,
    "nothing_measured": NothingMeasuredError,
    "no_answer": NoAnswerError,
}


def _error(error_json: str) -> Error:
    e = _json.loads(error_json)
    cls = _KINDS.get(e["kind"], Error)
    return cls(
        e["message"],
        kind=e["kind"],
        file=e.get("file"),
        line=e.get("line"),
        field=e.get("field"),
        exit_code=e.get("exit_code", 2),
    )


# ------------------------------------------------------------------------------ flag definitions

_FLAGS: Dict[str, List[Dict[str, Any]]] = {}
_GROUPS: Dict[str, List[str]] = _json.loads(_capsim.groups())
# Keywords of the functions here that are not flags; no command has a flag of these names (tested).
# (`workload` is a Workload object or the --workload file.)
_OWN = ("deployment", "progress")


def flags(command: str) -> List[Dict[str, Any]]:
    """The flags of ``capsim COMMAND`` from the command line's definitions: for each, ``key`` (the
    keyword argument), ``flag``, ``kind`` (switch, list, value, positional), ``defaults``,
    ``values`` (the allowed ones, where they are listed), ``required``, ``heading`` and ``help``."""
    if command not in _FLAGS:
        try:
            _FLAGS[command] = _json.loads(_capsim.flags(command))
        except ValueError as e:
            raise UnknownNameError(str(e), kind="unknown", field="command") from None
    return _FLAGS[command]


def commands() -> List[Dict[str, Any]]:
    """The command line's commands, each with its one-line description."""
    return _json.loads(_capsim.commands())


def version() -> str:
    """capsim's version and the commit it was built from, as ``capsim --version`` prints them."""
    return _capsim.version()


def _value(key: str, v: Any) -> Any:
    """A keyword argument's value as the flag's JSON value."""
    if isinstance(v, _os.PathLike):
        return _os.fspath(v)
    if isinstance(v, (list, tuple)):
        return [_value(key, x) for x in v]
    if isinstance(v, (str, bool, int, float)):
        return v
    raise InputError(
        f"{key} takes a string, a number, a boolean, a path or a list of them, got {type(v).__name__}",
        file="arguments",
        field=key,
    )


def _keys(given: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: _value(k, v) for k, v in given.items() if v is not None}


class _Group:
    _group = ""

    def __init__(self, **given: Any) -> None:
        keys = _keys(given)
        allowed = _GROUPS[self._group]
        for k in keys:
            if k.replace("-", "_") not in allowed:
                raise InputError(
                    f"unknown key: `{k}` is not a {self._group} flag (known: {', '.join(allowed)})",
                    file="arguments",
                    field=k,
                )
        self.flags: Dict[str, Any] = keys

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.flags.items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.flags == self.flags  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, _json.dumps(self.flags, sort_keys=True)))


class Deployment(_Group):
    """A deployment: a profile or a model, moved to a GPU, a tensor-parallel degree, an engine and
    its settings, a precision; the deployment flags of every command (``capsim.flags("simulate")``,
    heading Deployment, Engine, Speculative decoding, Disaggregated). Resolved when made, as every
    command resolves it: an unknown GPU or model, a deployment that does not fit, a bad engine
    setting raise here. ``resolved`` describes the result (profile, model, GPU, TP, dtypes, engine
    configuration with the KV capacity, whether it is an extrapolation and from which profile)."""

    _group = "deployment"

    def __init__(
        self,
        model: Optional[str] = None,
        gpu: Optional[str] = None,
        tp: Optional[int] = None,
        engine: Optional[str] = None,
        precision: Optional[str] = None,
        **flags: Any,
    ) -> None:
        super().__init__(model=model, gpu=gpu, tp=tp, engine=engine, precision=precision, **flags)
        resolved, err = _capsim.resolve_deployment(_json.dumps(self.flags))
        if err is not None:
            raise _error(err)
        self.resolved: Dict[str, Any] = _json.loads(resolved)

    @property
    def profile(self) -> Optional[str]:
        return self.resolved.get("profile")

    @property
    def extrapolation(self) -> bool:
        return bool(self.resolved.get("extrapolation", False))


class Workload(_Group):
    """A workload: request lengths (``input_len``, ``output_len``, distributions as the flags take
    them), think times, arrivals process, conversations, or a ``workload`` TOML file or a ``trace``;
    the workload flags of simulate, sweep and capacity. Checked when made as those commands read
    them. The load (``concurrency``, ``rate``, ``burst``, ...) belongs to the command."""

    _group = "workload"

    def __init__(self, **flags: Any) -> None:
        super().__init__(**flags)
        err = _capsim.check_workload(_json.dumps(self.flags))
        if err is not None:
            raise _error(err)


# -------------------------------------------------------------------------------------- running


def _progress_bar(command: str) -> Any:
    import warnings

    try:
        with warnings.catch_warnings():
            # tqdm.auto falls back to a text bar in a notebook without ipywidgets, and says so.
            warnings.simplefilter("ignore")
            from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(desc=f"capsim {command}", leave=False)


def _interactive() -> bool:
    """A bar is drawn where someone watches: a terminal, as the command line's, or a notebook."""
    import sys

    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return tty or "ipykernel" in sys.modules


def _run(command: str, keys: Dict[str, Any], progress: Optional[bool]) -> str:
    if progress is None:
        progress = _interactive()
    job = _capsim.start(command, _json.dumps(keys))
    bar = None
    start = _time.monotonic()
    try:
        # The command runs on its own thread; waiting releases the interpreter lock. The bar appears
        # once a run has lasted half a second, so quick calls draw nothing.
        while not job.wait(0.1):
            if progress is False or _time.monotonic() - start < 0.5:
                continue
            state = job.progress()
            if state is None:
                continue
            if bar is None:
                bar = _progress_bar(command)
                if bar is None:
                    progress = False
                    continue
            pos, total = state
            if bar.total != total:
                bar.total = total
            bar.n = pos
            bar.refresh()
    finally:
        if bar is not None:
            bar.close()
    stdout, err = job.result()
    if err is not None:
        e = _error(err)
        if isinstance(e, (NothingMeasuredError, NoAnswerError)):
            e.result = _json.loads(stdout) if keys.get("json") and stdout.strip() else stdout
        raise e
    return stdout


def _merge(deployment: Optional[Deployment], workload: Any, given: Mapping[str, Any]) -> Dict[str, Any]:
    keys: Dict[str, Any] = {}
    if deployment is not None:
        if not isinstance(deployment, Deployment):
            raise InputError("deployment must be a capsim.Deployment", file="arguments", field="deployment")
        keys.update(deployment.flags)
    if isinstance(workload, Workload):
        keys.update(workload.flags)
    elif workload is not None:
        # A path: the --workload file.
        keys["workload"] = _value("workload", workload)
    for k, v in _keys(given).items():
        if k in keys:
            raise InputError(f"`{k}` is given twice: by a Deployment or Workload and as a keyword", file="arguments", field=k)
        keys[k] = v
    return keys


def run(command: str, deployment: Optional[Deployment] = None, workload: Any = None, *, progress: Optional[bool] = None, **flags: Any) -> str:
    """Run ``capsim COMMAND`` with the flags given and return what it prints, exactly (its table,
    or with ``json=True`` its JSON text, byte for byte the command line's)."""
    return _run(command, _merge(deployment, workload, flags), progress)


def _json_command(command: str, deployment: Optional[Deployment], workload: Any, progress: Optional[bool], given: Mapping[str, Any]) -> Any:
    keys = _merge(deployment, workload, given)
    if "json" in keys:
        raise InputError("the functions return the JSON already; `json` is not a keyword here", file="arguments", field="json")
    keys["json"] = True
    return _json.loads(_run(command, keys, progress))


def simulate(deployment: Optional[Deployment] = None, workload: Any = None, *, progress: Optional[bool] = None, **flags: Any) -> Dict[str, Any]:
    """``capsim simulate --json``: one workload on one deployment."""
    return _json_command("simulate", deployment, workload, progress, flags)


class SweepResult(dict):  # type: ignore[type-arg]
    """``capsim sweep --json``, a plain dict, with :meth:`to_pandas`."""

    def to_pandas(self) -> Any:
        """The points as a pandas DataFrame, one row per load, nested keys flattened with ``.``
        (``summary.ttft_s.p95``). Needs pandas (``pip install pandas``)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("to_pandas needs pandas: pip install pandas") from None
        return pd.json_normalize(self["points"])


def sweep(deployment: Optional[Deployment] = None, workload: Any = None, *, progress: Optional[bool] = None, **flags: Any) -> SweepResult:
    """``capsim sweep --json``: a list of loads in parallel, one point per load."""
    return SweepResult(_json_command("sweep", deployment, workload, progress, flags))


def capacity(deployment: Optional[Deployment] = None, workload: Any = None, *, progress: Optional[bool] = None, **flags: Any) -> Dict[str, Any]:
    """``capsim capacity --json``: the largest load within the SLOs, with its band. A question no
    load answers raises :class:`NoAnswerError` with the result attached."""
    return _json_command("capacity", deployment, workload, progress, flags)


def plan(deployment: Optional[Deployment] = None, workload: Any = None, *, progress: Optional[bool] = None, **flags: Any) -> Dict[str, Any]:
    """``capsim plan --json``: the cheapest fleet meeting the SLOs."""
    return _json_command("plan", deployment, workload, progress, flags)


def calibrate(deployment: Optional[Deployment] = None, *, progress: Optional[bool] = None, **flags: Any) -> Any:
    """``capsim calibrate --json``: with ``runs=[...]`` (files or folders of benchmark results) and
    ``name``, a profile fitted to your runs, written under ``out``."""
    return _json_command("calibrate", deployment, None, progress, flags)


def validate(deployment: Optional[Deployment] = None, *, progress: Optional[bool] = None, **flags: Any) -> Dict[str, Any]:
    """``capsim validate --json``: with ``runs=[...]``, your runs replayed on a deployment, predicted
    against measured with bands."""
    return _json_command("validate", deployment, None, progress, flags)


def explain(deployment: Optional[Deployment] = None, *, progress: Optional[bool] = None, **flags: Any) -> Dict[str, Any]:
    """``capsim explain --json``: one engine step of a given batch, part by part."""
    return _json_command("explain", deployment, None, progress, flags)
