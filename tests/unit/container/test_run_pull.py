"""`acbslurm run`'s pull policy around the create (run_command._run), against the fake
Docker daemon: the image is not looked up before the create (one round trip less per
start, as `docker run`); a create that finds no image pulls it (``missing``) or says
why not (``never``) and is asked again; ``always`` pulls first."""

from __future__ import annotations

import json

import pytest
from fake_docker import Answer, FakeDocker, Request

from acbslurm.container.launch import LaunchSpec
from acbslurm.container.options import Limits
from acbslurm.container.probe import InfoProbe
from acbslurm.container.run_command import _run
from acbslurm.dockerapi.engine import EngineApi
from acbslurm.errors import DockerError


def _spec(image: str) -> LaunchSpec:
    return LaunchSpec(
        image=image, command=["true"], gpus=(), limits=Limits(), job_id="12", user="user1",
        name="acbslurm-12-p", grace=1.0,
    )  # fmt: skip


def _registry(fake: FakeDocker, pullable: set[str]) -> None:
    """Image look-ups answered from ``fake.images``; pulls of ``pullable`` add to it."""

    def inspect(req: Request) -> Answer:
        name = req.route[len("/images/") : -len("/json")]
        assert fake.images is not None
        if name in fake.images:
            return Answer(200, {"Id": "sha256:1"})
        return Answer(404, {"message": f"No such image: {name}"})

    def pull(req: Request) -> Answer:
        ref = f"{req.query['fromImage']}:{req.query['tag']}"
        assert fake.images is not None and ref in pullable, ref
        fake.images.add(ref)
        return Answer(200, json.dumps({"status": f"Downloaded newer image for {ref}"}).encode())

    fake.on("GET", "/images/*/json", inspect)
    fake.on("POST", "/images/create", pull)


def _order(fake: FakeDocker) -> list[str]:
    """The image and create calls, in the order the daemon got them."""
    names = {"/containers/create": "create", "/images/create": "pull"}
    return [
        names.get(r.route, "look-up")
        for r in fake.requests
        if r.route in names or r.route.startswith("/images/")
    ]


def _go(fake: FakeDocker, image: str, policy: str) -> int:
    api = EngineApi(fake.host, timeout=5)
    return _run(api, _spec(image), policy, InfoProbe(api))


def test_an_image_that_is_there_is_not_looked_up(fake_docker: FakeDocker) -> None:
    fake_docker.images = {"img:1"}
    _registry(fake_docker, set())
    assert _go(fake_docker, "img:1", "missing") == 0
    assert _order(fake_docker) == ["create"]


def test_a_missing_image_is_pulled_and_the_create_asked_again(fake_docker: FakeDocker) -> None:
    fake_docker.images = set()
    _registry(fake_docker, {"img:2"})
    assert _go(fake_docker, "img:2", "missing") == 0
    assert _order(fake_docker) == ["create", "look-up", "pull", "create"]
    assert fake_docker.containers == {}  # the run's container was removed at its end


def test_never_says_why_and_pulls_nothing(fake_docker: FakeDocker) -> None:
    fake_docker.images = set()
    _registry(fake_docker, {"img:2"})
    with pytest.raises(DockerError, match="not in your Docker daemon and the pull policy is never"):
        _go(fake_docker, "img:2", "never")
    assert "pull" not in _order(fake_docker)


def test_always_pulls_first(fake_docker: FakeDocker) -> None:
    fake_docker.images = {"img:1"}
    _registry(fake_docker, {"img:1"})
    assert _go(fake_docker, "img:1", "always") == 0
    assert _order(fake_docker) == ["pull", "create"]
