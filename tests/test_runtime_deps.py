"""Every third-party module modelc imports at module level belongs to a declared runtime dependency.

A module that arrives only through the dev extra (or through a dependency's dependency) passes the
test suite and breaks `pip install .`: the quickstart once died on an undeclared `sniffio`. Imports
inside functions are optional paths (ray, torch, trio, PyInstaller...) and are not checked here.
"""

from __future__ import annotations

import ast
import importlib.metadata
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _declared() -> set[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower().replace("_", "-") for d in deps}


def _module_level_imports(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:  # module level only (incl. `if TYPE_CHECKING` skipped)
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_module_level_imports_are_declared_dependencies():
    declared = _declared()
    dists = importlib.metadata.packages_distributions()
    missing: dict[str, str] = {}
    for path in sorted((ROOT / "modelc").rglob("*.py")):
        for name in _module_level_imports(path):
            if name in sys.stdlib_module_names or name in {"modelc", "__future__", "_build"}:
                continue
            owners = {d.lower().replace("_", "-") for d in dists.get(name, [name])}
            if not owners & declared:
                missing[f"{path.relative_to(ROOT)}: {name}"] = ", ".join(sorted(owners))
    assert not missing, f"imports outside [project.dependencies]: {missing}"
