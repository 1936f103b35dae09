"""Issue item "tenant names are not validated", on the API: a task naming a bad tenant is a 400
naming the pattern, a `?tenant=` filter takes a tenant name or `-`, and `-` means "records
without a tenant" on every listing, as the CLI's `--tenant -` and the console's filter do."""

from __future__ import annotations

import pytest

from tests.api.conftest import DEVICE_SCAN, Client

PATTERN = "^[a-z0-9][a-z0-9._-]{0,63}$"


@pytest.mark.parametrize("name", ["acme#x", "acme/../globex", "acme corp", "*", "-", "a" * 1000])
def test_a_task_naming_a_bad_tenant_is_400(api: Client, name: str) -> None:
    for answer in (
        api.put("/tasks/device-scan", {**DEVICE_SCAN, "tenant": name}),
        api.post("/tasks", {"tasks": [{**DEVICE_SCAN, "tenant": name}]}),
    ):
        assert answer.status == 400, answer.body
        (problem,) = answer.problems
        assert problem["field"] == "task 'device-scan': tenant"
        assert PATTERN in problem["message"]
    assert api.get("/tasks").body == []


@pytest.mark.parametrize("path", ["/tasks", "/instances", "/alerts", "/overview"])
def test_a_tenant_filter_is_a_tenant_name_or_dash(api: Client, path: str) -> None:
    assert api.get(path, tenant="acme corp").status == 400
    assert api.get(path, tenant="acme#x").status == 400
    assert api.get(path, tenant="acme").status == 200
    assert api.get(path, tenant="-").status == 200


def test_dash_lists_the_records_without_a_tenant(api: Client) -> None:
    assert api.put("/tasks/mine", {**DEVICE_SCAN, "id": "mine", "tenant": "acme"}).status == 200
    assert api.put("/tasks/ops", {**DEVICE_SCAN, "id": "ops"}).status == 200
    for task_id in ("mine", "ops"):
        assert api.post(f"/tasks/{task_id}/runs").status == 200
    tasks = api.get("/tasks", tenant="-").body
    assert [t["id"] for t in tasks] == ["ops"]
    instances = api.get("/instances", tenant="-").body
    assert {i["task_id"] for i in instances} == {"ops"}
    assert [t["id"] for t in api.get("/tasks", tenant="acme").body] == ["mine"]
