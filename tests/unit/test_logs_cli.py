"""`iotsched logs`: an attempt's lines as the record or the log object holds them, one shard or
every shard's latest attempt, `--follow` until the shard is final, clear errors for bad input."""

from __future__ import annotations

import json
import threading
from typing import Any

from click.testing import CliRunner

from iotsched.cli.main import cli
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import ShardOutcome
from iotsched.services.wiring import Wiring
from tests.unit.test_attempt_logs import setup, three_lines_then_fail
from tests.unit.test_shard_batch import delivery


def invoke(services: Wiring, *args: str) -> Any:
    return CliRunner().invoke(
        cli, list(args), obj={"services": services, "actor": "tester"}, env={"COLUMNS": "200"}
    )


def ran(clock: ManualClock, handler: Any, shards: int = 1) -> tuple[Wiring, str]:
    services, messages = setup(clock, {"work": handler}, shards=shards)
    for message in messages:
        run_shard(delivery(message, message.shard), services, worker="w")
    return services, messages[0].instance_id


def test_logs_prints_the_three_lines_and_the_failure(clock: ManualClock) -> None:
    services, iid = ran(clock, three_lines_then_fail)
    result = invoke(services, "logs", iid, "--shard", "0")
    assert result.exit_code == 0, result.output
    text = result.output
    assert "attempt 1: failed (4 lines" in text
    for line in (
        "WARNING reading block 0",
        "INFO    devices read devices=120",
        "gateway 7 refused",
    ):
        assert line in text
    assert "RuntimeError: firmware server down" in text
    assert text.index("reading block 0") < text.index("devices read") < text.index("gateway 7")

    as_json = json.loads(invoke(services, "logs", iid, "--shard", "0", "--json").output)
    assert [line["message"] for line in as_json["lines"][:3]] == [
        "reading block 0",
        "devices read",
        "gateway 7 refused",
    ]
    assert (as_json["source"], as_json["complete"], as_json["attempt"]) == ("inline", True, 1)


def test_without_a_shard_every_shards_latest_attempt_is_shown(clock: ManualClock) -> None:
    def per_shard(ctx: ShardContext) -> None:
        ctx.log(f"shard {ctx.shard} here")

    services, iid = ran(clock, per_shard, shards=3)
    views = json.loads(invoke(services, "logs", iid, "--json").output)
    assert [(v["shard"], [line["message"] for line in v["lines"]]) for v in views] == [
        (n, [f"shard {n} here"]) for n in range(3)
    ]


def test_a_long_log_is_printed_whole_from_its_object(clock: ManualClock) -> None:
    def chatty(ctx: ShardContext) -> None:
        for n in range(200):
            ctx.log(f"line {n}")

    services, iid = ran(clock, chatty)
    view = json.loads(invoke(services, "logs", iid, "--shard", "0", "--json").output)
    assert view["source"] == "object" and view["truncated"] and view["complete"]
    assert [line["message"] for line in view["lines"]] == [f"line {n}" for n in range(200)]


def test_bad_input_is_one_clear_line(clock: ManualClock) -> None:
    services, iid = ran(clock, three_lines_then_fail)
    cases = {
        ("logs", "nope@2026-11-29T12:00Z"): "no instance 'nope@2026-11-29T12:00Z'",
        ("logs", iid, "--attempt", "1"): "--attempt needs --shard",
        ("logs", iid, "--shard", "0", "--attempt", "3"): "has no attempt 3",
        ("logs", iid, "--shard", "4"): "has no shard 4",
    }
    for args, message in cases.items():
        result = invoke(services, *args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output


def test_follow_prints_each_attempt_as_it_ends_until_the_shard_is_final(
    clock: ManualClock,
) -> None:
    services, messages = setup(clock, {"work": three_lines_then_fail})
    (message,) = messages
    iid = message.instance_id
    result: list[Any] = []
    follower = threading.Thread(
        target=lambda: result.append(
            invoke(services, "logs", iid, "--follow", "--interval", "0.1", "--json")
        )
    )
    follower.start()  # the shard has not started: it waits
    assert run_shard(delivery(message), services, worker="w") is ShardOutcome.FAILED
    follower.join(timeout=30)
    assert not follower.is_alive()
    (answer,) = result
    assert answer.exit_code == 0, answer.output
    # CliRunner swaps sys.stdout and sys.stderr for the whole process: what the worker on this
    # thread writes meanwhile lands in the output too, so only the JSON documents are the CLI's.
    documents = [line for line in answer.output.splitlines() if line.startswith("{")]
    (view,) = [json.loads(line) for line in documents]
    assert (view["attempt"], view["outcome"], view["final"]) == (1, "failed", True)
    assert view["lines"][1]["message"] == "devices read"
