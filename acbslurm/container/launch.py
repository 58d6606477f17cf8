"""Run one container for a job: exact GPUs, limits, labels, streamed output, signals.

The container is a child of the Docker daemon, not of the job, so this process stands
in for it: SIGTERM/SIGINT (scancel, time limit) stop the container with a grace
period, and the container's exit code becomes this process's exit code. A SIGKILL of
this process is covered by the epilog, which removes every container of the job.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import IO, Any

from acbslurm.container.options import Limits, Mount
from acbslurm.errors import DockerError
from acbslurm.hooks.sweep import JOB_LABEL, USER_LABEL

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaunchSpec:
    image: str
    command: list[str]
    gpu_uuids: list[str]
    limits: Limits
    job_id: str
    user: str
    name: str
    grace: float
    mounts: list[Mount] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None


def limits_enforced(info: dict[str, Any]) -> bool:
    """False where the daemon runs without cgroups (rootless on cgroup v1)."""
    return str(info.get("CgroupDriver", "")).lower() not in ("none", "")


def host_config(api: Any, spec: LaunchSpec, enforce: bool) -> Any:
    import docker.types

    kwargs: dict[str, Any] = {
        "init": True,  # docker-init as PID 1 forwards signals to the command
        "binds": [m.bind() for m in spec.mounts],
    }
    if spec.gpu_uuids:
        # Exactly what `docker run --gpus device=UUID,...` sends.
        kwargs["device_requests"] = [
            docker.types.DeviceRequest(
                driver="nvidia", device_ids=list(spec.gpu_uuids), capabilities=[["gpu"]]
            )
        ]
    if enforce:
        if spec.limits.nano_cpus:
            kwargs["nano_cpus"] = spec.limits.nano_cpus
        if spec.limits.mem_bytes:
            kwargs["mem_limit"] = spec.limits.mem_bytes
    return api.create_host_config(**kwargs)


def _write(stream: IO[bytes], data: bytes | None) -> None:
    if data:
        stream.write(data)
        stream.flush()


def _pump(chunks: Iterator[tuple[bytes | None, bytes | None]]) -> None:
    out, err = sys.stdout.buffer, sys.stderr.buffer
    try:
        for o, e in chunks:
            _write(out, o)
            _write(err, e)
    except Exception as exc:  # the stream ends abruptly when the container is killed
        log.debug("output stream ended: %s", exc)


class _Stopper:
    """Turns SIGTERM/SIGINT into a graceful stop, a second one into a kill."""

    def __init__(self, api: Any, cid: str, grace: float) -> None:
        self.api, self.cid, self.grace = api, cid, grace
        self.signalled = 0

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        self.signalled += 1
        target = self._stop if self.signalled == 1 else self._kill
        threading.Thread(target=target, daemon=True).start()

    def _stop(self) -> None:
        try:
            self.api.stop(self.cid, timeout=max(0, round(self.grace)))
        except Exception as exc:
            log.warning("stopping the container failed: %s", exc)

    def _kill(self) -> None:
        try:
            self.api.kill(self.cid)
        except Exception as exc:
            log.debug("kill: %s", exc)


def run_container(api: Any, spec: LaunchSpec, enforce_limits: bool) -> int:
    """Create, attach, start and wait; returns the container's exit code."""
    import docker.errors

    env = dict(spec.env)
    env.setdefault("ACBSLURM_JOB_ID", spec.job_id)
    env.setdefault("ACBSLURM_GPU_UUIDS", ",".join(spec.gpu_uuids))
    labels = {JOB_LABEL: spec.job_id, USER_LABEL: spec.user}
    try:
        cid = api.create_container(
            spec.image,
            command=spec.command or None,
            environment=env,
            labels=labels,
            working_dir=spec.workdir,
            name=spec.name,
            host_config=host_config(api, spec, enforce_limits),
        )["Id"]
    except docker.errors.ImageNotFound:
        raise DockerError(
            f"image {spec.image!r} is not in your Docker daemon: `docker pull` or "
            "`docker load` it first"
        ) from None
    except docker.errors.APIError as exc:
        raise DockerError(f"cannot create the container: {exc.explanation or exc}") from None

    stopper = _Stopper(api, cid, spec.grace)
    # Worker threads inherit a blocked mask, so signals always reach the main thread.
    sigs = {signal.SIGTERM, signal.SIGINT}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    old_handlers = {s: signal.signal(s, stopper.handle) for s in sigs}
    try:
        chunks = api.attach(cid, stdout=True, stderr=True, stream=True, logs=True, demux=True)
        pump = threading.Thread(target=_pump, args=(chunks,), daemon=True)
        pump.start()
        try:
            api.start(cid)
        except docker.errors.APIError as exc:
            raise DockerError(f"cannot start the container: {exc.explanation or exc}") from None
        result: dict[str, Any] = {}
        done = threading.Event()

        def wait() -> None:
            try:
                result.update(api.wait(cid, timeout=None))
            except Exception as exc:
                result["error"] = exc
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        while not done.wait(0.2):  # short waits let signal handlers run promptly
            pass
        pump.join(timeout=2.0)
        if "error" in result:
            raise DockerError(f"waiting for the container failed: {result['error']}")
        return int(result.get("StatusCode", 1))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        for s, h in old_handlers.items():
            signal.signal(s, h)
        _remove(api, cid)


def _remove(api: Any, cid: str) -> None:
    try:
        api.remove_container(cid, force=True)
    except Exception as exc:
        log.debug("remove %s: %s", cid[:12], exc)


def command_of(args: Sequence[str]) -> list[str]:
    """Drop a leading ``--`` separating the image from the command."""
    args = list(args)
    return args[1:] if args[:1] == ["--"] else args
