"""Connected groups of items under pairwise links (union-find), for every package that
groups things: ranks linked by clock fits, native calls sharing candidate ops, steps
that correspond."""

from typing import Any, Dict, Iterable, List, Tuple


def components(items: Iterable[Any], edges: Iterable[Tuple[Any, Any]]) -> List[List[Any]]:
    """Connected groups of ``items`` (each sorted) under ``edges`` [(a, b)]; an edge with an
    end not among ``items`` is left out. Groups come in the order of their first item."""
    parent = {r: r for r in items}

    def find(r: Any) -> Any:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    for a, b in edges:
        if a in parent and b in parent:
            parent[find(a)] = find(b)
    groups: Dict[Any, List[Any]] = {}
    for r in parent:
        groups.setdefault(find(r), []).append(r)
    return [sorted(g) for g in groups.values()]
