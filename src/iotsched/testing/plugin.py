"""The pytest plugin of the testing kit, registered under the entry-point group `pytest11` as
`iotsched` (so `-p no:iotsched` turns it off).

Fixtures:
    iotsched_harness: a `TaskHarness` per test, built from the two below.
    iotsched_handlers: the handlers the harness adds to the installed ones, by name (empty;
        override it in a conftest.py or a test module).
    iotsched_resources: `{factory: fake}` for `ctx.resource(factory)` (empty; override it).

Every pytest run in an environment with iotsched loads this module: it imports nothing of the
scheduler until a test asks for the harness.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from iotsched.handlers import HandlerSpec
    from iotsched.testing import TaskHarness


@pytest.fixture
def iotsched_handlers() -> dict[str, Callable[..., Any] | HandlerSpec]:
    """Handlers `iotsched_harness` runs besides the installed ones, by name (a handler of
    this name replaces the installed one). Override it to add yours."""
    return {}


@pytest.fixture
def iotsched_resources() -> dict[Callable[[], Any], Any]:
    """What `ctx.resource(factory)` returns in `iotsched_harness`, by factory (a factory not
    listed is called, once per test). Override it to put fakes in place."""
    return {}


@pytest.fixture
def iotsched_harness(
    iotsched_handlers: dict[str, Callable[..., Any] | HandlerSpec],
    iotsched_resources: dict[Callable[[], Any], Any],
) -> TaskHarness:
    """The scheduler on the in-memory store with a manual clock (2026-01-01 12:00 UTC), for
    one test: apply tasks, run them, read their instances (docs/testing.md)."""
    from iotsched.testing import TaskHarness

    return TaskHarness(handlers=iotsched_handlers, resources=iotsched_resources)
