"""What a handler logs during its attempt (`AttemptCapture`), and where the log is kept
(`keep_log`).

A capture collects, while its attempt's handler runs, the Python logging records emitted on
the handler's thread (any logger but the scheduler's own: one router on the root logger hands
each record to the capture of the thread that emitted it, so concurrent attempts on other
threads never mix their lines), the lines of `ctx.log` (from any thread), and the exception
that failed the attempt as the last line. `keep_log` turns them into the record's
`AttemptLog`: the tail inline, and the whole log written to the attempt log store when the tail
does not hold it, before the record's final write names the object.
"""

from __future__ import annotations

import json
import logging
import threading
import traceback
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from iotsched.core import logs as attempt_logs
from iotsched.core.logs import INLINE_LINES, AttemptLog, LogLine
from iotsched.ports.clock import Clock
from iotsched.ports.logs import AttemptLogStore, LogObjectError

#: The logger `ctx.log` also writes to (so that its lines reach the function's own log).
HANDLER_LOGGER = "iotsched.handler"
#: A capture keeps lines up to this many encoded bytes (the object's size at most); past it,
#: the lines are counted, and only the last INLINE_LINES kept after a line saying so.
MAX_CAPTURED_BYTES = 1024 * 1024
_OWN_PREFIX = "iotsched."
_HANDLER_PREFIXES = ("iotsched.tasklib", HANDLER_LOGGER)

log = logging.getLogger(__name__)
# `ctx.log`'s lines reach the function's log at INFO whatever the root logger's level.
logging.getLogger(HANDLER_LOGGER).setLevel(logging.INFO)


@dataclass(frozen=True)
class LogStream:
    """Where the worker's own log goes on AWS (the Lambda context's log group and stream)."""

    group: str | None
    stream: str | None


@dataclass(frozen=True)
class AttemptKeys:
    """The attempt a thread runs now: the keys the worker's log lines carry."""

    instance_id: str
    shard: int
    attempt: int


class AttemptCapture:
    """The lines of one attempt, in the order they were logged."""

    def __init__(self, keys: AttemptKeys, clock: Clock) -> None:
        self.keys = keys
        self._clock = clock
        self._lines: list[LogLine] = []
        self._size = 0
        self._over: deque[LogLine] = deque(maxlen=INLINE_LINES)  # the last, once past the cap
        self._over_lines = 0
        self._over_bytes = 0
        self._lock = threading.Lock()

    def add(
        self,
        level: str,
        message: str,
        *,
        logger: str | None = None,
        fields: Mapping[str, Any] | None = None,
        at: datetime | None = None,
    ) -> None:
        """One line (a record, `ctx.log`'s, or the failure's)."""
        line = LogLine(
            at=at or self._clock.now(),
            level=level.upper(),
            message=attempt_logs.cut_message(message),
            logger=logger,
            fields=_json_safe(fields or {}),
        )
        size = len(line.encoded())
        with self._lock:
            if self._size + size <= MAX_CAPTURED_BYTES and not self._over_lines:
                self._lines.append(line)
                self._size += size
                return
            self._over.append(line)
            self._over_lines += 1
            self._over_bytes += size

    def failed(self, exc: BaseException) -> None:
        """The exception that failed the attempt, with its innermost frames, as the last line."""
        text = "".join(
            traceback.format_exception(exc, limit=-attempt_logs.TRACEBACK_FRAMES)
        ).rstrip()
        self.add("ERROR", text, logger="attempt")

    def lines(self) -> list[LogLine]:
        """Every line kept: those within the cap, then (past it) a line counting what was left
        out and the last few."""
        with self._lock:
            lines = list(self._lines)
            if self._over_lines:
                left_out = self._over_lines - len(self._over)
                lines.append(
                    LogLine(
                        at=self._over[0].at,
                        level="WARNING",
                        message=f"{left_out} lines ({self._over_bytes} bytes with the last "
                        f"{len(self._over)}) left out: the log passed {MAX_CAPTURED_BYTES} bytes",
                        logger="attempt",
                    )
                )
                lines.extend(self._over)
        return lines


class _Router(logging.Handler):
    """On the root logger: hands each record to the capture of the thread that emitted it."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.captures: dict[int, AttemptCapture] = {}

    def emit(self, record: logging.LogRecord) -> None:
        last_resort = logging.lastResort
        if last_resort is not None and record.levelno >= last_resort.level and _unhandled(record):
            # Without this router the record would have reached Python's last resort (stderr):
            # a process that configures no logging still prints its warnings.
            last_resort.handle(record)
        capture = self.captures.get(record.thread) if record.thread is not None else None
        if capture is None or _scheduler_own(record.name):
            return
        try:
            message = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                message += (
                    "\n"
                    + "".join(
                        traceback.format_exception(
                            record.exc_info[1], limit=-attempt_logs.TRACEBACK_FRAMES
                        )
                    ).rstrip()
                )
            capture.add(record.levelname, message, logger=record.name)
        except Exception:  # a record that cannot be formatted must not fail the handler
            self.handleError(record)


def _unhandled(record: logging.LogRecord) -> bool:
    """True when no handler but the router is on the record's way to the root."""
    logger: logging.Logger | None = logging.getLogger(record.name)
    while logger is not None:
        if any(handler is not _router for handler in logger.handlers):
            return False
        if not logger.propagate:
            return True
        logger = logger.parent
    return True


def _scheduler_own(name: str) -> bool:
    """The scheduler's own records (its services and adapters), not the handler's; `ctx.log`'s
    are added directly."""
    if name == HANDLER_LOGGER:
        return True
    return name.startswith(_OWN_PREFIX) and not name.startswith(_HANDLER_PREFIXES)


_router = _Router()
_installed = threading.Lock()


def _install() -> None:
    with _installed:
        root = logging.getLogger()
        if _router not in root.handlers:
            root.addHandler(_router)


@contextmanager
def capturing(capture: AttemptCapture) -> Iterator[AttemptCapture]:
    """Route this thread's records to `capture` while the block runs."""
    _install()
    ident = threading.get_ident()
    _router.captures[ident] = capture
    try:
        yield capture
    finally:
        _router.captures.pop(ident, None)


def current_keys(ident: int | None = None) -> AttemptKeys | None:
    """The attempt the thread `ident` (default: this one) runs now, if any."""
    capture = _router.captures.get(threading.get_ident() if ident is None else ident)
    return capture.keys if capture is not None else None


def keep_log(
    capture: AttemptCapture,
    *,
    task_id: str,
    retention_days: int,
    store: AttemptLogStore | None,
    stream: LogStream | None,
) -> AttemptLog | None:
    """The attempt's `AttemptLog` for its record; the whole log written to `store` first when
    the inline tail does not hold it. A failed write is recorded (`object_error`), never
    raised: the attempt's outcome does not depend on its log."""
    keys = capture.keys
    lines = capture.lines()
    on_aws = stream is not None and stream.stream is not None
    summary = attempt_logs.summarize(
        lines,
        log_group=stream.group if stream else None,
        log_stream=stream.stream if stream else None,
        insights_query=(
            attempt_logs.insights_query(keys.instance_id, keys.shard, keys.attempt)
            if on_aws
            else None
        ),
    )
    if summary is None or not summary.truncated:
        return summary
    key = attempt_logs.object_key(
        task_id, keys.instance_id, keys.shard, keys.attempt, retention_days=retention_days
    )
    if store is None:
        return summary.model_copy(update={"object_error": "no data bucket is configured"})
    try:
        store.put(key, attempt_logs.encode(lines))
    except LogObjectError as exc:
        log.warning("attempt log object not written", extra={"key": key, "error": str(exc)})
        return summary.model_copy(update={"object_error": str(exc)[:500]})
    except Exception as exc:  # whatever the store raised, the shard's outcome stands
        log.warning("attempt log object not written", exc_info=True)
        return summary.model_copy(update={"object_error": f"{type(exc).__name__}: {exc}"[:500]})
    return summary.model_copy(update={"object_key": key})


def _json_safe(fields: Mapping[str, Any]) -> dict[str, Any]:
    """`fields` as JSON would store them (anything else as its text)."""
    loaded: dict[str, Any] = json.loads(json.dumps(dict(fields), default=str))
    return loaded
