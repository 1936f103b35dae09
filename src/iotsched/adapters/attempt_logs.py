"""Attempt logs in the data bucket (S3), and the in-memory fake with the same contract."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from iotsched.ports.logs import LogObjectError

_MISSING = {"NoSuchKey", "404", "NotFound"}


class S3AttemptLogs:
    """`AttemptLogStore` on an S3 bucket (the deployment's DataBucket, encrypted by its key).

    `client` builds the S3 client on first use, so that a function that never writes or reads
    a log does not build it at its cold start.
    """

    def __init__(self, client: Callable[[], Any], bucket: str) -> None:
        self._client = client
        self._built: Any = None
        self._bucket = bucket

    @property
    def _s3(self) -> Any:
        if self._built is None:
            self._built = self._client()
        return self._built

    def put(self, key: str, body: bytes) -> None:
        # Create-only (the worker's role refuses any other write of `logs/`): a log is never
        # overwritten, by a handler or a retry. An attempt writes its key once, so an object
        # already there is this write's own, landed before a retry of it.
        try:
            self._s3.put_object(
                Bucket=self._bucket,
                Key=key,
                Body=body,
                ContentType="application/x-ndjson",
                IfNoneMatch="*",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "PreconditionFailed":
                return
            raise LogObjectError(f"{type(exc).__name__}: {exc}") from exc
        except BotoCoreError as exc:
            raise LogObjectError(f"{type(exc).__name__}: {exc}") from exc

    def get(self, key: str) -> bytes | None:
        try:
            response = self._s3.get_object(Bucket=self._bucket, Key=key)
            body: bytes = response["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING:
                return None
            raise LogObjectError(f"{type(exc).__name__}: {exc}") from exc
        except BotoCoreError as exc:
            raise LogObjectError(f"{type(exc).__name__}: {exc}") from exc
        return body


class MemoryAttemptLogs:
    """`AttemptLogStore` in memory; `failing` (a message) makes every put fail, as S3 may."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.failing: str | None = None
        self._lock = threading.Lock()

    def put(self, key: str, body: bytes) -> None:
        if self.failing is not None:
            raise LogObjectError(self.failing)
        with self._lock:
            self.objects[key] = bytes(body)

    def get(self, key: str) -> bytes | None:
        with self._lock:
            return self.objects.get(key)
