"""The tags of the API's callers, read from IAM (`iam:ListRoleTags`, `iam:ListUserTags`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class IamTags:
    """`PrincipalTagReader` over an IAM client; a role or user that does not exist has none."""

    def __init__(self, client: Any) -> None:
        self._iam = client

    def role_tags(self, role_name: str) -> Mapping[str, str] | None:
        return self._tags(self._iam.get_paginator("list_role_tags"), RoleName=role_name)

    def user_tags(self, user_name: str) -> Mapping[str, str] | None:
        return self._tags(self._iam.get_paginator("list_user_tags"), UserName=user_name)

    def _tags(self, paginator: Any, **name: str) -> Mapping[str, str] | None:
        try:
            tags: dict[str, str] = {}
            for page in paginator.paginate(**name):
                tags.update({t["Key"]: t["Value"] for t in page.get("Tags", [])})
            return tags
        except self._iam.exceptions.NoSuchEntityException:
            return None
