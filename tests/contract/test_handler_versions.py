"""Each attempt records the package and version of the handler it ran (what ran, beside the
task's version), on every store; a handler given in-process records none, and an attempt
stores nothing for it (items stay small)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from datetime import timedelta
from importlib import metadata
from typing import Any

import pytest
from click.testing import CliRunner

from iotsched import ShardContext, bootstrap
from iotsched.adapters.dynamodb.codec import attempt_value
from iotsched.cli.main import cli
from iotsched.clock import ManualClock
from iotsched.core.attempt_record import Attempt
from iotsched.core.shard_record import ShardRecord
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
)
from iotsched.services.scheduling.send import shard_messages
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0, AwsResources, task


def in_process(ctx: ShardContext) -> dict[str, int]:
    return {"shard": ctx.shard}


@pytest.fixture(params=["memory", pytest.param("moto", marks=pytest.mark.moto)])
def make(request: pytest.FixtureRequest) -> Callable[[], Wiring]:
    def build() -> Wiring:
        clock = ManualClock(T0 + timedelta(seconds=5))
        handlers = registry({"in_process": in_process})
        if request.param == "memory":
            return bootstrap.build_memory(clock=clock, handlers=handlers)
        aws: AwsResources = request.getfixturevalue("aws_resources")
        return bootstrap.build(aws.settings, clock=clock, handlers=handlers, clients=aws.clients())

    return build


def run(services: Wiring, handler: str, **fields: Any) -> ShardRecord:
    apply_tasks(
        [task(handler, handler=handler, **fields)], services.tasks, now=T0 - timedelta(hours=1)
    )
    (iid,) = dispatch_tick(T0, services).claimed
    instance = services.instances.get_instance(iid)
    assert instance is not None
    (message,) = shard_messages(instance)
    with contextlib.suppress(RetryShardError):
        run_shard(
            Delivery(body=message.model_dump_json(), receipt_handle="rh"), services, worker="w"
        )
    (shard,) = services.instances.list_shards(iid)
    return shard


def test_an_installed_handler_s_attempt_records_its_package_and_version(
    make: Callable[[], Wiring],
) -> None:
    shard = run(make(), "noop")
    (attempt,) = shard.attempts
    assert (attempt.package, attempt.version) == ("iotsched", metadata.version("iotsched"))


def test_a_failed_attempt_records_them_too(make: Callable[[], Wiring]) -> None:
    shard = run(make(), "noop", params={"fail": True}, retry={"max_attempts": 1})
    (attempt,) = shard.attempts
    assert attempt.outcome is not None and attempt.outcome.value == "failed"
    assert attempt.package == "iotsched"


def test_an_in_process_handler_records_none(make: Callable[[], Wiring]) -> None:
    shard = run(make(), "in_process")
    (attempt,) = shard.attempts
    assert (attempt.package, attempt.version) == (None, None)


def test_the_stored_attempt_leaves_out_what_it_does_not_have() -> None:
    bare = Attempt(number=1, worker="w", started_at=T0)
    assert {"package", "version"}.isdisjoint(attempt_value(bare)["M"])
    named = bare.model_copy(update={"package": "acme-jobs", "version": "1.4.2"})
    assert attempt_value(named)["M"]["package"] == {"S": "acme-jobs"}


def test_iotsched_shards_shows_what_ran() -> None:
    services = bootstrap.build_memory(clock=ManualClock(T0 + timedelta(seconds=5)))
    shard = run(services, "noop")
    version = metadata.version("iotsched")
    runner = CliRunner()
    listed = runner.invoke(cli, ["shards", shard.instance_id, "--json"], obj={"services": services})
    assert listed.exit_code == 0, listed.output
    (view,) = json.loads(listed.output)["shards"]
    (attempt,) = view["attempts"]
    assert (attempt["package"], attempt["version"]) == ("iotsched", version)
    table = runner.invoke(
        cli, ["shards", shard.instance_id], obj={"services": services}, env={"COLUMNS": "250"}
    )
    assert table.exit_code == 0, table.output
    assert f"succeeded (iotsched {version})" in table.output
