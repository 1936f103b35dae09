"""An external Device Management System over HTTP (urllib3, one connection pool per directory).

The REST contract (JSON; every list is paginated by an opaque cursor):

```
GET  /tenants                                   {"items": [{tenant_id, timezone, name}], "next": cursor|null}
GET  /tenants/{tenant}/groups                   {"items": [{group, first_id, end_id, timezone?,
                                                           attributes?}], "next": ...}
GET  /tenants/{tenant}/devices?from=ID&to=ID    {"items": [{device_id, last_heartbeat, offline_since,
                                                            plan_expires}], "next": ...}   ids in [from, to)
POST /tenants/{tenant}/devices/{id}/offline     {"since": ISO 8601} -> {"marked": true|false}; 404 unknown
```

Every request has a timeout. A timeout, a connection error, a 429 or a 5xx is retried with
exponential backoff, or after the server's `Retry-After` when it sends one (capped, so that a
Lambda never sleeps past its own timeout); after the last attempt `DirectoryError` says what was
asked, how often, and the last error. Other 4xx answers are not retried (the request itself is
wrong). Retrying the POST is safe: a mark is made once, and a repeated mark answers
`marked: false`. A server that answers a cursor it already gave is an error, not an endless loop.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import date, datetime
from typing import Any

import urllib3
from urllib3.exceptions import (
    HTTPError,
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
)
from urllib3.exceptions import (
    TimeoutError as Urllib3Timeout,
)
from urllib3.util.retry import Retry

from iotsched.ports.devices import (
    Device,
    DeviceGroup,
    DirectoryError,
    Tenant,
)

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
#: The longest `Retry-After` honoured; a longer one waits this long.
MAX_RETRY_AFTER_S = 30.0


class _Backoff(Retry):
    """urllib3's retry policy, sleeping through the directory's own `sleep` (tests record the
    waits) with a doubling backoff from `base_s`, or the server's `Retry-After`."""

    base_s: float = 0.2
    sleeper: Callable[[float], None] = staticmethod(time.sleep)

    def sleep(self, response: urllib3.BaseHTTPResponse | None = None) -> None:
        after = self.get_retry_after(response) if response is not None else None
        if after is not None:
            delay = min(after, MAX_RETRY_AFTER_S)
        else:
            delay = self.base_s * 2 ** max(0, len(self.history) - 1)
        self.sleeper(delay)


class HttpDeviceDirectory:
    """`DeviceDirectory` on a Device Management System's REST API.

    Args:
        base_url: the API root, http(s) only (e.g. `https://dms.example.com/v1`).
        timeout_s: per-request timeout (connect and read).
        attempts: tries per request, the first included.
        backoff_s: the first retry's delay; each next one doubles it.
        page_size: the `limit` asked for each page.
        headers: extra headers on every request (e.g. an API key from the environment).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 5.0,
        attempts: int = 4,
        backoff_s: float = 0.2,
        page_size: int = 1000,
        headers: dict[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        scheme = urllib.parse.urlsplit(base_url).scheme
        if scheme not in ("http", "https"):
            raise ValueError(f"the device directory URL must be http(s), not {base_url!r}")
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self._base = base_url.rstrip("/")
        self._timeout = timeout_s
        self._attempts = attempts
        self._page_size = page_size
        self._headers = {"Accept": "application/json", **(headers or {})}
        policy = type(
            "DirectoryBackoff", (_Backoff,), {"base_s": backoff_s, "sleeper": staticmethod(sleep)}
        )
        retries = attempts - 1
        self._http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s),
            retries=policy(
                total=retries,
                connect=retries,
                read=retries,
                status=retries,
                other=0,
                redirect=False,
                allowed_methods=None,  # every method: the POST is safe to repeat (see above)
                status_forcelist=RETRYABLE_STATUS,
                raise_on_status=False,  # the last answer is read below, for the error message
                respect_retry_after_header=True,
            ),
        )

    # -- the port ---------------------------------------------------------------------------

    def tenants(self) -> list[Tenant]:
        """Every tenant, by id."""
        found = [
            Tenant(
                tenant_id=str(item["tenant_id"]),
                timezone=str(item.get("timezone") or "UTC"),
                name=str(item.get("name") or ""),
            )
            for item in self._pages("/tenants", {})
        ]
        return sorted(found, key=lambda t: t.tenant_id)

    def groups(self, tenant: str | None = None) -> list[DeviceGroup]:
        """The groups of `tenant` (every tenant's when None), by tenant then first id."""
        tenant_ids = [tenant] if tenant is not None else [t.tenant_id for t in self.tenants()]
        out: list[DeviceGroup] = []
        for tenant_id in tenant_ids:
            found = [
                DeviceGroup(
                    tenant=tenant_id,
                    group=str(item["group"]),
                    first_id=str(item["first_id"]),
                    end_id=str(item["end_id"]),
                    timezone=str(item.get("timezone") or "UTC"),
                    attributes=_attributes(item.get("attributes")),
                )
                for item in self._pages(f"/tenants/{_seg(tenant_id)}/groups", {})
            ]
            out.extend(sorted(found, key=lambda g: (g.first_id, g.group)))
        return out

    def devices(self, tenant: str, first_id: str, end_id: str) -> Iterator[Device]:
        """The tenant's devices in `[first_id, end_id)`, page by page, in id order."""
        if end_id <= first_id:
            return
        for item in self._pages(
            f"/tenants/{_seg(tenant)}/devices", {"from": first_id, "to": end_id}
        ):
            yield Device(
                device_id=str(item["device_id"]),
                tenant=tenant,
                last_heartbeat=_instant(item.get("last_heartbeat")),
                offline_since=_instant(item.get("offline_since")),
                plan_expires=date.fromisoformat(item["plan_expires"])
                if item.get("plan_expires")
                else None,
            )

    def mark_offline(self, tenant: str, device_id: str, *, since: datetime) -> bool:
        """POST the mark; False when it was already marked or the device is unknown (404)."""
        try:
            answer = self._request(
                "POST",
                f"/tenants/{_seg(tenant)}/devices/{_seg(device_id)}/offline",
                {},
                body={"since": since.isoformat()},
            )
        except _NotFoundError:
            return False
        return bool(answer.get("marked"))

    # -- HTTP -------------------------------------------------------------------------------

    def _pages(self, path: str, query: dict[str, str]) -> Iterator[dict[str, Any]]:
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            params = {**query, "limit": str(self._page_size)}
            if cursor:
                params["cursor"] = cursor
            page = self._request("GET", path, params)
            items = page.get("items")
            if not isinstance(items, list):
                raise DirectoryError(f"GET {path}: the answer has no 'items' list")
            yield from items
            cursor = page.get("next")
            if not cursor:
                return
            if cursor in seen:  # a server bug would otherwise page forever
                raise DirectoryError(f"GET {path}: the server repeated the cursor {cursor!r}")
            seen.add(cursor)

    def _request(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        *,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        url = self._base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = dict(self._headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            response = self._http.request(method, url, body=data, headers=headers)
        except MaxRetryError as exc:
            raise self._gave_up(method, url, _describe(exc.reason)) from exc
        except (Urllib3Timeout, NewConnectionError, ProtocolError, HTTPError) as exc:
            raise self._gave_up(method, url, _describe(exc)) from exc
        if response.status == 404:
            raise _NotFoundError(url)
        if response.status in RETRYABLE_STATUS:
            raise self._gave_up(method, url, f"HTTP {response.status} {response.reason}")
        if response.status >= 400:
            excerpt = response.data[:200].decode(errors="replace")
            raise DirectoryError(
                f"{method} {url}: HTTP {response.status} {response.reason}: {excerpt}"
            )
        try:
            answer = json.loads(response.data or b"{}")
        except json.JSONDecodeError as exc:
            raise DirectoryError(f"{method} {url}: the answer is not JSON ({exc})") from exc
        if not isinstance(answer, dict):
            raise DirectoryError(f"{method} {url}: the answer is not a JSON object")
        return answer

    def _gave_up(self, method: str, url: str, last: str) -> DirectoryError:
        return DirectoryError(
            f"{method} {url}: the Device Management System did not answer after "
            f"{self._attempts} attempts; last error: {last}"
        )


def _describe(error: BaseException | None) -> str:
    # NewConnectionError is a ConnectTimeoutError in urllib3: asked first.
    if isinstance(error, NewConnectionError | ProtocolError):
        return f"connection failed: {error}"
    if isinstance(error, Urllib3Timeout):
        return f"timed out ({error})"
    return f"{type(error).__name__}: {error}"


class _NotFoundError(DirectoryError):
    """HTTP 404."""


def _seg(value: str) -> str:
    """One URL path segment."""
    return urllib.parse.quote(value, safe="")


def _instant(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _attributes(value: Any) -> dict[str, Any]:
    """A group's attributes as the service sent them; anything but a JSON object is none (a
    task naming one of them then finds it missing and says so)."""
    return dict(value) if isinstance(value, dict) else {}
