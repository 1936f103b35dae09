"""Issue item "small files that exhaust memory or time": a planner parameter, a YAML file's
aliases, nesting and size, and the tasks of a file are bounded before any work is done, each
refusal naming its limit.

The hostile files run `iotsched tasks apply --dry-run` in a child process whose address space
is capped (`RLIMIT_AS`) and whose time is bounded, so that a regression fails the test instead
of the machine; the child reports its own peak memory, which a refusal keeps to what the CLI
takes to start."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iotsched.services.definitions.task_file import TaskFileError, parse_task_file
from iotsched.tasklib import registry

#: The child's address space: far above what a refusal needs, far below what the issue saw.
CHILD_ADDRESS_SPACE = 2 * 1024**3
#: What a refused file may take at its peak: the CLI's own start (about 65 MB) and some room.
REFUSAL_PEAK_BYTES = 160 * 1024**2
#: How long a refusal may take, on a loaded machine (the CLI alone starts in 1 to 3 s).
REFUSAL_SECONDS = 60

# The child's peak is its address space's high-water mark (`VmHWM`): `ru_maxrss` would count
# the pytest worker it was forked from, which Linux carries over the exec.
_CHILD = """
import atexit, re, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))

def peak():
    with open("/proc/self/status") as status:
        kib = re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1)
    sys.stderr.write(f"\\npeak_kib={{kib}}\\n")

atexit.register(peak)
from iotsched.cli.main import main
sys.argv = ["iotsched", "tasks", "apply", "--dry-run", sys.argv[1]]
main()
"""

HEADER = "tasks:\n  - id: t\n    handler: noop\n    trigger: {rate: 1h}\n"


def _planner_buckets(tmp: Path) -> str:
    params = "{buckets: 100000000}"
    return HEADER + f"    sharding: {{strategy: custom, planner: hash_buckets, params: {params}}}\n"


def _alias_bomb(tmp: Path) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 10)]
    return HEADER + "    params:\n" + "".join(f"      {line}\n" for line in lines)


def _many_tasks(tmp: Path) -> str:
    entry = "  - {{id: t{n:05d}, handler: noop, trigger: {{rate: 1h}}}}\n"
    return "tasks:\n" + "".join(entry.format(n=n) for n in range(89_484))


def _many_tasks_within_the_size(tmp: Path) -> str:
    entry = "  - {{id: t{n:05d}, handler: noop, trigger: {{rate: 1h}}}}\n"
    return "tasks:\n" + "".join(entry.format(n=n) for n in range(18_000))  # about 1 MB


def _many_values_within_the_size(tmp: Path) -> str:
    return HEADER + "    params: {a: [" + "1, " * 150_000 + "]}\n"  # 450 KB, 150,000 values


def _deep_nesting(tmp: Path) -> str:
    return HEADER + "    params: {a: " + "[" * 10_000 + "]" * 10_000 + "}\n"


HOSTILE: dict[str, tuple[Callable[[Path], str], str]] = {
    "planner-buckets": (
        _planner_buckets,
        "task 't': sharding.params.buckets: Input should be less than or equal to 10000",
    ),
    "alias-bomb": (_alias_bomb, "expands to more than 100,000 nodes"),
    "89484-tasks": (_many_tasks, "larger than 1,048,576 bytes (1 MiB), the most a task file takes"),
    "18000-tasks-in-1-MB": (
        _many_tasks_within_the_size,
        "a task file holds at most 500 tasks: split it (task 501 starts here)",
    ),
    "150000-values": (_many_values_within_the_size, "expands to more than 100,000 nodes"),
    "deep-nesting": (_deep_nesting, "nests deeper than 64 levels"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_small_files_that_exhaust_memory_or_time_are_refused_before_work(
    tmp_path: Path, case: str
) -> None:
    make, limit = HOSTILE[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(make(tmp_path))
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", _CHILD.format(cap=CHILD_ADDRESS_SPACE), str(path)],
        capture_output=True,
        text=True,
        timeout=REFUSAL_SECONDS * 2,
        env={**os.environ, "COLUMNS": "200"},
    )
    took = time.monotonic() - started
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr[-2000:])
    assert limit in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    peak = re.search(r"peak_kib=(\d+)", result.stderr)
    assert peak is not None, result.stderr[-2000:]
    assert int(peak.group(1)) * 1024 < REFUSAL_PEAK_BYTES, f"peak {int(peak.group(1))} KiB"
    assert took < REFUSAL_SECONDS, f"{took:.1f} s"


def test_a_planner_parameter_past_its_bound_is_refused_naming_it() -> None:
    sharding = {"strategy": "custom", "planner": "hash_buckets", "params": {"buckets": 10_001}}
    task = {"id": "t", "handler": "noop", "trigger": {"rate": "1h"}, "sharding": sharding}
    with pytest.raises(TaskFileError) as refused:
        parse_task_file({"tasks": [task]}, handlers=registry())
    assert refused.value.problems == [
        "task 't': sharding.params.buckets: Input should be less than or equal to 10000"
    ]


def test_a_file_of_more_tasks_than_a_file_holds_is_refused_before_they_are_validated() -> None:
    entry: dict[str, Any] = {"handler": "noop", "trigger": {"rate": "1h"}}
    tasks = [{"id": f"t{n}", **entry} for n in range(501)]
    with pytest.raises(TaskFileError) as refused:
        parse_task_file({"tasks": tasks}, handlers=registry())
    assert refused.value.problems == [
        "tasks: a task file holds at most 500 tasks, this one 501: split it"
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param(
            "tasks: [" + "[" * 65 + "]" * 65 + "]\n", "nests deeper than 64 levels", id="depth"
        ),
        pytest.param(
            "a: &a [" + ", ".join(["x"] * 1000) + "]\nb: [" + ", ".join(["*a"] * 300) + "]\n",
            "expands to more than 100,000 nodes",
            id="aliases",
        ),
    ],
)
def test_the_yaml_loader_refuses_past_its_bounds_naming_them(text: str, problem: str) -> None:
    from iotsched.services.definitions.task_yaml import TaskFileLimitError, load_task_yaml

    with pytest.raises(TaskFileLimitError) as refused:
        load_task_yaml(text)
    assert problem in str(refused.value)


def test_aliases_within_the_bounds_are_read() -> None:
    from iotsched.services.definitions.task_yaml import load_task_yaml

    text = "base: &b {handler: noop}\ntasks:\n  - {<<: *b, id: t}\n  - {<<: *b, id: u}\n"
    loaded = load_task_yaml(text)
    assert loaded["tasks"] == [{"handler": "noop", "id": "t"}, {"handler": "noop", "id": "u"}]


def test_a_yaml_file_listing_more_tasks_than_a_file_holds_is_refused_at_the_first_past_it() -> None:
    from iotsched.services.definitions.task_yaml import TaskFileLimitError, load_task_yaml

    def listing(n: int) -> str:
        return "tasks:\n" + "".join(
            f"  - {{id: t{i:05d}, handler: noop, trigger: {{rate: 1h}}}}\n" for i in range(n)
        )

    # the most a file holds loads; a list of other things may be longer
    assert len(load_task_yaml(listing(500))["tasks"]) == 500
    assert len(load_task_yaml("calendars: [" + "1, " * 600 + "]\ntasks: []\n")["calendars"]) == 600
    # one more, or 18,000 (a 1 MB file), is refused at task 501's line, before composing it
    for n in (501, 18_000):
        with pytest.raises(TaskFileLimitError) as refused:
            load_task_yaml(listing(n))
        assert refused.value.problem == (
            "a task file holds at most 500 tasks: split it (task 501 starts here)"
        )
        assert refused.value.problem_mark is not None
        assert refused.value.problem_mark.line == 501  # 0-based: the file's line 502


@pytest.mark.parametrize(
    "text",
    [
        HEADER + "    params: {a: [" + "1, " * 1_500 + "]}\n",
        HEADER + "    params: {a: " + "[" * 100 + "]" * 100 + "}\n",
        "tasks:\n" + "  - {id: t, handler: noop, trigger: {rate: 1h}}\n" * 21,
        "tasks:\n  - id: t\n    params:\n" + "      - [1, 2]\n" * 400,
        "tasks: []\nother: [" + "1, " * 1_001 + "]\n",
    ],
    ids=["values", "depth", "tasks", "nodes-over-lines", "nodes-beside-tasks"],
)
def test_libyamls_count_refuses_what_the_bounded_loader_refuses_where_it_does(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The libyaml pass is a shortcut, not a second rule: each refusal it makes is the bounded
    loader's own (the same limit, at the same line). Under smaller limits, so that the bounded
    loader's own refusal is quick to reach (the real limits' files: the tests above)."""
    import yaml

    from iotsched.services.definitions import task_yaml

    monkeypatch.setattr(task_yaml, "MAX_YAML_NODES", 1_000)
    monkeypatch.setattr(task_yaml, "MAX_TASKS_PER_FILE", 20)
    assert yaml.__with_libyaml__, "PyYAML without libyaml: the shortcut is not under test"
    with pytest.raises(task_yaml.TaskFileLimitError) as fast:
        task_yaml._within_limits_as_written(text)  # the shortcut alone refuses it
    monkeypatch.setattr(yaml, "__with_libyaml__", False)
    with pytest.raises(task_yaml.TaskFileLimitError) as composed:
        task_yaml.load_task_yaml(text)
    assert fast.value.problem == composed.value.problem
    assert fast.value.problem_mark is not None and composed.value.problem_mark is not None
    assert fast.value.problem_mark.line == composed.value.problem_mark.line
