"""Cold start: import time of each function module in a fresh interpreter, vs a bare handler.

Each run is `python -X importtime -c "import app"` in the function's code directory (as Lambda
imports `app` from /var/task, with iotsched installed as the layer is), in a new interpreter;
the figure read is the cumulative import time of `app` itself. The baseline is
`bench/baseline_handler/app.py`: Powertools Logger and Metrics, `import boto3`, a decorated
handler. One untimed run of each first (bytecode caches written), then the runs alternate
between the modules; the ratio is each module's median over the baseline's median, and the
figure is the largest of them.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import AWS_ENV, BENCH_DIR, ROOT, median, rounded

#: Every function of the template: each directory of functions/ with an app.py.
FUNCTIONS = tuple(
    sorted(d.name for d in (ROOT / "functions").iterdir() if (d / "app.py").is_file())
)
TARGET = 1.5


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
    """`runs` imports of every function module and of the baseline, interleaved."""
    modules = {name: ROOT / "functions" / name for name in FUNCTIONS}
    modules["baseline"] = BENCH_DIR / "baseline_handler"
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
    return {
        "runs": runs,
        "median_ms": {name: rounded(median(v), 1) for name, v in times.items()},
        "samples_ms": {name: [rounded(x, 1) for x in v] for name, v in times.items()},
        "interpreter_cpu_median_ms": {name: rounded(median(v), 1) for name, v in cpu.items()},
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
        "target": TARGET,
        "met": ratios[worst] <= TARGET,
    }


if __name__ == "__main__":
    import json

    sys.stdout.write(
        json.dumps(run(runs=int(sys.argv[1]) if len(sys.argv) > 1 else 3), indent=1) + "\n"
    )
