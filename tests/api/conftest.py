"""The management API, called in-process with API Gateway REST proxy events.

`api` answers on the in-memory services (the `memory_services` fixture, manual clock at T0);
`moto_api` on the moto server's resources. Both call the resolver exactly as the Lambda does:
a proxy event in, a proxy response out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from iotsched.api.app import create_app
from iotsched.api.proxy import rest_event
from iotsched.services.wiring import Wiring

DEVICE_SCAN: dict[str, Any] = {
    "id": "device-scan",
    "handler": "noop",
    "trigger": {"rate": "1h"},
    "sharding": {"strategy": "id_range", "shards": 3, "key_space": "device_id", "id_max": 300},
    "retry": {"max_attempts": 2, "backoff_s": 0},
    "timeout_s": 60,
}


@dataclass(frozen=True)
class Answer:
    """A proxy response, its JSON body decoded."""

    status: int
    body: Any
    headers: dict[str, str]

    @property
    def problems(self) -> list[dict[str, str]]:
        """The `problems` of an error body."""
        return list(self.body["problems"])


@dataclass
class Client:
    """Sends proxy events to one resolver."""

    app: APIGatewayRestResolver
    services: Wiring

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        response = self.app.resolve(
            rest_event(method, path, body=body, query=query, headers=headers), None
        )
        raw = response.get("body")
        headers = dict(response.get("headers") or {})
        headers.update(
            {k: ", ".join(v) for k, v in (response.get("multiValueHeaders") or {}).items()}
        )
        return Answer(
            status=int(response["statusCode"]),
            body=json.loads(raw) if raw else None,
            headers=headers,
        )

    def get(self, path: str, **query: str) -> Answer:
        return self.call("GET", path, query=query or None)

    def post(self, path: str, body: Any = None) -> Answer:
        return self.call("POST", path, body)

    def put(self, path: str, body: Any) -> Answer:
        return self.call("PUT", path, body)


@pytest.fixture
def api(memory_services: Wiring) -> Client:
    """The API on in-memory services (manual clock at T0)."""
    return Client(create_app(lambda: memory_services), memory_services)


@pytest.fixture
def moto_api(moto_services: Wiring) -> Client:
    """The API on the moto server's table, queue and topic (manual clock at T0)."""
    return Client(create_app(lambda: moto_services), moto_services)


@pytest.fixture
def device_scan(api: Client) -> dict[str, Any]:
    """`device-scan` applied through the API (3 id-range shards, hourly)."""
    answer = api.put("/tasks/device-scan", DEVICE_SCAN)
    assert answer.status == 200, answer.body
    return DEVICE_SCAN
