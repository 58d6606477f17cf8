"""CDI (Container Device Interface): whether a daemon has it, and what its specs name.

Docker 26.1 has CDI behind ``features: {"cdi": true}``, 28.2 on enables it; GET /info
then lists the daemon's spec directories in ``CDISpecDirs`` (empty or absent: no CDI).
NVIDIA's Container Toolkit (``nvidia-ctk cdi generate``) writes a spec of kind
``nvidia.com/gpu`` naming each GPU by index, by UUID and ``all``; a site may keep only
one of the forms. A rootless daemon reads the directories its own daemon.json names
(``cdi-spec-dirs``): its defaults, /etc/cdi and /var/run/cdi, are the host's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence

from acbslurm.errors import ConfigError
from acbslurm.userfiles import MIB, read_user_text
from acbslurm.values import field, mutable

TYPE_CHECKING = False  # a lean-path module: CONTRIBUTING.md, "Lean imports"
if TYPE_CHECKING:
    from typing import Any

    from acbslurm.gpuvalue import Gpu

GPU_KIND = "nvidia.com/gpu"
SPEC_SUFFIXES = (".json", ".yaml", ".yml")
# The toolkit's spec of a node with 8 GPUs is ~30 KiB.
SPEC_LIMIT = 4 * MIB


def spec_dirs(info: Mapping[str, Any]) -> list[str]:
    """The daemon's CDI spec directories; empty when it has no CDI (20.10, 26.1 without
    the feature)."""
    dirs = info.get("CDISpecDirs") or []
    return [str(d) for d in dirs] if isinstance(dirs, list) else []


@mutable
class Spec:
    path: str
    kind: str
    names: list[str] = field(default_factory=list)
    # device name -> the host paths of its device nodes
    nodes: dict[str, list[str]] = field(default_factory=dict)


def parse_spec(text: str, path: str) -> Spec:
    """One spec file (JSON, or YAML when PyYAML is there: the toolkit writes YAML)."""
    try:
        data = json.loads(text)
    except ValueError:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"CDI spec {path!r} is not YAML or JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list):
        raise ConfigError(f"CDI spec {path!r} has no list of devices")
    spec = Spec(path=path, kind=str(data.get("kind", "")))
    for dev in data["devices"]:
        if isinstance(dev, dict) and "name" in dev:
            name = str(dev["name"])
            spec.names.append(name)
            spec.nodes[name] = _device_nodes(dev)
    return spec


def _device_nodes(dev: dict[str, Any]) -> list[str]:
    """The host paths of a spec device's nodes (``containerEdits.deviceNodes``)."""
    edits = dev.get("containerEdits") or {}
    nodes = edits.get("deviceNodes") or [] if isinstance(edits, dict) else []
    return [str(n.get("hostPath") or n.get("path", "")) for n in nodes if isinstance(n, dict)]


def spec_files(dirs: Iterable[str]) -> list[str]:
    out = []
    for d in dirs:
        try:
            entries = sorted(os.listdir(d))
        except OSError:
            continue
        out += [os.path.join(d, e) for e in entries if e.endswith(SPEC_SUFFIXES)]
    return out


def load_specs(dirs: Iterable[str], kind: str = GPU_KIND) -> list[Spec]:
    """The specs of ``kind`` in ``dirs``; a file that cannot be read or parsed is
    ConfigError naming it."""
    specs = []
    for path in spec_files(dirs):
        spec = parse_spec(read_user_text(path, "CDI spec", limit=SPEC_LIMIT), path)
        if spec.kind == kind:
            specs.append(spec)
    return specs


def gpu_names(dirs: Iterable[str]) -> set[str] | None:
    """Every ``nvidia.com/gpu`` device name the specs in ``dirs`` define (None: they
    could not be read, so the caller assumes the toolkit's UUID names)."""
    try:
        return {n for s in load_specs(dirs) for n in s.names}
    except (ConfigError, OSError):
        return None


def device_ids(gpus: Sequence[Gpu], names: set[str] | None) -> list[str]:
    """``nvidia.com/gpu=<name>`` for each GPU: its UUID, or its index where the spec
    names GPUs by index only."""
    out = []
    for g in gpus:
        by_index = names is not None and g.uuid not in names and g.index is not None
        name = str(g.index) if by_index and str(g.index) in (names or ()) else g.uuid
        out.append(f"{GPU_KIND}={name}")
    return out
