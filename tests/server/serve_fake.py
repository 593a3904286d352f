"""Run the real daemon (hypercorn) on a FakeEngine (or `--tiny`: the real AsyncEngine on the tiny
random llama of tests/server/tiny_model.py) in this process: `python -m tests.server.serve_fake`.

Prints `READY <port>` on stdout once listening; exits 0 after SIGTERM/SIGINT and a drain.
Used by the subprocess tests and loadtests/http_overhead.py.
"""

from __future__ import annotations

import argparse
import sys

import anyio

from modelc.server.daemon import serve
from modelc.server.state import ServerConfig
from tests.server.fake_engine import FakeEngine, FakeTemplate


class ThinkTemplate(FakeTemplate):
    """FakeTemplate whose source shows <think>: the server splits the reply's reasoning off."""

    @property
    def source(self) -> str:
        return "{{ '<think>' }}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--delay", type=float, default=0.0, help="seconds per token")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--drain", type=float, default=30.0)
    ap.add_argument("--tiny", action="store_true", help="serve the tiny real model instead of the FakeEngine")
    ap.add_argument("--fim", action="store_true", help="with --tiny: a vocabulary with fill-in-the-middle tokens")
    ap.add_argument("--reply", default=None, help="FakeEngine: this fixed output text")
    ap.add_argument("--alias", action="append", default=[], help="another name the served model answers to")
    ap.add_argument(
        "--think", action="store_true", help="FakeEngine: a chat template that shows <think> (reasoning on)"
    )
    args = ap.parse_args()

    def ready(host: str, port: int) -> None:
        print(f"READY {port}", flush=True)

    engine_config = None
    if args.tiny:
        from modelc.config import CacheConfig, EngineConfig
        from tests.server.tiny_model import make_served_model

        engine, engine_config = make_served_model(fim=args.fim), EngineConfig(cache=CacheConfig(kv_cache_tokens=8192))
    else:
        engine = FakeEngine(delay_s=args.delay, reply=args.reply)
        if args.think:
            engine.chat_template = ThinkTemplate()
    anyio.run(
        lambda: serve(
            engine,
            port=args.port,
            engine_config=engine_config,
            server_config=ServerConfig(api_key=args.api_key, log_requests=False, model_aliases=tuple(args.alias)),
            ready_cb=ready,
            drain_timeout_s=args.drain,
        )
    )
    print("STOPPED", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
