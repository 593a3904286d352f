"""Every x86 intrinsic in modelc/kernels is reached only through a CPU check (docs/arm.md).

An `llvm.x86.*` call compiled on aarch64 (or on an x86 CPU without the feature) is an LLVM error, so each
function that emits one must either test a cpu.py flag (`HAS_*`) itself, be called only from functions
that do, or belong to the AMX kernels (gemm_tile_amx and gemm_tile_bf16, which only plan.Path.AMX, AMX_R16 and
AMX_BF16 reach, and those only where HAS_AMX / HAS_AMX_BF16). The aarch64 check (tools/aarch64_check.sh) compiles what its tests touch; this reads all of it.
"""

from __future__ import annotations

import ast
import pathlib

KERNELS = pathlib.Path(__file__).resolve().parents[3] / "modelc" / "kernels"
AMX_MODULES = {"matmul/gemm_tile_amx.py": "gemm_tile_amx", "matmul/gemm_tile_bf16.py": "gemm_tile_bf16"}


def _uses_flag(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id.startswith("HAS_") for n in ast.walk(node))


def _x86(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("llvm.x86.")
        for n in ast.walk(node)
    )


def _modules(root: pathlib.Path = KERNELS) -> dict[str, ast.Module]:
    return {f.relative_to(root).as_posix(): ast.parse(f.read_text()) for f in sorted(root.rglob("*.py"))}


def _unguarded(root: pathlib.Path) -> list[str]:
    """'module:line name' of each top-level def that emits an llvm.x86 call with no flag check on its way."""
    mods = _modules(root)
    funcs = {}  # (module, name) -> top-level def
    callers: dict[str, set[tuple[str, str]]] = {}  # name -> the top-level defs (module, name) that mention it
    for mod, tree in mods.items():
        for top in tree.body:
            if isinstance(top, (ast.FunctionDef, ast.ClassDef)):
                funcs[(mod, top.name)] = top
                for n in ast.walk(top):
                    if isinstance(n, ast.Name) and n.id != top.name:
                        callers.setdefault(n.id, set()).add((mod, top.name))
            elif _x86(top):
                raise AssertionError(f"{mod}:{top.lineno}: an x86 intrinsic outside a function")
    ok = {key for key, f in funcs.items() if _uses_flag(f) or key[0] in AMX_MODULES}
    changed = True
    while changed:  # a helper is guarded when every function that mentions it is
        changed = False
        for key in funcs:
            users = callers.get(key[1], set()) - {key}
            if key not in ok and users and users <= ok:
                ok.add(key)
                changed = True
    assert any(_x86(f) for f in funcs.values()), "no llvm.x86 call found at all"
    return [f"{mod}:{f.lineno} {name}" for (mod, name), f in funcs.items() if _x86(f) and (mod, name) not in ok]


def test_every_x86_intrinsic_sits_behind_a_cpu_flag():
    assert _unguarded(KERNELS) == []


def test_the_check_finds_an_unguarded_intrinsic(tmp_path):
    (tmp_path / "simd").mkdir()
    (tmp_path / "simd" / "k.py").write_text(
        "def _avx2(b, x):\n    return b.call('llvm.x86.avx2.pmadd.wd', x)\n\n\n"
        "def guarded(b, x):\n    if HAS_AVX2:\n        return _avx2(b, x)\n    return x\n\n\n"
        "def plain(b, x):\n    return b.call('llvm.x86.avx2.psign.b', x)\n\n\n"
        "def leaky(b, x):\n    return _avx2(b, x)\n"
    )
    assert _unguarded(tmp_path) == ["simd/k.py:1 _avx2", "simd/k.py:11 plain"]


def test_amx_kernels_only_behind_the_amx_path():
    """gemm_tile_amx and gemm_tile_bf16 are used only inside a branch that tests an AMX path or flag."""
    uses = 0
    for mod, tree in _modules().items():
        if mod in AMX_MODULES:
            continue
        refs = {
            n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in AMX_MODULES.values()
        }  # fmt: skip
        guarded = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "AMX" in ast.unparse(node.test):
                for n in node.body:
                    guarded.update(x.lineno for x in ast.walk(n) if hasattr(x, "lineno"))
        assert refs <= guarded, f"{mod}: an AMX kernel used outside an AMX branch at lines {sorted(refs - guarded)}"
        uses += len(refs)
    assert uses >= 1
