"""The chat template worker process (`python -m modelc.tokenizer.template_child`): renders templates for its
parent's template_worker.RenderWorker, one JSON line in, one out, under an address-space limit.

tokenizer/template_worker.py tells why templates render in a child process, and the protocol.
"""

from __future__ import annotations

import contextlib
import json
import resource
import sys
from datetime import datetime
from typing import Any

import minijinja

from modelc.errors import ModelcError
from modelc.tokenizer import chat_template
from modelc.tokenizer.chat_template import _environment, _one_line
from modelc.tokenizer.template_worker import MAX_CACHED, WORKER_MEMORY_BYTES


def serve() -> None:
    """The worker: limit its own memory, then answer render requests until stdin closes."""

    class ParentClock(datetime):
        """strftime_now() shows the parent's clock (so a caller that fixes the time fixes it here too)."""

        at: datetime | None = None

        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return cls.at or datetime.now(tz)

    chat_template.datetime = ParentClock  # type: ignore[misc]

    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    envs: dict[str, Any] = {}
    out = sys.stdout.buffer
    out.write(b'{"ready": true}\n')
    out.flush()
    for line in sys.stdin.buffer:
        req = json.loads(line)
        env = envs.get(req["source"])
        if env is None:
            env = _environment()
            env.add_template("chat", req["source"])
            if len(envs) >= MAX_CACHED:
                envs.pop(next(iter(envs)))
            envs[req["source"]] = env
        env.fuel = int(req["fuel"])
        ParentClock.at = datetime.fromisoformat(req["now"]) if req.get("now") else None
        try:
            text = env.render_template("chat", **req["context"])
            reply: dict[str, Any] = {"text": text}
            if len(text) > int(req["limit"]):
                reply = {
                    "error": f"it produced {len(text)} characters, more than the limit of {req['limit']}",
                    "kind": "output",
                }
        except minijinja.TemplateError as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, ModelcError):
                reply = {"error": cause.message, "kind": "raise"}
            elif "out of fuel" in str(exc):
                reply = {"error": "it ran past its work budget (a loop too long)", "kind": "fuel"}
            else:  # its message only: str(exc) shows the template's source lines around the error
                reply = {"error": _one_line(exc), "kind": "other"}
        except ModelcError as exc:  # raise_exception's own error, passed through by minijinja as is
            reply = {"error": exc.message, "kind": "raise"}
        except Exception as exc:  # noqa: BLE001 - everything becomes a reply; the parent decides
            reply = {"error": f"{type(exc).__name__}: {exc}"[:300], "kind": "other"}
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    serve()
