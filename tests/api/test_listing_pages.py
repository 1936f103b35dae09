"""GET /instances a page at a time across the index's buckets (moto server)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.api.conftest import Client
from tests.support import T0, instance

pytestmark = pytest.mark.moto


def test_instances_by_status_page_by_page(moto_api: Client) -> None:
    ids = []
    for n in range(7):
        inst = instance(f"job-a{n % 3}", T0 + timedelta(minutes=5 * n))
        assert moto_api.services.instances.claim_instance(inst) is None
        ids.append(inst.instance_id)
    newest = list(reversed(ids))
    pages, before = [], None
    for _ in range(10):  # a cursor that does not move fails, never loops
        query = {"status": "planning", "limit": "3", **({"before": before} if before else {})}
        answer = moto_api.get("/instances", **query)
        assert answer.status == 200, answer.body
        page = [i["instance_id"] for i in answer.body]
        if not page:
            break
        pages.append(page)
        before = page[-1]
    assert pages == [newest[0:3], newest[3:6], newest[6:7]]
    assert moto_api.get("/instances", before="not an id").status == 400
