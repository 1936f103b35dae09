"""Reading a task file for a verb: YAML from disk, every problem on its own line, exit 2.

A file that cannot be read, is not UTF-8 or not YAML exits 2 with one line naming where; a
task file's problems (`TaskFileError`) print one `error: FILE: ...` line each before it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from iotsched.cli.output import BadInputError, err, styled
from iotsched.core.task_definition import TaskDefinition
from iotsched.services.definitions.task_file import TaskFileError, parse_task_file
from iotsched.tasklib import registry


def yaml_problem(path: Path, text: str, exc: yaml.YAMLError) -> str:
    """PyYAML's error as one line: `tasks.yaml:3:5: not valid YAML: problem (context at 2:3)`."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}"
        problem = exc.problem or "unexpected content"
        if exc.context and exc.context_mark is not None:
            context = exc.context_mark
            problem += f" ({exc.context} at {context.line + 1}:{context.column + 1})"
        return f"{where}: not valid YAML: {problem}"
    if isinstance(exc, yaml.reader.ReaderError):  # a control character: no mark, an offset
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        character = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return f"{path}:{line}:{column}: not valid YAML: {exc.reason} (#x{character:04x})"
    return f"{path}: not valid YAML: {' '.join(str(exc).split())}"


def load_task_file(path: Path) -> Any:
    """A task file's YAML, parsed (not yet validated); a file that cannot be read exits 2."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInputError(f"{path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise BadInputError(
            f"{path}: not UTF-8: byte 0x{raw[exc.start]:02x} at byte offset {exc.start} "
            f"(line {line}); save the file as UTF-8"
        ) from None
    try:
        return yaml.safe_load(text)
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
