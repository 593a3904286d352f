from __future__ import annotations

from pathlib import Path

import pytest

from modelc import store, tmpfiles
from modelc.artifact import open_artifact, write_artifact
from modelc.artifact.tiny import make_model
from modelc.errors import ArtifactError, NotFoundError, StoreError


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def add(name: str, seed: int = 0):
    return store.add(name, lambda p: write_artifact(make_model(seed, name=f"{name}-{seed}"), p))


def names_in(folder):
    return sorted(p.name for p in folder.iterdir())


def test_versions_rule(home):
    add("m", 1)
    assert store.active_version("m") == 1 and store.versions("m") == []
    add("m", 2)
    add("m", 3)
    assert store.active_version("m") == 3 and store.versions("m") == [1, 2]
    assert open_artifact(store.resolve("m")).name == "m-3"
    assert open_artifact(store.resolve("m:1")).name == "m-1"
    store.switch("m", 1)
    assert store.active_version("m") == 1 and store.versions("m") == [2, 3]
    assert open_artifact(store.resolve("m")).name == "m-1"
    add("m", 4)  # a new pack is always the next number, and active
    assert store.active_version("m") == 4 and store.versions("m") == [1, 2, 3]
    assert open_artifact(store.resolve("m:3")).name == "m-3"
    assert not any(
        n.startswith(".") and n.endswith((".part", ".tmp", tmpfiles.SUFFIX)) for n in names_in(home / "models")
    )
    with pytest.raises(NotFoundError, match="no version 9"):
        store.switch("m", 9)


def test_list_reads_headers(home):
    add("a", 1)
    add("a", 2)
    add("user/b", 3)
    rows = store.list_models()
    assert [(r.name, r.version, r.active) for r in rows] == [("a", 1, False), ("a", 2, True), ("user/b", 1, True)]
    r = rows[-1]
    assert r.architecture == "llama" and r.num_params == make_model().num_params and r.size_bytes > 0
    assert "F32" in r.dtypes and (home / "models" / "user" / "b.modelc").is_file()
    (home / "models" / "broken.modelc").write_bytes(b"junk")
    assert [r.error is not None for r in store.list_models() if r.name == "broken"] == [True]


def test_rm_rules(home):
    add("m", 1)
    add("m", 2)
    with pytest.raises(StoreError, match="older version"):
        store.remove("m")
    removed = store.remove("m", force=True)
    assert [p.name for p in removed] == ["m.modelc"] and store.versions("m") == [1]
    with pytest.raises(NotFoundError, match="no active version"):
        store.resolve("m")
    store.switch("m", 1)
    assert store.resolve("m").name == "m.modelc"
    add("m", 3)
    assert len(store.remove("m", all_versions=True)) == 2
    assert not store.exists("m") and names_in(home / "models") == []
    with pytest.raises(NotFoundError):
        store.remove("m")
    add("u/x", 1)
    store.remove("u/x")
    assert not (home / "models" / "u").exists()


def test_cp(home, tmp_path):
    add("a", 1)
    store.copy("a", "b")
    assert open_artifact(store.resolve("b")).name == "a-1"
    with pytest.raises(StoreError, match="already exists"):
        store.copy("a", "b")
    outside = write_artifact(make_model(5, name="ext"), tmp_path / "ext.modelc")
    store.copy(outside, "team/ext")
    assert open_artifact(store.resolve("team/ext")).name == "ext"
    with pytest.raises(NotFoundError):
        store.copy("missing", "c")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"x" * 100)
    with pytest.raises(ArtifactError):
        store.copy(junk, "c")
    assert not store.exists("c")


@pytest.mark.parametrize("bad", ["", "a//b", "../x", "a.v2", "x.modelc", "a b", "-x"])
def test_bad_names(home, bad):
    with pytest.raises(StoreError, match="invalid model name"):
        store.check_name(bad)


def test_resolve_paths(home, tmp_path):
    p = write_artifact(make_model(), tmp_path / "f.modelc")
    assert store.resolve(p) == Path(p) and store.resolve(Path(p)) == Path(p)
    with pytest.raises(NotFoundError, match="no such file"):
        store.resolve(str(tmp_path / "missing.modelc"))
    with pytest.raises(NotFoundError, match="not in the store"):
        store.resolve("nothing")


def test_failed_write_leaves_store_unchanged(home):
    add("m", 1)
    before = names_in(home / "models")

    def boom(p):
        raise StoreError("boom")

    with pytest.raises(StoreError, match="boom"):
        store.add("m", boom)
    assert names_in(home / "models") == before and store.active_version("m") == 1


KILLED_PACK = """
import os, signal, sys
from modelc import store
from modelc.artifact import write_artifact
from modelc.artifact.tiny import make_model

def write(tmp):
    def progress(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9 in the middle of writing the artifact
    write_artifact(make_model(0, name="k"), tmp, progress=progress)

store.add("killed/model", write)
"""


def test_kill_9_during_pack_leaves_nothing_after_the_next_store_operation(home) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "MODELC_HOME": str(home)}
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", KILLED_PACK], env=env, cwd=root, capture_output=True)
        assert proc.returncode == -9, proc.stderr
    left = [p for p in (home / "models").rglob("*") if p.is_file()]
    assert left and all(tmpfiles.writer_pid(p.name) is not None for p in left)  # the orphans of the kills
    fd, mine = tmpfiles.make(home / "models", "live.modelc")  # a live writer's temp file stays
    os.close(fd)
    assert store.list_models() == []
    assert [p for p in (home / "models").rglob("*") if p.is_file()] == [mine]


def test_default_names_the_bundled_model_unless_the_store_has_one(home):
    bundled = store.bundled_default_path()
    if not bundled.is_file():
        pytest.skip("the bundled default model is not in this checkout")
    assert store.lookup("default") == bundled and store.resolve("default") == bundled
    with pytest.raises(NotFoundError):
        store.lookup("default:2")
    store.copy("default", "mine")  # any command that takes a model takes it
    assert open_artifact(store.lookup("mine")).name == open_artifact(bundled).name
    add("default")
    assert store.lookup("default") == store.active_path("default")  # the user's own wins
