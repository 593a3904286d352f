"""AdapterTable: ids that do not move while their adapters stay loaded, and the global scales beside them."""

from __future__ import annotations

from modelc.engine.adapter_table import AdapterTable


def test_ids_are_stable_and_never_reused() -> None:
    t = AdapterTable()
    assert [t.loaded(n, f"{n}.safetensors").adapter_id for n in ("a", "b", "c")] == [0, 1, 2]
    t.unloaded("a")
    assert [(i, n) for i, n, _, _ in t.describe()] == [(1, "b"), (2, "c")]  # nothing renumbered
    assert t.loaded("d", "d.safetensors").adapter_id == 3  # never a freed id
    assert t.loaded("b", "b2.safetensors", 2.0).adapter_id == 1  # a replacement keeps its id and place
    assert t.describe() == [
        (1, "b", "b2.safetensors", 0.0),
        (2, "c", "c.safetensors", 0.0),
        (3, "d", "d.safetensors", 0.0),
    ]
    t.unloaded("b")
    t.unloaded("c")
    t.unloaded("d")
    assert t.describe() == [] and t.loaded("e", "e.safetensors").adapter_id == 4


def test_global_scales() -> None:
    t = AdapterTable()
    t.loaded("a", "a", 2.0, global_=True)
    t.loaded("b", "b", 1.0, global_=False)
    assert t.global_scales == {"a": 2.0}
    t.scaled({"a": 0.0, "b": 0.5})
    assert [s for *_, s in t.describe()] == [0.0, 0.5] and t.global_scales == {"b": 0.5}
    t.unloaded("b")
    assert t.global_scales == {}
    assert [(r.name, r.alpha, r.global_) for r in t.rows()] == [("a", 2.0, True)]
