"""The building blocks of every core model: the immutable base `Frozen`, and the checked field
types a task file's values pass through (a 5-field cron, an IANA zone, a duration, an aware
instant in the range a task may name, a task id, a tenant name, params). The check is the
type's, wherever a model uses it."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from functools import partial
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from iotsched.core import triggers
from iotsched.core.input_limits import check_params_depth
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


#: The instants a task may name (`at`, `end_at`, a silence's `start` and `end`): from the first,
#: before the last. Outside, no slot is ever ahead of a clock, or a deadline, a retention TTL
#: or a data interval computed from one would overflow at a firing.
FIRST_INSTANT = datetime(2000, 1, 1, tzinfo=UTC)
END_OF_INSTANTS = datetime(3000, 1, 1, tzinfo=UTC)


def _instant(value: datetime, *, first: datetime = FIRST_INSTANT) -> datetime:
    # Compared as written: converting an instant at the ends of the calendar to UTC overflows.
    aware = value.tzinfo is not None and value.utcoffset() is not None
    if aware and not first <= value < END_OF_INSTANTS:
        raise ValueError(
            f"{value.isoformat()} is not between {first:%Y-%m-%dT%H:%MZ} and "
            f"{END_OF_INSTANTS:%Y-%m-%dT%H:%MZ}, the instants a task may name"
        )
    return require_aware(value)  # naive: refused, naming it; else in UTC


#: The business dates a run, a submission or a backfill may name: a date's data interval is
#: derived from it, and would overflow at either end of Python's calendar.
FIRST_BUSINESS_DATE = date(1970, 1, 1)
LAST_BUSINESS_DATE = date(2999, 12, 31)


def business_date_problem(day: date) -> str | None:
    """Why `day` cannot be a business date (outside `FIRST_BUSINESS_DATE` to
    `LAST_BUSINESS_DATE`); None if it can."""
    if FIRST_BUSINESS_DATE <= day <= LAST_BUSINESS_DATE:
        return None
    return (
        f"business date {day.isoformat()} is not between {FIRST_BUSINESS_DATE.isoformat()} and "
        f"{LAST_BUSINESS_DATE.isoformat()}"
    )


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
Aware = Annotated[datetime, AfterValidator(_instant)]  # an instant with its offset, in range
# A rate's anchor: an instant from the Unix epoch, its default, on.
Anchor = Annotated[datetime, AfterValidator(partial(_instant, first=triggers.RATE_EPOCH))]
Tenant = Annotated[str, Field(pattern=TENANT_PATTERN)]  # a tenant name
# Free-form JSON a shard message carries (a task's params, a custom planner's, a static
# shard's bounds), nesting at most `MAX_PARAMS_DEPTH` levels.
Params = Annotated[dict[str, Any], AfterValidator(check_params_depth)]


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
