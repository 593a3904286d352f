"""Prompt lookup drafts: continue the sequence the way it continued the last time its tail occurred.

The tail n-gram of prompt + output (n from max_n down to min_n) is searched for in the earlier
tokens; the most recent earlier occurrence's next k tokens are the draft. Free (no model), and
strong where the output repeats the input: code edits, RAG quotes, summaries that copy names.
Pure numpy over one sequence; O(length x n) per call.
"""

from __future__ import annotations

import numpy as np

MAX_NGRAM = 4
MIN_NGRAM = 2


def propose(tokens: list[int] | np.ndarray, k: int, *, max_n: int = MAX_NGRAM, min_n: int = MIN_NGRAM) -> list[int]:
    """Up to k drafted tokens (possibly none) following the latest earlier match of the tail n-gram."""
    if k <= 0:
        return []
    t = np.asarray(tokens, dtype=np.int64)  # (L,)
    length = t.shape[0]
    for n in range(max_n, min_n - 1, -1):
        starts = length - n  # candidate match starts 0..starts-1 (the tail itself starts at `starts`)
        if starts <= 0:
            continue
        hits = t[0:starts] == t[starts]
        for j in range(1, n):
            hits &= t[j : starts + j] == t[starts + j]
        found = np.flatnonzero(hits)
        if found.size:
            begin = int(found[-1]) + n
            return t[begin : begin + k].tolist()
    return []
