"""Hugging Face model folder reader: config.json, tokenizer files, generation config, weights.

Maps config.json to the normalized config keys of docs/architecture.md; weights come from
model.safetensors (single or sharded) or pytorch_model.bin (single or sharded) as zero-copy
views. Sentence-transformers folders also give config["pooling"]. No maths here.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

from modelc.errors import FormatError, UnsupportedError
from modelc.formats import pytorch, safetensors
from modelc.formats.hf_config import normalize_config
from modelc.formats.hf_tokenizer import tokenizer_json_for_folder
from modelc.ir import Model, TensorData
from modelc.tokenizer.reasoning import HARMONY, reasoning_syntax


def _json(path: pathlib.Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise FormatError(f"{path.parent.name}/{path.name}: not valid JSON ({e})") from None


def _json_if(path: pathlib.Path) -> Any:
    return _json(path) if path.is_file() else None


def _object_if(path: pathlib.Path) -> dict[str, Any]:
    """A JSON object file's content, {} where the file is absent; FormatError for any other JSON value."""
    v = _json_if(path)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise FormatError(f"{path.parent.name}/{path.name}: not a JSON object")
    return v


def _text(path: pathlib.Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"{path.parent.name}/{path.name}: not UTF-8 text") from None
    except OSError as e:
        raise FormatError(f"{path.parent.name}/{path.name}: cannot read: {e.strerror or e}") from None


def _tokenizer_json(folder: pathlib.Path, text: str) -> dict[str, Any]:
    """tokenizer.json parsed, and checked the way the runtime will build it (the tokenizers library): a file it
    refuses is refused here, at pack, instead of packing a model that cannot load."""
    from modelc.tokenizer.build import build

    where = f"{folder.name}/tokenizer.json"
    try:
        tok_json = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise FormatError(f"{where}: not valid JSON ({e})") from None
    if not isinstance(tok_json, dict):
        raise FormatError(f"{where}: not a JSON object")
    try:
        build(text)  # remembered: pack's structure check does not build it again
    except Exception as e:  # tokenizers raises plain Exception subclasses
        raise FormatError(f"{where}: not a tokenizer the tokenizers library reads ({str(e).splitlines()[0]})") from None
    return tok_json


def _weights(folder: pathlib.Path) -> tuple[dict[str, TensorData], dict[str, Any]]:
    """Tensors from the folder's weight files, safetensors preferred."""
    single = folder / "model.safetensors"
    if single.is_file():
        tensors, meta = safetensors.read_tensors(single)
        return tensors, {"safetensors_metadata": meta} if meta else {}
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        tensors, meta = safetensors.read_sharded(index)
        return tensors, {"safetensors_metadata": meta} if meta else {}
    others = sorted(folder.glob("*.safetensors"))
    if len(others) == 1:
        tensors, meta = safetensors.read_tensors(others[0])
        return tensors, {"safetensors_metadata": meta} if meta else {}
    pt = folder / "pytorch_model.bin"
    if pt.is_file():
        return pytorch.read_pytorch_tensors(pt)
    pt_index = folder / "pytorch_model.bin.index.json"
    if pt_index.is_file():
        tensors: dict[str, TensorData] = {}
        notes: dict[str, Any] = {}
        weight_map = safetensors.read_index(pt_index)
        for shard in sorted(set(weight_map.values())):
            part, meta = pytorch.read_pytorch_tensors(folder / shard)
            for name in part:
                if name in tensors:
                    raise FormatError(f"duplicate tensor name {name} in shard {shard}")
            tensors.update(part)
            notes.update(meta)
        return tensors, notes
    raise FormatError(f"{folder.name}: no weights found (model.safetensors, *.index.json or pytorch_model.bin)")


def _token_str(v: Any) -> str | None:
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), str):
        return v["content"]
    return None


def _token_ids(tok_json: dict[str, Any] | None) -> dict[str, int]:
    """token text -> id from tokenizer.json's added tokens and model vocab."""
    ids: dict[str, int] = {}
    if not tok_json:
        return ids
    vocab = (tok_json.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        ids.update({k: v for k, v in vocab.items() if isinstance(v, int)})
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        ids.update({p[0]: i for i, p in enumerate(vocab) if isinstance(p, list) and p})
    for t in tok_json.get("added_tokens") or []:
        if isinstance(t, dict) and isinstance(t.get("content"), str) and isinstance(t.get("id"), int):
            ids[t["content"]] = t["id"]
    return ids


def _adds_bos(tok_json: dict[str, Any] | None, bos: str | None) -> bool:
    post = (tok_json or {}).get("post_processor") or {}
    procs = post.get("processors", [post]) if post.get("type") == "Sequence" else [post]
    for p in procs:
        if p.get("type") == "TemplateProcessing":
            first = (p.get("single") or [{}])[0]
            return "SpecialToken" in first and (bos is None or first["SpecialToken"].get("id") == bos)
        if p.get("type") in ("BertProcessing", "RobertaProcessing"):
            return True
    return False


def _ints(v: Any) -> list[int]:
    if isinstance(v, int) and not isinstance(v, bool):
        return [v]
    if isinstance(v, list):
        return [x for x in v if isinstance(x, int) and not isinstance(x, bool)]
    return []


def keep_special_text(template: str | None) -> dict[str, bool]:
    """{"keep_special_text": True} for harmony (gpt-oss), whose channel markers are special tokens that the
    generated text must keep so the reasoning can be split from the answer; else {}."""
    return {"keep_special_text": True} if template and reasoning_syntax(template) is HARMONY else {}


def _chat_template(folder: pathlib.Path, tok_cfg: dict[str, Any]) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return _text(jinja)
    tpl = tok_cfg.get("chat_template")
    if isinstance(tpl, str):
        return tpl
    if isinstance(tpl, list):
        named = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
        chosen = named.get("default") or next(iter(named.values()), None)
        return chosen if isinstance(chosen, str) else None
    return None


def _special_tokens(
    cfg: dict[str, Any], tok_cfg: dict[str, Any], gen: dict[str, Any], tok_json: dict[str, Any] | None
) -> dict[str, Any]:
    ids = _token_ids(tok_json)
    bos, eos, pad = (_token_str(tok_cfg.get(k)) for k in ("bos_token", "eos_token", "pad_token"))
    bos_id = ids.get(bos) if bos else None
    if bos_id is None:
        bos_id = next(iter(_ints(gen.get("bos_token_id")) + _ints(cfg.get("bos_token_id"))), None)
    eos_ids = _ints(gen.get("eos_token_id")) + _ints(cfg.get("eos_token_id"))
    if eos and eos in ids:
        eos_ids.append(ids[eos])
    pad_ids = _ints(gen.get("pad_token_id")) + _ints(cfg.get("pad_token_id")) + ([ids[pad]] if pad in ids else [])
    id_to_tok = {v: k for k, v in ids.items()}
    eot = next((ids[t] for t in ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>") if t in ids), None)
    sp: dict[str, Any] = {
        "bos_token_id": bos_id,
        "eos_token_ids": list(dict.fromkeys(eos_ids)),
        "pad_token_id": pad_ids[0] if pad_ids else None,
        "eot_token_id": eot if eot in eos_ids else None,
        "bos_token": bos or id_to_tok.get(bos_id),
        "eos_token": eos or (id_to_tok.get(eos_ids[0]) if eos_ids else None),
    }
    add_bos = tok_cfg.get("add_bos_token")
    sp["add_bos_token"] = bool(add_bos) if isinstance(add_bos, bool) else _adds_bos(tok_json, sp["bos_token"])
    return sp


def _pooling(folder: pathlib.Path) -> dict[str, Any] | None:
    """Sentence-transformers pooling: {"mode": "mean"|"cls"|..., "normalize": bool}, or None."""
    modules = _json_if(folder / "modules.json")
    if not isinstance(modules, list):
        return None
    pooling_dir = next((m.get("path") for m in modules if "Pooling" in str(m.get("type", ""))), None)
    normalize = any("Normalize" in str(m.get("type", "")) for m in modules)
    pcfg = _json_if(folder / pooling_dir / "config.json") if pooling_dir else None
    if not isinstance(pcfg, dict):
        return None
    for key, mode in (
        ("pooling_mode_cls_token", "cls"),
        ("pooling_mode_mean_tokens", "mean"),
        ("pooling_mode_max_tokens", "max"),
        ("pooling_mode_lasttoken", "last"),
    ):
        if pcfg.get(key):
            return {"mode": mode, "normalize": normalize}
    raise UnsupportedError(f"{folder.name}: unsupported sentence-transformers pooling {pcfg}")


def read_folder_metadata(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """Everything but the weights: architecture, config, tokenizer, chat template, special tokens..."""
    f = pathlib.Path(folder)
    cfg = _json_if(f / "config.json")
    if not isinstance(cfg, dict):
        raise FormatError(f"{f.name}: no config.json (not a Hugging Face model folder)")
    tok_cfg = _object_if(f / "tokenizer_config.json")
    gen = _object_if(f / "generation_config.json")
    tok_text = _text(f / "tokenizer.json") if (f / "tokenizer.json").is_file() else None
    if tok_text is None:
        tok_text = tokenizer_json_for_folder(f, tok_cfg)
    tok_json = _tokenizer_json(f, tok_text) if tok_text is not None else None
    architecture, config = normalize_config(cfg)
    pooling = _pooling(f)
    if pooling:
        config["pooling"] = pooling
    st_cfg = _json_if(f / "sentence_bert_config.json")
    if isinstance(st_cfg, dict) and isinstance(st_cfg.get("max_seq_length"), int):
        config["max_seq_length"] = st_cfg["max_seq_length"]
    if "vocab_size" not in config and tok_json:
        config["vocab_size"] = len(_token_ids(tok_json))
    template = _chat_template(f, tok_cfg)
    return {
        "architecture": architecture,
        "config": config,
        "metadata": {"hf_config": cfg},
        "tokenizer_json": tok_text,
        "chat_template": template,
        "special_tokens": {**_special_tokens(cfg, tok_cfg, gen, tok_json), **keep_special_text(template)},
        "generation_config": {k: v for k, v in gen.items() if not k.startswith("_") and k != "transformers_version"},
    }


_GENERIC_FOLDER_NAMES = {"hf", "model", "models", "weights", "checkpoint", "original"}


def folder_model_name(folder: pathlib.Path) -> str:
    """A readable default name: the folder's, or the repo's for a Hugging Face cache snapshot."""
    f = folder.resolve()
    if f.parent.name == "snapshots" and f.parent.parent.name.startswith("models--"):
        return f.parent.parent.name.removeprefix("models--").split("--")[-1]
    if f.name.lower() in _GENERIC_FOLDER_NAMES and f.parent.name:
        return f.parent.name
    return f.name


# A multimodal checkpoint's language model (Gemma 3 4B+): its tensors under these prefixes
_TEXT_PREFIXES = (
    ("language_model.model.", "model."),
    ("model.language_model.", "model."),
    ("language_model.lm_head.", "lm_head."),
)


def text_model_tensors(tensors: dict[str, TensorData]) -> dict[str, TensorData]:
    """The language model's tensors renamed as a text-only checkpoint's (the vision tower is left out)."""
    out: dict[str, TensorData] = {}
    for name, t in tensors.items():
        for old, new in _TEXT_PREFIXES:
            if name.startswith(old):
                out[new + name[len(old) :]] = t
                break
        else:
            if name == "lm_head.weight":
                out[name] = t
    return out


def read_hf(folder: str | os.PathLike[str], name: str | None = None) -> Model:
    """A Model from a Hugging Face model folder (naming "hf")."""
    f = pathlib.Path(folder)
    meta = read_folder_metadata(f)
    tensors, weight_notes = _weights(f)
    if meta["config"].get("text_of_multimodal"):  # keep the language model's tensors under its own names
        tensors = text_model_tensors(tensors)
    config = meta["config"]
    # The stored tensors are the truth: no lm_head means the output reuses the embeddings.
    config["tie_word_embeddings"] = bool(config.get("tie_word_embeddings")) or "lm_head.weight" not in tensors
    meta["metadata"].update(weight_notes)
    return Model(name=name or folder_model_name(f), tensors=tensors, source_format="hf", naming="hf", **meta)
