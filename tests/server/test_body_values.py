"""A body of too many JSON values is refused (413) before it is parsed: parsing holds the GIL for
its whole length, and its cost grows with the number of values (modelc.server.body)."""

from __future__ import annotations

import json

import pytest

from modelc.errors import PayloadTooLargeError
from modelc.server.body import MAX_VALUES, parse_body
from tests.server.conftest import error_of

pytestmark = pytest.mark.anyio


def many_ids(n: int) -> bytes:
    return json.dumps({"input": [[1] * 1000] * (n // 1000 + 1)}, separators=(",", ":")).encode()


def test_parse_body_counts_values_before_parsing() -> None:
    with pytest.raises(PayloadTooLargeError, match="JSON values"):
        parse_body(many_ids(MAX_VALUES))
    assert len(parse_body(many_ids(MAX_VALUES // 2))["input"]) == MAX_VALUES // 2000 + 1
    text = json.dumps({"prompt": "word, " * 300_000}).encode()  # prose: one comma per word
    assert len(parse_body(text)["prompt"]) == 6 * 300_000


async def test_too_many_values_is_413_in_each_api_shape(client) -> None:
    headers = {"Content-Type": "application/json"}
    resp = await client.http.post("/v1/embeddings", data=many_ids(MAX_VALUES), headers=headers)
    err = await error_of(resp, 413)
    assert err["code"] == "payload_too_large" and "JSON values" in err["message"]
    resp = await client.http.post("/api/embed", data=many_ids(MAX_VALUES), headers=headers)
    assert resp.status_code == 413 and "JSON values" in (await resp.get_json())["error"]


async def test_default_body_limit_is_8_mib(client, capsys) -> None:
    """A 10 MB prompt (the issue's abuse case) is refused by its Content-Length, before it is read or
    parsed; 8 MiB still fits 2048 embedding inputs of 4 KB. `modelc run --max-body-mb` changes it."""
    from modelc.cli.main import main

    body = json.dumps({"prompt": "word " * 2_000_000, "max_tokens": 4}).encode()
    resp = await client.http.post("/v1/completions", data=body, headers={"Content-Type": "application/json"})
    err = await error_of(resp, 413)
    assert "--max-body-mb" in err["message"]
    fits = json.dumps({"input": ["word " * 800] * 2048}).encode()
    assert len(fits) < 8 * 1024 * 1024
    resp = await client.http.post("/v1/embeddings", data=fits, headers={"Content-Type": "application/json"})
    assert resp.status_code != 413
    main(["run", "--help"])
    assert "--max-body-mb" in capsys.readouterr().out
