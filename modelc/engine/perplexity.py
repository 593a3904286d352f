"""Perplexity of a token stream, computed the way llama.cpp's `llama-perplexity` does.

Pure arithmetic over a `logits(tokens, first)` callable; no model or I/O knowledge here.

NOTE: the two llama.cpp modes, as its tools/perplexity/perplexity.cpp implements them:
- chunks (default): the tokens are cut into floor(N / ctx) disjoint chunks of ctx tokens; the
  first token of each chunk is replaced by BOS when the tokenizer adds BOS; the logits at
  positions first .. ctx-2 (first = ctx // 2) score the tokens at first+1 .. ctx-1, so each
  chunk scores ctx - first - 1 tokens. At least 2 * ctx tokens are needed.
- stride: windows of ctx tokens start every `stride` tokens ((N - ctx + stride - 1) // stride
  windows); the last `stride` tokens of each window are scored (positions ctx-stride-1 ..
  ctx-2 predicting the next token). llama.cpp writes BOS into the token array only after the
  window was decoded, so its windows run on the raw tokens: so do ours.
PPL = exp(mean NLL); the ± is llama.cpp's: ppl * sqrt((E[nll^2] - E[nll]^2) / (count - 1)).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from modelc.errors import InvalidRequestError

LogitsFn = Callable[[np.ndarray, int], np.ndarray]  # (tokens (T,), first) -> (T - first, V) float32


@dataclass(frozen=True, slots=True)
class PerplexityResult:
    ppl: float
    ppl_stderr: float  # llama.cpp's "+/-" (0.0 where it is undefined)
    nll: float  # mean negative log-likelihood, nats per token
    num_scored: int  # tokens scored
    num_chunks: int
    num_tokens: int  # tokens in the text (with BOS when the tokenizer adds it)
    ctx: int
    stride: int | None
    chunk_ppls: tuple[float, ...] = field(default=())  # running PPL after each chunk, as llama.cpp prints

    def as_dict(self) -> dict:
        return {
            "ppl": self.ppl,
            "ppl_stderr": self.ppl_stderr,
            "nll": self.nll,
            "num_scored": self.num_scored,
            "num_chunks": self.num_chunks,
            "num_tokens": self.num_tokens,
            "ctx": self.ctx,
            "stride": self.stride,
            "chunk_ppls": list(self.chunk_ppls),
        }


def token_log_probs(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(n,) float64 log softmax(logits[i])[targets[i]] for logits (n, V)."""
    x = logits.astype(np.float64)  # (n, V)
    m = x.max(axis=1, keepdims=True)
    lse = np.log(np.exp(x - m).sum(axis=1)) + m[:, 0]
    return x[np.arange(len(targets)), targets] - lse


def num_chunks(num_tokens: int, ctx: int, stride: int | None) -> int:
    """How many forwards of ctx tokens the evaluation takes; a too-short text is a clear error."""
    if ctx < 4:
        raise InvalidRequestError(f"ctx must be >= 4, got {ctx}", param="ctx")
    if stride is None:
        if num_tokens < 2 * ctx:
            raise InvalidRequestError(
                f"the text has {num_tokens} tokens; perplexity with ctx {ctx} needs at least {2 * ctx}"
            )
        return num_tokens // ctx
    if not 0 < stride < ctx:
        raise InvalidRequestError(f"stride must be in 1..{ctx - 1}, got {stride}", param="stride")
    if num_tokens < 2 * ctx:
        raise InvalidRequestError(
            f"the text has {num_tokens} tokens; perplexity with ctx {ctx} needs at least {2 * ctx}"
        )
    return (num_tokens - ctx + stride - 1) // stride


def perplexity(
    logits: LogitsFn,
    tokens: Sequence[int],
    *,
    ctx: int = 512,
    stride: int | None = None,
    bos_id: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> PerplexityResult:
    """Perplexity of `tokens` (already tokenized with BOS when the model adds it).

    bos_id: replace each chunk's first token with it (llama.cpp does when the vocab adds BOS);
    None leaves the chunks as they are. progress(done, total) is called after each chunk.
    """
    toks = np.asarray(list(tokens), np.int32)
    n = num_chunks(len(toks), ctx, stride)
    first = ctx // 2 if stride is None else ctx - stride - 1
    nll = nll2 = 0.0
    count = 0
    running = []
    for i in range(n):
        start = i * ctx if stride is None else i * stride
        chunk = toks[start : start + ctx].copy()  # (ctx,)
        if bos_id is not None and stride is None:
            chunk[0] = bos_id
        lg = logits(chunk, first)  # (ctx - first, V)
        lp = token_log_probs(lg[: ctx - 1 - first], toks[start + first + 1 : start + ctx])
        nll -= float(lp.sum())
        nll2 += float((lp * lp).sum())
        count += len(lp)
        running.append(math.exp(nll / count))
        if progress is not None:
            progress(i + 1, n)
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    err = ppl * math.sqrt(var / (count - 1)) if var > 0 and count > 1 else 0.0
    return PerplexityResult(ppl, err, mean, count, n, len(toks), ctx, stride, tuple(running))
