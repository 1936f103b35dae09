"""What a failed call raises: the API's own answer (`ApiError` and a subclass per status), or
`TransportError` when no answer came."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from iotsched.api.models import Problem


class ClientError(Exception):
    """Every error the client raises."""


class TransportError(ClientError):
    """No answer: the API could not be reached, or the connection broke (after the retries the
    request allowed)."""


class ApiError(ClientError):
    """The API answered with an error.

    `status` is the HTTP status; `error` the API's code (`bad_request`, `not_found`,
    `conflict`, ...; for an answer of API Gateway itself, such as a refused signature or a
    throttle, a code derived from the status); `message` its one line; `problems` each field at
    fault (`field`, `message`), for a 400.
    """

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        problems: list[Problem] | None = None,
        *,
        method: str = "",
        url: str = "",
    ) -> None:
        super().__init__(f"{status} {error}: {message}")
        self.status = status
        self.error = error
        self.message = message
        self.problems = problems or []
        self.method = method
        self.url = url


class BadRequestError(ApiError):
    """400 (or 415): the request is invalid; `problems` names each field at fault."""


class ForbiddenError(ApiError):
    """403: the caller holds no tenant, writes one it does not hold, or its signature was
    refused."""


class NotFoundError(ApiError):
    """404: no such task or instance (or one of a tenant the caller does not hold)."""


class ConflictError(ApiError):
    """409: the state does not allow the action (the instance has ended, the task has open
    instances, another change landed meanwhile)."""


class ThrottledError(ApiError):
    """429: API Gateway throttled the request (retried first; raised once retries ran out)."""


class ServerError(ApiError):
    """5xx: a fault of the server or of AWS."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    415: BadRequestError,
    429: ThrottledError,
}
#: The code an answer without the API's error body (API Gateway's own) is given.
_CODES = {
    400: "bad_request",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    415: "unsupported_media_type",
    429: "throttled",
}


def api_error(status: int, payload: bytes, *, method: str = "", url: str = "") -> ApiError:
    """The exception for an error answer: the API's body (`error`, `message`, `problems`), or
    API Gateway's (`{"message": ...}`), or whatever text came."""
    kind = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    code = _CODES.get(status, "internal" if status >= 500 else f"http_{status}")
    text = payload.decode("utf-8", "replace").strip()
    body: Any = None
    with contextlib.suppress(ValueError):  # not JSON: the text is the message
        body = json.loads(text) if text else None
    problems: list[Problem] = []
    message = text[:500] or f"HTTP {status}"
    if isinstance(body, dict):
        if isinstance(body.get("error"), str):
            code = body["error"]
        found = body.get("message") or body.get("Message")
        if isinstance(found, str):
            message = found
        for item in body.get("problems") or []:
            if isinstance(item, dict):
                problems.append(
                    Problem(field=str(item.get("field", "")), message=str(item.get("message", "")))
                )
    return kind(status, code, message, problems, method=method, url=url)
