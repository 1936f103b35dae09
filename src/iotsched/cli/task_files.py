"""Reading a task file for a verb: YAML from disk, every problem on its own line, exit 2.

A file that cannot be read, is larger than a task file may be, is not UTF-8, not YAML or past a
YAML limit (docs/limits.md) exits 2 with one line naming where; a task file's problems
(`TaskFileError`) print one `error: FILE: ...` line each before it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from iotsched.cli.output import BadInputError, err, styled
from iotsched.core.input_limits import MAX_FILE_BYTES, too_large
from iotsched.core.task_definition import TaskDefinition
from iotsched.services.definitions.task_file import TaskFileError, parse_task_file
from iotsched.services.definitions.task_yaml import load_task_yaml, yaml_problem
from iotsched.tasklib import registry


def load_task_file(path: Path) -> Any:
    """A task file's YAML, parsed (not yet validated); a file that cannot be read exits 2."""
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_FILE_BYTES + 1)  # no more than the limit and a byte past it
    except OSError as exc:
        raise BadInputError(f"{path}: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise BadInputError(f"{path}: {too_large('a task file')}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise BadInputError(
            f"{path}: not UTF-8: byte 0x{raw[exc.start]:02x} at byte offset {exc.start} "
            f"(line {line}); save the file as UTF-8"
        ) from None
    try:
        return load_task_yaml(text)
    except yaml.YAMLError as exc:
        raise BadInputError(yaml_problem(path, text, exc)) from None


def file_problems(path: Path, exc: TaskFileError) -> BadInputError:
    """Print each problem of a task file on its own line; the error to exit 2 with."""
    for problem in exc.problems:
        err.print(styled("error", "red") + f": {path}: {problem}")
    return BadInputError(f"{path}: {len(exc.problems)} problem(s); nothing was written")


def read_task_file(path: Path) -> list[TaskDefinition]:
    """Parse and validate a task file; every problem exits 2."""
    data = load_task_file(path)
    try:
        return parse_task_file(data, handlers=registry())
    except TaskFileError as exc:
        raise file_problems(path, exc) from None
