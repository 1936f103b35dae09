"""The tracing port: spans with annotations, so one firing can be followed from the tick to
its shards' effects (docs/design.md, section 16).

Use-cases open spans through this port only: the AWS adapter records them as X-Ray subsegments
(Powertools Tracer), the local one keeps them in memory (and in a file per process on the
local runtime). Where nothing is configured the tracer is `NoTracer`, whose span is one shared
object: a task pays a call per span, nothing more.

A span's *carrier* is the text a message takes along so that its receiver's spans join the
sender's trace (the local tracer's `<trace id>:<span id>`). X-Ray carries its own header on
the request (SQS's `AWSTraceHeader`), so the AWS adapter's carrier is None and a message
takes nothing.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

#: What an annotation may hold (X-Ray indexes strings, numbers and booleans).
Annotation = str | int | bool


class Span(Protocol):
    """One timed operation of a trace."""

    def annotate(self, **annotations: Annotation) -> None:
        """Add annotations (searchable: `instance_id`, `task_id`, `shard`, `attempt`...)."""
        ...

    @property
    def carrier(self) -> str | None:
        """This span's context for a message to carry (None: the transport carries it)."""
        ...


class Tracer(Protocol):
    """Opens spans; a span opened inside another is its child (on the same thread)."""

    def span(
        self, name: str, *, parent: str | None = None, **annotations: Annotation
    ) -> AbstractContextManager[Span]:
        """A span named `name`, child of the current span, or of the span `parent` names (a
        carrier a message brought: the receiving side of a queue); with its annotations."""
        ...

    def annotate(self, **annotations: Annotation) -> None:
        """Add annotations to the current span (nothing if there is none)."""
        ...

    def carrier(self) -> str | None:
        """The current span's carrier (None: no span, or the transport carries the trace)."""
        ...


class _NoSpan:
    """The span of `NoTracer`: one object, entered and left, recording nothing."""

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def annotate(self, **annotations: Annotation) -> None:
        """Nothing is recorded."""

    @property
    def carrier(self) -> str | None:
        """No trace to carry."""
        return None


_NO_SPAN = _NoSpan()


class NoTracer:
    """No tracing: every span is the same inert object (no allocation per span)."""

    def span(
        self, name: str, *, parent: str | None = None, **annotations: Annotation
    ) -> AbstractContextManager[Span]:
        """The shared inert span."""
        return _NO_SPAN

    def annotate(self, **annotations: Annotation) -> None:
        """Nothing is recorded."""

    def carrier(self) -> str | None:
        """No trace to carry."""
        return None
