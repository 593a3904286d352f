"""`modelc perplexity`: llama-perplexity's figure for a model on a text file, in-process (no daemon).

Thin shell over Engine.perplexity (modelc/engine/perplexity.py holds the arithmetic);
`eval_perplexity` is shared with `modelc pack --eval`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from modelc.cli.console import json_text
from modelc.errors import InvalidRequestError


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidRequestError(f"text file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidRequestError(f"cannot read text file {path}: {e}") from None


def eval_perplexity(
    source: Any,
    text: str,
    *,
    ctx: int,
    stride: int | None,
    threads: int | None = None,
    kv_dtype: str = "auto",
    label: str = "perplexity",
) -> Any:
    """Perplexity of an opened model source (artifact or raw weights) on `text`, with a progress bar."""
    from modelc.api.engine import Engine
    from modelc.cli.console import progress_bar

    eng = Engine(source, threads=threads, kv_cache_tokens=16, kv_dtype=kv_dtype)
    with progress_bar(label) as update:
        return eng.perplexity(text, ctx=ctx, stride=stride, progress=update)


def format_result(r: Any) -> str:
    mode = f"stride {r.stride}" if r.stride else "chunks"
    return (
        f"PPL = {r.ppl:.4f} +/- {r.ppl_stderr:.5f}  ({r.num_scored} tokens scored in {r.num_chunks} "
        f"windows of {r.ctx}, {mode})"
    )


def perplexity_cmd(
    model: str = typer.Argument(..., help="A .modelc file, a store name, or raw weights (GGUF, HF folder...)."),
    text_file: Path = typer.Argument(..., help="UTF-8 text to score (e.g. wiki.test.raw)."),
    ctx: int = typer.Option(512, "--ctx", "-c", help="Tokens per evaluated window (llama.cpp -c)."),
    stride: int | None = typer.Option(
        None,
        "--stride",
        help="Slide windows by N tokens and score the last N "
        "(llama.cpp --ppl-stride); default: disjoint chunks, score the second half.",
    ),
    threads: int | None = typer.Option(None, "--threads", help="numba threads (default: all cores)."),
    kv_cache_dtype: str = typer.Option(
        "auto",
        "--kv-cache-dtype",
        help="KV cache type (auto: f16 for quantized weights, else f32; f32, f16, q8_0, mixed).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Perplexity of MODEL on TEXT_FILE, computed as llama.cpp's llama-perplexity does.

    Example: modelc perplexity tiny wiki.test.raw --ctx 512
    """
    from modelc.config import parse_kv_dtype
    from modelc.source import open_model

    text = read_text(text_file)
    res = eval_perplexity(
        open_model(model), text, ctx=ctx, stride=stride, threads=threads, kv_dtype=parse_kv_dtype(kv_cache_dtype)
    )
    if as_json:
        typer.echo(json_text(res.as_dict()))
    else:
        typer.echo(format_result(res))


def register(app: typer.Typer) -> None:
    app.command("perplexity")(perplexity_cmd)
