"""Scripted DynamoDB answers for the contract suite: precise, per test, on both backends.

moto never cancels a transaction for a conflict or throttling. `Faults` answers chosen requests
in place of the service, as DynamoDB would, and nothing reaches the table for them:

    faults = Faults().cancel("TransactionConflict", at=1)          # the next transaction
    faults.cancel("ValidationError", at=0, times=3)                 # then three more
    faults.reject("TransactionConflictException", operation="UpdateItem")   # a single write
    faults.lose_response()                                          # lands; the answer is lost
    store = faults.install(store)

On a `DynamoDBStore` it is a botocore `before-call` hook on the store's own (fresh) client: the
hook returns the canned error response, so botocore raises it as the service's error
(`TransactionCanceledException` with its `CancellationReasons`, one per action of the very
request: the code at `at`, "None" elsewhere) without sending anything and without retrying. On
a `MemoryStore` it is the store's `fault_hook`, which the fake's transactional writes consult
with the same number of actions, in the same order, as the DynamoDB adapter's. Faults are
answered in the order they were scripted, each to the next request of its operation.

`lose_response` (DynamoDB only) lets the next TransactWriteItems reach the server and answers
500 as if its response was lost; botocore retries the same request (the same
ClientRequestToken), which the hook answers as DynamoDB does within its idempotency window:
committed, without writing again (moto would run it twice).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.httpsession import URLLib3Session

from iotsched.adapters.dynamodb import DynamoDBStore
from iotsched.adapters.memory.store import MemoryStore
from tests.support import TEST_INDEX_BUCKETS, AwsResources

S = TypeVar("S")


@dataclass
class _Fault:
    operation: str
    code: str
    at: int | None  # a cancellation's failing action; None: a request-level error
    times: int


class _Body:
    def __init__(self, body: bytes = b"") -> None:
        self._body = body

    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        yield self._body


class Faults:
    """A script of DynamoDB answers (see the module docstring)."""

    def __init__(self) -> None:
        self._script: list[_Fault] = []
        self.answered: list[tuple[str, str]] = []  # (operation, code) of each injected answer
        self._lose = 0  # transactions still to land with their response lost
        self._landed: set[str] = set()  # their ClientRequestTokens
        self.replays = 0  # retries of a landed transaction answered as committed

    def cancel(self, code: str, *, at: int, times: int = 1) -> Faults:
        """Cancel the next `times` transactions with `code` on action `at` ("None" elsewhere)."""
        self._script.append(_Fault("TransactWriteItems", code, at, times))
        return self

    def reject(self, code: str, *, operation: str = "TransactWriteItems", times: int = 1) -> Faults:
        """Answer the next `times` requests of `operation` with the error `code` (HTTP 400)."""
        self._script.append(_Fault(operation, code, None, times))
        return self

    def lose_response(self, *, times: int = 1) -> Faults:
        """Let the next `times` transactions land, then lose their responses (see above)."""
        self._lose += times
        return self

    @property
    def pending(self) -> int:
        """Scripted answers not given yet."""
        return sum(f.times for f in self._script) + self._lose

    def answer(self, operation: str, actions: int) -> dict[str, Any] | None:
        """The error response for this request, or None to let it through."""
        fault = next((f for f in self._script if f.operation == operation), None)
        if fault is None:
            return None
        fault.times -= 1
        if fault.times == 0:
            self._script.remove(fault)
        self.answered.append((operation, fault.code))
        response: dict[str, Any] = {
            "Error": {"Code": fault.code, "Message": f"injected by the test: {fault.code}"},
            "ResponseMetadata": {"HTTPStatusCode": 400, "RequestId": "injected"},
        }
        if fault.at is not None:
            assert fault.at < actions, f"no action {fault.at} in a transaction of {actions}"
            response["Error"]["Code"] = "TransactionCanceledException"
            response["CancellationReasons"] = [
                {"Code": fault.code} if n == fault.at else {"Code": "None"} for n in range(actions)
            ]
        return response

    def install(self, store: S, aws: AwsResources | None = None) -> S:
        """The same store with the script installed: a MemoryStore in place, a DynamoDBStore
        rebuilt on a fresh client of `aws` (the shared clients never see the hook)."""
        if isinstance(store, MemoryStore):
            store.fault_hook = lambda _write, actions: self.answer("TransactWriteItems", actions)
            return store
        assert isinstance(store, DynamoDBStore) and aws is not None
        client = aws.new_clients().dynamodb()
        client.meta.events.register("before-call.dynamodb", self._before_call)
        client.meta.events.register("before-send.dynamodb.TransactWriteItems", self._before_send)
        installed: Any = DynamoDBStore(client, aws.table, buckets=TEST_INDEX_BUCKETS)
        return installed  # type: ignore[no-any-return]

    def _before_call(
        self, model: Any, params: Mapping[str, Any], **kwargs: Any
    ) -> tuple[AWSResponse, dict[str, Any]] | None:
        actions = 0
        if model.name == "TransactWriteItems":
            actions = len(json.loads(params["body"])["TransactItems"])
        response = self.answer(model.name, actions)
        if response is None:
            return None
        http = AWSResponse("https://injected", 400, {}, _Body())  # type: ignore[arg-type]
        return http, response

    def _before_send(self, request: AWSPreparedRequest, **kwargs: Any) -> AWSResponse | None:
        body = request.body if isinstance(request.body, bytes) else str(request.body).encode()
        token = json.loads(body).get("ClientRequestToken", "")
        if token in self._landed:  # botocore's retry: DynamoDB's idempotent answer
            self.replays += 1
            return AWSResponse(request.url, 200, {}, _Body(b"{}"))  # type: ignore[arg-type]
        if not self._lose or not token:
            return None
        self._lose -= 1
        landed = URLLib3Session().send(request)  # the write lands ...
        assert landed.status_code == 200, landed.content
        self._landed.add(token)
        lost = b'{"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError"}'
        return AWSResponse(request.url, 500, {}, _Body(lost))  # type: ignore[arg-type]
