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


# ---- the Markdown pass and incremental streaming, over random inputs (hypothesis) in the real browser
CHECK_RENDER = """([text, cuts]) => {
  const { renderMarkdown } = window.__md;
  const { MarkdownView } = window.__view;
  const html = renderMarkdown(text);
  const tpl = document.createElement("template");
  tpl.innerHTML = html;
  const ATTRS = { A: ["href", "target", "rel"], DIV: ["class"], SPAN: ["class"], BUTTON: ["class", "type", "title"] };
  const TAGS = "P BR STRONG EM DEL CODE PRE A H1 H2 H3 H4 H5 H6 HR TABLE THEAD TBODY TR TH TD UL OL LI BLOCKQUOTE DIV SPAN BUTTON";
  const problems = [];
  for (const e of tpl.content.querySelectorAll("*")) {
    if (!TAGS.split(" ").includes(e.tagName)) problems.push(`tag ${e.tagName}`);
    for (const a of e.attributes) {
      if (!(ATTRS[e.tagName] || []).includes(a.name)) problems.push(`attribute ${a.name} on ${e.tagName}`);
    }
    if (e.tagName === "A") {
      const href = e.getAttribute("href");
      if (e.getAttribute("target") !== "_blank") problems.push(`target=${e.getAttribute("target")}`);
      if (e.getAttribute("rel") !== "noopener noreferrer") problems.push(`rel=${e.getAttribute("rel")}`);
      if (!/^(https?:\\/\\/|mailto:)/i.test(href) || !text.includes(href)) problems.push(`href=${href}`);
    }
    const cls = e.getAttribute("class");
    if (e.tagName === "DIV" && cls !== "code") problems.push(`div class=${cls}`);
    if (e.tagName === "SPAN" && !/^(code-lang|tok-(comment|string|number|keyword))$/.test(cls)) problems.push(`span class=${cls}`);
  }
  const box = document.createElement("div");
  const view = new MarkdownView(box);
  for (const c of [...cuts, text.length]) view.update(text.slice(0, c));
  const whole = document.createElement("div");
  whole.innerHTML = html;
  if (box.innerHTML !== whole.innerHTML) problems.push(`streamed ${box.innerHTML} != whole ${whole.innerHTML}`);
  return problems;
}"""
PIECES = [
    "a", "b ", "x_y", "_blank", "target", "*", "**", "_", "__", "~~", "`", "```", "```py\n", "~~~\n", "\n", "\n\n",
    " ", "# ", "## ", "> ", "- ", "1. ", "| a | b |\n", "|---|---|\n", "---\n", "[", "]", "(", ")", "](",
    "[l](http://e.x/a_b*c_)", "[m_n](https://q.y/__w__?a=1&b=2)", "[bad](javascript:alert(1))", "mailto:z@y",
    "<", ">", "&", '"', "'", "=", "<em>", "def f():\n", "    return 1\n", "\t",
]  # fmt: skip


def load_modules(page) -> None:
    page.evaluate(
        "async () => { window.__md = await import('./webui/markdown.js'); window.__view = await import('./webui/view.js'); }"
    )


def test_markdown_never_rewrites_its_markup_and_streams_as_rendered_whole(server, page) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    page.goto(server.url + "/")
    load_modules(page)
    html = page.evaluate("() => window.__md.renderMarkdown('see [docs](https://x.y/a_b) and snake_')")
    assert html == (
        '<p>see <a href="https://x.y/a_b" target="_blank" rel="noopener noreferrer">docs</a> and snake_</p>'
    )  # the audit's case: the emphasis pass used to make it target="<em>blank"
    assert "<em>this</em>" in page.evaluate("() => window.__md.renderMarkdown('[a](http://b.c) _this_')")

    @settings(max_examples=400, deadline=None, database=None)
    @given(
        st.lists(st.sampled_from(PIECES), max_size=40).map("".join),
        st.lists(st.integers(0, 600), max_size=12).map(sorted),
    )
    def check(text: str, cuts: list[int]) -> None:
        assert page.evaluate(CHECK_RENDER, [text, [c for c in cuts if c <= len(text)]]) == []

    check()


def test_streaming_renders_in_time_linear_in_the_answer(server, page) -> None:
    """A long answer fed 7 characters at a time: the text handed to the renderer grows linearly with the
    answer (twice the answer, twice the work: only the open block is rendered again per chunk), where
    re-rendering the whole message per chunk grows with its square (~len^2 / 14: 18M characters here)."""
    page.goto(server.url + "/")
    load_modules(page)
    para = "Some *text* with `code` and a [link](https://e.x/a_b).\n\n"
    code = "```python\n" + "def f(x):\n    return x * 2\n" * 3 + "```\n"
    rendered = {}
    for repeats in (60, 120):
        answer = (para * 3 + code) * repeats
        rendered[repeats], whole = page.evaluate(
            """([text, step]) => {
              const box = document.createElement("div");
              const view = new window.__view.MarkdownView(box);
              for (let i = step; i < text.length + step; i += step) view.update(text.slice(0, i));
              const ref = document.createElement("div");
              ref.innerHTML = window.__md.renderMarkdown(text);
              return [view.renderedChars, box.innerHTML === ref.innerHTML];
            }""",
            [answer, 7],
        )
        assert whole
        assert rendered[repeats] <= 10 * len(answer), (rendered, len(answer))  # the open block again per chunk
    assert rendered[120] < 2.2 * rendered[60], rendered


def test_model_picker_lists_only_chat_models(server, page) -> None:
    cards = {
        "object": "list",
        "data": [
            {"id": "chatty", "object": "model", "capabilities": ["completion", "chat"]},
            {"id": "plain", "object": "model", "capabilities": ["completion"]},
            {"id": "minilm", "object": "model", "capabilities": ["embedding"]},
            {"id": "ranker", "object": "model", "capabilities": ["rerank"]},
        ],
    }
    page.route("**/v1/models", lambda route: route.fulfill(status=200, json=cards))
    page.goto(server.url + "/")
    until(page, "document.querySelectorAll('#model option').length === 1")
    assert page.locator("#model option").all_inner_texts() == ["chatty"]
    page.unroute("**/v1/models")
    cards["data"] = cards["data"][1:]
    page.route("**/v1/models", lambda route: route.fulfill(status=200, json=cards))
    page.reload()
    page.wait_for_selector("#error:has-text('No chat model')")
    assert "minilm" in page.locator("#error").inner_text()
