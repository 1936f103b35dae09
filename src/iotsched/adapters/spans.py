"""The local tracer: spans kept in memory, for the local runtime and the tests.

`LocalTracer` records each span it closes in a `SpanStore`: its trace id, its own id, its
parent's, its name, annotations, start and end. A span opened inside another (same thread or
task) is its child; a span given a `parent` carrier (what a message brought) joins that trace,
as X-Ray joins a consumer to its producer by SQS's `AWSTraceHeader`. A span with neither
starts a new trace.

The local runtime runs its functions in OS processes, each with its own store: a store given a
`path` also appends every span it records to that file, one JSON line each (one file per
process, so no two writers share one), and `read_spans` reads a directory of them back.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from iotsched.ports.clock import Clock
from iotsched.ports.tracing import Annotation

log = logging.getLogger(__name__)


@dataclass
class SpanRecord:
    """One span as recorded: `end` is None while it is open."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start: datetime
    annotations: dict[str, Annotation] = field(default_factory=dict)
    end: datetime | None = None
    error: str | None = None

    def annotate(self, **annotations: Annotation) -> None:
        """Add annotations."""
        self.annotations.update(annotations)

    @property
    def carrier(self) -> str:
        """`<trace id>:<span id>`: what a message takes to make its receiver a child."""
        return f"{self.trace_id}:{self.span_id}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-able."""
        data = asdict(self)
        data["start"] = self.start.isoformat()
        data["end"] = self.end.isoformat() if self.end is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpanRecord:
        """The span `as_dict` wrote."""
        return cls(
            trace_id=str(data["trace_id"]),
            span_id=str(data["span_id"]),
            parent_id=data.get("parent_id"),
            name=str(data["name"]),
            start=datetime.fromisoformat(data["start"]),
            annotations=dict(data.get("annotations") or {}),
            end=datetime.fromisoformat(data["end"]) if data.get("end") else None,
            error=data.get("error"),
        )


def parse_carrier(carrier: str | None) -> tuple[str, str] | None:
    """(trace id, span id) of a carrier, None for none or a malformed one (a new trace)."""
    if not carrier:
        return None
    trace_id, sep, span_id = carrier.partition(":")
    if not sep or not trace_id or not span_id:
        return None
    return trace_id, span_id


class SpanStore:
    """The spans recorded, in the order they ended; appended to `path` too, if given."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._spans: list[SpanRecord] = []
        self._lock = threading.Lock()

    def add(self, span: SpanRecord) -> None:
        """Record a closed span. A span the file cannot take is kept in memory only: tracing
        never fails the work it watches."""
        line = json.dumps(span.as_dict(), default=str) + "\n" if self.path is not None else None
        with self._lock:
            self._spans.append(span)
            if self.path is not None and line is not None:
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    with self.path.open("a", encoding="utf-8") as out:
                        out.write(line)
                except OSError:
                    log.warning("span not written to %s", self.path, exc_info=True)

    def spans(self) -> list[SpanRecord]:
        """Every span recorded."""
        with self._lock:
            return list(self._spans)

    def trace(self, trace_id: str) -> list[SpanRecord]:
        """The spans of one trace."""
        return [s for s in self.spans() if s.trace_id == trace_id]


def read_spans(directory: Path) -> list[SpanRecord]:
    """The spans every process's store appended under `directory` (a line cut short by a
    process killed mid-write is left out)."""
    spans: list[SpanRecord] = []
    if not directory.is_dir():
        return spans
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                spans.append(SpanRecord.from_dict(json.loads(line)))
            except (ValueError, KeyError, TypeError):
                continue
    return spans


#: The span open on this thread (or task) of every `LocalTracer`.
_CURRENT: ContextVar[SpanRecord | None] = ContextVar("local_span", default=None)


class LocalTracer:
    """Tracer keeping its spans in `store`, timed on `clock`."""

    def __init__(self, store: SpanStore, clock: Clock) -> None:
        self.store = store
        self._clock = clock

    @contextmanager
    def span(
        self, name: str, *, parent: str | None = None, **annotations: Annotation
    ) -> Iterator[SpanRecord]:
        """A span, child of `parent` (a carrier) if given, else of the span open here."""
        carried = parse_carrier(parent)
        current = _CURRENT.get()
        if carried is not None:
            trace_id, parent_id = carried
        elif current is not None:
            trace_id, parent_id = current.trace_id, current.span_id
        else:
            trace_id, parent_id = secrets.token_hex(16), None
        record = SpanRecord(
            trace_id=trace_id,
            span_id=secrets.token_hex(8),
            parent_id=parent_id,
            name=name,
            start=self._clock.now(),
            annotations=dict(annotations),
        )
        token = _CURRENT.set(record)
        try:
            yield record
        except BaseException as exc:
            record.error = f"{type(exc).__name__}: {exc}"[:500]
            raise
        finally:
            _CURRENT.reset(token)
            record.end = self._clock.now()
            self.store.add(record)

    def annotate(self, **annotations: Annotation) -> None:
        """Annotate the span open here."""
        current = _CURRENT.get()
        if current is not None:
            current.annotate(**annotations)

    def carrier(self) -> str | None:
        """The open span's carrier."""
        current = _CURRENT.get()
        return current.carrier if current is not None else None


def traces_of(spans: list[SpanRecord], instance_id: str) -> list[list[SpanRecord]]:
    """The traces holding a span annotated with `instance_id` (as X-Ray's search by
    annotation finds them), each in the order its spans started; the oldest trace first."""
    ids = {s.trace_id for s in spans if s.annotations.get("instance_id") == instance_id}
    traces = [sorted((s for s in spans if s.trace_id == t), key=lambda s: s.start) for t in ids]
    return sorted(traces, key=lambda trace: trace[0].start)
