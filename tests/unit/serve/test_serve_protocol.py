"""The gateway <-> worker messages decode into their types, or fail naming why."""

from __future__ import annotations

import pytest

from acbslurm.serve.errors import ProtocolError
from acbslurm.serve.protocol import decode_to_gateway, decode_to_worker, encode


def test_a_message_comes_back_as_it_was_sent() -> None:
    done = {
        "type": "done",
        "id": "a-1",
        "finish_reason": "length",
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "timing": {"wait_s": 0.1, "restore_s": 0.0, "compute_s": None},
    }
    assert decode_to_gateway(encode(done)) == done
    assert decode_to_worker(b'{"type":"cancel","id":"a-1"}\n') == {"type": "cancel", "id": "a-1"}
    # optional fields may be left out: a generate needs its id only
    assert decode_to_worker(b'{"type":"generate","id":"a-2"}') == {"type": "generate", "id": "a-2"}


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b"{not json", "a message is not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"id": "a-1"}', "unknown type None (expected one of generate, cancel)"),
        (b'{"type": "delta", "id": "a-1", "text": "x"}', "unknown type 'delta'"),
        (b'{"type": "generate"}', "a 'generate' message without id"),
    ],
)
def test_a_worker_refuses_what_is_not_a_message_for_it(line: bytes, says: str) -> None:
    with pytest.raises(ProtocolError, match=says.replace("(", r"\(").replace(")", r"\)")):
        decode_to_worker(line)


def test_the_gateway_names_every_missing_field() -> None:
    with pytest.raises(ProtocolError, match="a 'server' message without folder, shm"):
        decode_to_gateway(b'{"type": "server", "pid": 7}')
    with pytest.raises(ProtocolError, match="unknown type 'generate'"):
        decode_to_gateway(b'{"type": "generate", "id": "x"}')
