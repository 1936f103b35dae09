"""The committed OpenAPI document (docs/openapi.json) is the one the code generates."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from iotsched.api.openapi import main, openapi_document, render

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
REGENERATE = ".venv/bin/python -m iotsched.api.openapi --write docs/openapi.json"


def test_the_committed_document_has_not_drifted() -> None:
    committed = DOCUMENT.read_text(encoding="utf-8")
    generated = render(openapi_document())
    if committed != generated:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                generated.splitlines(keepends=True),
                "docs/openapi.json (committed)",
                "generated from the code",
                n=2,
            )
        )
        raise AssertionError(f"docs/openapi.json is stale; run `{REGENERATE}`\n{diff[:6000]}")


def test_every_operation_answers_errors_with_the_error_body() -> None:
    document = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    operations = [op for ops in document["paths"].values() for op in ops.values()]
    assert {op["operationId"] for op in operations} == {
        "listTasks",
        "applyTasks",
        "getTask",
        "putTask",
        "pauseTask",
        "resumeTask",
        "deleteTask",
        "runTask",
        "submitRun",
        "backfillTask",
        "listInstances",
        "getInstance",
        "listShards",
        "getShardLogs",
        "cancelInstance",
        "rerunInstance",
        "listAlerts",
        "listCalendars",
        "listHandlers",
        "getHandler",
        "listTenants",
        "listTaskVersions",
        "rollbackTask",
        "listAudit",
        "getOverview",
    }
    error_body = {"$ref": "#/components/schemas/ErrorBody"}
    for op in operations:
        responses = op["responses"]
        assert "422" not in responses, op["operationId"]  # validation errors are 400s
        assert "200" in responses, op["operationId"]
        for code, response in responses.items():
            if code != "200":
                assert response["content"]["application/json"]["schema"] == error_body, code
        if "parameters" in op or "requestBody" in op:
            assert "400" in responses, op["operationId"]
    assert document["security"] == [{"sigv4": []}]
    assert {"HTTPValidationError", "ResponseValidationError"}.isdisjoint(
        document["components"]["schemas"]
    )


def test_task_bodies_are_the_task_file_model() -> None:
    document = json.loads(DOCUMENT.read_text(encoding="utf-8"))

    def body(path: str, method: str) -> object:
        return document["paths"][path][method]["requestBody"]["content"]["application/json"][
            "schema"
        ]

    assert body("/tasks/{task_id}", "put") == {"$ref": "#/components/schemas/TaskDefinition"}
    assert body("/tasks", "post") == {"$ref": "#/components/schemas/TaskFile"}


def test_the_generator_writes_the_document(tmp_path: Path) -> None:
    target = tmp_path / "docs" / "openapi.json"
    assert main(["--write", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == render(openapi_document())
