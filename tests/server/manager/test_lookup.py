"""Requests name models by store name or under --models-dir only, adapters under --adapters-dir only;
errors quote neither file bytes nor server paths (server/manager/lookup.py and the routes using it)."""

from __future__ import annotations

import os

import pytest

from modelc import store
from modelc.artifact.tiny import make_model
from modelc.artifact.writer import write_artifact
from modelc.errors import NotFoundError
from modelc.server.manager.lookup import resolve_adapter, resolve_model
from tests.server.manager.test_ollama_routes import daemon_app

SECRET = b"root:*:SECRET-BYTES\n"


@pytest.fixture
def outside(tmp_path):
    """A file outside the store and an artifact outside the store (both must stay unreachable)."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    (d / "shadow").write_bytes(SECRET)
    write_artifact(make_model(name="stray"), d / "stray.modelc")
    return d


def test_store_names_only(home, outside) -> None:
    assert resolve_model("alpha") == store.active_path("alpha")
    for spec in (str(outside / "shadow"), str(outside / "stray.modelc"), "../elsewhere/stray.modelc",
                 "/proc/self/environ", "models/alpha.modelc", "alpha/../../elsewhere/shadow", "", "a\0b"):  # fmt: skip
        with pytest.raises(NotFoundError) as e:
            resolve_model(spec)
        told = e.value.message.replace(repr(spec), "")  # the client's own words may be echoed, nothing more
        assert str(home) not in told and "SECRET" not in told
    with pytest.raises(NotFoundError) as e:
        resolve_model("nope")
    assert str(home) not in e.value.message  # the store's location is not told to clients


def test_relative_name_never_reads_the_working_directory(home, outside, monkeypatch) -> None:
    monkeypatch.chdir(outside)
    with pytest.raises(NotFoundError):
        resolve_model("shadow")  # a valid store name, but only the store is searched


def test_models_dir(home, outside, tmp_path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    write_artifact(make_model(name="m"), allowed / "m.modelc")
    (allowed / "link.modelc").symlink_to(outside / "stray.modelc")  # a symlink out of the folder
    dirs = (str(allowed),)
    assert resolve_model("m.modelc", dirs) == (allowed / "m.modelc").resolve()
    assert resolve_model("m", dirs) == (allowed / "m.modelc").resolve()
    assert resolve_model(str(allowed / "m.modelc"), dirs) == (allowed / "m.modelc").resolve()
    for spec in ("link.modelc", str(outside / "stray.modelc"), "../elsewhere/stray.modelc", str(allowed)):
        with pytest.raises(NotFoundError) as e:
            resolve_model(spec, dirs)
        assert str(allowed) not in e.value.message.replace(repr(spec), "")


def test_adapters_dir(home, outside, tmp_path) -> None:
    ad = home / "adapters"
    (ad / "peft").mkdir(parents=True)
    (ad / "style.safetensors").write_bytes(b"")
    assert resolve_adapter("style") == (ad / "style.safetensors").resolve()
    assert resolve_adapter("peft") == (ad / "peft").resolve()
    assert resolve_adapter(str(ad / "style.safetensors")) == (ad / "style.safetensors").resolve()
    for spec in (str(outside / "shadow"), "../elsewhere/shadow", "/etc/passwd", ""):
        with pytest.raises(NotFoundError) as e:
            resolve_adapter(spec)
        assert str(home) not in e.value.message and "SECRET" not in e.value.message
    other = tmp_path / "mine"
    other.mkdir()
    (other / "x.safetensors").write_bytes(b"")
    assert resolve_adapter("x", str(other)) == (other / "x.safetensors").resolve()


pytestmark = pytest.mark.anyio


async def test_requests_cannot_open_paths(home, outside) -> None:
    async with daemon_app() as c:
        for spec in (str(outside / "shadow"), "/proc/self/environ", str(outside / "stray.modelc")):
            for path, body in (
                ("/api/show", {"model": spec}),
                ("/api/generate", {"model": spec, "prompt": "x", "stream": False}),
                ("/v1/chat/completions", {"model": spec, "messages": [{"role": "user", "content": "x"}]}),
                ("/api/load", {"model": spec}),
                ("/api/copy", {"source": spec, "destination": "copied"}),
            ):
                r = await c.post(path, json=body)
                text = (await r.get_data()).decode().replace(spec, "")
                assert r.status_code == 404, (path, spec, text)
                assert "SECRET" not in text and "root" not in text and str(home) not in text
        assert c.opener.opened == []  # nothing outside the store was ever opened
        assert not store.exists("copied")
        r = await c.post("/api/lora/load", json={"model": "alpha", "path": str(outside / "shadow")})
        assert r.status_code == 404 and str(outside) not in (await r.get_data()).decode()


async def test_show_names_no_server_path(home) -> None:
    async with daemon_app() as c:
        body = await (await c.post("/api/show", json={"model": "alpha"})).get_json()
        assert str(home) not in str(body) and "FROM alpha" in body["modelfile"]


async def test_models_dir_serves_files_there(home, tmp_path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    write_artifact(make_model(name="m"), allowed / "m.modelc")
    async with daemon_app(models_dirs=(str(allowed),), config={"models_dirs": (str(allowed),)}) as c:
        r = await c.post("/api/generate", json={"model": "m.modelc", "prompt": "x", "stream": False})
        assert r.status_code == 200, await r.get_data()
        assert (await c.post("/api/show", json={"model": "m.modelc"})).status_code == 200
        assert c.opener.opened == ["m"]


async def test_load_error_hides_the_path(home) -> None:
    bad = store.active_path("beta")
    bad.write_bytes(SECRET + b"\0" * 64)
    async with daemon_app() as c:
        from modelc.api.opener import open_engine
        from modelc.server.manager.lookup import resolve_model as rm

        c.manager._opener = open_engine  # the real opener: reads the header and fails
        r = await c.post("/api/generate", json={"model": "beta", "prompt": "x", "stream": False})
        text = (await r.get_data()).decode()
        assert r.status_code >= 400 and "SECRET" not in text and "root" not in text
        assert str(home) not in text and os.fspath(rm("beta")) not in text


async def test_model_routes_are_no_file_oracle(home, outside, monkeypatch) -> None:
    monkeypatch.chdir(outside)  # "shadow" exists in the working directory, not in the store
    async with daemon_app() as c:
        assert (await c.get("/v1/models/shadow")).status_code == 404
        assert (await c.get("/v1/models/alpha")).status_code == 200


async def test_corrupt_store_file_errors_name_the_model(home) -> None:
    store.active_path("gamma").write_bytes(SECRET + b"\0" * 64)
    async with daemon_app() as c:
        for path, body in (("/api/show", {"model": "gamma"}), ("/api/copy", {"source": "gamma", "destination": "g2"})):
            r = await c.post(path, json=body)
            text = (await r.get_data()).decode()
            assert r.status_code >= 400 and str(home) not in text and "SECRET" not in text, text
        await c.post("/api/load", json={"model": "alpha"})
        ps = (await (await c.get("/api/ps")).get_json())["models"]
        assert ps and str(home) not in str(ps)


async def test_config_counting_a_billion_layers_fails_cleanly(home) -> None:
    from modelc.api.opener import open_engine
    from modelc.models.tiny import make_tiny_llama

    model = make_tiny_llama()
    model.config = {**model.config, "num_hidden_layers": 10**9}
    store.add("huge", lambda tmp: write_artifact(model, tmp))
    async with daemon_app() as c:
        c.manager._opener = open_engine  # the real engine: the check runs before any allocation
        r = await c.post("/api/generate", json={"model": "huge", "prompt": "x", "stream": False})
        text = (await r.get_data()).decode()
        assert 400 <= r.status_code < 500 and "num_hidden_layers = 1000000000" in text, text
        assert c.manager.loaded()[0].name == "main" and len(c.manager.loaded()) == 1
