"""The OpenAPI document of the management API, generated from the code.

`docs/openapi.json` is this document, committed; `tests/api` fails when it drifts. Regenerate:

    .venv/bin/python -m iotsched.api.openapi --write docs/openapi.json

Powertools documents a 422 for request validation errors; this API answers them with a 400
(`ErrorBody` naming the fields), so the document says so instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from iotsched import __version__
from iotsched.api.app import create_app
from iotsched.services.wiring import Wiring

TITLE = "iotsched management API"
DESCRIPTION = (
    "The `iotsched` CLI's verbs over HTTP: tasks (the task-file model), manual runs, "
    "submissions and backfills, instances and their shards. Behind API Gateway with IAM "
    "authorization: sign requests with SigV4 (service `execute-api`). A caller sees the tasks "
    "and records of the tenants its IAM tags name (`iotsched:tenants`), every tenant's with "
    "`iotsched:operator`. Errors are an `ErrorBody`: 400 names each field at fault, 403 a "
    "caller holding no tenant or writing one it does not hold, 404 an unknown task or "
    "instance (or another tenant's), 409 an action the instance's state does not allow."
)
#: API Gateway's IAM authorization, as its OpenAPI extension writes it.
SECURITY_SCHEMES = {
    "sigv4": {
        "type": "apiKey",
        "name": "Authorization",
        "in": "header",
        "x-amazon-apigateway-authtype": "awsSigv4",
    }
}
_POWERTOOLS_SCHEMAS = ("HTTPValidationError", "ValidationError", "ResponseValidationError")
_INTERNAL_ERROR = {
    "description": "A fault of the server or of AWS (logged with the request's correlation id).",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
}


def _no_services() -> Wiring:
    raise RuntimeError("the OpenAPI document is generated without services")


def openapi_document(app: APIGatewayRestResolver | None = None) -> dict[str, Any]:
    """The document of `app` (default: the API's own routes) as a JSON-able dict."""
    app = app or create_app(_no_services)
    document: dict[str, Any] = json.loads(
        app.get_openapi_json_schema(title=TITLE, version=__version__, description=DESCRIPTION)
    )
    paths = document.get("paths", {})
    document["paths"] = {path: paths[path] for path in sorted(paths)}
    for operations in document["paths"].values():
        for operation in operations.values():
            responses = operation["responses"]
            responses.pop("422", None)  # answered as a 400 (ErrorBody), see the module doc
            responses["500"] = _INTERNAL_ERROR  # not Powertools' ResponseValidationError body
    schemas = document.get("components", {}).get("schemas", {})
    for name in _POWERTOOLS_SCHEMAS:
        schemas.pop(name, None)
    document.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
    document["security"] = [{"sigv4": []}]
    return document


def render(document: dict[str, Any]) -> str:
    """The committed text: stable key order, two-space indent, a final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the document, or write it to a file (`--write docs/openapi.json`)."""
    import click  # an operator tool's dependency (the cli extra), never a Lambda's

    @click.command(name="python -m iotsched.api.openapi")
    @click.option("--write", type=click.Path(dir_okay=False, path_type=Path), help="write here")
    def command(write: Path | None) -> None:
        text = render(openapi_document())
        if write is None:
            click.echo(text, nl=False)
        else:
            write.parent.mkdir(parents=True, exist_ok=True)
            write.write_text(text, encoding="utf-8")

    command.main(args=argv, standalone_mode=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
