"""Render a job spec into an sbatch script: a pure function through Jinja templates.

Every value that reaches bash goes through ``sh`` (shlex quoting) and every value on an
``#SBATCH`` line through ``sbatch`` (sbatch's own quoting), so a job name or command
with quotes, ``$()``, backticks, ``;``, spaces or newlines does exactly the literal thing.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from acbslurm.errors import ConfigError, SpecError
from acbslurm.resources import templates_dir
from acbslurm.userfiles import TEMPLATE_LIMIT, read_user_text

if TYPE_CHECKING:
    from acbslurm.spec import JobSpec

DEFAULT_TEMPLATE = "sbatch.sh.j2"
_SBATCH_BARE = re.compile(r"^[A-Za-z0-9_.,:/%@+=\-]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def sh_quote(value: Any) -> str:
    """Quote one word for bash (newlines included, they stay literal)."""
    text = str(value)
    if "\x00" in text:
        raise SpecError(f"a NUL character cannot reach a shell: {text!r}")
    return shlex.quote(text)


def sh_join(words: Sequence[Any]) -> str:
    return " ".join(sh_quote(w) for w in words)


def sbatch_quote(value: Any) -> str:
    """Quote a value for an ``#SBATCH`` line as sbatch parses it.

    sbatch reads one line; inside double quotes ``\\`` escapes the next character and
    ``#`` does not start a comment. A newline cannot be expressed at all, so it is refused.
    """
    text = str(value)
    if _CONTROL.search(text):
        raise SpecError(f"an #SBATCH value must be one line without control characters: {text!r}")
    if _SBATCH_BARE.match(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _environment(search_dir: Path) -> Any:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(search_dir)]),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # noqa: S701 - the output is a shell script, quoted by filters
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["sh"] = sh_quote
    env.filters["sh_join"] = sh_join
    env.filters["sbatch"] = sbatch_quote
    return env


def _user_loader(folder: Path) -> Any:
    """A Jinja loader of ``folder`` that reads through ``userfiles`` (regular files of
    at most TEMPLATE_LIMIT bytes; the refusal names the file)."""

    class UserFolderLoader(jinja2.BaseLoader):
        def get_source(self, environment: Any, template: str) -> tuple[str, str, Any]:  # noqa: ARG002 - jinja2's signature
            path = os.path.join(str(folder), *jinja2.loaders.split_template_path(template))
            try:
                text = read_user_text(path, "sbatch template", limit=TEMPLATE_LIMIT)
            except FileNotFoundError:
                raise jinja2.TemplateNotFound(template) from None
            return text, os.path.normpath(path), lambda: False

    return UserFolderLoader()


def render(
    spec: JobSpec,
    *,
    acbslurm: Sequence[str] | str,
    template: str | Path | None = None,
) -> str:
    """The sbatch script text of ``spec``.

    ``acbslurm`` is the command that starts ``acbslurm run`` inside the job (an absolute
    path, or argv words such as ``[python, -m, acbslurm]``). ``template`` is a site's own
    template file; by default the packaged ``sbatch.sh.j2``.
    """
    if template is None:
        search_dir, name = templates_dir(), DEFAULT_TEMPLATE
    else:
        path = Path(template)
        if not path.exists():
            raise ConfigError(f"sbatch template {str(path)!r} does not exist")
        search_dir, name = path.parent, path.name
    env = _environment(search_dir)
    if template is not None:
        # The site's folder is the user's: what is read from it is bounded (a FIFO or
        # /dev/zero named as the template is refused). The packaged templates stay
        # loadable so a site template can extend them.
        env.loader = jinja2.ChoiceLoader(
            [_user_loader(search_dir), jinja2.FileSystemLoader([str(templates_dir())])]
        )
    words = [acbslurm] if isinstance(acbslurm, str) else list(acbslurm)
    try:
        tmpl = env.get_template(name)
        return str(tmpl.render(job=spec, acbslurm=sh_join(words)))
    except jinja2.TemplateError as exc:
        where = f"{getattr(exc, 'filename', None) or name}"
        lineno = getattr(exc, "lineno", None)
        raise ConfigError(
            f"sbatch template {where}{':' + str(lineno) if lineno else ''}: {exc}"
        ) from None
