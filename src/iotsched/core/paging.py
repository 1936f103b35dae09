"""A filtered page that keeps a listing's paging contract."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

_Item = TypeVar("_Item")


def filled_page(
    read: Callable[[str | None, int], Sequence[_Item]],
    keep: Callable[[_Item], bool],
    cursor_of: Callable[[_Item], str],
    limit: int,
    start: str | None = None,
) -> list[_Item]:
    """At most `limit` kept items from `read(cursor, n)` pages, from `start` on, reading on past
    dropped ones, so that a page shorter than `limit` still means the listing ended."""
    kept: list[_Item] = []
    cursor = start
    while True:
        page = read(cursor, limit)
        for item in page:
            if keep(item):
                kept.append(item)
                if len(kept) == limit:
                    return kept
        if len(page) < limit:
            return kept
        cursor = cursor_of(page[-1])
