"""Each IoT handler, run shard by shard and then every shard again (a rerun with the stored
plan, bounds and business date): the second run changes nothing in the end state."""

from __future__ import annotations

import gzip
import json
from datetime import date, timedelta
from typing import Any

import pytest

from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
)
from iotsched.services.operations.on_demand import run_now
from iotsched.tasklib.archive_cold_data import rows_of
from iotsched.tasklib.common import Scope, TelemetryRow, put_rows, read_rows
from tests.iot.conftest import IotHarness
from tests.iot.support import AS_OF
from tests.support import task

pytestmark = pytest.mark.moto

GROUPS = {"strategy": "groups", "source": "device_directory"}


def fire(h: IotHarness, definition: dict[str, Any], business_date: date | None = None) -> str:
    """Apply one task and run it now (manual firing), every shard once; returns its id."""
    apply_tasks([task(**definition)], h.services.tasks, now=h.clock.now())
    instance, _ = run_now(definition["task_id"], h.services, business_date=business_date)
    h.drain()
    h.ended(instance.instance_id)
    return instance.instance_id


def device_state(h: IotHarness) -> dict[str, Any]:
    return {
        d.device_id: (d.offline_since, d.last_heartbeat)
        for tenant, first, end in (("acme", 0, 1000), ("globex", 1000, 1300))
        for d in h.iot.directory.devices(tenant, f"dev-{first:06d}", f"dev-{end:06d}")
    }


def objects(h: IotHarness, prefix: str) -> dict[str, list[str]]:
    """Object key -> version ids (every version, so a rewrite shows)."""
    s3, bucket = h.iot.resources.need_bucket()
    out: dict[str, list[str]] = {}
    for v in s3.list_object_versions(Bucket=bucket, Prefix=prefix).get("Versions", []):
        out.setdefault(v["Key"], []).append(v["VersionId"])
    return out


def body(h: IotHarness, key: str) -> bytes:
    s3, bucket = h.iot.resources.need_bucket()
    data: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return data


def seed_telemetry(h: IotHarness, tenant: str, first: int, end: int, days: list[date]) -> None:
    rows = []
    for day in days:
        for block in range(first - first % 500, end, 500):
            ids = range(max(block, first), min(block + 500, end))
            rows.append(
                TelemetryRow(
                    tenant=tenant,
                    day=day,
                    block=f"dev-{block:06d}",
                    readings=tuple(
                        (f"dev-{n:06d}", (n + day.day) % 97, 1 if n % 40 == 0 else 0) for n in ids
                    ),
                )
            )
    put_rows(h.iot.resources, rows)


# -- inspect_offline ------------------------------------------------------------------------


def test_inspect_offline_marks_late_devices_once_as_of_the_interval_end(
    harness: IotHarness,
) -> None:
    h = harness
    first = fire(
        h,
        {
            "task_id": "inspect",
            "handler": "inspect_offline",
            "trigger": {"rate": "15m"},
            "business_date": "same_day",
            "sharding": GROUPS,
            "params": {"heartbeat_timeout_s": 1800},
        },
    )
    results = h.results(first)
    assert [r["devices"] for r in results] == [600, 400, 300]
    # Every 10th device is silent since 3 h before the interval's end (every 50th never spoke).
    assert sum(r["marked"] for r in results) == 130
    state = device_state(h)
    offline = {d for d, (since, _) in state.items() if since is not None}
    assert offline == {f"dev-{n:06d}" for n in range(0, 1300, 10)}
    assert {since for since, _ in state.values() if since} == {AS_OF}  # the interval's end

    # Two days later, a rerun judges the same interval: nothing more is marked (a device
    # whose last heartbeat is 1 h past the interval would be late by "now").
    h.clock.set(AS_OF + timedelta(days=2))
    again = h.rerun(first)
    assert [r["marked_now"] for r in h.results(again)] == [0, 0, 0]
    # what it reports is the interval's marks, which the first run made
    assert [r["marked"] for r in h.results(again)] == [60, 40, 30]
    assert [r["offline"] for r in h.results(again)] == [60, 40, 30]
    assert device_state(h) == state


class WorkerDied(Exception):
    """Stands for a process death mid-shard: the attempt stops with its marks made."""


def test_an_inspection_killed_mid_shard_reports_the_marks_its_dead_attempt_made(
    harness: IotHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = harness
    definition = {
        "task_id": "inspect",
        "handler": "inspect_offline",
        "trigger": {"rate": "15m"},
        "business_date": "same_day",
        "sharding": {"strategy": "static", "shards": [{"tenant": "acme"}]},
        "params": {"heartbeat_timeout_s": 1800},
        "retry": {"max_attempts": 2, "backoff_s": 1},
    }
    apply_tasks([task(**definition)], h.services.tasks, now=h.clock.now())
    instance, _ = run_now("inspect", h.services)
    (message,) = h.queue.sent
    directory = h.iot.directory
    mark = directory.mark_offline
    made: list[str] = []

    def dies_after_40(tenant: str, device_id: str, *, since: Any) -> bool:
        if len(made) == 40:
            raise WorkerDied("killed mid-shard")
        made.append(device_id)
        return mark(tenant, device_id, since=since)

    monkeypatch.setattr(directory, "mark_offline", dies_after_40)
    with pytest.raises(RetryShardError):
        run_shard(
            Delivery(body=message.model_dump_json(), receipt_handle="rh-1"), h.services, worker="w1"
        )
    monkeypatch.setattr(directory, "mark_offline", mark)
    run_shard(
        Delivery(body=message.model_dump_json(), receipt_handle="rh-2", receive_count=2),
        h.services,
        worker="w2",
    )
    h.ended(instance.instance_id)
    (result,) = h.results(instance.instance_id)
    marks = [d for d, (since, _) in device_state(h).items() if since == AS_OF]
    assert len(marks) == 100  # every 10th of acme's 1,000 devices
    # the second attempt made 60 of them; it reports the 100 the inspection made
    assert (result["marked"], result["marked_now"], result["offline"]) == (100, 60, 100)


# -- tenant_report ----------------------------------------------------------------------------


REPORT = {
    "task_id": "report",
    "tenant": "acme",
    "handler": "tenant_report",
    "reduce": "tenant_report_merge",
    "trigger": {"cron": "5 0 * * *", "timezone": "Asia/Shanghai"},
    "sharding": GROUPS,
}


def test_tenant_report_writes_one_report_with_the_same_bytes_on_rerun(harness: IotHarness) -> None:
    h = harness
    day = date(2026, 11, 27)
    seed_telemetry(h, "acme", 0, 1000, [day, day - timedelta(days=1)])
    first = fire(h, REPORT, business_date=day)
    key = "reports/acme/daily/2026-11-27.json"
    assert objects(h, "reports/") == {key: objects(h, "reports/")[key]}
    data = body(h, key)
    report = json.loads(data)
    expected_readings = sum((n + 27) % 97 for n in range(1000))
    assert report["devices"] == 1000 and report["telemetry_readings"] == expected_readings
    assert report["alarms"] == 25 and [g["group"] for g in report["groups"]] == ["north", "south"]
    assert report["business_date"] == "2026-11-27"
    assert report["days"] == [
        {
            "date": "2026-11-27",
            "readings": expected_readings,
            "alarms": 25,
            "reporting": sum(1 for n in range(1000) if (n + 27) % 97),
        }
    ]

    h.clock.set(AS_OF + timedelta(days=3))
    again = h.rerun(first)
    (reduce_result,) = [r for r in h.results(again) if "unchanged" in r]
    assert reduce_result == {"written": [], "unchanged": [key]}
    assert body(h, key) == data
    assert len(objects(h, "reports/")[key]) == 1  # no second version


def test_weekly_report_sums_the_week(harness: IotHarness) -> None:
    h = harness
    day = date(2026, 11, 27)
    week = [day - timedelta(days=k) for k in range(7)]
    seed_telemetry(h, "acme", 0, 1000, [*week, day - timedelta(days=7)])
    fire(h, {**REPORT, "task_id": "weekly", "params": {"period": "weekly"}}, business_date=day)
    report = json.loads(body(h, "reports/acme/weekly/2026-11-27.json"))
    assert [d["date"] for d in report["days"]] == sorted(d.isoformat() for d in week)
    assert report["telemetry_readings"] == sum((n + d.day) % 97 for d in week for n in range(1000))


# -- archive_cold_data ------------------------------------------------------------------------


ARCHIVE = {
    "task_id": "archive",
    "tenant": "acme",
    "handler": "archive_cold_data",
    "trigger": {"cron": "30 2 * * *", "timezone": "Asia/Shanghai"},
    "sharding": GROUPS,
    "params": {"retention_days": 2, "lookback_days": 7},
}


def test_archive_moves_cold_rows_once_with_deterministic_keys(harness: IotHarness) -> None:
    h = harness
    business = date(2026, 11, 27)
    days = [business - timedelta(days=k) for k in range(8)]  # 11-20 .. 11-27
    seed_telemetry(h, "acme", 0, 1000, days)
    everything = {
        d: read_rows(h.iot.resources, Scope("acme", "dev-000000", "dev-001000"), d) for d in days
    }
    first = fire(h, ARCHIVE, business_date=business)
    cold = [d for d in days if d <= business - timedelta(days=2)]  # 11-20 .. 11-25
    # Block dev-000500 starts in `north` ([0, 600)): north archives both blocks, south none.
    expected = {f"archive/acme/{d.isoformat()}/dev-000000_dev-000600.jsonl.gz" for d in cold}
    versions = objects(h, "archive/")
    assert set(versions) == expected
    for d in cold:
        key = f"archive/acme/{d.isoformat()}/dev-000000_dev-000600.jsonl.gz"
        assert rows_of(body(h, key)) == everything[d]  # every row, byte-exact content
        assert gzip.decompress(body(h, key)).count(b"\n") == 2
    scope = Scope("acme", "dev-000000", "dev-001000")
    assert [read_rows(h.iot.resources, scope, d) for d in cold] == [[] for _ in cold]
    assert read_rows(h.iot.resources, scope, business) == everything[business]  # warm: kept
    results = h.results(first)
    assert [r["objects"] for r in results] == [6, 0]
    assert [r["rows_deleted"] for r in results] == [12, 0]

    again = h.rerun(first)
    assert [r["objects"] for r in h.results(again)] == [0, 0]
    assert objects(h, "archive/") == versions  # no object written twice


def test_archive_after_a_death_between_upload_and_delete_only_deletes(harness: IotHarness) -> None:
    h = harness
    business = date(2026, 11, 27)
    cold = business - timedelta(days=2)
    seed_telemetry(h, "acme", 0, 1000, [cold])
    first = fire(h, {**ARCHIVE, "params": {"retention_days": 2, "lookback_days": 1}}, business)
    versions = objects(h, "archive/")
    # The rows come back as if the worker had died after confirming the object.
    seed_telemetry(h, "acme", 0, 1000, [cold])
    again = h.rerun(first)
    assert [r["already"] for r in h.results(again)] == [1, 0]
    assert [r["rows_deleted"] for r in h.results(again)] == [2, 0]
    assert [r["rows_left"] for r in h.results(again)] == [0, 0]
    assert objects(h, "archive/") == versions
    scope = Scope("acme", "dev-000000", "dev-001000")
    assert read_rows(h.iot.resources, scope, cold) == []


# -- plan_expiry_reminders --------------------------------------------------------------------


REMINDERS = {
    "task_id": "reminders",
    "handler": "plan_expiry_reminders",
    "trigger": {"cron": "0 9 * * *", "timezone": "Europe/Berlin"},
    "sharding": GROUPS,
    "params": {"days_ahead": 7},
}


def test_reminders_send_one_notice_per_device_and_plan_period(harness: IotHarness) -> None:
    h = harness
    first = fire(h, REMINDERS, business_date=date(2026, 11, 28))
    sent = h.notices()
    expected = {f"dev-{n:06d}" for n in range(0, 1300, 25)}  # plans ending 2026-12-01
    assert sorted(n["device_id"] for n in sent) == sorted(expected)
    assert {n["notice_id"] for n in sent} == {
        f"remind#{'acme' if int(d[4:]) < 1000 else 'globex'}#{d}#2026-12-01" for d in expected
    }
    h.rerun(first)
    assert h.notices() == []  # a rerun sends none twice


def test_a_notice_claimed_but_never_sent_is_sent_by_the_next_run(harness: IotHarness) -> None:
    h = harness
    first = fire(h, REMINDERS, business_date=date(2026, 11, 28))
    assert len(h.notices()) == 52
    ddb, table = h.iot.resources.need_table()
    # As if the worker had died between its claim and its publish.
    ddb.update_item(
        TableName=table,
        Key={"pk": {"S": "NOTICE#acme"}, "sk": {"S": "dev-000050#2026-12-01"}},
        UpdateExpression="SET #s = :p",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":p": {"S": "pending"}},
    )
    again = h.rerun(first)
    assert [n["device_id"] for n in h.notices()] == ["dev-000050"]
    assert sum(r["resent"] for r in h.results(again)) == 1
    h.rerun(first)
    assert h.notices() == []


# -- billing_settlement -----------------------------------------------------------------------


BILLING = {
    "task_id": "billing",
    "handler": "billing_settlement",
    "trigger": {"cron": "0 1 * * *", "timezone": "Asia/Shanghai"},
    "sharding": {"strategy": "static", "shards": [{"tenant": "acme"}, {"tenant": "globex"}]},
}


def accounts(h: IotHarness) -> dict[str, tuple[int, int, set[str]]]:
    ddb, table = h.iot.resources.need_table()
    out = {}
    for tenant in ("acme", "globex"):
        items = ddb.query(
            TableName=table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"ACCOUNT#{tenant}"}},
        )["Items"]
        for item in items:
            out[f"{tenant}/{item['sk']['S']}"] = (
                int(item["balance"]["N"]),
                int(item.get("deductions", {}).get("N", "0")),
                set(item.get("settled", {}).get("SS", [])),
            )
    return out


def seed_accounts(h: IotHarness) -> None:
    ddb, table = h.iot.resources.need_table()
    for tenant, account, devices in (
        ("acme", "a1", 600),
        ("acme", "a2", 400),
        ("globex", "g1", 300),
    ):
        ddb.put_item(
            TableName=table,
            Item={
                "pk": {"S": f"ACCOUNT#{tenant}"},
                "sk": {"S": account},
                "balance": {"N": "1000000"},
                "devices": {"N": str(devices)},
                "daily_fee": {"N": "3"},
            },
        )


def test_billing_deducts_once_per_account_and_business_date(harness: IotHarness) -> None:
    h = harness
    seed_accounts(h)
    first = fire(h, BILLING, business_date=date(2026, 11, 27))
    after_first = accounts(h)
    assert after_first == {
        "acme/a1": (1000000 - 1800, 1, {"2026-11-27"}),
        "acme/a2": (1000000 - 1200, 1, {"2026-11-27"}),
        "globex/g1": (1000000 - 900, 1, {"2026-11-27"}),
    }
    again = h.rerun(first)
    assert [r["deducted"] for r in h.results(again)] == [0, 0]
    assert accounts(h) == after_first
    # A catch-up of an older date settles that date once, whatever the order.
    h.clock.set(AS_OF + timedelta(minutes=1))
    older = fire(h, {**BILLING}, business_date=date(2026, 11, 26))
    h.rerun(older)
    assert accounts(h)["acme/a1"] == (1000000 - 3600, 2, {"2026-11-26", "2026-11-27"})
