"""The bounded in-memory store behind the Responses API's previous_response_id and input_items: an LRU
of stored conversations, bounded by count and by bytes. Lost on restart (documented in docs/api.md)."""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from modelc.errors import NotFoundError

MAX_STORED = 512  # responses kept for previous_response_id (least recently used dropped first)
MAX_STORED_BYTES = 64 * 1024 * 1024  # and at most this much of their JSON text in all


@dataclass(frozen=True, slots=True)
class Stored:
    """One stored response: the conversation so far as chat messages (instructions excluded, as
    OpenAI does not carry them over) and the response object for GET /v1/responses/{id}."""

    messages: tuple[dict[str, Any], ...]
    response: dict[str, Any]
    input_items: tuple[dict[str, Any], ...] = ()  # this request's `input`, as GET .../input_items lists it

    @property
    def num_bytes(self) -> int:
        return len(json.dumps([self.messages, self.response, self.input_items], ensure_ascii=False).encode())


class ResponseStore:
    """An in-memory LRU of stored responses, bounded by count and by bytes. Lost on restart (documented)."""

    def __init__(self, max_items: int = MAX_STORED, max_bytes: int = MAX_STORED_BYTES) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.num_bytes = 0
        self._items: OrderedDict[str, tuple[Stored, int]] = OrderedDict()

    def put(self, response_id: str, item: Stored) -> None:
        if response_id in self._items:
            self._drop(response_id)
        size = item.num_bytes
        self._items[response_id] = (item, size)
        self.num_bytes += size
        while len(self._items) > self.max_items or (self.num_bytes > self.max_bytes and len(self._items) > 1):
            self._drop(next(iter(self._items)))

    def _drop(self, response_id: str) -> None:
        _, size = self._items.pop(response_id)
        self.num_bytes -= size

    def get(self, response_id: str, param: str = "previous_response_id") -> Stored:
        item = self._items.get(response_id)
        if item is None:
            raise NotFoundError(
                f"response {response_id[:80]!r} not found (it was not stored, or this server restarted or dropped it)",
                param=param,
            )
        self._items.move_to_end(response_id)
        return item[0]

    def delete(self, response_id: str) -> None:
        self.get(response_id, param="response_id")
        self._drop(response_id)

    def __len__(self) -> int:
        return len(self._items)
