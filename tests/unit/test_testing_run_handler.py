"""`iotsched.testing.run_handler`: one handler against a context the test describes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel, Field

from iotsched import FailShard, HandlerSpec, ShardContext, handler
from iotsched.ports.effects import EffectConditionError
from iotsched.testing import CancelSwitch, EffectLedger, ManualClock, ParamsError, run_handler

log = logging.getLogger("acme.jobs")


class Params(BaseModel):
    limit: int = Field(default=10, ge=1)
    currency: str = "EUR"


@handler("priced", params=Params)
def priced(ctx: ShardContext, params: Params) -> dict[str, Any]:
    return {"limit": params.limit, "currency": params.currency, "bounds": dict(ctx.bounds)}


def test_params_go_through_the_handlers_model_and_the_context_carries_the_rest() -> None:
    run = run_handler(
        priced,
        params={"limit": "5"},
        bounds={"tenant": "acme"},
        business_date=date(2026, 3, 31),
        shard=2,
        attempt=3,
        task_id="close",
        tenant="acme",
    )
    assert run.ok and run.result == {"limit": 5, "currency": "EUR", "bounds": {"tenant": "acme"}}
    ctx = run.ctx
    assert ctx.params == {"limit": "5"}  # as stored: the model parses it for the handler
    assert (ctx.task_id, ctx.tenant, ctx.shard, ctx.attempt) == ("close", "acme", 2, 3)
    assert ctx.instance_id == "close@2026-01-01T12:00Z"
    assert (ctx.data_interval_start, ctx.data_interval_end) == (
        datetime(2026, 3, 31, tzinfo=UTC),
        datetime(2026, 4, 1, tzinfo=UTC),
    )


def test_the_business_date_defaults_to_the_day_before_the_clock() -> None:
    run = run_handler(lambda ctx: {"day": str(ctx.business_date)})
    assert run.result == {"day": "2025-12-31"}
    clock = ManualClock(datetime(2026, 7, 1, 0, 30, tzinfo=UTC))
    assert run_handler(lambda ctx: {"day": str(ctx.business_date)}, clock=clock).result == {
        "day": "2026-06-30"
    }


def test_params_the_model_refuses_raise_before_the_handler_runs() -> None:
    calls: list[object] = []

    @handler("strict", params=Params)
    def strict(ctx: ShardContext, params: Params) -> None:
        calls.append(params)

    with pytest.raises(ParamsError) as refused:
        run_handler(strict, params={"limit": 0, "currency": 3})
    assert refused.value.problems == [
        "limit: Input should be greater than or equal to 1",
        "currency: Input should be a valid string",
    ]
    assert "params of handler 'strict' do not fit Params" in str(refused.value)
    assert calls == []


def test_params_that_are_not_json_are_refused() -> None:
    with pytest.raises(ParamsError, match="must be JSON values"):
        run_handler(priced, params={"limit": object()})


def test_the_handlers_exception_is_the_runs_error_and_reading_the_result_raises_it() -> None:
    def broken(ctx: ShardContext) -> None:
        log.warning("about to fail")
        raise FailShard("account 7 has no tariff")

    run = run_handler(broken)
    assert not run.ok
    assert isinstance(run.error, FailShard)
    with pytest.raises(FailShard, match="no tariff"):
        _ = run.result
    # the worker's log: the handler's lines, then the failure's
    assert [(line.level, line.logger) for line in run.logs] == [
        ("WARNING", "acme.jobs"),
        ("ERROR", "attempt"),
    ]
    assert "FailShard: account 7 has no tariff" in run.logs[-1].message


def test_a_result_the_worker_would_refuse_is_an_error() -> None:
    run = run_handler(lambda ctx: ["not", "a", "mapping"])
    assert isinstance(run.error, TypeError)
    big = run_handler(lambda ctx: {"blob": "x" * 40_000})
    assert isinstance(big.error, ValueError) and "exceeds" in str(big.error)


def test_a_pydantic_result_is_stored_as_its_json_form() -> None:
    class Out(BaseModel):
        day: date

    run = run_handler(lambda ctx: Out(day=ctx.business_date), business_date=date(2026, 2, 3))
    assert run.result == {"day": "2026-02-03"}


def test_a_handler_spec_runs_as_its_function_does() -> None:
    spec = HandlerSpec(name="plain", fn=lambda ctx: {"n": ctx.shard})
    assert run_handler(spec, shard=4).result == {"n": 4}


def test_effects_are_claimed_once_across_runs_sharing_a_ledger() -> None:
    def bill(ctx: ShardContext) -> dict[str, bool]:
        return {
            "a": ctx.once("bill#a", writes=[{"Put": {"Item": {"pk": {"S": "a"}}}}]),
            "b": ctx.once("bill#b"),
        }

    first = run_handler(bill, shard=1)
    assert first.result == {"a": True, "b": True}
    assert [(e.key, e.shard, e.attempt) for e in first.effects] == [
        ("bill#a", 1, 1),
        ("bill#b", 1, 1),
    ]
    assert first.effects[0].writes == ({"Put": {"Item": {"pk": {"S": "a"}}}},)
    assert first.ctx.keys == ["bill#a", "bill#b"]
    again = run_handler(bill, attempt=2, ledger=first.ledger)
    assert again.result == {"a": False, "b": False}
    assert (again.effects, again.skipped) == ([], ["bill#a", "bill#b"])
    # a run with a ledger of its own claims afresh
    assert run_handler(bill).result == {"a": True, "b": True}
    assert "bill#a" in first.ledger and len(first.ledger.effects) == 2


def test_a_refused_effect_raises_its_condition_error_and_claims_nothing() -> None:
    ledger = EffectLedger()
    ledger.refuse("bill#a", index=1)

    def bill(ctx: ShardContext) -> dict[str, Any]:
        try:
            ctx.once("bill#a", writes=[{}, {}])
        except EffectConditionError as exc:
            return {"refused": exc.index}
        return {"refused": None}

    run = run_handler(bill, ledger=ledger)
    assert run.result == {"refused": 1}
    assert run.effects == [] and "bill#a" not in ledger


def test_resources_given_replace_their_factories_others_are_made_once_per_run() -> None:
    made: list[int] = []

    def real_client() -> str:
        raise AssertionError("the real client is never made in a test that gives a fake")

    def counter() -> int:
        made.append(1)
        return len(made)

    def uses(ctx: ShardContext) -> dict[str, Any]:
        return {
            "client": ctx.resource(real_client),
            "counts": [ctx.resource(counter), ctx.resource(counter)],
        }

    run = run_handler(uses, resources={real_client: "fake"})
    assert run.result == {"client": "fake", "counts": [1, 1]}
    assert run_handler(uses, resources={real_client: "fake"}).result == {
        "client": "fake",
        "counts": [2, 2],
    }


def test_partials_are_the_reduce_handlers_and_a_shard_handler_has_none() -> None:
    def total(ctx: ShardContext) -> dict[str, Any]:
        parts = ctx.partials()
        return {"shards": [p["shard"] for p in parts], "n": sum(p["result"]["n"] for p in parts)}

    run = run_handler(
        total, partials=[{"result": {"n": 2}}, {"shard": 5, "bounds": {"t": 1}, "result": {"n": 3}}]
    )
    assert run.result == {"shards": [0, 5], "n": 5}
    lone = run_handler(total)
    assert isinstance(lone.error, RuntimeError) and "reduce" in str(lone.error)
    with pytest.raises(ValueError, match=r"partials\[0\] has no 'result'"):
        run_handler(total, partials=[{"n": 2}])


def test_cancel_after_answers_false_that_many_times_then_true() -> None:
    def loop(ctx: ShardContext) -> dict[str, int]:
        done = 0
        while done < 10 and not ctx.cancelled():
            done += 1
        return {"done": done}

    run = run_handler(loop, cancel_after=3)
    assert run.result == {"done": 3} and run.cancel_seen
    uncancelled = run_handler(loop)
    assert uncancelled.result == {"done": 10} and not uncancelled.cancel_seen
    assert run_handler(loop, cancel_after=0).result == {"done": 0}


def test_a_cancel_switch_is_flipped_by_the_test_or_a_fake() -> None:
    switch = CancelSwitch()

    class Device:
        def read(self) -> int:
            switch.cancel()  # an operator cancels while the first read runs
            return 1

    def reads(ctx: ShardContext) -> dict[str, int]:
        device = Device()
        total = 0
        while not ctx.cancelled():
            total += device.read()
        return {"total": total}

    run = run_handler(reads, cancel=switch)
    assert run.result == {"total": 1} and run.cancel_seen and switch.checks == 2
    with pytest.raises(ValueError, match="not both"):
        run_handler(reads, cancel=CancelSwitch(), cancel_after=1)


def test_heartbeats_read_the_clock_and_move_the_deadline() -> None:
    clock = ManualClock(datetime(2026, 5, 1, 8, 0, tzinfo=UTC))

    def slow(ctx: ShardContext) -> dict[str, str]:
        first = ctx.deadline
        clock.advance(timedelta(seconds=90))
        ctx.heartbeat()
        return {"first": first.isoformat(), "then": ctx.deadline.isoformat()}

    run = run_handler(slow, clock=clock, timeout_s=120)
    assert run.result == {"first": "2026-05-01T08:02:00+00:00", "then": "2026-05-01T08:03:30+00:00"}
    assert run.heartbeats == [datetime(2026, 5, 1, 8, 1, 30, tzinfo=UTC)]


def test_logs_keep_ctx_log_from_any_thread_and_logging_of_the_handlers_thread() -> None:
    def chatty(ctx: ShardContext) -> None:
        ctx.log("read devices", devices=3)
        log.info("python logging at INFO")
        log.debug("below the level kept")

        def elsewhere() -> None:
            ctx.log("from a worker thread", level="DEBUG")
            log.warning("logging of another thread is not the attempt's")

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()

    run = run_handler(chatty)
    assert [(line.level, line.logger, line.message, line.fields) for line in run.logs] == [
        ("INFO", None, "read devices", {"devices": 3}),
        ("INFO", "acme.jobs", "python logging at INFO", {}),
        ("DEBUG", None, "from a worker thread", {}),
    ]
    assert run.messages("debug") == ["from a worker thread"]
    assert run_handler(chatty, log_level="DEBUG").messages("DEBUG") == [
        "below the level kept",
        "from a worker thread",
    ]


def test_log_level_none_leaves_loggings_configuration_alone() -> None:
    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.WARNING)
    try:
        run = run_handler(lambda ctx: log.info("at INFO"), log_level=None)
        assert run.logs == []
        assert run_handler(lambda ctx: log.info("at INFO")).messages() == ["at INFO"]
        assert root.level == logging.WARNING  # lowered for the handler only
    finally:
        root.setLevel(before)
    with pytest.raises(ValueError, match="not a logging level"):
        run_handler(lambda ctx: None, log_level="LOUD")


def returns_mapping(ctx: ShardContext) -> Mapping[str, Any]:
    return {"ok": True}


def test_an_undecorated_function_is_a_handler_of_its_name() -> None:
    run = run_handler(returns_mapping)
    assert run.result == {"ok": True}
