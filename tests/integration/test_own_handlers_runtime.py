"""A package's own handlers on the local runtime: found by the worker processes through the
entry-point group (the package only on their PYTHONPATH, nothing of iotsched edited), run with
typed params; RetryShard retried within max_attempts, FailShard failing at once; each attempt
recording the package and version."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from iotsched.bootstrap import build
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.shard_record import ShardStatus
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.tasklib import registry
from tests.distributions import Distributions, installed
from tests.integration.conftest import ENV, PARAMETERS
from tests.support import PATIENCE_S, started_runtime

pytestmark = [pytest.mark.slow, pytest.mark.moto]

JOBS = """
    from pydantic import BaseModel
    from iotsched import FailShard, RetryShard, handler

    class Greeting(BaseModel):
        name: str

    @handler("greet", params=Greeting)
    def greet(ctx, params):
        if ctx.attempt == 1:
            raise RetryShard("directory busy", delay_s=0)
        return {"hello": params.name, "attempt": ctx.attempt}

    @handler("refuse")
    def refuse(ctx):
        raise FailShard("account has no currency")
"""


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Distributions]:
    with installed(tmp_path_factory.mktemp("site")) as made:
        made.add(
            "acme-jobs",
            "0.3.1",
            handlers={"greet": "acme_jobs.jobs:greet", "refuse": "acme_jobs.jobs:refuse"},
            modules={"acme_jobs.jobs": JOBS},
        )
        yield made


@pytest.fixture(scope="module")
def runtime(
    dists: Distributions, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalRuntime]:
    logs = tmp_path_factory.mktemp("runtime-logs")
    env = {**ENV, "PYTHONPATH": dists.pythonpath()}
    with started_runtime(logs, parameters=PARAMETERS, env=env, dispatchers=1) as rt:
        yield rt


def test_a_package_s_handlers_run_retry_and_fail_as_declared(
    runtime: LocalRuntime, dists: Distributions
) -> None:
    services = build(runtime.settings())
    tasks = [
        {
            "id": "greet",
            "handler": "greet",
            "trigger": {"rate": "1h"},
            "params": {"name": "ada"},
            "retry": {"max_attempts": 3, "backoff_s": 0},
            "timeout_s": 2,
        },
        {
            "id": "refuse",
            "handler": "refuse",
            "trigger": {"rate": "1h"},
            "retry": {"max_attempts": 3, "backoff_s": 0},
            "timeout_s": 2,
        },
    ]
    start = datetime(2026, 1, 5, 9, 58, tzinfo=UTC)
    apply_tasks(parse_task_file({"tasks": tasks}, handlers=registry()), services.tasks, now=start)
    runtime.tick(datetime(2026, 1, 5, 10, 0, 20, tzinfo=UTC))
    ids = ["greet@2026-01-05T10:00Z", "refuse@2026-01-05T10:00Z"]

    def ended() -> bool:
        found = [services.instances.get_instance(i) for i in ids]
        return all(i is not None and i.status.final for i in found)

    assert runtime.wait_for(ended, PATIENCE_S)
    greet = services.instances.get_instance(ids[0])
    assert greet is not None and greet.status is InstanceStatus.SUCCEEDED
    (shard,) = services.instances.list_shards(ids[0])
    assert shard.result == {"hello": "ada", "attempt": 2}
    assert [a.outcome for a in shard.attempts] == ["failed", "succeeded"]
    assert shard.attempts[0].error == "RetryShard: directory busy"
    assert {(a.package, a.version) for a in shard.attempts} == {("acme-jobs", "0.3.1")}

    refused = services.instances.get_instance(ids[1])
    assert refused is not None and refused.status is InstanceStatus.FAILED
    (shard,) = services.instances.list_shards(ids[1])
    assert shard.status is ShardStatus.FAILED and len(shard.attempts) == 1
    assert shard.error == "FailShard: account has no currency"
