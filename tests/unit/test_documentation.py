"""The docs stay true (as submitit's test_documentation.py keeps its own): every relative
link and anchor in README.md, CONTRIBUTING.md and docs/ resolves, every page of docs/ is
reachable from README.md, every `acbslurm ...` command the docs show names a command
whose --help loads (its subcommand path walked in the real CLI), and every docs section
the code cites (`docs/X.md, "Heading"`) and every file it names by path exists."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from acbslurm.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# `acbslurm WORD WORD...` at the start of code (a command line a reader copies).
COMMAND = re.compile(r"^(?:\$\s+|sudo\s+|srun\s+|exec\s+)*acbslurm((?:\s+[a-z][a-z-]*)+)")
SPAN = re.compile(r"`([^`\n]+)`")


def _code(page: Path) -> list[str]:
    """The page's code: fenced and indented blocks' lines, inline code spans."""
    out: list[str] = []
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced or line.startswith("    "):
            out.append(line.strip())
        else:
            out += SPAN.findall(line)
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    out: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            slug = _slug(line.lstrip("#"))
            n = 1
            while slug in out:  # GitHub numbers repeated headings
                slug = f"{_slug(line.lstrip('#'))}-{n}"
                n += 1
            out.add(slug)
    return out


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    bad = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target}: no heading with that anchor in {dest.name}")
    assert not bad, f"{page.relative_to(ROOT)}: " + "; ".join(bad)


def test_every_page_is_reachable_from_the_readme() -> None:
    seen = {ROOT / "README.md"}
    todo = [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        for target in _links(page):
            dest = (page.parent / target.partition("#")[0]).resolve()
            if dest.suffix == ".md" and dest.exists() and dest not in seen:
                seen.add(dest)
                todo.append(dest)
    lost = [p.name for p in PAGES if p not in seen]
    assert not lost, f"docs pages no link from README.md leads to: {lost}"


def _command_paths() -> dict[tuple[str, ...], str]:
    """Each command path the docs show (as many words as name subcommands), with a page
    that shows it."""
    paths: dict[tuple[str, ...], str] = {}
    for page in PAGES:
        for words in (m.group(1) for c in _code(page) if (m := COMMAND.match(c))):
            path: list[str] = []
            group: click.Command = cli
            for word in words.split():
                ctx = click.Context(group)
                sub = group.get_command(ctx, word) if isinstance(group, click.Group) else None
                if sub is None:
                    if not path:  # the first word must be a command
                        path.append(word)
                    break
                path.append(word)
                group = sub
            paths.setdefault(tuple(path), page.name)
    return paths


def test_the_docs_show_commands() -> None:
    assert len(_command_paths()) > 15  # the pattern reads the docs, not nothing


@pytest.mark.parametrize(("path", "page"), sorted(_command_paths().items()))
def test_every_command_the_docs_show_loads_its_help(path: tuple[str, ...], page: str) -> None:
    res = CliRunner().invoke(cli, [*path, "--help"])
    assert res.exit_code == 0, f"{page}: `acbslurm {' '.join(path)}`: {res.output}"


# A section the code cites: `docs/X.md, "Heading"`, `docs/X.md "Heading"`,
# `docs/X.md ("Heading")`, with the heading in double or single quotes or *stars*,
# possibly wrapped onto the next line of a docstring or comment. A single-quoted heading
# may hold an apostrophe ('Containers in the job's cgroups'): it ends at a quote that a
# delimiter follows.
REFERENCE = re.compile(
    r"docs/([\w-]+\.md),?[ \t]*(?:\n[ \t]*(?:#[ \t]*)?)?\(?"
    r"""(?:"([^"\n]+)"|'(.+?)'(?=[)"\s,.;:]|$)|\*([^*\n]+)\*)""",
    re.M,
)


def _headings(page: Path) -> list[str]:
    fenced = False
    out = []
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.append(line.lstrip("#").strip().replace("`", ""))
    return out


def _names_a_heading(cited: str, headings: list[str]) -> bool:
    """The heading itself or its start up to a word's end ("Faults" for "Faults: what
    acbslurm does, what the admin does"), backticks ignored."""
    cited = cited.replace("`", "").strip()
    return any(re.match(re.escape(cited) + r"(?!\w)", h) for h in headings)


def _references() -> list[tuple[str, str, str]]:
    """(where, page, heading) for each section the package's code cites."""
    out = []
    for source in sorted((ROOT / "acbslurm").rglob("*")):
        if source.suffix not in {".py", ".proto"} or "_generated" in source.parts:
            continue
        text = source.read_text()
        for m in REFERENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            # A heading inside a Python string is read as the string holds it.
            heading = next(g for g in m.groups()[1:] if g).replace("\\'", "'")
            out.append((f"{source.relative_to(ROOT)}:{line}", m.group(1), heading))
    return out


def test_the_code_cites_sections() -> None:
    assert len(_references()) > 10  # the pattern reads the code, not nothing


def test_every_section_the_code_cites_exists() -> None:
    bad = []
    for where, page, heading in _references():
        path = ROOT / "docs" / page
        if not path.exists():
            bad.append(f"{where}: docs/{page}: no such page")
        elif not _names_a_heading(heading, _headings(path)):
            bad.append(f"{where}: docs/{page} has no heading {heading!r}")
    assert not bad, "\n".join(bad)


def test_every_page_the_code_names_exists() -> None:
    bad = []
    for source in sorted((ROOT / "acbslurm").rglob("*.py")):
        for page in set(re.findall(r"docs/([\w-]+\.md)", source.read_text())):
            if not (ROOT / "docs" / page).exists():
                bad.append(f"{source.relative_to(ROOT)}: docs/{page}")
    assert not bad, "pages that do not exist: " + "; ".join(bad)


# A file of the checkout the code names by its path (`gpu/acl.py`, `tests/unit/...`,
# `templates/sbatch.sh.j2`): from the checkout's root or from a package above the
# naming module. Paths outside the checkout (`/etc/...`, `~/.config/...`) are not read.
FILE = re.compile(
    r"(?<![\w./-])((?:[a-z_]+/)+[\w.-]*\.(?:py|proto|sh|j2|md|json|yaml))(?![\w.-]*\w)"
)


def test_every_file_the_code_names_exists() -> None:
    bad = []
    for source in sorted((ROOT / "acbslurm").rglob("*.py")):
        if "_generated" in source.parts:
            continue
        bases = [ROOT, *(p for p in source.parents if ROOT in p.parents)]
        for path in set(FILE.findall(source.read_text())):
            if not any((base / path).exists() for base in bases):
                bad.append(f"{source.relative_to(ROOT)}: {path}")
    assert not bad, "files that do not exist: " + "; ".join(sorted(bad))
