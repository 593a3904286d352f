"""Pull from the Hugging Face Hub through huggingface_hub: a GGUF (one quant, split parts followed) or a
safetensors repo (config, tokenizer, shards).

Every Hub request goes through the library, so HF_TOKEN (or a saved `hf auth login`) and HF_ENDPOINT
(a mirror) work as in every HF tool; the endpoint is read when a pull starts, not when the library
was imported. The calls:
- `HfApi.model_info(repo, revision, files_metadata=True)`: GET /api/models/{repo}/revision/{rev}
  ?blobs=true -> the commit, every file with its size, git object id and, for LFS files, sha256.
  The pull pins that commit for every file it downloads.
- `get_hf_file_metadata(hf_hub_url(...))`: HEAD /{repo}/resolve/{commit}/{file} -> X-Repo-Commit,
  X-Linked-Etag / ETag, X-Linked-Size, and the Location of a redirect to a blob store (followed
  only by the download, and without the Authorization header when it leaves the Hub's origin).
- `file_download.http_get(location, part, resume_size=...)`: the GET, with a Range header for
  the bytes an earlier try left in the `.part` file; the library also resumes after a dropped
  connection within one try. modelc downloads over plain HTTP (never the Xet protocol), which
  every Hub file and mirror serves.
A file lands by rename only after its sha256 matches the LFS oid (git blob id for small non-LFS
files) the Hub declared; a body longer than declared is stopped at the first extra byte.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from modelc.errors import ModelcError, NotFoundError
from modelc.pull import gguf_choice
from modelc.pull.download import (
    CappedWriter,
    GatedError,
    Plan,
    PullError,
    PullEvent,
    Report,
    check_disk,
    finish,
    locked_part,
    sha256_file,
    staging_dir,
)  # fmt: skip
from modelc.pull.ref import HfRef

DEFAULT_ENDPOINT = "https://huggingface.co"
# the files of a safetensors repo that modelc.formats.hf reads (weights, config, tokenizer, template)
FOLDER_FILES = frozenset({
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "tokenizer.model", "vocab.txt", "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja",
    "chat_template.json", "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
    "model.safetensors.index.json",
})  # fmt: skip
_ST_MODULE = re.compile(r"[0-9]+_[A-Za-z]+/config\.json")  # sentence-transformers' 1_Pooling/config.json


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


class HubFile:
    """One file of the pinned commit, as model_info(files_metadata=True) declared it."""

    def __init__(self, path: str, size: int | None, sha256: str | None, blob_id: str | None) -> None:
        self.path, self.size, self.sha256, self.blob_id = path, size, sha256, blob_id


def resolve(ref: HfRef, report: Report) -> tuple[str, list[HubFile], str]:
    """(commit, the files to download, "gguf" | "hf") for `ref`, from one model_info call."""
    from huggingface_hub import HfApi

    report(PullEvent("pulling manifest"))
    info = _hub(lambda: HfApi(endpoint=endpoint()).model_info(ref.repo, revision="main", files_metadata=True), ref)
    commit = str(info.sha or "")
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise PullError(f"hf.co/{ref.repo}: the Hub did not give a commit for main")
    files: dict[str, HubFile] = {}
    for s in info.siblings or []:
        lfs = s.lfs
        files[s.rfilename] = HubFile(s.rfilename, s.size, lfs.sha256 if lfs else None, s.blob_id)
    if ref.file is not None:
        if ref.file not in files:
            raise NotFoundError(f"hf.co/{ref.repo} has no file {ref.file}")
        if not ref.file.lower().endswith(".gguf"):
            raise ModelcError(
                f"hf://{ref.repo}/{ref.file}: name a .gguf file, or the repo alone for a safetensors model"
            )
        return commit, [files[p] for p in gguf_choice.split_parts(ref.file, files, repo=ref.repo)], "gguf"
    if ref.quant is not None or any(gguf_choice.is_model_gguf(p) for p in files):
        return commit, [files[p] for p in gguf_choice.choose(files, ref.quant, repo=ref.repo)], "gguf"
    wanted = [f for p, f in sorted(files.items()) if _folder_file(p)]
    if not any(f.path.endswith(".safetensors") for f in wanted) or not any(f.path == "config.json" for f in wanted):
        raise NotFoundError(f"hf.co/{ref.repo} has neither a GGUF file nor safetensors weights with a config.json")
    return commit, wanted, "hf"


def _folder_file(path: str) -> bool:
    return ("/" not in path and (path in FOLDER_FILES or path.endswith(".safetensors"))) or bool(
        _ST_MODULE.fullmatch(path)
    )


def download(ref: HfRef, commit: str, files: list[HubFile], report: Report) -> Path:
    """Every file into the staging folder for (repo, commit), verified; returns the folder."""
    folder = staging_dir("hf", f"{ref.repo}/{commit[:12]}")
    total = sum(f.size or 0 for f in files)
    if total:
        check_disk(folder, total)
    for f in files:
        if f.sha256 is None and f.blob_id is None:
            raise PullError(f"hf.co/{ref.repo}: the Hub gave no digest for {f.path}; refusing an unverified file")
        download_file(ref.repo, commit, f, folder, report)
    return folder


def download_file(repo: str, commit: str, f: HubFile, folder: Path, report: Report) -> Path:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    dest = folder / f.path
    label = f"{repo}/{f.path}"
    if dest.is_file() and f.sha256 is not None and sha256_file(dest) == f.sha256:
        return dest  # verified by an earlier pull that did not get to pack it
    url = hf_hub_url(repo, f.path, revision=commit, endpoint=endpoint())
    meta = _hub(lambda: get_hf_file_metadata(url, endpoint=endpoint()), None, label)
    etag = (meta.etag or "").strip('"').removeprefix("W/").strip('"')
    expected = f.sha256 or f.blob_id
    if expected is not None and etag and etag != expected:
        raise PullError(f"{label}: the Hub's file metadata disagree (etag {etag[:12]} vs {expected[:12]})")
    size = f.size if f.size is not None else meta.size
    if size is None:
        raise PullError(f"{label}: the Hub did not declare its size; refusing an unbounded download")
    headers = build_hf_headers()
    if _origin(meta.location) != _origin(url):
        headers.pop("authorization", None)  # a blob store gets a signed URL, never the Hub token
    digest = f"sha256:{f.sha256}" if f.sha256 else f"git:{f.blob_id}"
    event = f"downloading {f.path}"
    with locked_part(dest) as part:
        have = part.tell()
        if have > size:
            part.seek(0)
            part.truncate(0)
            have = 0
        report(PullEvent(event, digest, size, have))
        out = CappedWriter(part, size, label)
        bar = _progress_class(lambda done: report(PullEvent(event, digest, size, done)), have)
        _hub(lambda: http_get(meta.location, out, resume_size=have, headers=headers, expected_size=size,
                              displayed_filename=f.path, tqdm_class=bar), None, label)  # fmt: skip
    return finish(dest, label, size=size, sha256=f.sha256, git_sha1=None if f.sha256 else f.blob_id)


def _progress_class(on_bytes: Any, start: int) -> type:
    """A tqdm-shaped class for http_get that turns its updates into PullEvents (no bar of its own:
    the CLI draws one from the events, the daemon streams them)."""

    class Bar:
        def __init__(self, *args: Any, initial: int = 0, **kwargs: Any) -> None:
            self.n = initial or start

        def __enter__(self) -> Bar:
            return self

        def __exit__(self, *exc: Any) -> None:
            return None

        def update(self, n: int = 1) -> None:
            self.n += n
            on_bytes(self.n)

        def close(self) -> None:
            return None

    return Bar


def _origin(url: str) -> tuple[str, str, int | None]:
    from urllib.parse import urlsplit

    u = urlsplit(url)
    return u.scheme.lower(), (u.hostname or "").lower(), u.port or {"http": 80, "https": 443}.get(u.scheme.lower())


def _host(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).netloc


def _hub(call: Any, ref: HfRef | None, label: str | None = None) -> Any:
    """Run a huggingface_hub call; its errors become ModelcErrors a user can act on (never a traceback)."""
    from huggingface_hub import errors as hub_errors

    what = label or (f"hf.co/{ref.repo}" if ref else "the Hub")
    try:
        return call()
    except ModelcError:
        raise
    except hub_errors.GatedRepoError:
        raise GatedError(
            f"{what} is gated: accept its terms on the Hub, then set HF_TOKEN to a token of that account"
        ) from None
    except hub_errors.RepositoryNotFoundError:
        raise NotFoundError(
            f"{what}: no such repo on {endpoint()} (or it is private: set HF_TOKEN to a token that can read it)"
        ) from None
    except (hub_errors.RevisionNotFoundError, hub_errors.RemoteEntryNotFoundError, hub_errors.EntryNotFoundError):
        raise NotFoundError(f"{what}: not found on {endpoint()}") from None
    except hub_errors.HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "?"
        if status == 404:
            raise NotFoundError(f"{what}: not found at {_host(endpoint())} or its blob store (404)") from None
        if status in (401, 403):
            raise GatedError(
                f"{what}: the Hub refused access ({status}); set HF_TOKEN to a token that can read it"
            ) from None
        raise PullError(f"{what}: the Hub answered HTTP {status}") from None
    except hub_errors.OfflineModeIsEnabled:
        raise PullError(f"{what}: HF_HUB_OFFLINE is set; unset it to download") from None
    except (hub_errors.HTTPError, OSError) as e:
        first = (str(e).strip().splitlines() or [""])[0][:160]
        raise PullError(f"{what}: download from {endpoint()} failed ({type(e).__name__}: {first})") from None


def search(query: str, limit: int = 20) -> list[tuple[str, int, int]]:
    """GGUF repos on the Hub whose name matches `query`: (repo, downloads, likes), most downloaded first."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint())
    found = _hub(
        lambda: list(api.list_models(search=query or None, filter="gguf", sort="downloads", limit=limit)), None
    )
    return [(m.id, int(m.downloads or 0), int(m.likes or 0)) for m in found]


def plan(ref: HfRef, report: Report) -> Any:
    """The pull's Plan: the commit and files from one model_info call; the download verifies each file."""
    commit, files, kind = resolve(ref, report)
    folder = staging_dir("hf", f"{ref.repo}/{commit[:12]}")

    def fetch(report: Report) -> Path:
        download(ref, commit, files, report)
        return folder / files[0].path if kind == "gguf" else folder

    digest = f"hf:{ref.repo}@{commit}:{files[0].path}"
    return Plan(digest, fetch, folder, summary=", ".join(f.path for f in files[:3]))
