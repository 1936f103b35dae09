"""The AWS tracer: spans as X-Ray subsegments, through Powertools Tracer.

Each function's entry point wraps its handler in Powertools' `capture_lambda_handler` (the
invocation's subsegment, under the segment Lambda opens with `Tracing: Active`); the spans the
use-cases open here are subsegments inside it, and their annotations X-Ray annotations, which
a trace search filters on (`annotation.instance_id = "..."`). X-Ray links a message's consumer
to its producer by the header the SDK puts on each SQS request (`AWSTraceHeader`), so a
carrier is never needed: `carrier` is None and a message takes nothing.

Tracer is Powertools' shared-state object: `XRayTracer(Tracer())` here and `Tracer()` at a
function's entry are one configuration (disabled outside Lambda, or with
POWERTOOLS_TRACE_DISABLED, where every span is inert).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from iotsched.ports.tracing import Annotation

if TYPE_CHECKING:
    from aws_lambda_powertools import Tracer


class XRaySpan:
    """A subsegment, or nothing where tracing is disabled."""

    def __init__(self, subsegment: Any | None) -> None:
        self._subsegment = subsegment

    def annotate(self, **annotations: Annotation) -> None:
        """X-Ray annotations on the subsegment."""
        if self._subsegment is not None:
            for key, value in annotations.items():
                self._subsegment.put_annotation(key, value)

    @property
    def carrier(self) -> str | None:
        """None: X-Ray's own header carries the trace."""
        return None


class XRayTracer:
    """Tracer over a Powertools `Tracer` (its provider: the X-Ray SDK's recorder)."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    @contextmanager
    def span(
        self, name: str, *, parent: str | None = None, **annotations: Annotation
    ) -> Iterator[XRaySpan]:
        """A subsegment of the current (sub)segment; `parent` is ignored (X-Ray joined the
        invocation to its producer already)."""
        if self._tracer.disabled:
            yield XRaySpan(None)
            return
        with self._tracer.provider.in_subsegment(name=name) as subsegment:
            span = XRaySpan(subsegment)
            span.annotate(**annotations)
            yield span

    def annotate(self, **annotations: Annotation) -> None:
        """X-Ray annotations on the current (sub)segment."""
        for key, value in annotations.items():
            # an int is a number to X-Ray (Powertools types it as numbers.Number)
            self._tracer.put_annotation(key, cast("Any", value))

    def carrier(self) -> str | None:
        """None: X-Ray's own header carries the trace."""
        return None
