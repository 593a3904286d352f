"""A hostile chat template fails its request with a clear 400 (TemplateError) instead of hanging or
aborting the process; real templates with long conversations still render (tokenizer/template_budget.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelc.tokenizer.chat_template import ChatTemplate, TemplateError

pytestmark = pytest.mark.anyio

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "templates"
MSGS = [{"role": "user", "content": "hi"}]

HOSTILE = {
    "string doubling": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s }}",
    "list doubling": "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}"
    "{% endfor %}{% for x in ns.l %}{{ x }}{% endfor %}",
    "repetition": "{{ 'x' * 10000000000 }}",
    "exponential macro": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% else %}x{% endif %}{% endmacro %}"
    "{{ f(60) }}",
    "nested loops": "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_template_is_a_template_error(name) -> None:
    with pytest.raises(TemplateError) as e:
        ChatTemplate(HOSTILE[name]).render(MSGS)
    assert e.value.http_status == 400 and "\n" not in e.value.message


def test_output_cap() -> None:
    # within the work budget, but a prompt far larger than the conversation
    big = "{% for i in range(3000) %}{{ 'y' * 1000 }}{% endfor %}"
    with pytest.raises(TemplateError, match="more than the limit"):
        ChatTemplate(big).render(MSGS)


@pytest.mark.parametrize("path", sorted(TEMPLATES.glob("*.jinja")), ids=lambda p: p.stem[:24])
def test_real_templates_render_long_conversations(path) -> None:
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": "word " * 400} for i in range(400)]
    text = ChatTemplate(path.read_text(), bos_token="<s>", eos_token="</s>").render(msgs)
    assert len(text) > 400 * 2000


async def test_server_answers_400_and_keeps_serving() -> None:
    import anyio

    from modelc.server.app import create_app
    from modelc.server.state import ServerConfig, ServerState
    from tests.server.fake_engine import FakeEngine

    engine = FakeEngine()
    engine.chat_template = ChatTemplate(HOSTILE["list doubling"])  # loops past fuel and would hang
    client = create_app(ServerState(engine, ServerConfig(log_requests=False))).test_client()
    body = {"messages": MSGS, "max_tokens": 2}
    with anyio.fail_after(60):
        r = await client.post("/v1/chat/completions", json=body)
        assert r.status_code == 400 and "chat template failed" in (await r.get_json())["error"]["message"]
        engine.chat_template = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
        assert (await client.post("/v1/chat/completions", json=body)).status_code == 200


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Quart is asyncio-only


def test_dead_worker_is_replaced_and_missing_worker_falls_back(monkeypatch) -> None:
    import sys

    from modelc.tokenizer import template_worker

    tpl = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert tpl.render(MSGS) == "hi"
    worker = template_worker.shared_worker()
    worker._proc.kill()  # a crash between requests
    worker._proc.wait()
    assert tpl.render(MSGS) == "hi"
    fresh = template_worker.RenderWorker()
    monkeypatch.setattr(template_worker, "_WORKER", fresh)
    monkeypatch.setattr(sys, "executable", "/bin/false")  # no worker can start here
    assert tpl.render(MSGS) == "hi"  # rendered in process, with fuel and the output cap
    assert fresh._failed_at is not None and fresh._proc is None  # not retried on every request
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # a frozen app: no interpreter to start
    monkeypatch.setattr(template_worker, "_WORKER", template_worker.RenderWorker())
    assert tpl.render(MSGS) == "hi"
    with pytest.raises(TemplateError, match="work budget|fuel"):
        ChatTemplate(HOSTILE["string doubling"]).render(MSGS)
