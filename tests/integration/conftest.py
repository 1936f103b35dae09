"""A local runtime (moto server + template + real worker processes) shared by a module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from iotsched.bootstrap import build
from iotsched.local.runtime import LocalRuntime
from iotsched.services.wiring import Wiring
from tests.support import started_runtime

# Lease = task timeout_s (2) + margin (1) = 3 s, shorter than the visibility timeout (5 s), as
# on AWS; a dead worker's shard is taken over within about 5 s. MaxReceiveCount 3 sends a
# poison message to the DLQ after three receives.
PARAMETERS = {
    "WorkerTimeoutSeconds": "4",
    "ShardVisibilityTimeoutSeconds": "5",
    "MaxReceiveCount": "3",
}
ENV = {"IOTSCHED_LEASE_MARGIN_S": "1", "POWERTOOLS_LOG_LEVEL": "WARNING"}


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    """A started runtime with a manual clock (ticks delivered by the test)."""
    logs = tmp_path_factory.mktemp("runtime-logs")
    with started_runtime(logs, parameters=PARAMETERS, env=ENV, dispatchers=2) as rt:
        yield rt


@pytest.fixture(scope="module")
def services(runtime: LocalRuntime) -> Wiring:
    """Wiring aimed at the runtime's emulator."""
    return build(runtime.settings())
