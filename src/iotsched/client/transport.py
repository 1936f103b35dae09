"""HTTP for the client: one request, signed if asked, retried with backoff when that is safe.

It uses only the standard library (`urllib.request`) and, for SigV4, botocore (a dependency of
iotsched itself), so a handler package can call the API from a worker.

What is retried, with exponential backoff and full jitter (`Retry-After` is honoured up to the
cap):

- a 429 (API Gateway throttled the request: nothing ran), and a refused connection (nothing was
  sent), for every request;
- a 5xx, a timeout or a connection broken after the request was sent, only for an idempotent
  request (`idempotent=True`): the server may have done the work, and doing it again must not
  change the outcome.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from enum import Enum
from typing import Any, Protocol
from urllib.parse import quote, urlencode, urlsplit

from iotsched.client.errors import TransportError, api_error

#: Statuses retried for an idempotent request (429 is retried for every request).
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
USER_AGENT = "iotsched-client"


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a request is tried again.

    `attempts` is the most tries in all (1: never retry). Before try n+1 the client waits a
    random time up to `min(cap_s, base_s * 2**(n-1))` (without `jitter`, that bound itself), or
    the answer's `Retry-After` seconds if longer, at most `cap_s`.
    """

    attempts: int = 4
    base_s: float = 0.25
    cap_s: float = 8.0
    jitter: bool = True

    def delay(self, tried: int, retry_after: float | None, rng: Callable[[], float]) -> float:
        bound = min(self.cap_s, self.base_s * 2.0 ** (tried - 1))
        wait = bound * rng() if self.jitter else bound
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.cap_s))
        return wait


class Signer(Protocol):
    """Adds authentication headers to a request about to be sent."""

    def sign(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> dict[str, str]: ...


class SigV4Signer:
    """Signs with AWS Signature Version 4 (botocore's `SigV4Auth`), as API Gateway's IAM
    authorization requires: service `execute-api`, the API's region, and credentials read
    fresh for each request (a role's session credentials are refreshed by botocore)."""

    def __init__(self, credentials: Any, region: str, service: str = "execute-api") -> None:
        self._credentials = credentials
        self.region = region
        self.service = service

    def sign(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        frozen = getattr(self._credentials, "get_frozen_credentials", None)
        credentials = frozen() if frozen is not None else self._credentials
        request = AWSRequest(method=method, url=url, data=body or b"", headers=dict(headers))
        SigV4Auth(credentials, self.service, self.region).add_auth(request)
        return dict(request.headers.items())


def path_of(*segments: str | int) -> str:
    """`/instances/<id>/shards` from its segments, each percent-encoded (an instance id holds
    `@`, `:` and `~`)."""
    return "".join("/" + quote(str(s), safe="") for s in segments)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    model_dump = getattr(value, "model_dump", None)
    if model_dump is not None:
        return model_dump(mode="json", by_alias=True, exclude_none=True)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _retry_after(headers: Any) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:  # an HTTP date: rare for an API; the backoff stands
        return None


def _refused(exc: BaseException) -> bool:
    """Whether the connection was never made (so nothing was sent)."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return isinstance(reason, ConnectionRefusedError | socket.gaierror)


class Transport:
    """Requests to one API base URL (`https://<id>.execute-api.<region>.amazonaws.com/<stage>`,
    or `http://127.0.0.1:8000/api` for the local runtime)."""

    def __init__(
        self,
        base_url: str,
        *,
        signer: Signer | None = None,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = 35.0,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"the API URL must be http(s)://host[/path], not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.signer = signer
        self.headers = dict(headers or {})
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s
        self._sleep = sleep
        self._rng = rng

    def url(self, path: str, query: Mapping[str, Any] | None = None) -> str:
        """The full URL of `path` with the query's non-None values."""
        pairs = {
            k: (str(v).lower() if isinstance(v, bool) else str(v))
            for k, v in (query or {}).items()
            if v is not None
        }
        return self.base_url + path + ("?" + urlencode(sorted(pairs.items())) if pairs else "")

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        idempotent: bool,
    ) -> Any:
        """Send the request; the answer's JSON (None when empty), or the error it came to."""
        url = self.url(path, query)
        data = None if body is None else json.dumps(body, default=_json_default).encode()
        tried = 0
        while True:
            tried += 1
            last = tried >= self.retry.attempts
            try:
                status, payload, headers = self._send(method, url, data)
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                if last or not (idempotent or _refused(exc)):
                    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                    raise TransportError(f"{method} {url}: {reason}") from exc
                self._sleep(self.retry.delay(tried, None, self._rng))
                continue
            if status < 400:
                return json.loads(payload) if payload.strip() else None
            retried = status == 429 or (idempotent and status in RETRIED_STATUSES)
            if last or not retried:
                raise api_error(status, payload, method=method, url=url)
            self._sleep(self.retry.delay(tried, _retry_after(headers), self._rng))

    def _send(self, method: str, url: str, data: bytes | None) -> tuple[int, bytes, Any]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT, **self.headers}
        if data is not None or method not in ("GET", "HEAD"):
            # Every write says JSON, even one without a body: the local runtime refuses writes
            # that do not (a page of another origin could send them).
            headers["Content-Type"] = "application/json"
        if self.signer is not None:
            headers = self.signer.sign(method, url, headers, data)
        request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310 - http(s) only: __init__
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:  # noqa: S310
                return int(answer.status), answer.read(), answer.headers
        except urllib.error.HTTPError as exc:
            with exc:
                return int(exc.code), exc.read(), exc.headers
