"""The AWS tracer on a stubbed X-Ray recorder (Powertools Tracer's provider): spans are
subsegments named as the use-cases name them, with their annotations put on them; annotations
of the current span go through Powertools; nothing is carried in messages; and a disabled
Powertools Tracer (outside Lambda) makes the composition root choose no tracer at all."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from aws_lambda_powertools import Tracer

from iotsched.adapters.xray import XRayTracer
from iotsched.bootstrap import tracer_for
from iotsched.clock import ManualClock
from iotsched.ports.tracing import NoTracer
from iotsched.settings import Settings, SettingsError
from tests.support import T0


class Subsegment:
    def __init__(self, name: str, calls: list[tuple[str, ...]]) -> None:
        self.name = name
        self.annotations: dict[str, Any] = {}
        self._calls = calls

    def put_annotation(self, key: str, value: Any) -> None:
        self.annotations[key] = value
        self._calls.append(("annotate", self.name, key, value))

    def add_exception(self, *args: Any, **kwargs: Any) -> None:
        self._calls.append(("exception", self.name))

    def put_metadata(self, *args: Any, **kwargs: Any) -> None:
        pass


class Recorder:
    """The X-Ray SDK recorder's calls Powertools Tracer makes, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.open: list[Subsegment] = []

    @contextmanager
    def in_subsegment(self, name: str | None = None, **kwargs: Any) -> Iterator[Subsegment]:
        sub = Subsegment(name or "", self.calls)
        self.calls.append(("open", sub.name))
        self.open.append(sub)
        try:
            yield sub
        finally:
            self.open.pop()
            self.calls.append(("close", sub.name))

    def put_annotation(self, key: str, value: Any) -> None:
        self.calls.append(("annotate", self.open[-1].name if self.open else "-", key, value))

    def put_metadata(self, *args: Any, **kwargs: Any) -> None:
        pass

    def patch(self, *args: Any, **kwargs: Any) -> None:
        pass

    def patch_all(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    # Powertools' Tracer shares its configuration between instances, and a `disabled` once
    # set (by a function module imported outside Lambda) stays: start and end afresh.
    Tracer._reset_config()
    stub = Recorder()
    yield stub
    Tracer._reset_config()


def test_spans_are_annotated_subsegments_of_the_invocation(recorder: Recorder) -> None:
    powertools = Tracer(service="iotsched", disabled=False, auto_patch=False, provider=recorder)  # type: ignore[arg-type]
    tracer = XRayTracer(powertools)

    @powertools.capture_lambda_handler(capture_response=False)
    def handler(event: dict[str, Any], context: Any) -> str:
        with tracer.span(
            "attempt", parent="ignored:carrier", task_id="t", instance_id="t@x", shard=3
        ) as span:
            tracer.annotate(attempt=2)
            with tracer.span("once", effect_key="k") as inner:
                inner.annotate(claimed=True)
            assert span.carrier is None and tracer.carrier() is None
        return "ok"

    assert handler({}, None) == "ok"
    # (Powertools annotates its own subsegment too: ColdStart, Service)
    ours = [c for c in recorder.calls if c[:2] != ("annotate", "## handler")]
    assert ours == [
        ("open", "## handler"),
        ("open", "attempt"),
        ("annotate", "attempt", "task_id", "t"),
        ("annotate", "attempt", "instance_id", "t@x"),
        ("annotate", "attempt", "shard", 3),
        ("annotate", "attempt", "attempt", 2),
        ("open", "once"),
        ("annotate", "once", "effect_key", "k"),
        ("annotate", "once", "claimed", True),
        ("close", "once"),
        ("close", "attempt"),
        ("close", "## handler"),
    ]


def test_a_disabled_powertools_tracer_records_nothing(recorder: Recorder) -> None:
    powertools = Tracer(disabled=True, auto_patch=False, provider=recorder)  # type: ignore[arg-type]
    tracer = XRayTracer(powertools)
    with tracer.span("attempt", shard=1) as span:
        span.annotate(attempt=1)
        tracer.annotate(attempt=1)
    assert recorder.calls == []


def _settings(**env: str) -> Settings:
    return Settings.from_env(
        {"IOTSCHED_TABLE": "t", "IOTSCHED_SHARD_QUEUE_URL": "q", "IOTSCHED_ALERT_TOPIC_ARN": "a"}
        | env
    )


def test_outside_lambda_xray_tracing_is_no_tracer(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAMBDA_TASK_ROOT", raising=False)
    assert isinstance(tracer_for(_settings(IOTSCHED_TRACING="xray"), ManualClock(T0)), NoTracer)
    assert isinstance(tracer_for(_settings(), ManualClock(T0)), NoTracer)


def test_in_lambda_xray_tracing_is_the_xray_tracer(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    monkeypatch.delenv("POWERTOOLS_TRACE_DISABLED", raising=False)
    Tracer(auto_patch=False, provider=recorder)  # type: ignore[arg-type]  # as a function's entry
    chosen = tracer_for(_settings(IOTSCHED_TRACING="xray"), ManualClock(T0))
    assert isinstance(chosen, XRayTracer)
    with chosen.span("claim", instance_id="i"):
        pass
    assert ("annotate", "claim", "instance_id", "i") in recorder.calls


def test_tracing_settings_are_checked() -> None:
    with pytest.raises(SettingsError, match="IOTSCHED_TRACING must be one of"):
        _settings(IOTSCHED_TRACING="jaeger")
    with pytest.raises(SettingsError, match="needs IOTSCHED_TRACE_DIR"):
        _settings(IOTSCHED_TRACING="local")
