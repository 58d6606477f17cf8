"""The OpenAI routes a pool serves, and which model serves which.

A model's ``routes:`` in the pool file names what it serves (``chat``, ``embeddings``,
...); without it a model serves what its engine serves: the built-in engine
completions and chat, a vLLM server what its own OpenAPI schema lists (vLLM registers
a route only for the tasks its model runs: a Whisper model gets the audio routes, an
embedding model ``/v1/embeddings``, a text model completions, chat and responses).
A request on a route its model does not serve gets OpenAI's error shape naming the
model (``not_served``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from acbslurm.serve.api import ApiError

# name in the pool file -> the route's path
ROUTES: dict[str, str] = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
    "embeddings": "/v1/embeddings",
    "transcriptions": "/v1/audio/transcriptions",
    "translations": "/v1/audio/translations",
}
NAMES = {path: name for name, path in ROUTES.items()}
BUILTIN = ("/v1/completions", "/v1/chat/completions")
AUDIO = ("/v1/audio/transcriptions", "/v1/audio/translations")
# The field whose text is bounded in characters before anything is tokenized (api.py).
PROMPT_FIELD = {
    "/v1/completions": "prompt",
    "/v1/chat/completions": "messages",
    "/v1/responses": "input",
    "/v1/embeddings": "input",
}


def served(declared: Iterable[str], engine: Iterable[str]) -> list[str]:
    """The paths a model serves: its engine's, less those the pool file leaves out
    (``declared``: route names; empty: all of the engine's)."""
    have = [p for p in engine if p in NAMES]
    want = {ROUTES[n] for n in declared}
    return [p for p in have if not want or p in want]


def from_openapi(paths: Iterable[str]) -> list[str]:
    """The pool's routes among the paths a vLLM server's ``/openapi.json`` lists."""
    return [p for p in ROUTES.values() if p in set(paths)]


def not_served(
    model: str, path: str, serves: Iterable[str], others: Mapping[str, Iterable[str]]
) -> ApiError:
    """404 in OpenAI's shape: ``model`` does not serve ``path``; what it serves, and
    which models serve ``path`` here."""
    mine = ", ".join(serves) or "nothing yet (it is not ready)"
    who = [name for name, paths in others.items() if path in set(paths)]
    elsewhere = f" Models that serve {path} here: {', '.join(who)}." if who else ""
    return ApiError(
        404,
        f"The model {model!r} does not serve {path}; it serves {mine}.{elsewhere}",
        "model",
        "model_not_supported",
    )
