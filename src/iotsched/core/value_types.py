"""The building blocks of every core model: the immutable base `Frozen`, and the checked field
types a task file's values pass through (a 5-field cron, an IANA zone, a duration, an aware
instant, a task id). The check is the type's, wherever a model uses it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from iotsched.core import triggers
from iotsched.core.timeutil import require_aware

#: A task id: lower-case letters, digits, `.`, `_` and `-`, starting with a letter or a digit;
#: at most 80 characters.
TASK_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,79}$"


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


class Frozen(BaseModel):
    """Base for value objects: immutable, unknown fields rejected."""

    # `defer_build`: each validator is built on the model's first use, not at import, so a
    # Lambda cold start pays only for the models its function uses.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
