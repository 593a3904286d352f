"""Pull from the Ollama registry (registry.ollama.ai's v2 API), or import from an Ollama install's own
folder (~/.ollama/models, or $OLLAMA_MODELS) without a download.

A manifest (GET /v2/{namespace}/{name}/manifests/{tag}) lists layers by media type and sha256 digest:
the GGUF (`application/vnd.ollama.image.model`), the chat template, the parameters (JSON: stop
strings, sampling defaults), the system prompt and the license. Each layer used is fetched by digest
(GET /v2/{namespace}/{name}/blobs/sha256:{hex}, redirects to a blob store followed) and checked
against its digest; a local import checks the blobs' sha256 too. $MODELC_OLLAMA_REGISTRY (set by the
operator) points at another registry with the same API.

Chat template: Ollama's templates are Go templates, which modelc (Jinja, through minijinja) does not
run. The model keeps the Jinja template its GGUF carries (`tokenizer.chat_template`, present in the
GGUFs of Ollama's library); the manifest's Go template is kept beside it in the artifact's metadata
(`ollama.template`) for reference, and `modelc.chat_template_source` says which one the model uses.
A GGUF without a Jinja template gets none (requests then send token ids or a raw prompt).
Stop parameters: each stop string that is one token of the model's vocabulary becomes an end-of-
sequence id; the others are listed in `ollama.stop_unused`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from modelc.errors import ChecksumError, FormatError, NotFoundError
from modelc.ir import Model
from modelc.pull.download import (
    Plan,
    PullError,
    PullEvent,
    Report,
    check_disk,
    check_status,
    fetch,
    read_capped,
    sha256_file,
    staging_dir,
)  # fmt: skip
from modelc.pull.ref import OllamaRef

DEFAULT_REGISTRY = "https://registry.ollama.ai"
REGISTRY_HOST = "registry.ollama.ai"  # the folder an Ollama install keeps the library's manifests in
MEDIA = "application/vnd.ollama.image."
MAX_MANIFEST_BYTES = 1 << 20
MAX_SMALL_LAYER_BYTES = 1 << 20  # template, params, system
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_ACCEPT = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"


def registry_url() -> str:
    return (os.environ.get("MODELC_OLLAMA_REGISTRY") or DEFAULT_REGISTRY).rstrip("/")


def models_dir() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models")


class Layer:
    def __init__(self, media: str, digest: str, size: int) -> None:
        self.media, self.digest, self.size = media, digest, size

    @property
    def sha256(self) -> str:
        return self.digest[len("sha256:") :]


def parse_manifest(raw: bytes, label: str) -> dict[str, Layer]:
    """Layers by short media type ("model", "template", "params", "system", ...); every digest checked."""
    try:
        data = json.loads(raw)
        layers = {}
        for item in data["layers"]:
            media, digest, size = item["mediaType"], item["digest"], item["size"]
            if not isinstance(media, str) or not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
                raise ValueError("bad layer")
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise ValueError("bad size")
            short = media.removeprefix(MEDIA)
            if short == "model" and "model" in layers:
                raise ValueError("two model layers")
            layers.setdefault(short, Layer(media, digest, size))
    except (ValueError, KeyError, TypeError, RecursionError, UnicodeDecodeError):
        raise PullError(f"{label}: the manifest is malformed") from None
    if "model" not in layers:
        raise PullError(f"{label}: the manifest has no model layer")
    return layers


def plan(ref: OllamaRef, report: Report) -> Any:
    report(PullEvent("pulling manifest"))
    if ref.local:
        return _local_plan(ref)
    import httpx

    label = ref.text
    base = f"{registry_url()}/v2/{ref.namespace}/{ref.name}"
    with httpx.Client(timeout=60, trust_env=True) as client:
        try:
            with client.stream(
                "GET", f"{base}/manifests/{ref.tag}", headers={"Accept": _ACCEPT}, follow_redirects=True
            ) as resp:
                if resp.status_code == 404:
                    raise NotFoundError(f"{label}: no such model or tag in the Ollama registry")
                check_status(resp.status_code, label)
                raw = read_capped(resp, MAX_MANIFEST_BYTES, label, "the manifest")
        except httpx.TransportError as e:
            raise PullError(f"{label}: cannot reach the Ollama registry ({type(e).__name__})") from None
    layers = parse_manifest(raw, label)
    used = {k: v for k, v in layers.items() if k in ("model", "template", "params", "system")}
    for k, layer in used.items():
        if k != "model" and layer.size > MAX_SMALL_LAYER_BYTES:
            raise PullError(f"{label}: its {k} layer is larger than {MAX_SMALL_LAYER_BYTES} bytes")
    folder = staging_dir("ollama", f"{ref.namespace}/{ref.name}/{layers['model'].sha256[:16]}")

    def download(report: Report) -> Path:
        check_disk(folder, layers["model"].size)
        paths = {}
        with httpx.Client(timeout=60, trust_env=True) as client:
            for k, layer in used.items():
                name = f"{k}.gguf" if k == "model" else k
                paths[k] = fetch(client, f"{base}/blobs/{layer.digest}", folder / name, label=f"{label} {k}",
                                 size=layer.size, sha256=layer.sha256, report=report)  # fmt: skip
        report(PullEvent("verifying sha256 digest"))
        found.amend = _amender({k: p.read_bytes() for k, p in paths.items() if k != "model"}, layers, label)
        return paths["model"]

    found = Plan(layers["model"].digest, download, folder, summary=_summary(layers))
    return found


def _local_plan(ref: OllamaRef) -> Any:
    root = models_dir()
    label = ref.text
    manifest = root / "manifests" / REGISTRY_HOST / ref.namespace / ref.name / ref.tag
    try:
        if manifest.stat().st_size > MAX_MANIFEST_BYTES:
            raise PullError(f"{label}: the manifest is larger than {MAX_MANIFEST_BYTES} bytes")
        layers = parse_manifest(manifest.read_bytes(), label)
    except FileNotFoundError:
        raise NotFoundError(
            f"{label}: not in the Ollama install's folder (pull it with ollama, or set OLLAMA_MODELS)"
        ) from None
    except OSError as e:
        raise PullError(f"{label}: cannot read the Ollama manifest ({e.strerror or e})") from None

    def blob(layer: Layer) -> Path:
        p = root / "blobs" / f"sha256-{layer.sha256}"
        if not p.is_file() or p.stat().st_size != layer.size:
            raise NotFoundError(f"{label}: its blob {layer.digest[:19]} is missing from the Ollama folder")
        if sha256_file(p) != layer.sha256:
            raise ChecksumError(f"{label}: the Ollama blob {layer.digest[:19]} does not match its digest; refused")
        return p

    def load(report: Report) -> Path:
        model = blob(layers["model"])
        small = {}
        for k in ("template", "params", "system"):
            if k in layers:
                if layers[k].size > MAX_SMALL_LAYER_BYTES:
                    raise PullError(f"{label}: its {k} layer is larger than {MAX_SMALL_LAYER_BYTES} bytes")
                small[k] = blob(layers[k]).read_bytes()
        report(PullEvent("verifying sha256 digest"))
        found.amend = _amender(small, layers, label)
        return model  # packed straight from Ollama's blob: nothing is copied first

    found = Plan(layers["model"].digest, load, None, summary=_summary(layers))
    return found


def _summary(layers: dict[str, Layer]) -> str:
    extra = [k for k in layers if k in ("projector", "adapter")]
    return "model" + (f" (not used: {', '.join(extra)})" if extra else "")


def _amender(small: dict[str, bytes], layers: dict[str, Layer], label: str) -> Callable[[Model], None]:
    """The changes the manifest's template, parameters and system prompt make to the packed model."""
    try:
        template = small["template"].decode("utf-8") if "template" in small else None
        system = small["system"].decode("utf-8") if "system" in small else None
        params = json.loads(small["params"]) if "params" in small else {}
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise FormatError(f"{label}: its template, params or system layer is not valid text/JSON") from None
    if not isinstance(params, dict):
        raise FormatError(f"{label}: its params layer is not a JSON object")

    def amend(model: Model) -> None:
        meta = model.metadata
        meta["modelc.chat_template_source"] = (
            "gguf tokenizer.chat_template (Jinja)"
            if model.chat_template
            else "none (the Ollama template is a Go template)"
        )
        if template is not None:
            meta["ollama.template"] = template
        if system is not None:
            meta["ollama.system"] = system
        if params:
            meta["ollama.params"] = params
        stops = params.get("stop") or []
        if isinstance(stops, str):
            stops = [stops]
        unused = add_stop_tokens(model, [s for s in stops if isinstance(s, str)])
        if unused:
            meta["ollama.stop_unused"] = unused

    return amend


def add_stop_tokens(model: Model, stops: list[str]) -> list[str]:
    """Make each stop string that is one token of the model's vocabulary an end-of-sequence id; returns
    the stop strings that are not."""
    if not stops:
        return []
    if not model.tokenizer_json:
        return stops
    from modelc.tokenizer.build import model_tokenizer

    tok = model_tokenizer(model.tokenizer_json)  # remembered: pack's structure check does not build it again
    st = model.special_tokens
    eos = list(st.get("eos_token_ids") or ([st["eos_token_id"]] if isinstance(st.get("eos_token_id"), int) else []))
    unused = []
    for s in stops:
        tid = tok.token_to_id(s)
        if tid is None:
            unused.append(s)
        elif tid not in eos:
            eos.append(tid)
    st["eos_token_ids"] = eos
    return unused
