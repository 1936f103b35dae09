"""Cold start: import time of each function module in a fresh interpreter, vs a bare handler.

Each run is `python -X importtime -c "import app"` in the function's code directory (as Lambda
imports `app` from /var/task, with iotsched installed as the layer is), in a new interpreter;
the figure read is the cumulative import time of `app` itself. The baseline is
`bench/baseline_handler/app.py`: Powertools Logger and Metrics, `import boto3`, a decorated
handler. One untimed run of each first (bytecode caches written), then the runs alternate
between the modules; the ratio is each module's median over the baseline's median, and the
figure is the largest of them.

Beside them, not in the figure, the same measure of each function's floor: the baseline plus
only the libraries that function cannot drop (pydantic, the task models' validation library; the
Powertools batch utility of the worker and DLQ handlers; the REST resolver with validation of
the API; the EventBridge data class of the dispatcher), imported in the order the function
imports them. A function's ratio less its floor's is what iotsched's own modules cost.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import AWS_ENV, BENCH_DIR, ROOT, median, rounded

#: Every function of the template: each directory of functions/ with an app.py.
FUNCTIONS = tuple(
    sorted(d.name for d in (ROOT / "functions").iterdir() if (d / "app.py").is_file())
)
TARGET = 1.5

_PYDANTIC = "from pydantic import BaseModel, Field\n"
#: Each floor: the lines added to the baseline handler's module, and the functions it is the
#: floor of. Powertools' batch utility comes before pydantic, as in the functions: imported
#: after it, the utility also imports its parser's event models.
FLOORS: dict[str, tuple[str, tuple[str, ...]]] = {
    "baseline+pydantic": (_PYDANTIC, ("sweeper",)),
    "baseline+eventbridge+pydantic": (
        "from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, event_source\n"
        + _PYDANTIC,
        ("dispatcher",),
    ),
    "baseline+batch+pydantic": (
        "from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType\n"
        + _PYDANTIC
        + "processor = BatchProcessor(event_type=EventType.SQS)\n",
        ("dlq", "worker"),
    ),
    "baseline+resolver+pydantic": (
        "from aws_lambda_powertools.event_handler import APIGatewayRestResolver\n"
        "from aws_lambda_powertools.event_handler.openapi.params import Body\n"
        + _PYDANTIC
        + "resolver = APIGatewayRestResolver(enable_validation=True)\n",
        ("api",),
    ),
}


def write_floors(directory: Path) -> dict[str, Path]:
    """One code directory per floor: the baseline's app.py with the floor's lines after its
    imports (before its handler)."""
    source = (BENCH_DIR / "baseline_handler" / "app.py").read_text(encoding="utf-8")
    head, marker, tail = source.partition("logger = Logger()")
    assert marker, "the baseline handler's layout changed"
    paths = {}
    for name, (lines, _functions) in FLOORS.items():
        path = directory / name
        path.mkdir()
        (path / "app.py").write_text(head + lines + "\n" + marker + tail, encoding="utf-8")
        paths[name] = path
    return paths


def import_once(code_dir: Path) -> tuple[float, float, Counter[str]]:
    """(ms to import `app`, the interpreter's CPU ms, self time by top-level package inside it).

    The CPU time (user + system, whole interpreter) is a check on the wall-clock figure: it
    moves less when other processes share the machine.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import app"],
        cwd=code_dir,
        env={**os.environ, **AWS_ENV, "PYTHONDONTWRITEBYTECODE": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_ms = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    rows: list[tuple[int, int, int, str]] = []  # (level, self us, cumulative us, module)
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3:
            continue
        self_us = parts[0].removeprefix("import time:").strip()
        if not self_us.isdigit():
            continue  # the header line
        name = parts[2]
        level = (len(name) - len(name.lstrip(" ")) - 1) // 2
        rows.append((level, int(self_us), int(parts[1].strip()), name.strip()))
    app = next(i for i in range(len(rows) - 1, -1, -1) if rows[i][3] == "app")
    by_package: Counter[str] = Counter()
    i = app - 1
    while i >= 0 and rows[i][0] >= 1:  # app's subtree: printed just before it, nested under it
        module = rows[i][3]
        by_package[module.split(".")[0]] += rows[i][1]
        if module.startswith("iotsched."):
            by_package[module] += rows[i][1]
        i -= 1
    by_package["app"] += rows[app][1]
    return rows[app][2] / 1000, cpu_ms, by_package


def run(*, runs: int = 7) -> dict[str, Any]:
    """`runs` imports of every function module, of the baseline and of the floors, interleaved."""
    with tempfile.TemporaryDirectory(prefix="iotsched-coldstart-") as tmp:
        return _run(runs, write_floors(Path(tmp)))


def _run(runs: int, floors: dict[str, Path]) -> dict[str, Any]:
    modules = {name: ROOT / "functions" / name for name in FUNCTIONS}
    modules["baseline"] = BENCH_DIR / "baseline_handler"
    modules.update(floors)
    for path in modules.values():  # untimed: write the bytecode caches
        import_once(path)
    times: dict[str, list[float]] = {name: [] for name in modules}
    cpu: dict[str, list[float]] = {name: [] for name in modules}
    packages: dict[str, Counter[str]] = {name: Counter() for name in modules}
    for _ in range(runs):
        for name, path in modules.items():
            ms, cpu_ms, by_package = import_once(path)
            times[name].append(ms)
            cpu[name].append(cpu_ms)
            packages[name].update(by_package)
    base = median(times["baseline"])
    ratios = {name: median(times[name]) / base for name in FUNCTIONS}
    worst = max(ratios, key=lambda n: ratios[n])
    cpu_base = median(cpu["baseline"])
    cpu_ratios = {name: median(cpu[name]) / cpu_base for name in FUNCTIONS}
    shown = [*FUNCTIONS, "baseline"]
    return {
        "runs": runs,
        "median_ms": {name: rounded(median(times[name]), 1) for name in shown},
        "samples_ms": {name: [rounded(x, 1) for x in times[name]] for name in shown},
        "interpreter_cpu_median_ms": {name: rounded(median(cpu[name]), 1) for name in shown},
        "cpu_ratios": {name: rounded(r, 2) for name, r in cpu_ratios.items()},
        "ratios": {name: rounded(r, 2) for name, r in ratios.items()},
        "cold_start_ratio": rounded(ratios[worst], 2),
        "worst": worst,
        "top_packages_ms": {
            name: {
                pkg: rounded(us / runs / 1000, 1)
                for pkg, us in [(p, u) for p, u in packages[name].most_common() if "." not in p][:8]
            }
            for name in (worst, "baseline")
        },
        "top_iotsched_modules_ms": {
            module: rounded(us / runs / 1000, 1)
            for module, us in [(m, u) for m, u in packages[worst].most_common() if "." in m][:8]
        },
        "floors": {
            name: {
                "adds": FLOORS[name][0].strip().splitlines(),
                "floor_of": list(FLOORS[name][1]),
                "median_ms": rounded(median(times[name]), 1),
                "ratio": rounded(median(times[name]) / base, 2),
                "cpu_ratio": rounded(median(cpu[name]) / cpu_base, 2),
            }
            for name in floors
        },
        "target": TARGET,
        "met": ratios[worst] <= TARGET,
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

    A count does not move with the load of a shared machine, which the timed medians do by
    tenths; it leaves out what instructions do not show (page faults, cache misses), so it
    checks the timed ratios rather than replaces them. The interpreter's own start (`-c pass`)
    is subtracted from every count.
    """
    with tempfile.TemporaryDirectory(prefix="iotsched-coldstart-") as tmp:
        modules = {name: ROOT / "functions" / name for name in FUNCTIONS}
        modules["baseline"] = BENCH_DIR / "baseline_handler"
        modules.update(write_floors(Path(tmp)))
        for path in modules.values():  # untimed: write the bytecode caches
            import_once(path)
        start = instructions_once(BENCH_DIR / "baseline_handler", "pass")
        counts = {name: instructions_once(path) - start for name, path in modules.items()}
    base = counts["baseline"]
    return {
        "interpreter_start": start,
        "instructions": counts,
        "ratios": {name: rounded(n / base, 3) for name, n in counts.items() if name != "baseline"},
    }


if __name__ == "__main__":
    import json

    if sys.argv[1:] == ["--instructions"]:
        if shutil.which("valgrind") is None:
            sys.exit("bench.coldstart --instructions needs valgrind (apt-get install valgrind)")
        sys.stdout.write(json.dumps(instructions(), indent=1) + "\n")
    else:
        sys.stdout.write(
            json.dumps(run(runs=int(sys.argv[1]) if len(sys.argv) > 1 else 3), indent=1) + "\n"
        )
