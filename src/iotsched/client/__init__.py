"""A Python client for iotsched's management API: the CLI's verbs, typed results.

    from iotsched.client import Client

    api = Client.local()                      # `iotsched local up`'s port: http://127.0.0.1:8000/api
    api = Client.from_stack("iotsched")       # a deployed stack, SigV4-signed (docs/client.md)
    result = api.run("device-scan", request_id="nightly-2026-12-01")
    for shard in api.shards(result.instance.instance_id):
        print(shard.index, shard.status)

It depends on what iotsched's functions depend on (pydantic, botocore for SigV4, the standard
library's HTTP), so a handler can use it too. Errors: `iotsched.client.errors`.
"""

from __future__ import annotations

from iotsched.client.client import Client
from iotsched.client.errors import (
    ApiError,
    BadRequestError,
    ClientError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    ServerError,
    ThrottledError,
    TransportError,
)
from iotsched.client.transport import RetryPolicy, Signer, SigV4Signer, Transport

__all__ = [
    "ApiError",
    "BadRequestError",
    "Client",
    "ClientError",
    "ConflictError",
    "ForbiddenError",
    "NotFoundError",
    "RetryPolicy",
    "ServerError",
    "SigV4Signer",
    "Signer",
    "ThrottledError",
    "Transport",
    "TransportError",
]
