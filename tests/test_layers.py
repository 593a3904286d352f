"""The package floors (docs/architecture.md): a module imports only from its own floor or lower ones, no two
packages import each other, and no two files do either, directly or round a longer circle; at module level
or inside functions.

Every module under modelc/ is parsed with ast (nothing is imported), so the check is cheap and sees the
imports a function hides. An import that has to go upward is listed in EXCEPTIONS with its reason (at most
MAX_EXCEPTIONS of them) and carries a `# layer:` comment at the import saying why.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "modelc"

# Lowest first. A module belongs to the floor of the longest entry that prefixes its dotted name.
FLOORS: tuple[tuple[str, ...], ...] = (
    (
        "modelc.errors",
        "modelc.ir",
        "modelc.tmpfiles",
        "modelc.config",
        "modelc.version",
        "modelc.spin",
        "modelc.memory",
    ),
    ("modelc.kernels",),
    (
        "modelc.formats",
        "modelc.onnx",
        "modelc.artifact",
        "modelc.tokenizer",
        "modelc.models",
        "modelc.cache",
        "modelc.store",
        "modelc.registry",
        "modelc.capabilities",
        "modelc.architectures",
        "modelc.pack",
        "modelc.source",
        "modelc.pull",
    ),
    ("modelc.request",),
    ("modelc.scheduler",),
    ("modelc.engine",),
    ("modelc.actors",),
    ("modelc.api",),
    ("modelc.replicas",),
    ("modelc.server",),
    ("modelc.daemon",),
    ("modelc.cli", "modelc.build", "modelc.__main__"),
)
# The package root (`modelc.Engine` / `modelc.AsyncEngine`, resolved lazily) is above every floor: nothing imports it.
ROOT_FLOOR = len(FLOORS)

# (importing module, imported module) -> why the import has to go upward. Keep it short.
EXCEPTIONS: dict[tuple[str, str], str] = {
    # open_engine is the one door for every kind of model; the Ray replicas behind it run AsyncEngines themselves
    ("modelc.api.opener", "modelc.replicas.engine"): "open_engine serves Ray replicas where the config asks",
}
MAX_EXCEPTIONS = 4

# Modules written into builds only (modelc/build), absent from the source tree: imports of them are guarded.
GENERATED = frozenset({"modelc._build"})


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def _all_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """Every modelc module `name` imports (module level and inside functions), with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from modelc import store` imports the module modelc.store
                sub = f"{target}.{alias.name}"
                found.append((sub if sub in modules else target, node.lineno))
    return [(t, line) for t, line in found if t == "modelc" or t.startswith("modelc.")]


def _resolve(target: str, modules: dict[str, Path]) -> str:
    while target not in modules and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def floor_of(name: str) -> int:
    if name == "modelc":
        return ROOT_FLOOR
    best, best_len = -1, -1
    for level, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = level, len(prefix)
    return best


def _package(name: str) -> str:
    """The unit of the circle check: modelc.x for a module or package directly under modelc/."""
    return ".".join(name.split(".")[:2])


@functools.cache
def _graph() -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every import of a modelc module by another one."""
    modules = _all_modules()
    edges = []
    for name, path in modules.items():
        for target, line in _imports(name, path, modules):
            if target not in GENERATED and _resolve(target, modules) != name:
                edges.append((name, _resolve(target, modules), line))
    return edges


def test_every_module_has_a_floor():
    missing = [name for name in _all_modules() if floor_of(name) < 0]
    assert not missing, f"add these modules to FLOORS in tests/test_layers.py: {missing}"


def upward_imports() -> list[str]:
    bad = []
    for src, dst, line in _graph():
        if (src, dst) in EXCEPTIONS:
            continue
        if floor_of(dst) > floor_of(src):
            bad.append(f"{src}:{line} imports {dst} (floor {floor_of(src)} -> {floor_of(dst)})")
    return bad


def file_circles() -> list[str]:
    """Every set of modules that import one another round a circle (a strongly connected component of the
    file-level import graph, Tarjan's algorithm), with the imports that close it."""
    graph: dict[str, dict[str, int]] = {}
    for src, dst, line in _graph():
        graph.setdefault(src, {}).setdefault(dst, line)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[str] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                inside = set(members)
                edges = [f"{a}:{line} -> {b}" for a in sorted(inside) for b, line in graph[a].items() if b in inside]
                circles.append(" | ".join(edges))

    for name in sorted(_all_modules()):
        if name not in index:
            visit(name)
    return circles


def package_circles() -> list[str]:
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for src, dst, line in _graph():
        a, b = _package(src), _package(dst)
        if a == b or "modelc" in (a, b) or (src, dst) in EXCEPTIONS:
            continue
        graph.setdefault(a, set()).add(b)
        where.setdefault((a, b), f"{src}:{line} -> {dst}")
    circles = []
    for a in sorted(graph):
        for b in sorted(graph[a]):
            if a < b and a in graph.get(b, set()):
                circles.append(f"{a} <-> {b}: {where[(a, b)]} and {where[(b, a)]}")
    # longer circles: a package that reaches itself through others
    for start in sorted(graph):
        seen, stack = set(), [(n, [start, n]) for n in graph[start]]
        while stack:
            node, path = stack.pop()
            if node == start and len(path) > 3:
                circles.append(" -> ".join(path))
                break
            if node in seen:
                continue
            seen.add(node)
            stack += [(n, path + [n]) for n in graph.get(node, ())]
    return circles


def test_no_import_goes_to_a_higher_floor():
    bad = upward_imports()
    assert not bad, "imports from a lower floor to a higher one:\n" + "\n".join(bad)


def test_no_import_circle_between_packages():
    circles = package_circles()
    assert not circles, "import circles between packages:\n" + "\n".join(circles)


def test_no_import_circle_between_files():
    circles = file_circles()
    assert not circles, "import circles between files:\n" + "\n".join(circles)


def test_upward_imports_are_few_and_say_why():
    assert len(EXCEPTIONS) <= MAX_EXCEPTIONS, f"more than {MAX_EXCEPTIONS} upward imports: {sorted(EXCEPTIONS)}"
    modules = _all_modules()
    silent = []
    for src, dst, line in _graph():
        if (src, dst) in EXCEPTIONS:
            text = modules[src].read_text(encoding="utf-8").splitlines()[line - 1]
            if "# layer:" not in text:
                silent.append(f"{src}:{line} -> {dst}")
    assert not silent, f"an allowed upward import says why with a `# layer:` comment on its line: {silent}"


def _absolute_imports(path: Path) -> list[tuple[str, int]]:
    """(top-level package, line) of every absolute import in a file, those inside functions too."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.append(((node.module or "").split(".")[0], node.lineno))
    return out


def test_only_the_kernels_import_numba():
    """DESIGN.md: numba (and llvmlite) stay inside modelc/kernels; everything else asks the kernels."""
    hits = []
    for name, path in _all_modules().items():
        if name == "modelc.kernels" or name.startswith("modelc.kernels."):
            continue
        hits += [f"{name}:{line}" for top, line in _absolute_imports(path) if top in ("numba", "llvmlite")]
    assert not hits, f"numba imported outside modelc/kernels: {hits}"


def test_the_cli_never_imports_loadtests():
    hits = []
    for path in sorted(PKG.rglob("*.py")):
        hits += [f"{path.relative_to(ROOT)}:{line}" for top, line in _absolute_imports(path) if top == "loadtests"]
    assert not hits, f"the shipped package imports loadtests: {hits}"


def test_exceptions_are_still_needed():
    edges = {(src, dst) for src, dst, _ in _graph()}
    stale = [pair for pair in EXCEPTIONS if pair not in edges]
    assert not stale, f"remove these from EXCEPTIONS, nothing imports that way any more: {stale}"
