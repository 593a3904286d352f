"""gpt-oss end to end on its real tokenizer: o200k (as a gpt-oss GGUF packs it), the harmony template, and the
analysis/final channel split, through the HTTP routes on the real AsyncEngine (issue 41).

The model is a one-layer gpt-oss GGUF with the full o200k vocabulary (tests/fixtures/tokenizer/llama_cpp_vocab/
ggml-vocab-gpt-oss.gguf.xz, tools/make_o200k_fixtures.py), the gpt-oss chat template, and weights set by hand
so that greedy decoding writes one harmony answer (SCRIPT): every script token has its own embedding
dimension, the output head maps each to its successor, and the one attention head looks back at the channel
names already written (analysis, final), which is what tells the first `<|channel|>` / `<|message|>` from
the second. Its RoPE sits on the lowest-frequency pair, so the lookup does not depend on positions; the
experts are zero. Nothing is random, and the script holds on the reference numpy kernels too.
"""

from __future__ import annotations

import json
import lzma
import pathlib

import anyio
import gguf
import numpy as np
import pytest

from modelc.api.async_engine import AsyncEngine
from modelc.config import CacheConfig, EngineConfig
from modelc.formats.gguf import _special_tokens, read_gguf
from modelc.formats.gguf_file import parse_gguf
from modelc.server.app import create_app
from modelc.server.sse import parse_sse
from modelc.server.state import ServerConfig, ServerState

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
VOCAB = FIXTURES / "tokenizer" / "llama_cpp_vocab" / "ggml-vocab-gpt-oss.gguf"
TEMPLATE = FIXTURES / "templates" / "families" / "openai-gpt-oss-120b.jinja"
RENDERS = json.loads((FIXTURES / "templates" / "families" / "rendered.json").read_text())["renders"]

# o200k_harmony ids (tiktoken): the answer greedy decoding must write after the prompt's <|start|>assistant
START, ASSISTANT, CHANNEL, MESSAGE, END, RETURN = 200006, 173781, 200005, 200008, 200007, 200002
ANALYSIS, FINAL, THINK, DOT, HI, BANG = 35644, 17196, 42421, 13, 12194, 0
SCRIPT = [CHANNEL, ANALYSIS, MESSAGE, THINK, DOT, END, START, ASSISTANT, CHANNEL, FINAL, MESSAGE, HI, BANG, RETURN]
ANSWER = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi!"

D, HEAD, FFN, EXPERTS = 64, 64, 32, 4
CONST, IS_CHANNEL_NAME, SAW_ANALYSIS, SAW_FINAL, ROPE_DIM = 0, 1, 40, 41, HEAD // 2 - 1


def _weights(vocab: int) -> dict[str, np.ndarray]:
    slots = {t: 4 + i for i, t in enumerate(dict.fromkeys([ASSISTANT, *SCRIPT]))}
    emb = np.zeros((vocab, D), np.float32)
    emb[:, CONST] = 1.0
    for t, s in slots.items():
        emb[t, s] = 1.0
    emb[[ANALYSIS, FINAL], IS_CHANNEL_NAME] = 1.0
    # attention: a constant query on the slowest RoPE pair finds the channel names written so far; their values
    # (analysis, final) land in SAW_ANALYSIS / SAW_FINAL
    wk = np.zeros((HEAD, D), np.float32)
    wk[ROPE_DIM, IS_CHANNEL_NAME] = 1.0
    bq = np.zeros(HEAD, np.float32)
    bq[ROPE_DIM] = 200.0
    wv = np.zeros((HEAD, D), np.float32)
    wv[0, slots[ANALYSIS]] = wv[1, slots[FINAL]] = 0.2
    wo = np.zeros((D, HEAD), np.float32)
    wo[SAW_ANALYSIS, 0] = wo[SAW_FINAL, 1] = 1.0
    # the head: each script token's successor; <|channel|> and <|message|> look at what was written
    out = np.zeros((vocab, D), np.float32)
    for cur, nxt in zip([ASSISTANT, *SCRIPT], SCRIPT, strict=False):
        out[nxt, slots[cur]] = 10.0
    # the first time (nothing written yet) wins the tie; what attention saw decides the second, but never
    # outweighs a successor (the channel name itself is seen at its own position)
    out[ANALYSIS, CONST] = out[THINK, CONST] = 1.0
    out[FINAL, SAW_ANALYSIS], out[HI, SAW_FINAL] = 5.0, 8.0
    w = {
        "token_embd.weight": emb, "output.weight": out, "output_norm.weight": np.ones(D, np.float32),
        "blk.0.attn_norm.weight": np.ones(D, np.float32), "blk.0.post_attention_norm.weight": np.ones(D, np.float32),
        "blk.0.attn_q.weight": np.zeros((HEAD, D), np.float32), "blk.0.attn_q.bias": bq,
        "blk.0.attn_k.weight": wk, "blk.0.attn_k.bias": np.zeros(HEAD, np.float32),
        "blk.0.attn_v.weight": wv, "blk.0.attn_v.bias": np.zeros(HEAD, np.float32),
        "blk.0.attn_output.weight": wo, "blk.0.attn_output.bias": np.zeros(D, np.float32),
        "blk.0.attn_sinks.weight": np.zeros(1, np.float32),
        "blk.0.ffn_gate_inp.weight": np.zeros((EXPERTS, D), np.float32),
        "blk.0.ffn_gate_inp.bias": np.zeros(EXPERTS, np.float32),
    }  # fmt: skip
    for name, shape in (("gate", (EXPERTS, FFN, D)), ("up", (EXPERTS, FFN, D)), ("down", (EXPERTS, D, FFN))):
        w[f"blk.0.ffn_{name}_exps.weight"] = np.zeros(shape, np.float32)
        w[f"blk.0.ffn_{name}_exps.bias"] = np.zeros(shape[:2], np.float32)
    return w


def write_harmony_model(path: pathlib.Path, vocab_gguf: pathlib.Path) -> None:
    """The scripted gpt-oss GGUF: o200k tokenizer metadata copied from the vocab-only GGUF."""
    tok = parse_gguf(vocab_gguf).fields
    vocab = len(tok["tokenizer.ggml.tokens"])
    w = gguf.GGUFWriter(str(path), "gpt-oss")
    w.add_block_count(1)
    w.add_context_length(8192)
    w.add_embedding_length(D)
    w.add_feed_forward_length(FFN)
    w.add_expert_feed_forward_length(FFN)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_key_length(HEAD)
    w.add_value_length(HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(150000.0)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_sliding_window(4096)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(2)
    w.add_tokenizer_model(tok["tokenizer.ggml.model"])
    w.add_tokenizer_pre(tok["tokenizer.ggml.pre"])
    w.add_token_list(tok["tokenizer.ggml.tokens"])
    w.add_token_types([int(t) for t in tok["tokenizer.ggml.token_type"]])
    w.add_token_merges(tok["tokenizer.ggml.merges"])
    for key in ("bos", "eos", "padding"):
        getattr(w, f"add_{'pad' if key == 'padding' else key}_token_id")(tok[f"tokenizer.ggml.{key}_token_id"])
    w.add_add_bos_token(tok["tokenizer.ggml.add_bos_token"])
    w.add_chat_template(TEMPLATE.read_text())
    for name, a in _weights(vocab).items():
        w.add_tensor(name, a.astype(np.float16) if name in ("token_embd.weight", "output.weight") else a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def vocab_gguf(tmp_path_factory) -> pathlib.Path:
    p = tmp_path_factory.mktemp("o200k") / VOCAB.name
    p.write_bytes(lzma.decompress(VOCAB.with_name(VOCAB.name + ".xz").read_bytes()))
    return p


@pytest.fixture(scope="module")
def harmony_gguf(vocab_gguf, tmp_path_factory) -> pathlib.Path:
    p = tmp_path_factory.mktemp("harmony") / "gpt-oss-harmony.gguf"
    write_harmony_model(p, vocab_gguf)
    return p


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Quart is asyncio-only


def tiktoken_ids(text: str) -> list[int]:
    """tiktoken's ids of a text of the o200k fixture (tools/make_o200k_fixtures.py)."""
    inp = VOCAB.with_name(VOCAB.name + ".inp").read_bytes().decode("utf-8").split("\n__ggml_vocab_test__\n")
    out = VOCAB.with_name(VOCAB.name + ".out").read_text(encoding="utf-8").split("\n")
    return [int(x) for x in out[inp.index(text)].split()]


def test_gpt_oss_gguf_ends_generation_like_llamacpp(vocab_gguf):
    """<|end|> closes the analysis message but does not end the answer (llama.cpp's o200k_harmony rule, and
    gpt-oss's generation_config: <|return|>, <|endoftext|>, <|call|>)."""
    st = _special_tokens(parse_gguf(vocab_gguf))
    assert sorted(st["eos_token_ids"]) == [199999, 200002, 200012]
    assert st["bos_token_id"] == 199998 and st["add_bos_token"] is False


def test_prompt_tokens_match_tiktoken(harmony_gguf, frozen_now):
    """The harmony template renders as transformers does (test_family_templates.py) and its text encodes to
    tiktoken's o200k_harmony ids."""
    from modelc.tokenizer import Tokenizer
    from modelc.tokenizer.chat_template import ChatTemplate

    model = read_gguf(harmony_gguf)
    tok = Tokenizer.from_json(model.tokenizer_json, model.special_tokens)
    tpl = ChatTemplate(model.chat_template)
    for case in (r for r in RENDERS if r["template"] == TEMPLATE.name):
        text = tpl.render(case["messages"], tools=case["tools"], add_generation_prompt=case["add_generation_prompt"],
                          **case["kwargs"])  # fmt: skip
        assert text == case["expected"]
        assert tok.encode(text) == tiktoken_ids(text), case["case"]


@pytest.mark.anyio
@pytest.mark.parametrize("kernels", ["numba", pytest.param("ref", marks=pytest.mark.slow)])
async def test_harmony_answer_splits_into_reasoning_and_content(harmony_gguf, frozen_now, kernels, monkeypatch):
    """Chat through /v1/chat/completions (whole and streamed): the analysis channel comes back as
    reasoning_content, the final channel as content, and the answer ends at <|return|>."""
    if kernels == "ref":
        monkeypatch.setenv("MODELC_KERNELS", "ref")
    msgs = [{"role": "user", "content": "Hello, who are you? 你好 🦙"}]
    prompt = next(r for r in RENDERS if r["template"] == TEMPLATE.name and r["case"] == "user"
                  and r["add_generation_prompt"])["expected"]  # fmt: skip
    cfg = EngineConfig(threads=1, cache=CacheConfig(kv_cache_tokens=1024))
    with anyio.fail_after(300):
        async with AsyncEngine.open(read_gguf(harmony_gguf), cfg) as eng:
            c = create_app(ServerState(eng, ServerConfig(log_requests=False))).test_client()
            r = await c.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 40, "temperature": 0})
            body = await r.get_json()
            choice = body["choices"][0]
            assert choice["message"] == {"role": "assistant", "content": "Hi!", "reasoning_content": "Think."}
            assert choice["finish_reason"] == "stop"
            assert body["usage"]["prompt_tokens"] == len(tiktoken_ids(prompt))
            raw = await c.post("/v1/completions", json={"prompt": tiktoken_ids(prompt), "max_tokens": 40,
                                                        "temperature": 0})  # fmt: skip
            assert (await raw.get_json())["choices"][0]["text"] == ANSWER
            r = await c.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 40, "stream": True,
                                                         "temperature": 0})  # fmt: skip
            deltas = [e["choices"][0]["delta"] for e in parse_sse(await r.get_data()) if isinstance(e, dict)
                      and e.get("choices")]  # fmt: skip
            assert "".join(d.get("reasoning_content") or "" for d in deltas) == "Think."
            assert "".join(d.get("content") or "" for d in deltas) == "Hi!"
