"""The management API (API Gateway + Lambda, IAM-authorized): the CLI's verbs over HTTP.

`create_app(services_factory)` builds the Powertools resolver; `functions/api/app.py` is its
Lambda shell, and the local runtime can mount the same app. `iotsched.api.openapi` generates
the committed OpenAPI document (`docs/openapi.json`).
"""

from __future__ import annotations

from iotsched.api.app import create_app

__all__ = ["create_app"]
