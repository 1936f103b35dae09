"""API Gateway REST proxy events from plain HTTP requests, and a WSGI shell around the app.

API Gateway hands the Lambda a REST proxy event (payload 1.0) whose `path` is percent-decoded
and whose query string is split into (multi-)value maps. `rest_event` builds the same shape, so
the local runtime and the tests call the resolver exactly as AWS does; `wsgi_app` serves the
resolver to any WSGI server or client (the local runtime's console, schemathesis).
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

_REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
}


#: Held while a resolver answers (see `wsgi_app`).
_RESOLVING = threading.Lock()


def rest_event(
    method: str,
    path: str,
    *,
    query: Mapping[str, str | Sequence[str]] | None = None,
    headers: Mapping[str, str] | None = None,
    body: Any = None,
    stage: str = "local",
    request_id: str | None = None,
) -> dict[str, Any]:
    """A REST proxy event for `method path`: `body` is sent as JSON unless it is str or bytes."""
    header_map = dict(headers or {})
    raw: str | None
    encoded = False
    if body is None:
        raw = None
    elif isinstance(body, bytes):
        raw, encoded = base64.b64encode(body).decode("ascii"), True
    elif isinstance(body, str):
        raw = body
    else:
        raw = json.dumps(body)
        if not any(k.lower() == "content-type" for k in header_map):
            header_map["Content-Type"] = "application/json"
    multi_query = {
        name: [value] if isinstance(value, str) else list(value)
        for name, value in (query or {}).items()
    }
    request_id = request_id or str(uuid.uuid4())
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method.upper(),
        "headers": header_map or None,
        "multiValueHeaders": {k: [v] for k, v in header_map.items()} or None,
        "queryStringParameters": {k: v[-1] for k, v in multi_query.items() if v} or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "httpMethod": method.upper(),
            "identity": {"sourceIp": "127.0.0.1", "userArn": None},
            "path": f"/{stage}{path}",
            "protocol": "HTTP/1.1",
            "requestId": request_id,
            "resourcePath": "/{proxy+}",
            "stage": stage,
        },
        "body": raw,
        "isBase64Encoded": encoded,
    }


def wsgi_app(
    app: APIGatewayRestResolver, context: Any = None
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """A WSGI application that answers each request through `app` (one event per request).

    Requests are resolved one at a time in the process, as one Lambda environment serves one
    event at a time: Powertools keeps the event being answered in a class attribute shared by
    every resolver, so two requests resolved together, even by two resolvers, would read each
    other's query string and headers (the caller)."""

    def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        data: bytes = environ["wsgi.input"].read(length) if length else b""
        headers = {
            key[5:].replace("_", "-").title(): str(value)
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            if environ.get(key):
                headers[key.replace("_", "-").title()] = str(environ[key])
        query: dict[str, list[str]] = {}
        for name, value in parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True):
            query.setdefault(name, []).append(value)
        # PATH_INFO is already percent-decoded by the server (latin-1 per PEP 3333).
        path = environ.get("PATH_INFO", "/").encode("latin-1").decode("utf-8", "replace")
        try:
            body: str | bytes | None = data.decode("utf-8") if data else None
        except UnicodeDecodeError:
            body = data
        event = rest_event(environ["REQUEST_METHOD"], path, query=query, headers=headers, body=body)
        with _RESOLVING:
            result = app.resolve(event, context)
        status = int(result["statusCode"])
        out_headers = [(k, str(v)) for k, v in (result.get("headers") or {}).items()]
        for name, values in (result.get("multiValueHeaders") or {}).items():
            out_headers += [(name, str(v)) for v in values]
        payload = result.get("body") or ""
        content = (
            base64.b64decode(payload) if result.get("isBase64Encoded") else payload.encode("utf-8")
        )
        if not any(name.lower() == "content-length" for name, _ in out_headers):
            out_headers.append(("Content-Length", str(len(content))))
        start_response(f"{status} {_REASONS.get(status, 'Status')}", out_headers)
        return [content]

    return application
