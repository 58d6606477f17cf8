"""The pool file: which models to serve, on how many devices each, and pool-wide policy.

    listen: 127.0.0.1:8000      # the gateway's address
    devices: auto               # own broker: auto (the job's / node's GPUs) or cpu:N[:SIZE]
    policy: quantum             # fifo | quantum (how long a model keeps GPUs others wait for)
    quantum: 2                  # seconds
    backfill: true              # free devices go to later requests while the first waits
    host_memory: 64G            # budget for evicted weights in host memory
    max_queue: 64               # per model: requests waiting beyond this get 429
    max_queue_per_key: 32       # per model and key (default: half of max_queue with 2+ keys)
    request_timeout: 300        # seconds before a request fails with 503
    hang_timeout: 60            # seconds a turn may make no progress before its model is hung
    api_keys: keys.txt          # NAME KEY lines, mode 0600 (keys.py); none: no key asked
    limits:                     # per key NAME (limits.py): rates, a GPU-second budget, expiry
      alice: {requests_per_minute: 60, gpu_seconds: 3600, period: day, models: [model-a]}
    models:
      - name: model-a
        path: /models/a         # Hugging Face-style directory (config.json, *.safetensors)
        devices: 4              # gang size
        procs: 1                # worker processes (pipeline stages), one per node in a job
        dtype: bfloat16
        max_batch: 8
        max_tokens: 128         # default completion length
        temperature: 0.7
        top_p: 0.95

Errors name ``file:line`` like the job spec's (``acbslurm.spec.yamlpos``).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Callable, Collection
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from acbslurm.errors import ConfigError, SpecError
from acbslurm.serve.engines import ENGINES
from acbslurm.serve.errors import KeyFileError, ListenError, PoolError
from acbslurm.serve.keys import read_keys
from acbslurm.serve.limits import KeyLimits, parse_limits
from acbslurm.serve.routes import ROUTES
from acbslurm.spec.yamlpos import Errors, Located, load_located, nearest_origin
from acbslurm.units import cpu_device_spec, size_bytes
from acbslurm.userfiles import MODEL_CONFIG_LIMIT, POOL_LIMIT, read_user_file, read_user_text
from acbslurm.values import field, frozen, replace

POOL_KEYS = (
    "listen",
    "broker",
    "devices",
    "policy",
    "quantum",
    "backfill",
    "host_memory",
    "max_queue",
    "max_queue_per_key",
    "request_timeout",
    "hang_timeout",
    "vllm_python",
    "api_keys",
    "limits",
    "max_audio",
    "models",
)
MODEL_KEYS = (
    "name",
    "path",
    "devices",
    "procs",
    "dtype",
    "max_batch",
    "max_tokens",
    "max_context",
    "temperature",
    "top_p",
    "headroom",
    "engine",
    "engine_args",
    "sleep_level",
    "routes",
    "tool_call_parser",
)
# vLLM options acbslurm sets itself (engines/vllm/server.py): an engine_args entry naming one
# is refused, with what acbslurm does instead.
OWNED_VLLM_ARGS = {
    "tensor_parallel_size": "the gang's size on CUDA, 1 on CPU stand-ins",
    "tp": "the gang's size on CUDA, 1 on CPU stand-ins",
    "pipeline_parallel_size": "procs: (one pipeline stage per node)",
    "nnodes": "procs: (one node per process)",
    "node_rank": "the worker group's ranks",
    "master_addr": "the worker group's rendezvous",
    "master_port": "the worker group's rendezvous",
    "headless": "the worker group's followers",
    "data_parallel_size": "one vLLM server per model on its gang",
    "uds": "the worker's private socket",
    "port": "the worker's private socket",
    "host": "the worker's private socket",
    "enable_sleep_mode": "always on: leases drive sleep and wake",
    "device": "the leased devices",
    "model": "the model's path:",
    "served_model_name": "the model's name:",
    "kv_cache_memory_bytes": "headroom:",
    "gpu_memory_utilization": "headroom: (the KV cache's bytes)",
    "api_key": "the worker's private socket",
}
DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2}
# safetensors' own limit on a file's JSON header (its reader refuses larger ones).
SAFETENSORS_HEADER_LIMIT = 100 * 1024 * 1024
SAFETENSORS_SIZES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
_LISTEN = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):([0-9]{1,5}|auto)$")
DEFAULT_LISTEN = "127.0.0.1:8000"
# Seconds a model's turn may go without progress (a token, a chunk, its vLLM server's
# counters moving) before the model is declared hung (supervisor.WorkerHandle): longer
# than any one step of a model (a prefill of the longest prompt), short enough that the
# pool's other models are not kept waiting long by a hung one.
HANG_TIMEOUT = 60.0


@frozen
class ModelSpec:
    name: str
    path: str
    devices: int = 1
    procs: int = 1  # worker processes, one pipeline stage each (the gang split evenly)
    dtype: str = "float32"
    max_batch: int = 8
    max_tokens: int = 128
    max_context: int = 0  # 0 = the model's own (config.json)
    temperature: float = 1.0
    top_p: float = 1.0
    headroom: int = 64 << 20  # bytes per device for KV cache and activations
    engine: str = "builtin"  # builtin | vllm
    engine_args: dict[str, Any] = field(default_factory=dict)  # vLLM options passed on
    sleep_level: int = 1  # engine: vllm: 1 (weights to host memory) or 2 (discarded, reloaded)
    vllm_python: str = ""  # the pool's vllm_python: (empty: the checkout's .venv-vllm)
    where: str = ""  # file:line of the entry
    # The routes it serves (names of serve/routes.py's ROUTES); empty: its engine's.
    routes: tuple[str, ...] = ()
    # engine: vllm: vLLM's --tool-call-parser (with --enable-auto-tool-choice)
    tool_call_parser: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelSpec:
        return cls(**{**d, "routes": tuple(d.get("routes") or ())})


@frozen
class PoolSpec:
    models: tuple[ModelSpec, ...]
    listen: str = DEFAULT_LISTEN
    broker: str = ""  # empty: the job's broker inside Slurm, else start one
    devices: str = "auto"
    policy: str = "quantum"
    quantum: float = 2.0
    # Free devices lent to a later model while the first in line waits (broker/core.py).
    backfill: bool = True
    host_memory: int = 0  # 0 = no budget check
    max_queue: int = 64
    # A key's share of each model's queue (0: the default, ``queue_share``).
    max_queue_per_key: int = 0
    request_timeout: float = 300.0
    hang_timeout: float = HANG_TIMEOUT
    vllm_python: str = ""  # the vLLM environment's python (empty: the checkout's .venv-vllm)
    # The key file's absolute path; "none": no key asked; "": the default (keys.py:
    # required in a Slurm job or off loopback, where a pool job's key is made for it).
    api_keys: str = ""
    limits: tuple[KeyLimits, ...] = ()  # per key NAME (limits.py)
    # Bytes of an audio upload (/v1/audio/*): more is a 413. OpenAI's own limit; it
    # crosses to the worker base64-encoded in one message (protocol.MAX_LINE).
    max_audio: int = 25 << 20
    source: str = ""
    origins: dict[tuple[str, ...], str] = field(default_factory=dict, compare=False)

    def queue_share(self, key_names: int) -> int:
        """How many of a model's waiting requests one key may hold (0: no share): the
        pool's ``max_queue_per_key``, else half of ``max_queue`` once two or more names
        share the pool (one caller must not fill it for everyone), never above the queue."""
        if self.max_queue_per_key:
            return min(self.max_queue_per_key, self.max_queue)
        return max(1, self.max_queue // 2) if key_names >= 2 else 0

    def model(self, name: str) -> ModelSpec | None:
        return next((m for m in self.models if m.name == name), None)

    def where(self, *path: str) -> str:
        return nearest_origin(self.origins, path) or self.source


def _int(value: Any, at: tuple[str, ...], e: Errors, low: int = 1) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        e.add(at, f"must be a whole number, got {value!r}")
        return None
    if value < low:
        e.add(at, f"must be at least {low}, got {value}")
        return None
    return value


def _float(value: Any, at: tuple[str, ...], e: Errors, low: float, high: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        e.add(at, f"must be a number, got {value!r}")
        return None
    if not (low <= float(value) <= high):
        e.add(at, f"must be between {low:g} and {high:g}, got {value}")
        return None
    return float(value)


def _size(value: Any, at: tuple[str, ...], e: Errors) -> int | None:
    try:
        return size_bytes(value)
    except (ValueError, TypeError) as exc:
        e.add(at, str(exc))
        return None


def _bool(value: Any, at: tuple[str, ...], e: Errors) -> bool | None:
    if not isinstance(value, bool):
        e.add(at, f"must be true or false, got {value!r}")
        return None
    return value


def _str(value: Any, at: tuple[str, ...], e: Errors) -> str | None:
    if not isinstance(value, str) or not value.strip():
        e.add(at, f"must be a non-empty string, got {value!r}")
        return None
    return value.strip()


def check_listen(text: str) -> str:
    """``HOST:PORT``, with ``HOST:auto`` spelled ``HOST:0`` (a free port); ListenError
    (a ConfigError and a ValueError) otherwise."""
    m = _LISTEN.match(text)
    if m and m.group(2) == "auto":
        return f"{m.group(1)}:0"
    if not m or not (0 <= int(m.group(2)) <= 65535):
        raise ListenError(
            f"{text!r} is not HOST:PORT (for example 127.0.0.1:8000; port 0 or auto: a free one)"
        )
    return text


def _listen(value: Any, at: tuple[str, ...], e: Errors) -> str | None:
    try:
        return check_listen(str(value))
    except ValueError as exc:
        e.add(at, str(exc))
        return None


def _devices(value: Any, at: tuple[str, ...], e: Errors) -> str | None:
    dev = _str(value, at, e)
    if dev is None or dev == "auto":
        return dev
    try:
        cpu_device_spec(dev)
    except ValueError as exc:
        e.add(at, f"must be auto or cpu:N[:SIZE], got {dev!r} ({exc})")
        return None
    return dev


def _choice(value: Any, at: tuple[str, ...], e: Errors, allowed: Collection[str]) -> str | None:
    if value not in allowed:
        e.add(at, f"{value!r}: one of {', '.join(allowed)}")
        return None
    return str(value)


# key -> check(value, at, errors): the value to keep (None after an error); in the order
# the keys are checked, which is the order their errors are listed in.
_Check = Callable[[Any, tuple[str, ...], Errors], Any]
POOL_CHECKS: tuple[tuple[str, _Check], ...] = (
    ("listen", _listen),
    ("broker", _str),
    ("devices", _devices),
    ("policy", partial(_choice, allowed=("fifo", "quantum"))),
    ("quantum", partial(_float, low=0.01, high=3600.0)),
    ("backfill", _bool),
    ("request_timeout", partial(_float, low=0.1, high=86400.0)),
    ("hang_timeout", partial(_float, low=0.5, high=86400.0)),
    ("host_memory", _size),
    ("max_queue", _int),
    ("max_queue_per_key", _int),
    ("vllm_python", _str),
    ("max_audio", lambda v, at, e: _max_audio(v, at, e)),
)
MODEL_CHECKS: tuple[tuple[str, _Check], ...] = (
    ("devices", _int),
    ("procs", _int),
    ("max_batch", _int),
    ("max_tokens", _int),
    ("max_context", partial(_int, low=2)),
    ("dtype", partial(_choice, allowed=DTYPES)),
    ("temperature", partial(_float, low=0.0, high=2.0)),
    ("top_p", partial(_float, low=0.0, high=1.0)),
    ("headroom", _size),
    ("engine", partial(_choice, allowed=ENGINES)),  # the engine table's names
    ("engine_args", lambda v, at, e: _engine_args(v, at, e)),
    ("sleep_level", lambda v, at, e: _sleep_level(v, at, e)),
    ("routes", lambda v, at, e: _routes(v, at, e)),
    ("tool_call_parser", lambda v, at, e: _parser(v, at, e)),
)
# The largest max_audio: base64 of it must fit in one worker message (protocol.MAX_LINE).
MAX_AUDIO_LIMIT = 40 << 20


def _max_audio(value: Any, at: tuple[str, ...], e: Errors) -> int | None:
    size = _size(value, at, e)
    if size is not None and not 1 <= size <= MAX_AUDIO_LIMIT:
        e.add(at, f"must be between 1 byte and {MAX_AUDIO_LIMIT >> 20}M, got {value!r}")
        return None
    return size


def _routes(value: Any, at: tuple[str, ...], e: Errors) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not value:
        e.add(at, f"must be a non-empty list of routes ({', '.join(ROUTES)}), got {value!r}")
        return None
    bad = [v for v in value if v not in ROUTES]
    if bad:
        e.add(at, f"{bad[0]!r}: not a route; one of {', '.join(ROUTES)}")
        return None
    return tuple(dict.fromkeys(value))


def _parser(value: Any, at: tuple[str, ...], e: Errors) -> str | None:
    text = _str(value, at, e)
    if text is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", text):
        e.add(at, f"{text!r}: a vLLM tool-call parser's name (hermes, llama3_json, ...)")
        return None
    return text


def _sleep_level(value: Any, at: tuple[str, ...], e: Errors) -> int | None:
    if isinstance(value, bool) or value not in (1, 2):
        e.add(at, f"{value!r}: 1 (weights to host memory) or 2 (weights discarded, reloaded)")
        return None
    return int(value)


def _engine_args(value: Any, at: tuple[str, ...], e: Errors) -> dict[str, Any] | None:
    """vLLM's own options (``--max-num-seqs 4`` is ``max_num_seqs: 4``), scalars only;
    the ones acbslurm owns are refused."""
    if not isinstance(value, dict):
        e.add(at, f"must be a mapping of vLLM options, got {value!r}")
        return None
    out: dict[str, Any] = {}
    for key, v in value.items():
        k = str(key).replace("-", "_")
        if not re.match(r"^[a-z][a-z0-9_]{0,63}$", k):
            e.add((*at, str(key)), "not a vLLM option name")
        elif k in OWNED_VLLM_ARGS:
            e.add((*at, str(key)), f"set by acbslurm ({OWNED_VLLM_ARGS[k]}); remove it")
        elif not isinstance(v, (str, int, float, bool)) or (isinstance(v, str) and "\n" in v):
            e.add((*at, str(key)), f"must be a string, number or boolean, got {v!r}")
        else:
            out[k] = v
    return out


def _checked(
    raw: dict[Any, Any], checks: tuple[tuple[str, _Check], ...], at: tuple[str, ...], e: Errors
) -> dict[str, Any]:
    return {key: check(raw[key], (*at, key), e) for key, check in checks if key in raw}


def _model_name(value: Any, at: tuple[str, ...], e: Errors) -> str | None:
    name = _str(value, at, e)
    if name is not None and not _NAME.match(name):
        e.add(at, f"{name!r}: letters, digits and . _ : / - only (max 128)")
    return name


def _model_path(
    value: Any, at: tuple[str, ...], e: Errors, base: Path, check_paths: bool
) -> str | None:
    """The model's folder, relative to the pool file's; with ``check_paths``, checked."""
    text = _str(value, at, e)
    if text is None:
        return None
    path = Path(os.path.expanduser(text))
    if not path.is_absolute():
        path = base / path
    if not check_paths:
        pass
    elif not (path / "config.json").is_file():
        e.add(at, f"{path}: no config.json there (a Hugging Face model folder)")
    elif not list(path.glob("*.safetensors")):
        e.add(at, f"{path}: no *.safetensors weights there")
    return str(path)


def _check_procs(kw: dict[str, Any], at: tuple[str, ...], e: Errors, check_paths: bool) -> None:
    """Each process of a model gets the same number of the gang's devices, and at
    least one of its blocks (pipeline stages)."""
    procs = kw.get("procs")
    devices = kw.get("devices", 1)
    if procs is None or devices is None:
        return
    if devices % procs:
        e.add(
            (*at, "procs"),
            f"{procs} processes cannot split the model's {devices} device(s) evenly "
            "(devices must be a multiple of procs)",
        )
    blocks = model_blocks(kw["path"]) if check_paths and kw.get("path") and procs > 1 else 0
    if blocks and procs > blocks:
        e.add((*at, "procs"), f"the model has {blocks} blocks: at most {blocks} processes")


def model_blocks(model_dir: str) -> int:
    """The model's number of blocks (layers) from its config.json; 0 if unknown."""
    try:
        raw = read_user_file(
            Path(model_dir) / "config.json", "model config", limit=MODEL_CONFIG_LIMIT
        )
        cfg = json.loads(raw)
    except (OSError, ValueError, ConfigError):
        return 0
    n = cfg.get("num_hidden_layers") or cfg.get("n_layer") if isinstance(cfg, dict) else 0
    return n if isinstance(n, int) else 0


def _model(raw: Any, i: int, base: Path, e: Errors, check_paths: bool) -> ModelSpec | None:
    at = ("models", str(i))
    if not isinstance(raw, dict):
        e.add(at, f"must be a mapping with name, path and devices, got {raw!r}")
        return None
    e.check_keys(raw, MODEL_KEYS, at)
    before = len(e.items)
    kw: dict[str, Any] = {"where": e.doc.where(at)}
    for key in ("name", "path"):
        if key not in raw:
            e.add(at, f"{key}: required")
    if "name" in raw:
        kw["name"] = _model_name(raw["name"], (*at, "name"), e)
    if "path" in raw:
        kw["path"] = _model_path(raw["path"], (*at, "path"), e, base, check_paths)
    kw.update(_checked(raw, MODEL_CHECKS, at, e))
    _check_procs(kw, at, e, check_paths)
    _check_engine(kw, at, e)
    if len(e.items) > before:
        return None
    return ModelSpec(**kw)


def _check_engine(kw: dict[str, Any], at: tuple[str, ...], e: Errors) -> None:
    """What goes with an engine: vLLM spreads a model itself, engine_args are vLLM's."""
    if kw.get("engine_args") and kw.get("engine") != "vllm":
        e.add((*at, "engine_args"), "only with engine: vllm")
    if "sleep_level" in kw and kw.get("engine") != "vllm":
        e.add((*at, "sleep_level"), "only with engine: vllm")
    if "tool_call_parser" in kw and kw.get("engine") != "vllm":
        e.add((*at, "tool_call_parser"), "only with engine: vllm")
    args = kw.get("engine_args") or {}
    if kw.get("tool_call_parser") and ({"tool_call_parser", "enable_auto_tool_choice"} & set(args)):
        e.add((*at, "tool_call_parser"), "given twice: here and in engine_args; keep one")


def _models(raw: dict[Any, Any], base: Path, e: Errors, check_paths: bool) -> list[ModelSpec]:
    """The valid entries of ``models:``; each model name once."""
    if "models" not in raw:
        e.add((), "models: required (a list of models to serve)")
        return []
    if not isinstance(raw["models"], list) or not raw["models"]:
        e.add(("models",), "must be a non-empty list of models")
        return []
    models: list[ModelSpec] = []
    seen: dict[str, str] = {}
    for i, m in enumerate(raw["models"]):
        spec = _model(m, i, base, e, check_paths)
        if spec is None:
            continue
        if spec.name in seen:
            e.add(("models", str(i), "name"), f"{spec.name!r} already defined at {seen[spec.name]}")
        seen[spec.name] = spec.where
        models.append(spec)
    return models


def _api_keys(value: Any, e: Errors, base: Path, check_paths: bool) -> str | None:
    """``none``, or the key file's absolute path (relative to the pool file's folder);
    with ``check_paths`` the file is read and checked (keys.read_keys)."""
    text = _str(value, ("api_keys",), e)
    if text is None or text == "none":
        return text
    path = Path(os.path.expanduser(text))
    path = path if path.is_absolute() else base / path
    if check_paths:
        try:
            read_keys(str(path))
        except KeyFileError as exc:
            for problem in exc.problems:
                e.add(("api_keys",), problem)
    return str(path)


def _limits(
    raw: Any, api_keys: str | None, models: Any, e: Errors, check_paths: bool
) -> tuple[KeyLimits, ...]:
    """``limits:`` per key NAME (limits.py); the NAMEs checked against the key file's
    when it is read, the models against the names in ``models:`` (as given: its errors
    are said by ``_models``). Without keys every request is billed to ``-``: nothing
    to limit."""
    entries = models if isinstance(models, list) else []
    served = [m["name"] for m in entries if isinstance(m, dict) and isinstance(m.get("name"), str)]
    if api_keys == "none":
        e.add(("limits",), "api_keys: none asks no key, so no request has a NAME to limit")
        return ()
    names = None
    if check_paths and api_keys:
        try:
            names = read_keys(api_keys).names
        except KeyFileError:
            return ()  # said by api_keys: already
    return parse_limits(raw, e, tuple(served), names)


def validate(doc: Located, base: Path, check_paths: bool = True) -> PoolSpec:
    e = Errors(doc)
    raw = doc.value
    if not isinstance(raw, dict):
        raise PoolError(f"{doc.source}: a pool file is a mapping with a models: list")
    e.check_keys(raw, POOL_KEYS, ())
    kw = _checked(raw, POOL_CHECKS, (), e)
    if "api_keys" in raw:
        kw["api_keys"] = _api_keys(raw["api_keys"], e, base, check_paths)
    models = _models(raw, base, e, check_paths)
    if "limits" in raw:
        kw["limits"] = _limits(raw["limits"], kw.get("api_keys"), raw.get("models"), e, check_paths)
    if e.items:
        raise PoolError("invalid pool file:\n  " + "\n  ".join(e.items))
    if kw.get("vllm_python"):
        path = Path(os.path.expanduser(kw["vllm_python"]))
        kw["vllm_python"] = str(path if path.is_absolute() else base / path)
        models = [replace(m, vllm_python=kw["vllm_python"]) for m in models]
    return PoolSpec(models=tuple(models), source=doc.source, origins=dict(doc.origins), **kw)


def load_pool_text(
    text: str, source: str, base: Path | None = None, check_paths: bool = True
) -> PoolSpec:
    try:
        doc = load_located(text, source)
    except SpecError as exc:  # a key twice, a list as key, a bomb of aliases
        raise PoolError(str(exc)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise PoolError(f"{source}{line}: not valid YAML: {problem}") from None
    return validate(doc, base or Path.cwd(), check_paths)


def load_pool(path: str | os.PathLike[str], check_paths: bool = True) -> PoolSpec:
    p = Path(path)
    try:
        text = read_user_text(p, "pool file", limit=POOL_LIMIT, error=PoolError)
    except FileNotFoundError:
        raise PoolError(f"pool file {str(p)!r} does not exist") from None
    return load_pool_text(text, str(p), p.resolve().parent, check_paths)


def weights_bytes(model_dir: str, dtype: str) -> int:
    """Bytes the model's weights take in ``dtype`` (from the safetensors headers)."""
    size = DTYPES[dtype]
    total = 0
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > SAFETENSORS_HEADER_LIMIT:  # the format's own bound; a bad file's 2**63
                raise PoolError(f"{f}: not a safetensors file (a header of {n} bytes)")
            header = json.loads(fh.read(n))
        for key, info in header.items():
            if key == "__metadata__":
                continue
            numel = 1
            for d in info["shape"]:
                numel *= int(d)
            stored = SAFETENSORS_SIZES.get(info["dtype"], 4)
            total += numel * (size if info["dtype"].startswith(("F", "BF")) else stored)
    return total


def per_device_need(model: ModelSpec) -> int:
    """Device bytes one member of the model's gang needs: its weight share plus headroom."""
    share = -(-weights_bytes(model.path, model.dtype) // model.devices)
    return share + model.headroom
