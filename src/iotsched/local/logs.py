"""Where the local runtime's processes write: a log file each, and their spans.

Every function process appends its output to `<log_dir>/<name>.log`; with tracing on, each
appends its spans to a file of its own under `<log_dir>/spans`, which `spans()` reads back.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

from iotsched.adapters.spans import SpanRecord, read_spans


class RunLogs:
    """The log directory of one runtime and the log files it opened (closed by `close`)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._handles: list[IO[bytes]] = []

    def open(self, name: str) -> IO[bytes]:
        """The log file of process `name`, opened for appending."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        handle = (self.log_dir / f"{name}.log").open("ab")
        self._handles.append(handle)
        return handle

    @property
    def span_dir(self) -> Path:
        """Where the functions' processes append their spans (with tracing on)."""
        return self.log_dir / "spans"

    def spans(self) -> list[SpanRecord]:
        """Every span recorded so far, in the order of their files and lines: group them by
        `trace_id`."""
        return read_spans(self.span_dir)

    def close(self) -> None:
        for handle in self._handles:
            handle.close()
