"""The management API function's glue: who calls, the IAM principal API Gateway vouches for,
mapped to tenants by its tags (docs/design.md, section 13); the IAM client is made on the first
request and kept with the container's wiring.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import boto3

from iotsched.adapters.iam import IamTags
from iotsched.api.identity import Caller, IamIdentity
from iotsched.lambdas.container import Container


class ApiContainer(Container):
    """The container's settings and wiring, and its callers' identities (tags cached)."""

    def __init__(self) -> None:
        super().__init__()
        self._identity: IamIdentity | None = None

    def identify(self, event: Mapping[str, Any]) -> Caller:
        """The caller of `event`."""
        if self._identity is None:
            self._identity = IamIdentity(IamTags(boto3.client("iam")), monotonic=time.monotonic)
        return self._identity(event)

    def clear(self) -> None:
        """Forget what was read and built."""
        super().clear()
        self._identity = None
