"""No two modules of acbslurm import each other, directly or through others.

Function-level and ``TYPE_CHECKING`` imports count too (grimp reads them all): a lazy
import hides a cycle from Python's import order but not from the design. The layer
contract (lint-imports) checks packages against each other; this checks modules, inside
packages as well.
"""

from __future__ import annotations

import grimp


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Each group of modules that import each other (through others, too), sorted."""
    groups: set[tuple[str, ...]] = set()
    for module in graph.modules:
        # What ``module`` imports, even indirectly, that imports it back.
        both = graph.find_upstream_modules(module) & graph.find_downstream_modules(module)
        if both:
            groups.add(tuple(sorted({module, *both})))
    return sorted(list(g) for g in groups)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for a, b in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        graph.add_import(importer=a, imported=b)
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


def test_no_module_of_acbslurm_is_in_an_import_cycle() -> None:
    graph = grimp.build_graph("acbslurm", cache_dir=None)
    assert len(graph.modules) > 50  # the package was read, not an empty graph
    assert _cycles(graph) == []
