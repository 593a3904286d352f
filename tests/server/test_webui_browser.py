"""The web UI in a real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright for Python)
against the real server on the tiny random llama: streaming, stop (the server frees its KV blocks),
reload (the conversation is kept), model switch; then, with the chat endpoint answered by the test
(page.route), Markdown/code/reasoning rendering, HTML escaping, error display, export/import and a
phone-width layout. Skips without /usr/bin/chromium (.ci/run installs it).

MODELC_WEBUI_SHOTS=DIR saves screenshots of the main states there (docs/webui/ holds a set).
"""

from __future__ import annotations

import json
import os
import pathlib
import time

import httpx
import pytest

from tests.server.live import LiveServer

CHROMIUM = pathlib.Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (.ci/run installs Debian's chromium)"),
    pytest.mark.slow,
]
sync_api = pytest.importorskip("playwright.sync_api")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHOTS = os.environ.get("MODELC_WEBUI_SHOTS")


def shot(page, name: str) -> None:
    if SHOTS:
        pathlib.Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(pathlib.Path(SHOTS) / f"{name}.png"))


@pytest.fixture(scope="module")
def server():
    s = LiveServer("--tiny", "--alias", "tiny-alias", timeout_s=120)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1200, "height": 800}, accept_downloads=True)
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    ctx.close()
    assert not errors, errors


def until(page, js: str, timeout_s: float = 60.0) -> None:
    """Poll a JS expression from here (the page's CSP forbids the eval that wait_for_function uses)."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(js):
        assert time.monotonic() < deadline, f"timed out waiting for {js}"
        page.wait_for_timeout(50)


def metrics_idle(url: str) -> bool:
    text = ""
    for _ in range(300):
        text = httpx.get(url + "/metrics").text
        if "modelc_kv_blocks_used 0.0" in text and "modelc_num_requests_running 0.0" in text:
            return True
        time.sleep(0.05)
    return False


def settings(page, **fields: str) -> None:
    if page.locator("#settings").is_hidden():
        page.click("#settings-toggle")
    for name, value in fields.items():
        page.fill(f"#{name}", value)
        page.dispatch_event(f"#{name}", "change")


def last_answer(page) -> str:
    return page.locator("article.message.assistant .content").last.inner_text()


def test_stream_stop_reload_switch_model(server, page) -> None:
    bodies: list[dict] = []
    page.on(
        "request",
        lambda r: bodies.append(json.loads(r.post_data)) if r.url.endswith("/v1/chat/completions") else None,
    )
    page.goto(server.url + "/")
    until(page, "document.querySelectorAll('#model option').length === 2")
    assert page.locator("#model option").all_inner_texts() == ["tiny-llama", "tiny-alias"]
    settings(page, max_tokens="3000", temperature="0", extra='{"ignore_eos": true}')
    page.fill("#input", "hello there")
    page.press("#input", "Enter")
    until(page, "document.querySelector('article.message.assistant .content').innerText.length > 10")
    seen = len(last_answer(page))
    until(
        page, f"document.querySelector('article.message.assistant .content').innerText.length > {seen + 10}"
    )  # still streaming: more text arrived
    assert page.locator("#stop").is_visible() and page.locator("#send").is_hidden()
    shot(page, "streaming")
    page.click("#stop")
    page.wait_for_selector("article.message.assistant .stats:has-text('stopped')")
    assert metrics_idle(server.url), "the server kept the stopped request's KV blocks"
    stopped_text = last_answer(page)
    assert page.locator("#send").is_visible()
    stats = page.locator("article.message.assistant .stats").last.inner_text()
    assert "TTFT" in stats and "tok/s" in stats

    page.reload()
    page.wait_for_selector(".conversations li.active")
    assert page.locator(".conversations li.active .open").inner_text() == "hello there"
    assert page.locator("article.message.user .content").inner_text() == "hello there"
    assert last_answer(page) == stopped_text

    page.select_option("#model", "tiny-alias")
    settings(page, max_tokens="4", extra="")
    page.fill("#input", "again")
    page.click("#send")
    page.wait_for_selector("article.message.assistant >> nth=1 >> .stats:has-text('4 tokens')")
    assert bodies[-1]["model"] == "tiny-alias" and bodies[-1]["max_tokens"] == 4
    assert [m["role"] for m in bodies[-1]["messages"]] == ["user", "assistant", "user"]
    assert bodies[0]["ignore_eos"] is True and "ignore_eos" not in bodies[-1]
    assert metrics_idle(server.url)


MARKDOWN = (
    "Here is a function:\n\n```python\ndef add(a, b):\n    # sum\n    return a + b\n```\n\n"
    'It returns **the sum** of `a` and `b`:\n\n- fast\n- small\n\n<img src=x onerror="window.hacked=1">'
)


def sse(chunks: list[dict]) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def chat_chunks(reasoning: str, content: str) -> list[dict]:
    out = [
        {"choices": [{"index": 0, "delta": {"reasoning_content": reasoning[i : i + 8]}}]}
        for i in range(0, len(reasoning), 8)
    ]
    out += [{"choices": [{"index": 0, "delta": {"content": content[i : i + 6]}}]} for i in range(0, len(content), 6)]
    out.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    out.append({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 42, "total_tokens": 51}})
    return out


def test_rendering_errors_export_import_phone(server, page, tmp_path) -> None:
    replies: list[dict] = []
    sent: list[dict] = []

    def answer(route) -> None:
        sent.append(json.loads(route.request.post_data))
        r = replies.pop(0)
        route.fulfill(status=r["status"], headers=r.get("headers", {}), body=r["body"])

    page.route("**/v1/chat/completions", answer)
    page.goto(server.url + "/")
    until(page, "document.querySelectorAll('#model option').length === 2")
    replies.append(
        {
            "status": 200,
            "headers": {"Content-Type": "text/event-stream"},
            "body": sse(chat_chunks("The user wants an adder. Keep it short.", MARKDOWN)),
        }
    )
    page.fill("#input", "Write an add function in Python")
    page.press("#input", "Enter")
    page.wait_for_selector("article.message.assistant .stats:has-text('42 tokens')")
    msg = page.locator("article.message.assistant").last
    assert msg.locator("details.reasoning").count() == 1
    assert msg.locator("details.reasoning").get_attribute("open") is None  # collapsed
    assert msg.locator("pre code .tok-keyword").first.inner_text() == "def"
    assert msg.locator(".content strong").inner_text() == "the sum"
    assert msg.locator(".content li").count() == 2
    assert msg.locator(".content img").count() == 0 and page.evaluate("window.hacked") is None
    assert "<img src=x" in msg.locator(".content").inner_text()
    shot(page, "chat")
    msg.locator("details.reasoning summary").click()
    assert "adder" in msg.locator(".reasoning-body").inner_text()
    settings(page)
    shot(page, "reasoning-settings")
    page.click("#settings-toggle")

    for status, kind, text in (
        (429, "rate_limit", "Rate limited (HTTP 429) (retry after 7s)"),
        (503, "overloaded", "Server busy"),
        (400, "invalid_request_error", "Bad request (HTTP 400)"),
    ):
        err = {"error": {"message": f"server said {status}", "type": kind, "param": None, "code": None}}
        replies.append(
            {"status": status, "headers": {"Retry-After": "7"} if status == 429 else {}, "body": json.dumps(err)}
        )
        page.fill("#input", f"try {status}")
        page.click("#send")
        page.wait_for_selector(f"#error:has-text('server said {status}')")
        assert text in page.locator("#error").inner_text()
        if status == 429:
            shot(page, "error-429")

    replies.append(
        {"status": 200, "headers": {"Content-Type": "text/event-stream"}, "body": sse(chat_chunks("", "ok"))}
    )
    page.fill("#input", "fine")
    page.click("#send")
    page.wait_for_selector("article.message.assistant >> nth=4 >> .stats:has-text('42 tokens')")
    # the turns that got only an error are not sent again
    assert [m["content"] for m in sent[-1]["messages"]] == ["Write an add function in Python", MARKDOWN, "fine"]

    with page.expect_download() as dl:
        page.click("#export")
    exported = tmp_path / "chats.json"
    dl.value.save_as(exported)
    data = json.loads(exported.read_text())
    assert data["format"] == "modelc-conversations" and len(data["conversations"]) == 1
    page.evaluate("localStorage.clear()")
    page.reload()
    page.wait_for_selector(".empty")
    assert page.locator(".conversations li").count() == 0
    page.set_input_files("#import-file", str(exported))
    page.wait_for_selector(".conversations li.active")
    assert page.locator("article.message.assistant pre code").count() == 1

    page.set_viewport_size({"width": 390, "height": 844})
    until(page, "document.getElementById('sidebar').getBoundingClientRect().right <= 0")  # slid off-screen
    assert page.locator("#open-sidebar").is_visible() and page.locator("#input").is_visible()
    box = page.locator("article.message.assistant").last.bounding_box()
    assert box["width"] <= 390
    shot(page, "phone")
    page.click("#open-sidebar")
    until(page, "document.getElementById('sidebar').getBoundingClientRect().x >= 0")
    shot(page, "phone-sidebar")


def test_api_key_reasoning_and_a_real_400(browser) -> None:
    s = LiveServer("--api-key", "s3cret", "--think", "--reply", "<think>pondering the greeting</think>Hello **there**")
    try:
        ctx = browser.new_context()
        page = ctx.new_page()
        page.goto(s.url + "/")  # the page itself is public
        page.wait_for_selector("#error:has-text('HTTP 401')")
        assert "set the API key" in page.locator("#error").inner_text()
        assert page.locator("#settings").is_visible()  # opened to ask for the key
        page.fill("#api-key", "s3cret")
        page.dispatch_event("#api-key", "change")
        until(page, "document.querySelectorAll('#model option').length === 1")
        assert page.locator("#error").is_hidden()
        page.fill("#input", "hi")
        page.press("#input", "Enter")
        page.wait_for_selector("article.message.assistant .stats")
        msg = page.locator("article.message.assistant").last
        assert msg.locator(".content").inner_text() == "Hello there"
        assert msg.locator(".content strong").inner_text() == "there"
        # the server's reasoning_content deltas, shown collapsed
        assert msg.locator("details.reasoning").get_attribute("open") is None
        assert msg.locator(".reasoning-body").text_content() == "pondering the greeting"  # hidden: not inner_text
        settings(page, extra='{"temperature": -1}')
        page.fill("#input", "again")
        page.click("#send")
        page.wait_for_selector("#error:has-text('HTTP 400')")
        assert "temperature" in page.locator("#error").inner_text()
        ctx.close()
    finally:
        s.stop()
