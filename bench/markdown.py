"""The reports' typography: counts with their word, a target's verdict, markdown tables."""

from __future__ import annotations

from collections import Counter
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


def fmt_counter(counter: Counter[str]) -> str:
    """'failed 2, succeeded 5': a count per name, by name."""
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items()))
