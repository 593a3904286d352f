"""Write tests/fixtures/rerank/: two tiny random cross-encoders (BertForSequenceClassification and
XLMRobertaForSequenceClassification, num_labels=1) as Hugging Face folders, and transformers' scores.

Dev-only tool (needs torch + transformers, which modelc never imports); run it in the reference venv:

    /work/refvenv/bin/python tools/make_tiny_cross_encoders.py

Each folder holds config.json, model.safetensors (float32) and a word-level tokenizer.json whose
post-processor lays out pairs as the real models do ([CLS] q [SEP] d [SEP] with token types 0/1 for
BERT; <s> q </s></s> d </s> for XLM-R). reference.json has the query, the documents and, per model,
transformers' logits for every (query, document) pair, computed on the `tokenizers` encodings.
Weights are drawn with a larger std than transformers' init so the scores differ clearly.
"""

from __future__ import annotations

import json
import pathlib

import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "rerank"
WORDS = (
    "what is the capital of france paris city river seine berlin germany a big small cat dog sat on mat "
    "eats fish and bread in morning tower eiffel museum louvre art food wine cheese train fast slow"
).split()
QUERY = "what is the capital of france"
DOCUMENTS = [
    "paris is the capital of france",
    "berlin is a big city in germany",
    "the cat sat on the mat",
    "the eiffel tower and the louvre museum are in paris",
    "a dog eats fish and bread in the morning",
]


def tokenizer(kind: str) -> Tokenizer:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] if kind == "bert" else ["<s>", "<pad>", "</s>", "<unk>"]
    vocab = {w: i for i, w in enumerate([*specials, *WORDS])}
    unk = specials[1] if kind == "bert" else "<unk>"
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if kind == "bert":
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
    else:
        tok.post_processor = processors.RobertaProcessing(("</s>", vocab["</s>"]), ("<s>", vocab["<s>"]))
    tok.add_special_tokens(specials)
    return tok


def build(kind: str) -> tuple[torch.nn.Module, Tokenizer]:
    tok = tokenizer(kind)
    common = dict(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=1,
        attn_implementation="eager",
    )
    if kind == "bert":
        cfg = transformers.BertConfig(**common, type_vocab_size=2, pad_token_id=0)
        model = transformers.BertForSequenceClassification(cfg)
    else:
        cfg = transformers.XLMRobertaConfig(**common, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)
        model = transformers.XLMRobertaForSequenceClassification(cfg)
    model.config.architectures = [type(model).__name__]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p) if name.endswith("weight") else 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    return model.eval(), tok


def scores(model: torch.nn.Module, tok: Tokenizer) -> list[float]:
    enc = [tok.encode(QUERY, d) for d in DOCUMENTS]
    T = max(len(e.ids) for e in enc)
    pad = model.config.pad_token_id
    ids = torch.tensor([e.ids + [pad] * (T - len(e.ids)) for e in enc])
    types = torch.tensor([e.type_ids + [0] * (T - len(e.ids)) for e in enc])
    mask = torch.tensor([[1] * len(e.ids) + [0] * (T - len(e.ids)) for e in enc])
    with torch.no_grad():
        logits = model(input_ids=ids, token_type_ids=types, attention_mask=mask).logits  # (S, 1)
    return [float(x) for x in logits[:, 0]]


def main() -> None:
    torch.manual_seed(0)
    ref = {"query": QUERY, "documents": DOCUMENTS, "transformers": transformers.__version__, "logits": {}}
    for kind, name in (("bert", "tiny_bert_ce"), ("xlmr", "tiny_xlmr_ce")):
        model, tok = build(kind)
        folder = OUT / name
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
        (folder / "config.json").write_text(model.config.to_json_string())
        tok.save(str(folder / "tokenizer.json"))
        ref["logits"][name] = scores(model, tok)
    (OUT / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    print(json.dumps(ref["logits"], indent=1))


if __name__ == "__main__":
    main()
