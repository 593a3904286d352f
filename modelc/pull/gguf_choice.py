"""Which GGUF files of a repo to download: one quant, every part of a split GGUF, never a projector.

The quant in a file name is matched case-insensitively, as a word ending in '.' or '-' (the
Hub's Ollama form `hf.co/ORG/REPO:q4_k_m` and llama.cpp's `-hf ORG/REPO:Q4_K_M` do the same). With no
quant named, Q4_K_M is taken when the repo has it, as Ollama and llama.cpp do; the Hub's Ollama
endpoint otherwise "picks one reasonable quant type present inside the repo" without saying which,
so modelc takes the one closest to Q4_K_M in DEFAULT_ORDER (4-bit first, then 5, 6 and 8 bits, then
3 and 2, then the float files), and the first model file when no name carries a known quant.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from modelc.errors import NotFoundError

DEFAULT_ORDER = (
    "Q4_K_M", "Q4_K_S", "Q4_0", "Q4_1", "IQ4_XS", "IQ4_NL", "Q5_K_M", "Q5_K_S", "Q5_0", "Q5_1", "Q6_K", "Q8_0",
    "Q3_K_L", "Q3_K_M", "Q3_K_S", "IQ3_M", "IQ3_S", "IQ3_XS", "IQ3_XXS", "Q2_K", "IQ2_M", "BF16", "F16", "F32",
)  # fmt: skip
SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-")


def is_model_gguf(path: str) -> bool:
    """A GGUF that holds a model (not a vision projector, an importance matrix or a draft head)."""
    name = path.rsplit("/", 1)[-1].lower()
    return name.endswith(".gguf") and not any(k in name for k in _NOT_MODELS)


def has_quant(path: str, quant: str) -> bool:
    """Whether the file name carries `quant` (any case) as a word followed by '.' or '-'."""
    name = path.rsplit("/", 1)[-1]
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(quant)}[.-]", name, re.IGNORECASE) is not None


def quant_of(path: str) -> str | None:
    """The known quant a file name carries (the longest match), or None."""
    found = [q for q in DEFAULT_ORDER if has_quant(path, q)]
    return max(found, key=len) if found else None


def _first_parts(files: Iterable[str]) -> list[str]:
    out = []
    for f in sorted(files):
        m = SPLIT.match(f)
        if is_model_gguf(f) and (m is None or int(m["no"]) == 1):
            out.append(f)
    return out


def choose(files: Iterable[str], quant: str | None, *, repo: str) -> list[str]:
    """The files to download for `quant` (None: the default): one GGUF, or every part of a split one."""
    files = list(files)
    firsts = _first_parts(files)
    if not firsts:
        raise NotFoundError(f"hf.co/{repo} has no GGUF model file")
    if quant is not None:
        picked = next((f for f in firsts if has_quant(f, quant)), None)
        if picked is None:
            have = sorted({q for f in firsts if (q := quant_of(f))})
            raise NotFoundError(
                f"hf.co/{repo} has no {quant} GGUF (it has: {', '.join(have) or ', '.join(firsts[:8])})"
            )
    else:
        picked = next((f for q in DEFAULT_ORDER for f in firsts if has_quant(f, q)), firsts[0])
    return split_parts(picked, files, repo=repo)


def split_parts(first: str, files: Iterable[str], *, repo: str) -> list[str]:
    """[first] for a single-file GGUF; every part NAME-0000i-of-0000n.gguf, in order, for a split one."""
    m = SPLIT.match(first)
    if m is None:
        return [first]
    count = int(m["count"])
    have = set(files)
    # the parts keep the first one's spelling of '-of-' and its case of '.gguf'
    parts = [f"{m['prefix']}-{i:05d}-of-{count:05d}{first[-5:]}" for i in range(1, count + 1)]
    missing = [p for p in parts if p not in have]
    if missing:
        raise NotFoundError(f"hf.co/{repo}: split GGUF {first} lacks part(s) {', '.join(missing[:4])}")
    return parts
