"""The import graph of one package, as a newcomer reads it: modules, the imports between them (each pair
once, lazy imports inside functions included), the longest chain of imports (levels) and any cycle.

    python scripts/tools/import_graph.py pipelines            # modules
    python scripts/tools/import_graph.py pipelines --folders  # each sub-package counted as one node
    # the job's stages as modules, the shared folders as one node each (the layout sketch of issue 22; the
    # inputs room since round 4)
    python scripts/tools/import_graph.py pipelines --collapse inputs --collapse common --collapse runners \
        --collapse tokenizer --collapse report --collapse tasks --collapse pretraining/kernels
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

NAMESPACE = "bertstream."  # the folders import each other as bertstream.<folder>.<module>: pipelines/<module>


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str, package: str, modules: set[str]) -> set[str]:
    """The modules of ``package`` that ``path`` imports; ``from pkg import mod`` counts ``pkg.mod`` only."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.removeprefix(NAMESPACE) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_pkg else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            base = base.removeprefix(NAMESPACE)
            subs = {f"{base}.{a.name}" for a in node.names}
            found.update(subs & modules)
            if subs - modules:  # a name defined in the module (or package) itself
                found.add(base)
    return {m for m in found if m == package or m.startswith(package + ".")}


def graph(package: str, folders: bool, collapse: tuple[str, ...] = ()) -> dict[str, set[str]]:
    root = Path(package)
    files = sorted(root.rglob("*.py"))
    names = {module_name(f, root): f for f in files}
    merged = [".".join([root.name, *Path(c).parts]) for c in collapse]

    def node(mod: str) -> str:
        for m in merged:
            if mod == m or mod.startswith(m + "."):
                return m
        if folders:
            parts = mod.split(".")
            # pipelines.X.Y... -> pipelines.X when X is a sub-package
            if len(parts) > 2 or (len(parts) == 2 and (root / parts[1]).is_dir()):
                return ".".join(parts[:2])
        return mod

    edges: dict[str, set[str]] = {node(n): set() for n in names}
    for name, path in names.items():
        for target in imports_of(path, name, package, set(names)):
            if target not in names:
                continue  # an attribute (from pkg.mod import func) or the package itself
            a, b = node(name), node(target)
            if a != b and not (b == package):
                edges[a].add(b)
    edges.pop(package, None)
    for targets in edges.values():
        targets.discard(package)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def levels(edges: dict[str, set[str]]) -> int:
    """Nodes on the longest import chain (a module importing nothing of ours is level 1); cycles cut."""
    memo: dict[str, int] = {}

    def depth(v: str, seen: frozenset[str]) -> int:
        if v in memo:
            return memo[v]
        d = 1 + max((depth(w, seen | {v}) for w in edges.get(v, ()) if w not in seen), default=0)
        memo[v] = d
        return d

    return max((depth(v, frozenset()) for v in edges), default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("--folders", action="store_true", help="count each sub-package as one node")
    parser.add_argument(
        "--collapse", action="append", default=[], metavar="FOLDER", help="count FOLDER (below the package) as one node"
    )
    parser.add_argument("--edges", action="store_true", help="list every import")
    args = parser.parse_args()
    edges = graph(args.package, args.folders, tuple(args.collapse))
    n_edges = sum(len(t) for t in edges.values())
    if args.edges:
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f"{a} -> {b}")
    found = cycles(edges)
    print(f"{args.package}: {len(edges)} nodes, {n_edges} imports, {levels(edges)} levels, {len(found)} cycles")
    for c in found:
        print("  cycle:", " <-> ".join(c))


if __name__ == "__main__":
    main()
