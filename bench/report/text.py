"""The report's small pieces of typography: counts, verdicts, tables."""

from __future__ import annotations

from typing import Any


def plural(count: int, word: str) -> str:
    """'1 run', '5 runs', '1,000 shards'."""
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def verdict(met: Any) -> str:
    if met is None:
        return "n/a"
    return "**met**" if met else "**missed**"


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines
