"""No import circles between the files of scheduler/ (issue 33).

The layers contract of ``lint-imports`` ([tool.importlinter] in pyproject.toml) keeps imports
between scheduler/'s packages going downward; this test keeps them acyclic between files
inside each package too. The graph is grimp's (the library import-linter is built on), with
imports inside functions and under ``TYPE_CHECKING`` counted, as import-linter counts them.
"""

from __future__ import annotations

import grimp


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (the import circles) of the
    graph ``{module: modules it imports}``, each sorted; Tarjan's algorithm (Tarjan, "Depth-first
    search and linear graph algorithms", SIAM J. Comput. 1972), iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_the_circle_finder_finds_circles_and_only_them():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}}
    assert strongly_connected(edges) == [["a", "b", "c"]]
    assert strongly_connected({"x": {"y"}, "y": set()}) == []


def test_no_import_circles_between_files_of_scheduler():
    graph = grimp.build_graph("scheduler", cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert strongly_connected(edges) == []
