"""An attempt's log: its lines, the tail kept on the attempt's record (`AttemptLog`, at most
INLINE_LINES lines and INLINE_BYTES bytes) and the key of the whole log's object in the data
bucket when the tail does not hold it all (`object_key`). Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import Field

from iotsched.core.value_types import Frozen

#: The inline tail's bounds: its lines, and their bytes as the object holds them.
INLINE_LINES = 20
INLINE_BYTES = 2048
#: One line's message is cut to this many characters (the object's lines too).
MAX_MESSAGE_CHARS = 8000
#: The frames of a failing attempt's traceback kept as its last line (the innermost ones).
TRACEBACK_FRAMES = 5
#: The retention tiers of log objects, in days: an object is kept for the first tier at least
#: as long as its record's retention (one S3 lifecycle rule per tier, template.yaml).
RETENTION_TIERS = (7, 30, 90, 365, 3650)
LOG_PREFIX = "logs/"
CUT = " [cut]"


class LogLine(Frozen):
    """One line of an attempt's log."""

    at: datetime
    level: str
    message: str
    logger: str | None = None  # the Python logger that emitted it (None: `ctx.log`)
    fields: dict[str, Any] = Field(default_factory=dict)  # `ctx.log`'s keyword fields

    def encoded(self) -> bytes:
        """The line as the log object holds it: one JSON object and a newline."""
        return (self.model_dump_json(exclude_defaults=True) + "\n").encode()


class AttemptLog(Frozen):
    """An attempt's log as its record keeps it: the tail, the counts, where the rest is.

    `lines` are the last lines (at most INLINE_LINES, INLINE_BYTES encoded); `line_count` and
    `byte_count` count the whole log, `truncated` says the tail lacks some of it. The whole
    log is the object `object_key` in the data bucket when one was written; `object_error`
    says why none is where one should be (the tail alone is kept). On AWS, `log_group`,
    `log_stream` and `insights_query` find the worker's lines of the attempt in CloudWatch.
    """

    lines: list[LogLine] = Field(default_factory=list)
    line_count: int = Field(default=0, ge=0)
    byte_count: int = Field(default=0, ge=0)
    truncated: bool = False
    object_key: str | None = None
    object_error: str | None = None
    log_group: str | None = None
    log_stream: str | None = None
    insights_query: str | None = None

    @property
    def complete(self) -> bool:
        """True when `lines` hold the whole log."""
        return not self.truncated


def cut_message(message: str) -> str:
    """`message`, cut to MAX_MESSAGE_CHARS."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - len(CUT)] + CUT


def tail(lines: Sequence[LogLine]) -> tuple[list[LogLine], bool]:
    """The last of `lines` within INLINE_LINES and INLINE_BYTES, and whether any was left out
    or cut. A last line larger than the budget alone is kept with its message's end cut."""
    kept: list[LogLine] = []
    size = 0
    for line in reversed(lines[-INLINE_LINES:]):
        n = len(line.encoded())
        if size + n > INLINE_BYTES:
            if not kept:  # the last line alone is over the budget: keep its start
                kept.append(_shrunk(line, INLINE_BYTES))
            break
        kept.append(line)
        size += n
    kept.reverse()
    return kept, len(kept) < len(lines) or (bool(kept) and kept[-1] is not lines[-1])


def _shrunk(line: LogLine, budget: int) -> LogLine:
    """`line` with its message cut so that its encoding fits in `budget` bytes."""
    message = line.message
    while message:
        over = len(line.model_copy(update={"message": message + CUT}).encoded()) - budget
        if over <= 0:
            return line.model_copy(update={"message": message + CUT})
        # JSON escapes make a character up to 6 bytes: cut at least what is over, by characters.
        message = message[: max(0, len(message) - max(1, over))]
    return line.model_copy(update={"message": CUT.strip(), "fields": {}})


def summarize(
    lines: Sequence[LogLine],
    *,
    log_group: str | None = None,
    log_stream: str | None = None,
    insights_query: str | None = None,
) -> AttemptLog | None:
    """The record's view of a log (None when nothing was logged: an attempt that logs nothing
    costs its record nothing, not even the name of the worker's log stream)."""
    if not lines:
        return None
    kept, truncated = tail(lines)
    return AttemptLog(
        lines=kept,
        line_count=len(lines),
        byte_count=sum(len(line.encoded()) for line in lines),
        truncated=truncated,
        log_group=log_group,
        log_stream=log_stream,
        insights_query=insights_query,
    )


def encode(lines: Iterable[LogLine]) -> bytes:
    """The log object's body: JSON Lines, oldest first."""
    return b"".join(line.encoded() for line in lines)


def decode(body: bytes) -> list[LogLine]:
    """The lines of a log object's body (a blank or torn line is skipped)."""
    found: list[LogLine] = []
    for raw in body.splitlines():
        if not raw.strip():
            continue
        try:
            found.append(LogLine.model_validate(json.loads(raw)))
        except ValueError:
            continue
    return found


def retention_tier(retention_days: int) -> int:
    """The shortest tier that keeps an object at least `retention_days`."""
    for tier in RETENTION_TIERS:
        if retention_days <= tier:
            return tier
    return RETENTION_TIERS[-1]


def object_key(
    task_id: str, instance_id: str, shard: int, attempt: int, *, retention_days: int
) -> str:
    """Where the whole log of an attempt is kept: under its retention tier's prefix (which the
    bucket's lifecycle rule expires), then the task, instance, shard and attempt."""
    tier = retention_tier(retention_days)
    return f"{LOG_PREFIX}{tier}d/{task_id}/{instance_id}/{shard}/{attempt}.jsonl"


def insights_query(instance_id: str, shard: int, attempt: int) -> str:
    """A CloudWatch Logs Insights query for the worker's JSON lines of one attempt (the keys
    the worker puts on its logger while the attempt runs)."""
    return (
        "fields @timestamp, level, message"
        f" | filter instance_id = {json.dumps(instance_id)}"
        f" and shard = {shard} and attempt = {attempt}"
        " | sort @timestamp asc"
    )


def line_text(line: LogLine) -> str:
    """One line as the CLI prints it."""
    fields = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in line.fields.items())
    when = line.at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    text = f"{when} {line.level:<7} {line.message}"
    return f"{text} {fields}" if fields else text


def view(line: LogLine) -> Mapping[str, Any]:
    """One line as the API and `--json` give it."""
    return line.model_dump(mode="json")
