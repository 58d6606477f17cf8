"""Layered site configuration: flag > environment > file > packaged default.

The file is YAML (``ACBSLURM_CONFIG`` or /etc/acbslurm/acbslurm.yaml); a file in JSON,
which is YAML too, is read without importing PyYAML. Every key can
also be set by an environment variable ``ACBSLURM_<KEY>`` (upper case). Values that
are paths may contain ``{uid}`` and ``{user}``, filled per job user where documented.

Any value may contain ``{node}``: Slurm's name for the node the reader runs on
(SLURMD_NODENAME, which slurmd gives its hooks and every job step; else the short host
name), filled here. A real cluster runs one slurmd per host and needs none; the sandbox
runs several slurmd on one machine (``sandbox up --nodes``), whose hooks and jobs must
each keep their own job records, job directories and GPU inventory.
"""

from __future__ import annotations

import json
import os

from acbslurm.errors import ConfigError, short_repr
from acbslurm.units import finite_float, is_ascii_int
from acbslurm.userfiles import SETTINGS_LIMIT, read_user_text
from acbslurm.values import field_names, frozen, replace

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

DEFAULT_CONFIG_FILE = "/etc/acbslurm/acbslurm.yaml"


@frozen
class Settings:
    # GPUs: a static inventory file (sandbox, sites without NVML); empty -> NVML.
    gpu_inventory: str = ""
    gres_conf: str = "/etc/slurm/gres.conf"
    slurm_conf: str = "/etc/slurm/slurm.conf"
    # The directory of the site's Slurm clients (scontrol, sbatch...). Empty: the hooks
    # take the bin directory beside the slurmd that runs them, then the one beside
    # slurm.conf's PluginDir, then PATH (slurm/binaries.py).
    slurm_bin_dir: str = ""
    # How `acbslurm submit` and `cancel` talk to Slurm: cli (sbatch, scancel), pyslurm
    # (libslurm in-process, built for the running release), or auto (pyslurm when usable).
    slurm_backend: str = "auto"
    # Root-owned per-job records written by the prolog.
    record_dir: str = "/run/acbslurm/jobs"
    # The job user's rootless Docker daemon.
    docker_host: str = "unix:///run/user/{uid}/docker.sock"
    # A system (rootful) daemon the epilog also sweeps; empty -> none.
    system_docker_host: str = ""
    # Seconds every Docker call of a hook may take.
    hook_docker_timeout: float = 5.0
    # Seconds a container gets between SIGTERM and SIGKILL when its job is cancelled.
    stop_grace: float = 5.0
    # The node's ports a job's container may publish (`acbslurm run -p`): a range
    # LOW-HIGH; empty: none.
    publish_ports: str = "1024-65535"
    # Device files a job's container may get with `acbslurm run --device` (InfiniBand's
    # /dev/infiniband for NCCL over RDMA): comma-separated paths, a directory allowing
    # the devices in it; never a GPU's (those come only as the job's GPUs). Empty: none.
    container_devices: str = ""
    # Accounting database (MySQL option file) and cluster name for `acbslurm report`.
    db_config: str = ""
    cluster: str = ""
    # Per-job runtime directories (<this>/<jobid>, the job user's, mode 0700), made by
    # the prolog: a job's own broker listens there.
    job_runtime_dir: str = "/run/acbslurm/job"
    # The report service (`acbslurm report serve`): its socket, and slurmdbd's PrivateData
    # ("auto": ask sacctmgr; or e.g. "jobs", "none").
    report_socket: str = "/run/acbslurm/report.sock"
    report_private_data: str = "auto"
    # GPU broker address (unix:PATH or HOST:PORT).
    broker_address: str = "unix:/run/acbslurm/broker.sock"
    # The acbslurm command rendered job scripts run on the nodes (`srun <this> run ...`):
    # an absolute path there (/opt/acbslurm/bin/acbslurm) or words (`/opt/venv/bin/python
    # -m acbslurm`); empty: the executable running `acbslurm submit`/`render` now.
    node_acbslurm: str = ""
    # "join": the prolog starts the job's cgroup helper, and `acbslurm run` puts its
    # container into the job step's cgroups through acbslurm's OCI runtime (the user's
    # daemon must know it: docs/admin-guide.md, "Containers in the job's cgroups");
    # "off": containers stand beside the job, outside Slurm's limits and accounting.
    # join by default: where the runtime or Slurm's cgroups are missing, `acbslurm run`
    # refuses to start a container, saying what is missing, instead of running it with
    # no limit; a site without Slurm's cgroup plugins sets off.
    container_cgroups: str = "join"
    # The GPU fence (docs/admin-guide.md, "GPU fence"): the prolog and epilog give each
    # job's user rw on exactly the job's GPU device files (a POSIX ACL entry) and take
    # every other user's away. Needs the device files without world access. Off by
    # default: on a node whose files are still the driver's 0666 it would fence nothing,
    # yet its epilog would kill the user's processes still holding the job's GPUs.
    gpu_fence: bool = False
    # The GPU-to-job files of the site's GPU monitoring (hooks/jobmap.py; empty: none):
    # dcgm-exporter's --hpc-job-mapping-dir (job ids per NVML index, and per UUID for
    # Fleet Intelligence), and Princeton jobstats' /run/gpustat (`JOBID UID` per GPU).
    dcgm_job_mapping_dir: str = ""
    gpustat_dir: str = ""


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0", ""}


def _coerce(name: str, raw: Any, default: Any, source: str) -> Any:
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        raise ConfigError(f"{source}: {name} must be true or false, got {short_repr(raw, 80)}")
    if isinstance(default, float):
        try:
            # only text and numbers reach finite_float, whose message quotes the value whole
            if isinstance(raw, str | int | float):
                return finite_float(raw)
        except ValueError:
            pass
        raise ConfigError(f"{source}: {name} must be a finite number, got {short_repr(raw, 80)}")
    if raw is None:
        return ""
    if not isinstance(raw, str | int | float):
        raise ConfigError(f"{source}: {name} must be a string, got {short_repr(raw, 80)}")
    return str(raw)


def _file_values(p: str, settings: Settings) -> dict[str, Any]:
    """The settings a file sets, checked and coerced."""
    text = read_user_text(p, "settings file", limit=SETTINGS_LIMIT)
    if text.lstrip().startswith("{"):
        # JSON is YAML too; read without PyYAML, whose import every Slurm hook and
        # every `acbslurm run` would pay
        # (docs/benchmarks.md, "Where the client's time went").
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{p}: not valid JSON: {exc}") from None
        except RecursionError:
            raise ConfigError(f"{p}: not valid JSON: nested too deep") from None
    else:
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {exc}") from None
        except RecursionError:
            raise ConfigError(f"{p}: not valid YAML: nested too deep") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: must be a mapping of settings")
    known = set(field_names(Settings))
    values: dict[str, Any] = {}
    for key, raw in data.items():
        if key not in known:
            raise ConfigError(f"{p}: unknown setting {short_repr(key, 80)}")
        values[key] = _coerce(key, raw, getattr(settings, key), p)
    return values


NODE_FIELD = "{node}"


def this_node(env: Mapping[str, str] | None = None) -> str:
    """Slurm's name for this node (SLURMD_NODENAME), else the short host name."""
    e = os.environ if env is None else env
    return e.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]


def load_settings(path: str | None = None, **overrides: Any) -> Settings:
    """Settings from packaged defaults, the file, the environment, then ``overrides``."""
    settings = Settings()
    known = field_names(Settings)
    values = _file_layer(path, settings)
    for key in known:  # the ACBSLURM_<SETTING> variables set
        name = f"ACBSLURM_{key.upper()}"
        if (env := os.environ.get(name)) is not None:
            values[key] = _coerce(key, env, getattr(settings, key), name)
    for key, raw in overrides.items():  # None: not given
        if raw is None:
            continue
        if key not in known:
            raise ConfigError(f"unknown setting {key!r}")
        values[key] = _coerce(key, raw, getattr(settings, key), f"--{key.replace('_', '-')}")
    node = ""
    for key, value in values.items():
        if isinstance(value, str) and NODE_FIELD in value:
            node = node or this_node()
            values[key] = value.replace(NODE_FIELD, node)
    return replace(settings, **values)


def _file_layer(path: str | None, settings: Settings) -> dict[str, Any]:
    """The settings file's values: ``path``, else $ACBSLURM_CONFIG, else the default file."""
    file_path = path or os.environ.get("ACBSLURM_CONFIG") or DEFAULT_CONFIG_FILE
    explicit = bool(path or os.environ.get("ACBSLURM_CONFIG"))
    values: dict[str, Any] = {}
    # An explicit file is read whatever it is (a FIFO or /dev/zero is refused by name);
    # the default one only when something is there.
    if explicit or os.path.exists(file_path):
        try:
            values.update(_file_values(file_path, settings))
        except FileNotFoundError:
            if explicit:
                raise ConfigError(f"config file {file_path!r} does not exist") from None
    return values


# -- single environment variables (tuning knobs outside Settings) --------------------


def env_float(
    name: str, default: float, *, minimum: float = 0.0, env: Mapping[str, str] | None = None
) -> float:
    """A finite number >= ``minimum`` from environment variable ``name``; ``default``
    when it is unset or empty. ConfigError naming the variable and its value otherwise:
    ``float()`` alone takes ``nan`` (a wait that never ends) and ``inf`` (OverflowError)."""
    raw = (os.environ if env is None else env).get(name, "")
    if not raw:
        return default
    try:
        value = finite_float(raw)
    except ValueError:
        raise ConfigError(
            f"environment variable {name} must be a finite number, got {raw!r}"
        ) from None
    if value < minimum:
        raise ConfigError(f"environment variable {name} must be at least {minimum:g}, got {raw!r}")
    return value


def env_int(
    name: str, default: int, *, minimum: int = 0, env: Mapping[str, str] | None = None
) -> int:
    """A whole number (ASCII digits) >= ``minimum`` from environment variable ``name``;
    ``default`` when it is unset or empty; ConfigError naming the variable otherwise."""
    raw = (os.environ if env is None else env).get(name, "")
    if not raw:
        return default
    if not is_ascii_int(raw) or int(raw) < minimum:
        raise ConfigError(
            f"environment variable {name} must be a whole number >= {minimum}, got {raw!r}"
        )
    return int(raw)
