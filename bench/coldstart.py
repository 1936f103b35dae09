"""Cold start: each function's import against its own floor, measured side by side.

A function's import is `import app` in its code directory, in a fresh interpreter, as Lambda
imports the handler's module from /var/task with the CoreLayer (iotsched and its Lambda
dependencies, here the project's virtualenv) on the path. Its floor is the same function
importing only the third-party libraries it cannot drop, and building the objects it builds
from them at import (the Powertools logger, metrics, batch processor or resolver): `FLOORS`
says which and why. What the function takes above its floor is iotsched's own modules, and
whatever else they import that the function could do without on some invocations.

Each run is a new interpreter that reads its clocks (process CPU time and wall time) around
`import app`; the interpreter's own start is outside the figure. Before the timed runs, one
untimed run of each module writes the bytecode caches and lists the modules it loaded: a
function must load every module of its floor (so a library needed on every invocation is never
deferred to the first one, where it would still be paid, only not counted). The runs of a
function and of its floor alternate (A B, B A, A B, ...) so that both see the same load; the
ratio is the function's median over its floor's. The figure, `cold_start_ratio_to_floor`, is
the largest ratio of CPU time: an import is CPU-bound, and on a shared machine the wall time
adds the waits for a core (its ratio is reported beside it).

The breakdown (`python -X importtime`, separate untimed runs) is the self time of every module
the function loads and its floor does not, by package and by module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import AWS_ENV, ROOT, median, rounded

#: Every function of the template: each directory of functions/ with an app.py.
FUNCTIONS = tuple(
    sorted(d.name for d in (ROOT / "functions").iterdir() if (d / "app.py").is_file())
)
TARGET = 1.15

# The libraries a function cannot drop, each with the reason, as (source lines, why). The
# lines are what the function imports from the library and builds with it at import.
_BOTO3 = (
    "import boto3\nfrom botocore.config import Config\n"
    "from boto3.dynamodb.types import TypeDeserializer, TypeSerializer\n",
    "boto3/botocore: every invocation reads or writes the table (and SQS or SNS) through "
    "boto3 clients; boto3's DynamoDB type (de)serialisers convert every item",
)
_LOGGER = (
    "from aws_lambda_powertools import Logger\n"
    "from aws_lambda_powertools.utilities.typing import LambdaContext\n"
    "logger = Logger()\n",
    "aws_lambda_powertools Logger: every invocation logs through it (structured logs, the "
    "Lambda context and correlation id injected)",
)
_TRACER = (
    "from aws_lambda_powertools import Tracer\ntracer = Tracer()\n",
    "aws_lambda_powertools Tracer (with the X-Ray SDK): every invocation is traced "
    "(`Tracing: Active`), the handler wrapped by `capture_lambda_handler`",
)
_METRICS = (
    "from aws_lambda_powertools import Metrics\n"
    "from aws_lambda_powertools.metrics import MetricUnit\n"
    "metrics = Metrics()\n",
    "aws_lambda_powertools Metrics: every invocation flushes its EMF metrics document",
)
_PYDANTIC = (
    "from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator\n",
    "pydantic: the scheduler's records (tasks, instances, shard records, messages) are "
    "pydantic models, validated on every read",
)
_BATCH = (
    "from aws_lambda_powertools.utilities.batch import (\n"
    "    BatchProcessor, EventType, process_partial_response\n)\n"
    "from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord\n"
    "processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)\n",
    "aws_lambda_powertools batch utility: every invocation is an SQS batch answered with "
    "batch item failures",
)
_EVENTBRIDGE = (
    "from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, event_source\n",
    "aws_lambda_powertools EventBridge data class: every invocation is a tick event",
)
_CRON = (
    "from cronsim import CronSim\nfrom zoneinfo import ZoneInfo\n",
    "cronsim: a tick computes the next slot of each due cron task",
)
_RESOLVER = (
    "from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response\n"
    "from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query\n"
    "from aws_lambda_powertools.logging import correlation_paths\n"
    "resolver = APIGatewayRestResolver(enable_validation=True)\n",
    "aws_lambda_powertools REST resolver with validation: every request is routed and "
    "validated by it (its validation is pydantic's)",
)
#: Each function's floor, in the order the function imports the libraries (Powertools' batch
#: utility before pydantic: imported after it, it also imports its parser's event models).
FLOORS: dict[str, tuple[tuple[str, str], ...]] = {
    "api": (_LOGGER, _TRACER, _RESOLVER, _BOTO3, _PYDANTIC),
    "dispatcher": (_LOGGER, _METRICS, _TRACER, _EVENTBRIDGE, _BOTO3, _PYDANTIC, _CRON),
    "dlq": (_LOGGER, _METRICS, _TRACER, _BATCH, _BOTO3, _PYDANTIC),
    "sweeper": (_LOGGER, _METRICS, _TRACER, _BOTO3, _PYDANTIC),
    "worker": (_LOGGER, _METRICS, _TRACER, _BATCH, _BOTO3, _PYDANTIC),
}

_HANDLER = '''

def lambda_handler(event: dict[str, Any], context: "LambdaContext") -> dict[str, Any]:
    """Entry point (Handler: app.lambda_handler)."""
    return {}
'''

#: One timed run: the clocks around `import app` only (time is built in, so the script itself
#: imports nothing the function's import could share).
_TIMED = (
    "import time\n"
    "w, c = time.perf_counter(), time.process_time()\n"
    "import app\n"
    "w, c = time.perf_counter() - w, time.process_time() - c\n"
    "print(w * 1000, c * 1000)\n"
)
#: The same with the garbage collector off: what the import costs without its collections.
_TIMED_NO_GC = "import gc\ngc.disable()\n" + _TIMED
#: One untimed run: the modules loaded, and the full (generation 2) collections the garbage
#: collector made during the import (each scans every tracked object: a step in the time).
_LISTED = (
    "import app, gc, sys\n"
    "print(gc.get_stats()[2]['collections'])\n"
    "print(' '.join(sorted(sys.modules)))\n"
)

#: The handlers group's scan where a worker makes it: after its import, on its first message
#: (the scan is made once per process; a handler's module is imported later, on lookup).
_SCAN = (
    "import time\n"
    "import app\n"
    "from importlib import metadata\n"
    "from iotsched.core.plugins import scan\n"
    "w, c = time.perf_counter(), time.process_time()\n"
    "names = scan('iotsched.handlers')\n"
    "w, c = time.perf_counter() - w, time.process_time() - c\n"
    "print(w * 1000, c * 1000, len(names), len(list(metadata.distributions())))\n"
)


def entry_point_scan(runs: int) -> dict[str, Any]:
    """The worker's first scan of the entry-point group `iotsched.handlers` (process CPU and
    wall ms, medians of `runs` fresh interpreters), beside the handlers it found and the
    distributions installed (the scan reads each one's metadata)."""
    wall: list[float] = []
    cpu: list[float] = []
    handlers = distributions = 0
    for _ in range(runs):
        out = _python(ROOT / "functions" / "worker", "-c", _SCAN).stdout.split()
        wall.append(float(out[0]))
        cpu.append(float(out[1]))
        handlers, distributions = int(out[2]), int(out[3])
    return {
        "cpu_ms": rounded(median(cpu), 1),
        "wall_ms": rounded(median(wall), 1),
        "handlers": handlers,
        "distributions": distributions,
    }


def floor_source(function: str) -> str:
    """The floor module of `function`: its libraries, then a bare handler."""
    lines = "".join(lines for lines, _why in FLOORS[function])
    return (
        f'"""The cold-start floor of {function} (bench/coldstart.py)."""\n\n'
        "from __future__ import annotations\n\nfrom typing import Any\n\n" + lines + _HANDLER
    )


def write_floors(directory: Path) -> dict[str, Path]:
    """One code directory per function's floor."""
    paths = {}
    for function in FUNCTIONS:
        path = directory / f"floor-{function}"
        path.mkdir()
        (path / "app.py").write_text(floor_source(function), encoding="utf-8")
        paths[function] = path
    return paths


def _python(code_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=code_dir,
        env={**os.environ, **AWS_ENV, "PYTHONDONTWRITEBYTECODE": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def import_once(code_dir: Path, *, collector: bool = True) -> tuple[float, float]:
    """(wall ms, process CPU ms) of `import app` in a fresh interpreter in `code_dir`
    (`collector=False`: with the garbage collector off)."""
    wall, cpu = _python(code_dir, "-c", _TIMED if collector else _TIMED_NO_GC).stdout.split()
    return float(wall), float(cpu)


def modules_loaded(code_dir: Path) -> tuple[set[str], int]:
    """(every module `import app` leaves in sys.modules, full collections during it); writes
    the bytecode caches too."""
    collections, modules = _python(code_dir, "-c", _LISTED).stdout.splitlines()[-2:]
    return set(modules.split()), int(collections)


def self_times(code_dir: Path) -> dict[str, int]:
    """Self time (µs) of each module `import app` loads, from `python -X importtime`."""
    done = _python(code_dir, "-X", "importtime", "-c", "import app")
    times: dict[str, int] = {}
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3:
            continue
        self_us = parts[0].removeprefix("import time:").strip()
        if self_us.isdigit():  # not the header line
            times[parts[2].strip()] = int(self_us)
    return times


def breakdown(function: Path, floor: Path, *, runs: int = 3) -> dict[str, Any]:
    """What `function` loads above `floor`: the self time (ms) of those modules, in all, by
    top-level package and the largest modules."""
    samples: dict[str, list[int]] = defaultdict(list)
    floor_app: list[int] = []
    floor_modules: set[str] = set()
    for _ in range(runs):
        for module, us in self_times(function).items():
            samples[module].append(us)
        floor_times = self_times(floor)
        floor_modules |= set(floor_times)
        floor_app.append(floor_times["app"])
    # The least of the runs: preemption by other work only ever adds to a module's time.
    above = {m: min(s) / 1000 for m, s in samples.items()}
    # `app` is in both: what the function's own module body runs beyond the floor's.
    app_ms = above["app"] - min(floor_app) / 1000
    above = {m: ms for m, ms in above.items() if m not in floor_modules}
    above["app"] = max(app_ms, 0.0)
    by_package: dict[str, float] = defaultdict(float)
    for module, ms in above.items():
        by_package[module.split(".")[0]] += ms
    return {
        "modules_above_floor": len(above),
        "self_ms_above_floor": rounded(sum(above.values()), 1),
        "by_package_ms": {
            p: rounded(ms, 1) for p, ms in sorted(by_package.items(), key=lambda kv: -kv[1])[:8]
        },
        "largest_modules_ms": {
            m: rounded(ms, 1) for m, ms in sorted(above.items(), key=lambda kv: -kv[1])[:12]
        },
    }


def run(*, runs: int = 15, breakdown_runs: int = 5) -> dict[str, Any]:
    """`runs` imports of every function module and as many of its floor, alternated; then
    `breakdown_runs` of each with the garbage collector off, and as many under importtime."""
    with tempfile.TemporaryDirectory(prefix="iotsched-coldstart-") as tmp:
        return _run(runs, breakdown_runs, write_floors(Path(tmp)))


def _without_collector(function: Path, floor: Path, runs: int) -> dict[str, float]:
    """CPU medians (ms) of `runs` alternated imports of each side with the collector off."""
    times: dict[str, list[float]] = {"import": [], "floor": []}
    for i in range(runs):
        pair = [("import", function), ("floor", floor)]
        for side, path in pair if i % 2 == 0 else reversed(pair):
            times[side].append(import_once(path, collector=False)[1])
    return {
        "floor_ms": rounded(median(times["floor"]), 1),
        "import_ms": rounded(median(times["import"]), 1),
        "ratio": rounded(median(times["import"]) / median(times["floor"]), 3),
    }


def _run(runs: int, breakdown_runs: int, floors: dict[str, Path]) -> dict[str, Any]:
    functions = {name: ROOT / "functions" / name for name in FUNCTIONS}
    missing: dict[str, list[str]] = {}
    loaded: dict[str, tuple[int, int]] = {}
    full_gcs: dict[str, tuple[int, int]] = {}
    for name in FUNCTIONS:  # untimed: bytecode caches written, the floor's modules checked
        (mine, gcs), (floor, floor_gcs) = (
            modules_loaded(functions[name]),
            modules_loaded(floors[name]),
        )
        missing[name] = sorted(floor - mine)
        loaded[name] = (len(mine), len(floor))
        full_gcs[name] = (gcs, floor_gcs)
    wall: dict[str, dict[str, list[float]]] = {
        name: {"import": [], "floor": []} for name in FUNCTIONS
    }
    cpu: dict[str, dict[str, list[float]]] = {
        name: {"import": [], "floor": []} for name in FUNCTIONS
    }
    for i in range(runs):
        for name in FUNCTIONS:
            pair = [("import", functions[name]), ("floor", floors[name])]
            for side, path in pair if i % 2 == 0 else reversed(pair):
                ms, cpu_ms = import_once(path)
                wall[name][side].append(ms)
                cpu[name][side].append(cpu_ms)
    per_function: dict[str, Any] = {}
    ratios: dict[str, float] = {}
    for name in FUNCTIONS:
        w, c = wall[name], cpu[name]
        ratios[name] = median(c["import"]) / median(c["floor"])
        pair_ratios = sorted(a / b for a, b in zip(c["import"], c["floor"], strict=True))
        per_function[name] = {
            "floor_ms": rounded(median(c["floor"]), 1),
            "import_ms": rounded(median(c["import"]), 1),
            "ratio": rounded(ratios[name], 3),
            # The spread of the ratio run by run (each run beside its pair's other side).
            "pair_ratio_quartiles": [
                rounded(pair_ratios[len(pair_ratios) // 4], 3),
                rounded(median(pair_ratios), 3),
                rounded(pair_ratios[(3 * len(pair_ratios)) // 4], 3),
            ],
            "wall_floor_ms": rounded(median(w["floor"]), 1),
            "wall_import_ms": rounded(median(w["import"]), 1),
            "wall_ratio": rounded(median(w["import"]) / median(w["floor"]), 3),
            "modules_loaded": loaded[name][0],
            "floor_modules_loaded": loaded[name][1],
            "floor_modules_not_loaded": missing[name],
            "full_collections": {"import": full_gcs[name][0], "floor": full_gcs[name][1]},
            "floor": [why for _lines, why in FLOORS[name]],
            "samples_ms": {side: [rounded(x, 1) for x in values] for side, values in c.items()},
        }
    for name in FUNCTIONS:
        per_function[name]["without_collector"] = _without_collector(
            functions[name], floors[name], breakdown_runs
        )
        per_function[name]["above_floor"] = breakdown(
            functions[name], floors[name], runs=breakdown_runs
        )
    worst = max(ratios, key=lambda n: ratios[n])
    figure = rounded(ratios[worst], 2)
    return {
        "runs": runs,
        "functions": per_function,
        "cold_start_ratio_to_floor": figure,
        "worst": worst,
        "target": TARGET,
        # Met only where every function's import loads its whole floor (see the docstring).
        "met": figure <= TARGET and not any(missing.values()),
        # Not in the import: a worker pays it once, on its first message.
        "entry_point_scan": entry_point_scan(breakdown_runs),
    }


def instructions_once(code_dir: Path, code: str = "import app") -> int:
    """Instructions the interpreter executes for `python -c code` in `code_dir` (valgrind's
    callgrind; about 50 times slower than a run)."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            code,
        ],
        cwd=code_dir,
        env={**os.environ, **AWS_ENV, "PYTHONDONTWRITEBYTECODE": ""},
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    counts = [line.split()[-1] for line in done.stderr.splitlines() if "Collected :" in line]
    return int(counts[-1])


def instructions() -> dict[str, Any]:
    """The ratios again, counted in instructions rather than timed (`python -m bench.coldstart
    --instructions`; not part of `make bench`: it needs valgrind and several minutes).

    A count does not move with the load of a shared machine, which the timed medians do; it
    leaves out what instructions do not show (page faults, cache misses), so it checks the
    timed ratios rather than replaces them. The interpreter's own start (`-c pass`) is
    subtracted from every count.
    """
    with tempfile.TemporaryDirectory(prefix="iotsched-coldstart-") as tmp:
        floors = write_floors(Path(tmp))
        functions = {name: ROOT / "functions" / name for name in FUNCTIONS}
        for name in FUNCTIONS:  # untimed: write the bytecode caches
            modules_loaded(functions[name])
            modules_loaded(floors[name])
        start = instructions_once(ROOT, "pass")
        counts = {
            name: {
                "import": instructions_once(functions[name]) - start,
                "floor": instructions_once(floors[name]) - start,
            }
            for name in FUNCTIONS
        }
    return {
        "interpreter_start": start,
        "instructions": counts,
        "ratios": {name: rounded(n["import"] / n["floor"], 3) for name, n in counts.items()},
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["--instructions"]:
        if shutil.which("valgrind") is None:
            sys.exit("bench.coldstart --instructions needs valgrind (apt-get install valgrind)")
        sys.stdout.write(json.dumps(instructions(), indent=1) + "\n")
    else:
        sys.stdout.write(
            json.dumps(run(runs=int(sys.argv[1]) if len(sys.argv) > 1 else 5), indent=1) + "\n"
        )
