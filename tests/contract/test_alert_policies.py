"""Alert policies on the in-memory services and on moto (DynamoDB, SNS read back through a
subscribed queue): a failure threshold counted cluster-wide from concurrent threads, silences,
and a subscriber's filter policy on the new alert types."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest

from iotsched.clock import ManualClock
from iotsched.core.alert_message import Alert
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.services.execution.sweep import sweep
from iotsched.services.notices.alert_policy import publish_instance_alert
from iotsched.services.wiring import Wiring
from tests.support import T0, AwsResources, instance, queue_arn, read_alerts

THRESHOLD = {"count": 10, "window_s": 300}


@pytest.fixture(params=["memory", pytest.param("moto", marks=pytest.mark.moto)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def services(backend: str, request: pytest.FixtureRequest) -> Wiring:
    fixture = "memory_services" if backend == "memory" else "moto_services"
    built: Wiring = request.getfixturevalue(fixture)
    return built


def published(services: Wiring, backend: str, request: pytest.FixtureRequest) -> list[Alert]:
    if backend == "memory":
        return list(services.alerts.published)  # type: ignore[attr-defined]
    aws: AwsResources = request.getfixturevalue("aws_resources")
    return [a for a, _ in read_alerts(aws.client("sqs"), aws.alert_tap_url)]


def failed(n: int, *, at_s: int, alerts: dict[str, Any]) -> InstanceRecord:
    """Instance n of task `t`, ended failed `at_s` seconds after T0, under the policy `alerts`."""
    ended = instance("t", T0 + timedelta(minutes=n), status=InstanceStatus.FAILED, alerts=alerts)
    return ended.model_copy(update={"finished_at": T0 + timedelta(seconds=at_s)})


def in_threads(instances: list[InstanceRecord], services: Wiring, threads: int = 8) -> None:
    errors: list[BaseException] = []
    go = threading.Barrier(threads)

    def worker(part: list[InstanceRecord]) -> None:
        go.wait()
        for one in part:
            try:
                publish_instance_alert(one, services)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

    workers = [
        threading.Thread(target=worker, args=(instances[k::threads],)) for k in range(threads)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []


def test_100_failures_against_10_per_5_minutes_alert_once_per_window_reached(
    services: Wiring, backend: str, request: pytest.FixtureRequest
) -> None:
    # 100 failures 15 s apart: 5 windows of 300 s with 20 each, then 9 in a sixth window
    # (below the threshold). Stated: 5 alerts, one per window, each counting exactly 10.
    failures = [failed(n, at_s=15 * n, alerts={"threshold": THRESHOLD}) for n in range(100)]
    failures += [
        failed(100 + n, at_s=1500 + 30 * n, alerts={"threshold": THRESHOLD}) for n in range(9)
    ]
    in_threads(failures, services)
    in_threads(failures[:40], services)  # follow-ups done twice (a sweeper's retry): no change
    alerts = published(services, backend, request)
    assert sorted(a.alert_id for a in alerts) == [
        f"t#failure_threshold#2026-11-29T12:{m:02d}Z" for m in (0, 5, 10, 15, 20)
    ]
    for alert in alerts:
        assert alert.type == "failure_threshold" and alert.count == 10
        assert alert.window_s == 300 and len(alert.instances) == 10
        # the counted instances ended in the alert's window
        assert alert.window_start is not None
        window = {
            f.instance_id
            for f in failures
            if f.finished_at and 0 <= (f.finished_at - alert.window_start).total_seconds() < 300
        }
        assert set(alert.instances) <= window


def test_a_silence_holds_alerts_until_it_ends_then_the_sweeper_publishes_them(
    services: Wiring, backend: str, request: pytest.FixtureRequest, clock: ManualClock
) -> None:
    silence = {"start": "2026-11-29T12:00Z", "end": "2026-11-29T12:30Z"}
    inside = failed(1, at_s=600, alerts={"silence": [silence]})
    outside = failed(2, at_s=1900, alerts={"silence": [silence]})
    clock.set(T0 + timedelta(seconds=610))
    publish_instance_alert(inside, services)
    sweep(services)
    assert published(services, backend, request) == []  # held: nothing on the topic
    clock.set(T0 + timedelta(minutes=30, seconds=40))  # the silence ended (and the grace)
    report = sweep(services)
    assert report.republished_alerts == [f"{inside.instance_id}#failed"]
    clock.set(T0 + timedelta(minutes=32))
    publish_instance_alert(outside, services)
    sweep(services)
    alerts = {a.alert_id: a for a in published(services, backend, request)}
    assert set(alerts) == {f"{inside.instance_id}#failed", f"{outside.instance_id}#failed"}
    held = alerts[f"{inside.instance_id}#failed"]
    assert held.silenced_until == T0 + timedelta(minutes=30)
    assert alerts[f"{outside.instance_id}#failed"].silenced_until is None


def test_a_recurring_silence_in_a_timezone_holds(memory_services: Wiring) -> None:
    # 13:00 to 14:00 in Berlin (UTC+1 in November) is 12:00 to 13:00 UTC
    silence = {"cron": "0 13 * * *", "duration": "1h", "timezone": "Europe/Berlin"}
    inside = failed(1, at_s=1800, alerts={"silence": [silence]})
    after = failed(2, at_s=3600, alerts={"silence": [silence]})
    publish_instance_alert(inside, memory_services)
    publish_instance_alert(after, memory_services)
    sink: Any = memory_services.alerts
    assert [a.instance_id for a in sink.published] == [after.instance_id]
    assert list(sink.held) == [f"{inside.instance_id}#failed"]
    assert sink.held[f"{inside.instance_id}#failed"].silenced_until == T0 + timedelta(hours=1)


@pytest.mark.moto
def test_a_subscriber_filtering_on_type_receives_only_missed_runs_and_recoveries(
    aws_resources: AwsResources, moto_services: Wiring
) -> None:
    sqs, sns = aws_resources.client("sqs"), aws_resources.client("sns")
    url = sqs.create_queue(QueueName="ops-missed")["QueueUrl"]
    subscription = sns.subscribe(
        TopicArn=aws_resources.alert_topic_arn,
        Protocol="sqs",
        Endpoint=queue_arn(sqs, url),
        ReturnSubscriptionArn=True,
    )["SubscriptionArn"]
    sns.set_subscription_attributes(
        SubscriptionArn=subscription,
        AttributeName="FilterPolicy",
        AttributeValue=json.dumps({"type": ["missed_run", "recovered"], "silenced": ["no"]}),
    )
    policy = {"recovery": True, "threshold": {"count": 1, "window_s": 300}}
    publish_instance_alert(failed(1, at_s=60, alerts=policy), moto_services)
    ok = instance("t", T0 + timedelta(minutes=9), status=InstanceStatus.SUCCEEDED, alerts=policy)
    publish_instance_alert(ok, moto_services)
    every = read_alerts(sqs, aws_resources.alert_tap_url, expect=2)
    assert sorted(a.type for a, _ in every) == ["failure_threshold", "recovered"]
    assert {attrs["silenced"] for _, attrs in every} == {"no"}
    (got,) = read_alerts(sqs, url, expect=1)
    assert got[0].type == "recovered" and got[1]["type"] == "recovered"
    assert got[0].recovered_from == "t@2026-11-29T12:01Z"


def test_an_instance_keeps_its_tasks_policy_and_one_without_stores_none(
    services: Wiring,
) -> None:
    policy = {
        "threshold": THRESHOLD,
        "recovery": True,
        "silence": [{"cron": "0 2 * * *", "duration": "1h"}],
    }
    with_policy = instance("t", T0, alerts=policy)
    without = instance("u", T0)
    for one in (with_policy, without):
        services.instances.claim_instance(one)
    stored = services.instances.get_instance(with_policy.instance_id)
    assert stored is not None and stored.alert_policy == with_policy.alert_policy
    assert stored.alert_policy is not None and stored.alert_policy.recovery
    plain = services.instances.get_instance(without.instance_id)
    assert plain is not None and plain.alert_policy is None


def test_a_task_created_again_counts_and_recovers_on_its_own(
    services: Wiring, backend: str, request: pytest.FixtureRequest
) -> None:
    # acme's `t` failed once in the window; globex's `t` (created again at version 3) fails
    # once in the same window: 1 of 2 each, no alert, and nothing of acme's in globex's state
    policy = {"threshold": {"count": 2, "window_s": 3600}, "recovery": True}
    first = failed(1, at_s=60, alerts=policy)
    again = failed(2, at_s=120, alerts=policy)
    again = again.model_copy(update={"instance_id": again.instance_id + "~v3", "tenant": "globex"})
    publish_instance_alert(first, services)
    publish_instance_alert(again, services)
    assert published(services, backend, request) == []
    # globex's next failure reaches its own threshold, naming its instances only
    third = failed(3, at_s=180, alerts=policy)
    third = third.model_copy(update={"instance_id": third.instance_id + "~v3", "tenant": "globex"})
    publish_instance_alert(third, services)
    (alert,) = published(services, backend, request)
    assert alert.type == "failure_threshold" and alert.tenant == "globex"
    assert sorted(alert.instances or []) == sorted([again.instance_id, third.instance_id])
    assert alert.alert_id == "t~v3#failure_threshold#2026-11-29T12:00Z"
