"""The tenant handlers' key prefix is one path segment: a task of one tenant cannot put its
reports or archives under another tenant's prefix (`reports/acme/<its own tenant>/...`)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Client


def report(prefix: str, handler: str = "tenant_report") -> dict[str, Any]:
    return {
        "id": "report",
        "tenant": "globex",
        "handler": handler,
        "trigger": {"cron": "0 1 * * *"},
        "sharding": {"strategy": "static", "shards": [{"tenant": "globex"}]},
        "params": {"prefix": prefix},
    }


@pytest.mark.parametrize("prefix", ["reports/acme", "../acme", "..", "", "a" * 64, "x y"])
@pytest.mark.parametrize("handler", ["tenant_report", "archive_cold_data"])
def test_a_tenants_report_cannot_land_under_another_tenants_prefix(
    api: Client, prefix: str, handler: str
) -> None:
    answer = api.put("/tasks/report", report(prefix, handler))
    assert answer.status == 400, answer.body
    assert answer.body["message"].startswith("task 'report': params.prefix"), answer.body
    assert api.get("/tasks/report").status == 404  # nothing written


def test_a_one_segment_prefix_is_taken(api: Client) -> None:
    assert api.put("/tasks/report", report("monthly-reports")).status == 200
