"""The API's limits, path parameters and request bodies, with the examples its document shows
(and the fuzz test starts from)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from iotsched.api.models import (
    INSTANCE_ID_PATTERN,
    BackfillRequest,
    CancelRequest,
    PauseRequest,
    RerunRequest,
    RunRequest,
    SubmitRequest,
)
from iotsched.core.task_definition import TaskDefinition
from iotsched.core.task_file import TaskFile
from iotsched.core.value_types import TASK_ID_PATTERN, TENANT_FILTER_PATTERN

#: Instances one request lists, and shards one page holds (a Lambda answer is at most 6 MB).
MAX_LIST_LIMIT = 500
MAX_SHARD_PAGE = 1000
#: Slots one backfill request claims: each claim is a few writes and a message batch, and API
#: Gateway gives a request 29 s. A longer range is split by the client (re-posting a range is
#: harmless: slots already claimed come back `exists`).
MAX_BACKFILL_CLAIMS = 100
#: Slots a backfill answer lists (a dry run counts them all).
MAX_LISTED_SLOTS = 1000
#: Alerts one request lists.
MAX_ALERTS = 200
#: Tasks one page of GET /tasks holds (each view reads the task's newest instance).
MAX_TASK_PAGE = 100
#: How far ahead a submission may be due.
MAX_SUBMIT_AHEAD = timedelta(days=366)

EXAMPLE_TASK: dict[str, Any] = {
    "id": "device-scan",
    "handler": "noop",
    "trigger": {"rate": "1h"},
    "sharding": {"strategy": "id_range", "shards": 8, "key_space": "device_id", "id_max": 120000},
    "misfire": {"policy": "fire_once", "grace_s": 300},
    "retry": {"max_attempts": 3, "backoff_s": 30},
    "timeout_s": 300,
}
EXAMPLE_INSTANCE = "device-scan@2026-11-29T12:00Z"

#: A `?tenant=` filter: a tenant name, or `-` for the records without a tenant.
TenantFilter = Annotated[
    str | None,
    Query(
        pattern=TENANT_FILTER_PATTERN,
        description="Only this tenant's records (the caller's are all it sees); `-`: those "
        "with no tenant (the operators').",
    ),
]

TaskId = Annotated[
    str,
    Path(
        pattern=TASK_ID_PATTERN,
        description="Task id, as in the task file.",
        openapi_examples={"device-scan": {"value": EXAMPLE_TASK["id"]}},
    ),
]
InstanceId = Annotated[
    str,
    Path(
        pattern=INSTANCE_ID_PATTERN,
        description="Instance id: `task@2026-11-29T12:00Z`, with `~suffix` for a manual run or a "
        "submission with a request id.",
        openapi_examples={"scheduled": {"value": EXAMPLE_INSTANCE}},
    ),
]

# Bodies, with the examples the document shows (and the fuzz test starts from).
TaskFileBody = Annotated[
    TaskFile, Body(openapi_examples={"one task": {"value": {"tasks": [EXAMPLE_TASK]}}})
]
TaskBody = Annotated[
    TaskDefinition, Body(openapi_examples={"device-scan": {"value": EXAMPLE_TASK}})
]
RunBody = Annotated[
    RunRequest | None,
    Body(
        openapi_examples={
            "for a date": {"value": {"business_date": "2026-11-28", "request_id": "r-1"}}
        }
    ),
]
SubmitBody = Annotated[
    SubmitRequest, Body(openapi_examples={"in two hours": {"value": {"delay": "2h"}}})
]
BackfillBody = Annotated[
    BackfillRequest,
    Body(
        openapi_examples={
            "dry run": {"value": {"from": "2026-11-01", "to": "2026-11-02", "dry_run": True}}
        }
    ),
]
RerunBody = Annotated[
    RerunRequest | None,
    Body(openapi_examples={"failed shards": {"value": {"failed_only": True}}}),
]
PauseBody = Annotated[
    PauseRequest | None,
    Body(openapi_examples={"with a note": {"value": {"note": "firmware 4.2 recalled"}}}),
]
CancelBody = Annotated[
    CancelRequest | None,
    Body(openapi_examples={"with a reason": {"value": {"reason": "wrong parameters"}}}),
]
