"""modelc.tokenizer: tokenizers-backed Tokenizer, streaming IncrementalDecoder, minijinja ChatTemplate."""

from __future__ import annotations

from modelc.tokenizer.chat_template import ChatTemplate, TemplateError
from modelc.tokenizer.incremental import IncrementalDecoder
from modelc.tokenizer.tokenizer import Tokenizer

__all__ = ["ChatTemplate", "IncrementalDecoder", "TemplateError", "Tokenizer"]
