"""Store commands: inspect, pack, list, rm, cp, switch, verify, export (local files only, no daemon).

Thin shells: argument parsing and rich output here, the work in modelc.artifact / modelc.store /
modelc.formats.export_*. Errors are ModelcError; cli/main.py prints them on one line.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from modelc import architectures
from modelc.cli.console import human_bytes, json_text, out, progress_bar
from modelc.errors import ChecksumError, UnsupportedError

QUANT_PREVIEW = ("fp32", "fp16", "int8", "int4", "q4_0", "q8_0", "q4_k")


def quant_sizes(source: Any) -> dict[str, int]:
    """Bytes the model would take after `modelc pack --quantize KIND` (docs/artifact.md), by pack's own
    rules: only the tensors pack quantizes change (embedding tables and the output head stay as stored
    without --quantize-embeddings/--quantize-output; norms and biases always do), each at the kind its
    rows allow (quantize.effective_kind: rows that are not whole blocks fall back); int8/int4 add one
    F32 scale per row. "fp32" is every float tensor as F32."""
    # lazy: the CLI imports this module for every command (even --help); numpy and the packer load only here
    from modelc.artifact.quantize import effective_kind, should_quantize
    from modelc.ir import SCALE_SUFFIX

    sizes = dict.fromkeys(QUANT_PREVIEW, 0)
    for name, t in source.tensors.items():
        if name.endswith(SCALE_SUFFIX):
            continue
        float_like = t.dtype.value in ("F32", "F16", "BF16", "F64")
        sizes["fp32"] += 4 * t.num_elements if float_like else t.nbytes
        for preview in QUANT_PREVIEW[1:]:
            kind = "f16" if preview == "fp16" else preview
            sizes[preview] += (
                _quantized_bytes(t, effective_kind(kind, t.shape[-1]))
                if (len(t.shape) >= 2 and should_quantize(name, t, kind))
                else t.nbytes
            )
    return sizes


def _quantized_bytes(t: Any, kind: str) -> int:
    from modelc.ir import DataType

    rows = t.num_elements // t.shape[-1]
    dtype = {"f16": DataType.F16, "bf16": DataType.BF16, "int8": DataType.I8, "int4": DataType.I4}.get(kind)
    if dtype is None:
        dtype = DataType[kind.upper()]
    scales = 4 * rows if kind in ("int8", "int4") else 0
    return dtype.nbytes((rows, t.shape[-1])) + scales


def describe(source: Any, path: Path) -> dict[str, Any]:
    """The inspect summary as plain data (used for --json and the table)."""
    # lazy: the CLI imports this module for every command (even --help); the model stack loads only here
    from modelc.capabilities import source_capabilities
    from modelc.models.residency import would_run

    header = getattr(source, "header", None)
    fmt = f"modelc (from {source.source_format or '?'})" if header is not None else source.source_format
    return {
        "path": str(path),
        "name": source.name,
        "architecture": source.architecture,
        "format": fmt,
        "num_params": source.num_params,
        "total_bytes": source.total_bytes,
        "file_bytes": path.stat().st_size if path.is_file() else None,
        "config": source.config,
        "special_tokens": source.special_tokens,
        "has_tokenizer": bool(source.tokenizer_json),
        "has_chat_template": bool(source.chat_template),
        "capabilities": source_capabilities(source),
        "weights": would_run(source),  # resident or streamed, as `modelc run` would pick here and now
        "provenance": (header or {}).get("provenance"),
        "metadata": source.metadata,
        "tensors": [
            {
                "name": n,
                "dtype": source.tensors[n].dtype.value,
                "shape": list(source.tensors[n].shape),
                "nbytes": source.tensors[n].nbytes,
            }
            for n in sorted(source.tensors)
        ],
    }


def _print_summary(info: dict[str, Any]) -> None:
    out.print(f"[bold]{info['name']}[/bold]  ({info['path']})")
    out.print(f"architecture: {info['architecture']}   format: {info['format']}")
    out.print(f"parameters: {info['num_params']:,}   tensor bytes: {human_bytes(info['total_bytes'])}")
    out.print("capabilities: " + (", ".join(info["capabilities"]) or "none"))
    out.print(f"weights under `modelc run` here: {info['weights']['reason']}")
    if info["provenance"]:
        p = info["provenance"]
        out.print(f"packed by modelc {p.get('modelc_version', '?')} at {p.get('created', '?')}")
    table = Table("tensor", "dtype", "shape", "bytes", box=None, pad_edge=False)
    for t in info["tensors"]:
        table.add_row(t["name"], t["dtype"], "x".join(map(str, t["shape"])) or "scalar", human_bytes(t["nbytes"]))
    out.print(table)
    if info["config"]:
        out.print("config: " + json.dumps(info["config"], default=str))
    meta = {k: v for k, v in info["metadata"].items() if len(json.dumps(v, default=str)) <= 200}
    if meta:
        out.print("metadata:")
        for k in sorted(meta):
            out.print(f"  {k}: {json.dumps(meta[k], default=str)}")


def inspect_cmd(
    file: Path = typer.Argument(..., help="A weights file/folder or a .modelc artifact (or a store name)."),
    format: str | None = typer.Option(None, "-f", "--format", help="Source format (default: detected)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    show_quant_sizes: bool = typer.Option(False, "--quant-sizes", help="Preview the size under each quant format."),
) -> None:
    """Summarize a model: name, architecture, format, parameters, size, tensors, metadata.

    Example: modelc inspect model.safetensors --quant-sizes
    """
    from modelc.pack import load_source, resolve_source

    path = resolve_source(file)
    source = load_source(path, format=format)
    if show_quant_sizes:
        current = source.total_bytes
        sizes = quant_sizes(source)
        if as_json:
            out.print_json(data={"current_bytes": current, "sizes_bytes": sizes})
            return
        table = Table("format", "size (MB)", "vs current", box=None, pad_edge=False)
        table.add_row("current", f"{current / 1e6:.2f}", "")
        for k, v in sizes.items():
            pct = (v - current) / current * 100 if current else 0.0
            table.add_row(k, f"{v / 1e6:.2f}", f"{pct:+.1f}%")
        out.print(table)
        return
    info = describe(source, path)
    if as_json:
        typer.echo(json_text(info, indent=1))  # strict: metadata may hold NaN or inf
    else:
        _print_summary(info)


def pack_cmd(
    file: Path = typer.Argument(
        ...,
        help="Weights file or folder (GGUF, safetensors/HF folder, ONNX, PyTorch, .modelc), or a store name "
        "(`default`: the bundled model) to pack again.",
    ),
    format: str | None = typer.Option(None, "-f", "--format", help="Source format (default: detected)."),
    output: Path | None = typer.Option(None, "-o", "--output", help="Write here instead of into the store."),
    name: str | None = typer.Option(None, "--name", help="Store name (default: the model's name)."),
    arch: str | None = typer.Option(
        None, "--arch", help=f"Override the architecture: {', '.join(architectures.FAMILY)}."
    ),
    compress: str | None = typer.Option(None, "--compress", help="Per-tensor compression: zstd or none."),
    compress_level: int | None = typer.Option(
        None, "--compress-level", min=1, max=22, help="zstd level, 1-22 (default 3); with --compress zstd."
    ),
    quantize: str | None = typer.Option(
        None, "--quantize", help="f16, bf16, int8, int4, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q6_k, iq4_nl."
    ),
    prune: float | None = typer.Option(None, "--prune", help="Zero weights with |w| below this threshold."),
    chat_template: Path | None = typer.Option(None, "--chat-template", help="Jinja file replacing the chat template."),
    quantize_embeddings: bool = typer.Option(False, "--quantize-embeddings", help="Quantize the embedding table too."),
    quantize_output: bool = typer.Option(False, "--quantize-output", help="Quantize the output head too."),
    source_hash: bool = typer.Option(
        False,
        "--source-hash/--no-source-hash",
        help="Also record the source file's sha256 in the provenance (one more pass over the file); by default "
        "the source is identified by its size and modification time. --no-source-hash is that default.",
    ),
    eval_text: Path | None = typer.Option(
        None, "--eval", help="Print the perplexity on this text before and after packing (llama-perplexity's figure)."
    ),
    eval_ctx: int = typer.Option(512, "--eval-ctx", help="Window size for --eval."),
) -> None:
    """Pack weights into one .modelc file (into the store unless -o is given).

    Example: modelc pack ./tiny-llama/hf --name tiny --quantize q8_0 --eval wiki.test.raw
    """
    from modelc.pack import pack_model

    if compress_level is not None and compress != "zstd":
        # the level of a compression not asked for was ignored, and the file written uncompressed
        raise typer.BadParameter("needs --compress zstd", param_hint="--compress-level")
    before = None
    if eval_text is not None:
        from modelc.cli.eval_cmds import eval_perplexity, read_text
        from modelc.pack import load_source, resolve_source

        text = read_text(eval_text)
        src = load_source(resolve_source(file), format=format)
        if arch:
            src.architecture = architectures.check(arch)
        before = eval_perplexity(src, text, ctx=eval_ctx, stride=None, label="perplexity (source)")

    with progress_bar("packing") as update:
        result = pack_model(
            file,
            out=output,
            name=name,
            format=format,
            arch=arch,
            compress=compress,
            level=3 if compress_level is None else compress_level,
            quantize=quantize,
            prune=prune,
            chat_template=chat_template,
            quantize_embeddings=quantize_embeddings,
            quantize_output=quantize_output,
            progress=update,
            source_hash=source_hash,
        )
    if prune is not None:
        out.print(f"pruned {result.num_pruned:,} of {result.num_params:,} weights (|w| < {prune})")
    if quantize is not None:
        out.print(f"quantized {len(result.quantized)} tensors to {quantize}")
        for tensor, used in sorted(result.stored_as.items()):
            # rows that are not whole blocks of the asked kind are stored in the nearest kind that fits
            out.print(f"  {tensor}: stored as {used} (its rows are not whole {quantize} blocks)")
    out.print(f"packed {result.name} -> {result.path} ({human_bytes(result.path.stat().st_size)})")
    if before is not None:
        from modelc.artifact.reader import open_artifact
        from modelc.cli.eval_cmds import format_result

        after = eval_perplexity(
            open_artifact(result.path), text, ctx=eval_ctx, stride=None, label="perplexity (packed)"
        )
        out.print(f"perplexity before: {format_result(before)}")
        out.print(f"perplexity after:  {format_result(after)}")
        out.print(f"change: {(after.ppl / before.ppl - 1) * 100:+.3f}%")


def list_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the models in the local store ($MODELC_HOME/models).

    Example: modelc list --json
    """
    from modelc import store

    rows = store.list_models()
    if as_json:
        data = [
            {
                "name": r.name,
                "version": r.version,
                "active": r.active,
                "path": str(r.path),
                "architecture": r.architecture,
                "num_params": r.num_params,
                "dtypes": r.dtypes,
                "size_bytes": r.size_bytes,
                "modified": _iso(r.modified),
                "error": r.error,
            }
            for r in rows
        ]
        typer.echo(json.dumps(data, indent=1))
        return
    if not rows:
        out.print(f"no models in {store.models_dir()}")
        return
    table = Table("name", "ver", "arch", "params", "dtypes", "size", "modified", box=None, pad_edge=False)
    for r in rows:
        ver = f"v{r.version}" + ("*" if r.active else "")
        arch = r.architecture if r.error is None else "[red]unreadable[/red]"
        table.add_row(r.name, ver, arch, f"{r.num_params:,}", r.dtypes, human_bytes(r.size_bytes), _iso(r.modified))
    out.print(table)
    out.print("* active version")


def rm_cmd(
    name: str = typer.Argument(..., help="Store name."),
    all_versions: bool = typer.Option(False, "--all", help="Also remove the older versions."),
    force: bool = typer.Option(False, "--force", help="Remove the active file even when older versions exist."),
) -> None:
    """Remove a model from the store.

    Example: modelc rm tiny --all
    """
    from modelc import store

    for p in store.remove(name, all_versions=all_versions, force=force):
        out.print(f"removed {p}")


def cp_cmd(
    src: str = typer.Argument(..., help="Store name or .modelc path."),
    dst: str = typer.Argument(..., help="New store name (must not exist)."),
) -> None:
    """Copy a model (store name or file) to a new store name.

    Example: modelc cp tiny tiny-experiment
    """
    from modelc import store

    out.print(f"copied to {store.copy(src, dst)}")


def switch_cmd(
    name: str = typer.Argument(..., help="Store name."),
    version: int = typer.Argument(..., help="Version number to make active."),
) -> None:
    """Make another stored version of a model the active one.

    Example: modelc switch tiny 1
    """
    from modelc import store

    store.switch(name, version)
    out.print(f"{name}: version {version} is active")


def verify_cmd(file: str = typer.Argument(..., help=".modelc path or store name.")) -> None:
    """Check an artifact's structure and every tensor's digest (BLAKE3, or SHA-256 in older files).

    Example: modelc verify tiny
    """
    from modelc import store
    from modelc.artifact.verify import verify_artifact

    path = store.resolve(file)
    with progress_bar("verifying") as update:
        report = verify_artifact(path, progress=update)
    if not report.ok:
        more = f" (and {len(report.bad_tensors) - 1} more)" if len(report.bad_tensors) > 1 else ""
        raise ChecksumError(f"{path}: tensor {report.bad_tensors[0]} does not match its digest{more}")
    out.print(f"ok: {path} ({report.num_tensors} tensors, {human_bytes(report.stored_bytes)} checked)")


def export_cmd(
    artifact: str = typer.Argument(..., help=".modelc path or store name."),
    to: str = typer.Option(..., "--to", help="safetensors or gguf."),
    output: Path = typer.Option(..., "-o", "--output", help="File to write."),
) -> None:
    """Export an artifact back to safetensors or GGUF.

    Example: modelc export tiny --to gguf -o tiny.gguf
    """
    from modelc import store
    from modelc.artifact.reader import open_artifact

    art = open_artifact(store.resolve(artifact))
    with progress_bar(f"exporting to {to}") as update:
        if to == "safetensors":
            from modelc.formats.export_safetensors import export_safetensors

            export_safetensors(art, output, progress=update)
        elif to == "gguf":
            from modelc.formats.export_gguf import export_gguf

            export_gguf(art, output, progress=update)
        else:
            raise UnsupportedError(f"cannot export to {to!r}; use safetensors or gguf")
    out.print(f"exported {art.name} -> {output} ({human_bytes(os.path.getsize(output))})")


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect_cmd)
    app.command("pack")(pack_cmd)
    app.command("list")(list_cmd)
    app.command("rm")(rm_cmd)
    app.command("cp")(cp_cmd)
    app.command("switch")(switch_cmd)
    app.command("verify")(verify_cmd)
    app.command("export")(export_cmd)
