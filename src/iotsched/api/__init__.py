"""The management API (API Gateway + Lambda, IAM-authorized): the CLI's verbs over HTTP.

`create_app(services_factory)` builds the Powertools resolver; `functions/api/app.py` is its
Lambda shell, and the local runtime can mount the same app. `iotsched.api.openapi` generates
the committed OpenAPI document (`docs/openapi.json`).

`create_app` is imported on first use: the request and response models (`iotsched.api.models`,
`audit_views`, `overview_views`) are shared with the Python client (`iotsched.client`), which
must not load the resolver, its routes or the use-cases behind them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iotsched.api.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from iotsched.api.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
