"""An external Device Management System over HTTP (urllib from the standard library).

The REST contract (JSON; every list is paginated by an opaque cursor):

```
GET  /tenants                                   {"items": [{tenant_id, timezone, name}], "next": cursor|null}
GET  /tenants/{tenant}/groups                   {"items": [{group, first_id, end_id}], "next": ...}
GET  /tenants/{tenant}/devices?from=ID&to=ID    {"items": [{device_id, last_heartbeat, offline_since,
                                                            plan_expires}], "next": ...}   ids in [from, to)
POST /tenants/{tenant}/devices/{id}/offline     {"since": ISO 8601} -> {"marked": true|false}; 404 unknown
```

Every request has a timeout. A timeout, a connection error, a 429 or a 5xx is retried with
exponential backoff; after the last attempt `DirectoryError` says what was asked, how often, and
the last error. Other 4xx answers are not retried (the request itself is wrong). Retrying the
POST is safe: a mark is made once, and a repeated mark answers `marked: false`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from datetime import date, datetime
from typing import Any

from iotsched.ports import Device, DeviceGroup, DirectoryError, Tenant

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


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
        self._backoff = backoff_s
        self._page_size = page_size
        self._headers = {"Accept": "application/json", **(headers or {})}
        self._sleep = sleep

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

    def _request(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        *,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        url = self._base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        last = "no attempt made"
        for attempt in range(1, self._attempts + 1):
            request = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310 - scheme checked
            try:
                with urllib.request.urlopen(request, timeout=self._timeout) as response:  # noqa: S310
                    raw = response.read()
                answer = json.loads(raw or b"{}")
                if not isinstance(answer, dict):
                    raise DirectoryError(f"{method} {url}: the answer is not a JSON object")
                return answer
            except urllib.error.HTTPError as exc:
                excerpt = exc.read()[:200].decode(errors="replace")
                if exc.code == 404:
                    raise _NotFoundError(url) from exc
                if exc.code not in RETRYABLE_STATUS:
                    raise DirectoryError(
                        f"{method} {url}: HTTP {exc.code} {exc.reason}: {excerpt}"
                    ) from exc
                last = f"HTTP {exc.code} {exc.reason}"
            except TimeoutError as exc:
                last = f"timed out after {self._timeout} s ({exc})"
            except urllib.error.URLError as exc:
                reason = exc.reason
                if isinstance(reason, TimeoutError):
                    last = f"timed out after {self._timeout} s"
                else:
                    last = f"connection failed: {reason}"
            except (ConnectionError, json.JSONDecodeError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if attempt < self._attempts:
                self._sleep(self._backoff * 2 ** (attempt - 1))
        raise DirectoryError(
            f"{method} {url}: the Device Management System did not answer after "
            f"{self._attempts} attempts; last error: {last}"
        )


class _NotFoundError(DirectoryError):
    """HTTP 404."""


def _seg(value: str) -> str:
    """One URL path segment."""
    return urllib.parse.quote(value, safe="")


def _instant(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
