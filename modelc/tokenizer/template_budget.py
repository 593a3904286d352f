"""Budgets of one chat-template render: minijinja fuel and the largest prompt it may produce.

Templates come from model files, which may be hostile: without limits a template can loop or grow a
string until memory runs out, and minijinja (Rust) aborts the whole process on a failed allocation.
Fuel bounds the work (and with it what can be allocated); both budgets grow with the conversation,
so long real conversations always fit (measured: real templates burn ~0.1 fuel per input character
plus ~150 per message; the budget leaves 10x headroom). Pure functions, no minijinja here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

BASE_FUEL = 200_000
FUEL_PER_CHAR = 1
FUEL_PER_ITEM = 2_000
BASE_OUTPUT_CHARS = 1 << 20
OUTPUT_PER_CHAR = 8


def measure(value: Any, depth: int = 0) -> tuple[int, int]:
    """(characters, items) in a JSON-like value: strings' lengths, and the number of containers' entries."""
    if isinstance(value, str):
        return len(value), 0
    if depth > 64:
        return 0, 1
    chars = items = 0
    if isinstance(value, Mapping):
        for k, v in value.items():
            c, i = measure(v, depth + 1)
            chars, items = chars + c + len(str(k)), items + i + 1
    elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        for v in value:
            c, i = measure(v, depth + 1)
            chars, items = chars + c, items + i + 1
    else:
        chars = len(str(value)) if value is not None else 0
    return chars, items


def fuel_for(context: Any) -> int:
    chars, items = measure(context)
    return BASE_FUEL + FUEL_PER_CHAR * chars + FUEL_PER_ITEM * items


def max_output_chars(context: Any) -> int:
    chars, _ = measure(context)
    return BASE_OUTPUT_CHARS + OUTPUT_PER_CHAR * chars
