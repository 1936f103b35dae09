"""`GET /instances/{id}/shards/{n}/logs`: an attempt's lines (the whole log from the data
bucket, else the record's tail), attempt by attempt; a shard not started has none; unknown
shards and attempts are 404s; the shard pages give each attempt's log counts, not its lines."""

from __future__ import annotations

from typing import cast

from iotsched.api.app import create_app
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.services.execution.batch import run_shard
from iotsched.services.wiring import Wiring
from tests.api.conftest import Client
from tests.unit.test_attempt_logs import setup, three_lines_then_fail
from tests.unit.test_shard_batch import delivery


def api_over(services: Wiring) -> Client:
    return Client(create_app(lambda: services), services)


def test_the_route_gives_the_three_lines_and_the_failure(clock: ManualClock) -> None:
    services, (message,) = setup(clock, {"work": three_lines_then_fail})
    api = api_over(services)
    iid = message.instance_id
    before = api.get(f"/instances/{iid}/shards/0/logs")
    assert before.status == 200, before.body
    assert (before.body["attempt"], before.body["lines"], before.body["status"]) == (
        None,
        [],
        "pending",
    )

    run_shard(delivery(message), services, worker="w")

    answer = api.get(f"/instances/{iid}/shards/0/logs")
    assert answer.status == 200, answer.body
    body = answer.body
    assert (body["attempt"], body["outcome"], body["final"]) == (1, "failed", True)
    assert (body["source"], body["complete"], body["line_count"]) == ("inline", True, 4)
    assert [(line["level"], line["message"]) for line in body["lines"][:3]] == [
        ("WARNING", "reading block 0"),
        ("INFO", "devices read"),
        ("ERROR", "gateway 7 refused"),
    ]
    assert body["lines"][1]["fields"] == {"devices": 120}
    assert "RuntimeError: firmware server down" in body["lines"][3]["message"]
    assert api.get(f"/instances/{iid}/shards/0/logs", attempt="1").body == body

    shards = api.get(f"/instances/{iid}/shards").body["shards"]
    (attempt,) = shards[0]["attempts"]
    assert attempt["log"]["line_count"] == 4  # counts and whereabouts, not the lines
    assert "lines" not in attempt["log"]


def test_a_long_log_comes_whole_from_the_bucket(clock: ManualClock) -> None:
    def chatty(ctx: ShardContext) -> None:
        for n in range(120):
            ctx.log(f"line {n}", n=n)

    services, (message,) = setup(clock, {"work": chatty})
    run_shard(delivery(message), services, worker="w")
    body = api_over(services).get(f"/instances/{message.instance_id}/shards/0/logs").body
    assert (body["source"], body["truncated"], body["complete"]) == ("object", True, True)
    assert [line["message"] for line in body["lines"]] == [f"line {n}" for n in range(120)]
    assert cast("str", body["object_key"]).endswith(f"/{message.instance_id}/0/1.jsonl")


def test_unknown_shards_and_attempts_are_404s(clock: ManualClock) -> None:
    services, (message,) = setup(clock, {"work": three_lines_then_fail})
    run_shard(delivery(message), services, worker="w")
    api = api_over(services)
    iid = message.instance_id
    for path, query in (
        (f"/instances/{iid}/shards/0/logs", {"attempt": "2"}),
        (f"/instances/{iid}/shards/7/logs", {}),
        ("/instances/t@2026-11-29T13:00Z/shards/0/logs", {}),
    ):
        answer = api.get(path, **query)
        assert answer.status == 404, (path, answer.body)
        assert answer.body["error"] == "not_found"
    for bad in ({"attempt": "0"}, {"attempt": "x"}):
        answer = api.get(f"/instances/{iid}/shards/0/logs", **bad)
        assert answer.status == 400, (bad, answer.body)
    assert api.get(f"/instances/{iid}/shards/-1/logs").status == 400
