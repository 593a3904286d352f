"""Speculative greedy output equals plain greedy output token for token on every fixture model
variant (tests/fixtures/models/variants/*/hf), with prompt lookup and with the model as its own draft,
a sequence alone and beside others in one batch; and on the bundled model with a code-edit prompt
(where prompt lookup drafts most of the output)."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from modelc.formats.detect import read_model
from modelc.request import SamplingParams
from modelc.scheduler.sequence import Sequence
from tests.models.test_hf_variants import VARIANTS
from tests.scheduler.spec_driver import drive, make_pair


def _seqs(prompt: list[int]) -> list[Sequence]:
    p = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    other = list(reversed(prompt))
    return [
        Sequence(1, prompt + prompt, p),
        Sequence(2, other, p),
        Sequence(3, prompt[: max(2, len(prompt) // 2)] * 3, p),
    ]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_speculative_greedy_equals_plain(fixtures_dir, name):
    d = fixtures_dir / "models" / "variants" / name
    if not (d / "hf").is_dir():
        pytest.skip(f"no fixture {name}")
    src = read_model(d / "hf")
    prompt = np.load(d / "ref" / "prompt_ids.npy").tolist()
    runner, sched = make_pair(src, blocks=64, max_num_seqs=8, max_batch_tokens=64)
    base = drive(runner, sched, _seqs(prompt))
    for mode, draft in (("ngram", None), ("draft", src)):
        runner, sched = make_pair(src, blocks=64, max_num_seqs=8, max_batch_tokens=64, speculative=mode, draft=draft,
                                  spec_gamma=4)  # fmt: skip
        assert drive(runner, sched, _seqs(prompt)) == base, mode
        assert sched.pool.num_used_blocks == 0
        if mode == "draft":  # (random weights rarely repeat themselves: prompt lookup may find nothing)
            assert sched.spec_stats.num_drafts > 0


def test_bundled_model_code_edit_prompt_lookup_equals_plain():
    import modelc
    from modelc.artifact.reader import open_artifact
    from modelc.tokenizer.tokenizer import Tokenizer

    src = open_artifact(str(pathlib.Path(modelc.__file__).parent / "data" / "default.modelc"))
    tok = Tokenizer.from_json(src.tokenizer_json, src.special_tokens or {})
    code = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
    ids = tok.encode(code + "\n# again:\n" + code[:20])
    p = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    runner, sched = make_pair(src, blocks=32)
    base = drive(runner, sched, [Sequence(1, ids, p)])
    runner, sched = make_pair(src, blocks=32, speculative="ngram", spec_gamma=8)
    assert drive(runner, sched, [Sequence(1, ids, p)]) == base
    assert sched.spec_stats.num_accepted_tokens > 0
