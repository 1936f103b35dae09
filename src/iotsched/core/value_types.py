"""The building blocks of every core model: the immutable base `Frozen`, and the checked field
types a task file's values pass through (a 5-field cron, an IANA zone, a duration, an aware
instant, a task id, a tenant name). The check is the type's, wherever a model uses it."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from iotsched.core import triggers
from iotsched.core.timeutil import require_aware

#: A task id: lower-case letters, digits, `.`, `_` and `-`, starting with a letter or a digit;
#: at most 80 characters.
TASK_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,79}$"

#: A tenant name: lower-case letters, digits, `.`, `_` and `-`, starting with a letter or a digit;
#: at most 64 characters. Names are parts of keys (`TENANT#<name>`), SQS message groups and
#: blank-separated lists (the `iotsched:tenants` IAM tag, the local tenants header), so no
#: blank, `#`, `/`, `*` or control character, and one spelling per tenant (no upper case).
TENANT_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
#: What a tenant filter (`--tenant`, `?tenant=`, the console's) gives for the records without a
#: tenant: never a tenant's name, which starts with a letter or a digit.
NO_TENANT = "-"
#: A tenant filter: a tenant name, or `NO_TENANT`.
TENANT_FILTER_PATTERN = rf"^(?:{NO_TENANT}|{TENANT_PATTERN[1:-1]})$"

_TENANT = re.compile(TENANT_PATTERN)


def is_tenant_name(text: str) -> bool:
    """Whether `text` is a tenant name (`TENANT_PATTERN`, the whole of it)."""
    return _TENANT.fullmatch(text) is not None


def passes_tenant_filter(tenant: str | None, wanted: str | None) -> bool:
    """Whether a record of `tenant` (None: it has none) passes the tenant filter `wanted` (None:
    no filter; `NO_TENANT`: the records without a tenant)."""
    return wanted is None or (tenant or NO_TENANT) == wanted


def _zone(value: str) -> str:
    triggers.load_zone(value)
    return value


def _duration(value: str) -> str:
    triggers.parse_rate(value)
    return value


# Checked field types: the check is the type's, wherever a model uses it.
Cron = Annotated[str, AfterValidator(triggers.check_cron)]  # 5-field cron
Zone = Annotated[str, AfterValidator(_zone)]  # an IANA timezone
Duration = Annotated[str, AfterValidator(_duration)]  # `30m`, `2h`, `1d`
Aware = Annotated[datetime, AfterValidator(require_aware)]  # an instant with its offset
Tenant = Annotated[str, Field(pattern=TENANT_PATTERN)]  # a tenant name


class Frozen(BaseModel):
    """Base for value objects: immutable, unknown fields rejected."""

    # `defer_build`: each validator is built on the model's first use, not at import, so a
    # Lambda cold start pays only for the models its function uses.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


def params_problems(error: ValidationError, prefix: str = "params") -> list[str]:
    """`params.currency: Input should be a valid string`, one per error of a params model (a
    handler's, a planner's)."""
    problems = []
    for err in error.errors():
        where = ".".join([prefix, *(str(part) for part in err["loc"])])
        problems.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
    return problems
