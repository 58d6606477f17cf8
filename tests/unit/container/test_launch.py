"""`run_container` end to end against the fake Docker daemon (tests/unit/fake_docker.py)."""

import contextlib
import gc
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest
from fake_docker import Answer, FakeDocker, Hang, Program, Request

from acbslurm.container.launch import LaunchSpec, run_container
from acbslurm.container.options import Limits
from acbslurm.container.signals import HANDLED
from acbslurm.dockerapi.engine import DaemonGone, EngineApi
from acbslurm.errors import DockerError, SetupError
from acbslurm.gpuvalue import Gpu

# The deadline below times tests by SIGALRM: run_container must not take it over.
NO_ALRM = HANDLED - {signal.SIGALRM}


def run(api: EngineApi, launch: LaunchSpec) -> int:
    return run_container(api, launch, handled=NO_ALRM)


def spec(**kw: object) -> LaunchSpec:
    base: dict[str, object] = {
        "image": "img:1",
        "command": ["train"],
        "gpus": (Gpu("GPU-a"),),
        "limits": Limits(),
        "job_id": "12",
        "user": "user1",
        "name": "acbslurm-12-x",
        "grace": 5.0,
    }
    base.update(kw)
    return LaunchSpec(**base)  # type: ignore[arg-type]


class Hung(BaseException):
    """Not an OSError (a TimeoutError would be taken for the daemon's)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail instead of hanging: SIGALRM raises in the main thread after ``seconds``."""

    def expire(_signum: int, _frame: FrameType | None) -> None:
        raise Hung(f"still running after {seconds} s: it hangs")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def sigterm_seen() -> Iterator[list[int]]:
    """Catches a SIGTERM that run_container did not take (it would kill pytest)."""
    seen: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda signum, _frame: seen.append(signum))
    yield seen
    signal.signal(signal.SIGTERM, old)


def sigterm_self(_req: Request) -> None:
    """A script hook: scancel's SIGTERM reaches `acbslurm run` now."""
    os.kill(os.getpid(), signal.SIGTERM)


def test_a_run_streams_output_passes_the_exit_code_and_removes_the_container(
    fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_docker.program = Program([(1, b"out 1\n"), (2, b"err 1\n"), (1, b"out 2\n")], 3)
    gc.disable()  # as the entry does for the start (cli/entry.py)
    try:
        with deadline(20):
            code = run(EngineApi(fake_docker.host, timeout=5), spec())
        assert gc.isenabled()  # on again once the container runs: a run may last days
    finally:
        gc.enable()
    assert code == 3
    out, err = capsys.readouterr()
    assert out == "out 1\nout 2\n"
    assert err == "err 1\n"
    (create,) = fake_docker.calls("POST", "/containers/create")
    assert create.query["name"] == "acbslurm-12-x"
    assert create.body["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] == ["GPU-a"]
    assert create.body["Labels"]["acbslurm.job_id"] == "12"
    assert [r.route.rsplit("/", 1)[-1] for r in fake_docker.calls("POST")] == [
        "create",
        "attach",
        "start",
        "wait",
    ]
    assert len(fake_docker.calls("DELETE")) == 1
    assert fake_docker.containers == {}


def test_sigterm_while_running_stops_the_container_gracefully(
    fake_docker: FakeDocker, sigterm_seen: list[int]
) -> None:
    fake_docker.program = Program([], exit_code=None)  # runs until stopped

    def later(_req: Request) -> None:
        threading.Timer(0.3, sigterm_self, args=(_req,)).start()

    fake_docker.on("POST", "/containers/*/start", later)
    with deadline(20):
        code = run(EngineApi(fake_docker.host, timeout=5), spec(grace=7.0))
    assert code == 143  # the fake's container exits on the stop's SIGTERM
    (stop,) = fake_docker.calls("POST", "/containers/*/stop")
    assert stop.query["t"] == "7"
    assert fake_docker.containers == {}
    assert sigterm_seen == []  # run_container's handler took it


def test_create_errors_name_the_fix(fake_docker: FakeDocker) -> None:
    d = EngineApi(fake_docker.host, timeout=5)
    fake_docker.images = {"img:1"}
    with pytest.raises(DockerError, match="image 'other:2' is not in your Docker daemon"):
        run(d, spec(image="other:2"))
    d.create("acbslurm-12-x", {"Image": "img:1"})
    with pytest.raises(DockerError, match="a container named 'acbslurm-12-x' already exists"):
        run(d, spec())
    fake_docker.on("POST", "/containers/create", Answer(500, {"message": "disk full"}))
    with pytest.raises(DockerError, match=r"cannot create the container: .*disk full"):
        run(d, spec(name="another"))
    # a 404 that names a network, not the image, is not told as a missing image
    fake_docker.on("POST", "/containers/create", Answer(404, {"message": "network n1 not found"}))
    with pytest.raises(DockerError, match=r"cannot create the container: .*network n1 not found"):
        run(d, spec(name="third"))


def test_no_daemon_says_how_to_start_one(tmp_path: Path) -> None:
    with pytest.raises(SetupError, match=r"no Docker daemon is running at .*dockerd-rootless"):
        run(EngineApi(f"unix://{tmp_path}/none.sock", timeout=5), spec())


@pytest.fixture
def daemon_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[subprocess.Popen[bytes]]:
    """The fake daemon runs in this process: a process of its own stands for dockerd's
    (what SO_PEERCRED names), so that a test can kill it or let it exit."""
    proc = subprocess.Popen(["sleep", "60"])
    monkeypatch.setattr(EngineApi, "daemon_pid", lambda _self: proc.pid)
    yield proc
    proc.kill()
    proc.wait()


def daemon_fault_after_start(fake_docker: FakeDocker, fault: Callable[[], None]) -> DaemonGone:
    """Run a container that works on until ``fault`` strikes its daemon, 0.3 s after
    the start; the DaemonGone that ends the run."""
    fake_docker.program = Program([(1, b"working\n")], exit_code=None)
    fake_docker.on("POST", "/containers/*/start", lambda _req: threading.Timer(0.3, fault).start())
    with deadline(15), pytest.raises(DaemonGone) as exc:
        run(EngineApi(fake_docker.host, timeout=5), spec())
    return exc.value


def test_a_daemon_dying_while_the_container_runs_ends_the_run_with_a_clear_error(
    fake_docker: FakeDocker, daemon_process: subprocess.Popen[bytes]
) -> None:
    def die() -> None:  # SIGKILL: the process is gone as its connections close
        daemon_process.kill()
        fake_docker.die()

    gone = daemon_fault_after_start(fake_docker, die)
    assert "the Docker daemon went away while the container ran" in str(gone)
    # A code of its own, as `docker run` has 125 for "the error is with Docker itself".
    assert gone.exit_code == 125


def test_a_daemon_stopped_gracefully_says_so(fake_docker: FakeDocker) -> None:
    # `systemctl stop docker`: dockerd closes its API first, then stops the containers
    # (exit 143 on the wait still open), then exits. The job must say why, not just 143.
    def stop_gracefully() -> None:
        fake_docker.stop_listening()
        with fake_docker.cond:
            for c in fake_docker.containers.values():
                fake_docker._exit(c, 143)
            fake_docker.cond.notify_all()

    gone = daemon_fault_after_start(fake_docker, stop_gracefully)
    assert str(gone) == (
        f"the Docker daemon stopped while the container ran ({fake_docker.host}); "
        "it stopped the container (exit code 143)"
    )
    assert gone.exit_code == 125


def test_a_daemon_stopped_gracefully_that_cuts_the_wait_says_it_stopped(
    fake_docker: FakeDocker, daemon_process: subprocess.Popen[bytes]
) -> None:
    # Seen on the sandbox's 20.10 now and then: the stopping daemon ends the open /wait
    # before the container's code is in it. Its process outlives its API while it stops
    # the containers, then exits: a stop, not a crash.
    def stop_gracefully() -> None:
        fake_docker.stop_listening()  # as dockerd: its API first
        fake_docker.die()  # then every connection closed, the wait's too, no code
        threading.Timer(0.5, daemon_process.terminate).start()

    gone = daemon_fault_after_start(fake_docker, stop_gracefully)
    assert str(gone) == (
        f"the Docker daemon stopped while the container ran ({fake_docker.host}); "
        "it stopped the container"
    )
    assert gone.exit_code == 125


@pytest.mark.parametrize("container_survives", [True, False])
def test_a_daemon_gone_at_once_is_told_apart_by_its_container(
    fake_docker: FakeDocker, daemon_process: subprocess.Popen[bytes], container_survives: bool
) -> None:
    """The daemon's process is already gone when the /wait ends (killed, or a stop that
    ended the wait only as it exited): the container's own process says which. Still
    running under its shim: the daemon died. Gone: the daemon stopped it first."""
    container = subprocess.Popen(["sleep", "60"])
    fake_docker.on("GET", "/containers/*/json", Answer(200, {"State": {"Pid": container.pid}}))

    def gone_at_once() -> None:
        if not container_survives:
            container.kill()
        daemon_process.kill()
        fake_docker.stop_listening()
        fake_docker.die()

    try:
        gone = daemon_fault_after_start(fake_docker, gone_at_once)
    finally:
        container.kill()
        container.wait()
    said = "went away" if container_survives else "stopped while the container ran"
    assert f"the Docker daemon {said}" in str(gone)


def test_a_container_killed_by_a_signal_with_the_daemon_up_keeps_its_code(
    fake_docker: FakeDocker,
) -> None:
    fake_docker.program = Program([(1, b"oom\n")], exit_code=137)
    with deadline(15):
        assert run(EngineApi(fake_docker.host, timeout=5), spec()) == 137
    # One question, answered: no waiting to see whether the daemon goes away (it would
    # have closed its API before stopping the container).
    assert len(fake_docker.calls("GET", "/version")) == 1


def test_an_unexpected_error_in_the_wait_thread_cannot_hang_the_run(
    fake_docker: FakeDocker, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_wait(_self: EngineApi, _cid: str) -> int:
        raise RuntimeError("a bug in wait")

    monkeypatch.setattr(EngineApi, "wait", broken_wait)
    with deadline(15), pytest.raises(RuntimeError, match="a bug in wait"):
        run(EngineApi(fake_docker.host, timeout=5), spec())
    assert fake_docker.containers == {}


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_before_the_container_starts_means_it_never_starts(
    fake_docker: FakeDocker,
    capsys: pytest.CaptureFixture[str],
    sigterm_seen: list[int],
    signum: int,
    code: int,
) -> None:
    """scancel while the container is created: not started, removed, 128+signal."""
    seen: list[int] = []
    old_int = signal.signal(signal.SIGINT, lambda s, _f: seen.append(s))  # pytest's would raise

    def cancel(_req: Request) -> None:
        os.kill(os.getpid(), signum)

    fake_docker.on("POST", "/containers/create", cancel)
    try:
        with deadline(15):
            rc = run(EngineApi(fake_docker.host, timeout=5), spec())
    finally:
        signal.signal(signal.SIGINT, old_int)
    assert fake_docker.calls("POST", "/containers/*/start") == []
    assert len(fake_docker.calls("POST", "/containers/create")) == 1
    assert fake_docker.containers == {}  # removed
    assert rc == code
    assert "cancelled before its container started" in capsys.readouterr().err
    assert sigterm_seen == [] and seen == []  # run_container's handlers took the signal


@pytest.mark.parametrize(
    ("names", "index", "want"),
    [
        (["GPU-a", "GPU-b", "0", "1", "all"], 0, ["nvidia.com/gpu=GPU-a"]),
        (["0", "1", "all"], 1, ["nvidia.com/gpu=1"]),  # a spec of index names only
        (None, None, ["nvidia.com/gpu=GPU-a"]),  # no spec file: the toolkit's UUID names
    ],
)
def test_a_daemon_with_cdi_gets_cdi_devices(
    fake_docker: FakeDocker,
    tmp_path: Path,
    names: list[str] | None,
    index: int | None,
    want: list[str],
) -> None:
    """GET /info lists CDISpecDirs: the GPUs go as Driver "cdi", as the docker CLI sends
    `--device nvidia.com/gpu=X` (seen on 26.1 and 28.5)."""
    specs = tmp_path / "cdi"
    specs.mkdir()
    if names is not None:
        devices = [{"name": n} for n in names]
        (specs / "nvidia.json").write_text(
            json.dumps({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices})
        )
    fake_docker.info["CDISpecDirs"] = [str(specs)]
    fake_docker.program = Program([], 0)
    with deadline(20):
        assert run_container(EngineApi(fake_docker.host, 5), spec(gpus=(Gpu("GPU-a", index),))) == 0
    (create,) = fake_docker.calls("POST", "/containers/create")
    (req,) = create.body["HostConfig"]["DeviceRequests"]
    assert req == {
        "Driver": "cdi",
        "Count": 0,
        "DeviceIDs": want,
        "Capabilities": None,
        "Options": None,
    }


def test_no_cdi_spec_dirs_means_gpus_as_before(fake_docker: FakeDocker) -> None:
    fake_docker.info["CDISpecDirs"] = []  # 26.1 without the feature
    fake_docker.program = Program([], 0)
    with deadline(20):
        assert run_container(EngineApi(fake_docker.host, 5), spec()) == 0
    (create,) = fake_docker.calls("POST", "/containers/create")
    assert create.body["HostConfig"]["DeviceRequests"][0]["Driver"] == "nvidia"


def test_a_busy_daemon_is_waited_for_and_a_dead_one_is_not(
    fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    """A start the daemon does not answer within the client's timeout: while it answers
    /_ping (busy: a burst of starts) and the container has not started, the start is
    asked again, said on stderr; the run then goes on as usual."""
    fake_docker.program = Program([(1, b"ran\n")], 0)
    fake_docker.on("POST", "/containers/*/start", Hang(), times=2)
    with deadline(30):
        code = run(EngineApi(fake_docker.host, timeout=0.5), spec())
    assert code == 0
    out, err = capsys.readouterr()
    assert out == "ran\n"
    busy = [ln for ln in err.splitlines() if "busy, not dead" in ln]
    assert len(busy) == 2 and "has not answered the container's start after " in busy[0], err
    assert len(fake_docker.calls("POST", "/containers/*/start")) == 3
    assert fake_docker.containers == {}


def _made_late(fake: FakeDocker) -> Callable[[Request], Hang]:
    """A script: the daemon does what was asked but answers only after the client
    gave up (a burst: the create or start went through, its answer came too late)."""

    def script(req: Request) -> Hang:
        if req.route == "/containers/create":
            fake._create(req)
        else:
            cid = req.route.split("/")[2]
            with fake.cond:
                c = fake._find(cid)
                assert c is not None
                fake._act(c, ("POST", "/start"), req)
                fake.cond.notify_all()
        return Hang()

    return script


@pytest.mark.parametrize("name", ["acbslurm-12-x", ""])
def test_a_create_answered_too_late_is_found_not_made_twice(
    fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """The create timed out but the daemon made the container: the run finds it by its
    own label and runs it, once."""
    fake_docker.program = Program([(1, b"ran\n")], 0)
    made: list[str] = []
    fake_docker.on("POST", "/containers/create", _made_late(fake_docker), times=1)
    fake_docker.on("DELETE", "/containers/*", lambda req: made.append(req.route) and None)
    with deadline(30):
        code = run(EngineApi(fake_docker.host, timeout=0.5), spec(name=name))
    out, err = capsys.readouterr()
    assert (code, out) == (0, "ran\n"), err
    assert "has not answered the container's create" in err
    assert len(fake_docker.calls("POST", "/containers/create")) == 1
    assert len(made) == 1 and fake_docker.containers == {}


NO_SUCH = Answer(404, {"message": "No such container"})


def test_a_container_listed_before_its_create_ends_is_waited_for(
    fake_docker: FakeDocker,
) -> None:
    """dockerd lists a container before its create has finished, and until then
    answers 404 for it (CI's burst of 64: "attach: HTTP 404"). The run found by its
    label waits until the daemon knows it, then attaches once."""
    fake_docker.program = Program([(1, b"ran\n")], 0)
    fake_docker.on("POST", "/containers/create", _made_late(fake_docker), times=1)
    fake_docker.on("GET", "/containers/*/json", NO_SUCH, times=2)
    with deadline(30):
        assert run(EngineApi(fake_docker.host, timeout=0.5), spec(name="")) == 0
    assert len(fake_docker.calls("POST", "/containers/create")) == 1
    assert len(fake_docker.calls("POST", "/containers/*/attach")) == 1
    assert fake_docker.containers == {}


def test_a_listed_container_whose_create_then_fails_is_created_again(
    fake_docker: FakeDocker,
) -> None:
    """Listed, then gone from the list: the create failed in the daemon, and the run
    asks for it again rather than attaching to nothing."""
    fake_docker.program = Program([(1, b"ran\n")], 0)
    fake_docker.on("POST", "/containers/create", _made_late(fake_docker), times=1)

    def create_failed(req: Request) -> Answer:
        with fake_docker.cond:
            fake_docker.containers.clear()
        return NO_SUCH

    fake_docker.on("GET", "/containers/*/json", create_failed, times=1)
    with deadline(30):
        assert run(EngineApi(fake_docker.host, timeout=0.5), spec(name="")) == 0
    assert len(fake_docker.calls("POST", "/containers/create")) == 2
    assert fake_docker.containers == {}


def test_a_named_create_still_in_flight_meets_its_own_name_and_finds_it(
    fake_docker: FakeDocker,
) -> None:
    """The first create lands only after the run looked for it: the second meets the
    name taken (409), and the run then finds the first by its label."""
    fake_docker.program = Program([(1, b"ran\n")], 0)
    first: list[Request] = []
    fake_docker.on("POST", "/containers/create", lambda req: first.append(req) or Hang(), times=1)

    def listed_before_it_landed(req: Request) -> Answer:
        fake_docker._create(first[0])
        return Answer(200, [])

    fake_docker.on("GET", "/containers/json", listed_before_it_landed, times=1)
    with deadline(30):
        assert run(EngineApi(fake_docker.host, timeout=0.5), spec()) == 0
    assert len(fake_docker.calls("POST", "/containers/create")) == 2
    assert fake_docker.containers == {}


def test_an_unnamed_twin_made_late_is_removed_with_the_run(fake_docker: FakeDocker) -> None:
    """Unnamed, the second create makes a second container when the first lands late:
    both carry the run's label, and the run removes both."""
    fake_docker.program = Program([(1, b"ran\n")], 0)
    first: list[Request] = []
    fake_docker.on("POST", "/containers/create", lambda req: first.append(req) or Hang(), times=1)
    fake_docker.on("GET", "/containers/json", Answer(200, []), times=1)
    # It lands while the run starts its own.
    fake_docker.on("POST", "/containers/*/start", lambda _: fake_docker._create(first[0]) and None)
    with deadline(30):
        assert run(EngineApi(fake_docker.host, timeout=0.5), spec(name="")) == 0
    assert len(fake_docker.calls("POST", "/containers/create")) == 2
    assert fake_docker.containers == {}


def test_a_create_that_timed_out_unmade_is_asked_again(fake_docker: FakeDocker) -> None:
    fake_docker.program = Program([(1, b"ran\n")], 0)
    fake_docker.on("POST", "/containers/create", Hang(), times=1)
    with deadline(30):
        assert run(EngineApi(fake_docker.host, timeout=0.5), spec()) == 0
    assert len(fake_docker.calls("POST", "/containers/create")) == 2
    assert fake_docker.containers == {}


def test_a_start_answered_too_late_is_not_started_again(
    fake_docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    """The start timed out but the container started (and ended): starting it again
    would run the job's command twice. The inspect says it started: the run waits."""
    fake_docker.program = Program([(1, b"ran\n")], 3)
    fake_docker.on("POST", "/containers/*/start", _made_late(fake_docker), times=1)
    with deadline(30):
        code = run(EngineApi(fake_docker.host, timeout=0.5), spec())
    out, _ = capsys.readouterr()
    assert (code, out) == (3, "ran\n")
    assert len(fake_docker.calls("POST", "/containers/*/start")) == 1


def test_an_attach_and_an_inspect_that_time_out_are_asked_again(fake_docker: FakeDocker) -> None:
    fake_docker.program = Program([(1, b"ran\n")], 0)
    fake_docker.on("POST", "/containers/*/attach", Hang(), times=1)
    fake_docker.on("GET", "/containers/*/json", Hang(), times=1)
    fake_docker.on("GET", "/info", Hang(), times=1)
    with deadline(30):
        assert run(EngineApi(fake_docker.host, timeout=0.5), spec()) == 0
    assert len(fake_docker.calls("POST", "/containers/*/attach")) == 2
    assert len(fake_docker.calls("GET", "/info")) == 2


def test_a_cancel_while_the_daemon_is_busy_removes_the_container_unstarted(
    fake_docker: FakeDocker, sigterm_seen: list[int]
) -> None:
    def busy_then_cancelled(req: Request) -> Hang:
        sigterm_self(req)
        return Hang()

    fake_docker.on("POST", "/containers/*/start", busy_then_cancelled)
    with deadline(30), pytest.raises(DockerError, match=r"cancelled \(SIGTERM\) while the daemon"):
        run(EngineApi(fake_docker.host, timeout=0.5), spec())
    assert sigterm_seen == [] and fake_docker.containers == {}


def test_a_daemon_that_does_not_ping_fails_the_start_at_once(fake_docker: FakeDocker) -> None:
    fake_docker.on("POST", "/containers/*/start", Hang())
    fake_docker.on("GET", "/_ping", Hang())
    with (
        deadline(30),
        pytest.raises(DockerError, match=r"POST /containers/[0-9a-f]+/start: timed out"),
    ):
        run(EngineApi(fake_docker.host, timeout=0.5), spec())
    assert len(fake_docker.calls("POST", "/containers/*/start")) == 1


def test_a_start_whose_container_is_gone_is_not_waited_for(fake_docker: FakeDocker) -> None:
    fake_docker.on("POST", "/containers/*/start", Hang())
    fake_docker.on("GET", "/containers/*/json", Answer(404, {"message": "No such container"}))
    with deadline(30), pytest.raises(DockerError, match=r"cannot start.*No such container"):
        run(EngineApi(fake_docker.host, timeout=0.5), spec())
    assert len(fake_docker.calls("POST", "/containers/*/start")) == 1
