"""How failures become HTTP answers: 400 naming the fields at fault, 404, 405, 409.

Task bodies are reported with the messages of `iotsched.services.definitions.apply.parse_task_file`, the
same lines `iotsched tasks apply` prints (`task 'x': trigger.cron: ...`), whichever check
(schema or handler registry) found the problem.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from iotsched.api.models import Problem
from iotsched.core.task_file import TaskFile
from iotsched.services.definitions.task_file import (
    TaskFileError,
    parse_task_file,
)

# The task file's own way of naming a field (`task 'x': trigger.cron`). Private to the
# use-case module; a public name for it is asked for in the API's hand-over notes.
from iotsched.services.definitions.task_file import field_location as task_file_location


class ApiInputError(ValueError):
    """A request that passed the schema but cannot be served as asked (400)."""

    def __init__(self, message: str, problems: list[Problem] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems = problems or []


# `task 'id': trigger.cron: message`, `task #2: id: message`, `(file): message`: the location is
# everything before the message; a field path never holds a blank or a colon.
_TASK_PROBLEM = re.compile(r"((?:task (?:'[^']*'|\"[^\"]*\"|#\d+|\S+): )?[^\s:]+): (.+)", re.S)


def split_task_problem(text: str) -> Problem:
    """A `parse_task_file` line as field and message (the whole line if it has another shape)."""
    match = _TASK_PROBLEM.fullmatch(text)
    if match is None:
        return Problem(field="body", message=text)
    return Problem(field=match.group(1), message=match.group(2))


def task_file_problems(data: Any, *, handlers: Collection[str]) -> list[Problem]:
    """Every problem `parse_task_file` finds in `data` (empty if it is a valid task file)."""
    try:
        parse_task_file(data, handlers=handlers)
    except TaskFileError as exc:
        return [split_task_problem(p) for p in exc.problems]
    return []


def strict_task_file_problems(raw: str, data: Any) -> list[Problem]:
    """Problems of a task file sent as JSON text `raw` (parsed: `data`) in pydantic's strict mode.

    Task files are validated in lax mode (YAML writes `enabled: yes`); a JSON body must use JSON's
    own types: `false` is no number and `"30"` no integer. Reported like `parse_task_file`.
    """
    try:
        TaskFile.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        return [
            split_task_problem(
                f"{task_file_location(data, tuple(e['loc']))}: "
                + e["msg"].removeprefix("Value error, ")
            )
            for e in exc.errors()
        ]
    return []


def validation_problems(errors: Iterable[Mapping[str, Any]]) -> list[Problem]:
    """Pydantic/Powertools validation errors as `where: what` problems."""
    problems = []
    for error in errors:
        loc = [str(part) for part in error.get("loc", ())]
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if error.get("type") == "json_invalid":
            detail = (error.get("ctx") or {}).get("error")
            loc, message = ["body"], f"not valid JSON{f': {detail}' if detail else ''}"
        problems.append(Problem(field=".".join(loc) or "request", message=message))
    return problems


def summary(problems: list[Problem]) -> str:
    """One line for the `message` of a 400."""
    if len(problems) == 1:
        return f"{problems[0].field}: {problems[0].message}"
    return f"{len(problems)} problems in the request"
