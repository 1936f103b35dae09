"""The report's cold-start section: each function's import against its floor."""

# ruff: noqa: RUF001  (the report's typography: multiplication signs and en dashes)

from __future__ import annotations

from typing import Any

from bench.report.text import plural, table, verdict


def coldstart_section(c: dict[str, Any], f: dict[str, Any]) -> list[str]:
    out = ["## Cold start", ""]
    if "cold_start_ratio_to_floor" not in c:  # a run of an earlier definition: not comparable
        return [*out, "Not measured in this run by the current definition (`bench/coldstart.py`)."]
    fns = c["functions"]
    out += [
        "Each function's `import app` in its code directory (as Lambda imports the handler's "
        "module, with the CoreLayer's packages on the path) against its floor: the same "
        "function importing only the libraries it cannot drop and building what it builds "
        "from them at import (the Powertools logger, metrics, batch processor or resolver), "
        f"listed below. A fresh interpreter per run, {plural(c['runs'], 'run')} of each side "
        "alternated (A B, B A, ...) after one untimed run; the time is the process's CPU "
        "time around the import, the median of the runs (the wall time beside it moves with "
        "the load of the shared machine; the interpreter's own start is outside both).",
        "",
    ]
    out += table(
        [
            "function",
            "floor (ms)",
            "import (ms)",
            "ratio",
            "per-run ratio (quartiles)",
            "wall floor / import (ms)",
            "wall ratio",
            "full GCs (import / floor)",
            "ratio, collector off",
        ],
        [
            [
                name,
                fn["floor_ms"],
                fn["import_ms"],
                f"**{fn['ratio']}**" if name == c["worst"] else fn["ratio"],
                " – ".join(str(q) for q in fn["pair_ratio_quartiles"]),
                f"{fn['wall_floor_ms']} / {fn['wall_import_ms']}",
                fn["wall_ratio"],
                f"{fn['full_collections']['import']} / {fn['full_collections']['floor']}",
                fn.get("without_collector", {}).get("ratio", "n/a"),
            ]
            for name, fn in fns.items()
        ],
    )
    scan = c.get("entry_point_scan")
    if scan:
        out += [
            "",
            "Outside the import, once per process: a worker's first scan of the entry-point "
            f"group `iotsched.handlers` took {scan['cpu_ms']} ms of CPU ({scan['wall_ms']} ms "
            f"wall) over {scan['distributions']} installed distributions, naming "
            f"{scan['handlers']} handlers without importing them.",
        ]
    unloaded = {name: fn["floor_modules_not_loaded"] for name, fn in fns.items()}
    out += [
        "",
        f"Figure: the largest ratio, {c['cold_start_ratio_to_floor']} ({c['worst']}); target "
        f"≤ {c['target']}: {verdict(c['met'])}. Every function's import loads every module of its "
        "floor (a library needed on every invocation is not deferred to the first one): "
        + (
            "yes."
            if not any(unloaded.values())
            else "**no**: "
            + "; ".join(f"{n}: {', '.join(m)}" for n, m in unloaded.items() if m)
            + "."
        ),
        "",
        "The floors: what each function cannot drop, and why.",
        "",
    ]
    reasons: dict[str, list[str]] = {}
    for name, fn in fns.items():
        for why in fn["floor"]:
            reasons.setdefault(why, []).append(name)
    out += [f"* {why} ({', '.join(names)})." for why, names in reasons.items()]
    out += [
        "",
        "The last column: the same ratio with the garbage collector off in both (CPU medians "
        "of fewer alternated runs): what the modules cost without the collections they set "
        "off. A full collection scans every tracked object, the libraries' included, and "
        "comes when the objects that survived grow by a quarter: a step, not a slope.",
        "",
        "Above the floor (`python -X importtime`, untimed runs: the self time of each module a "
        "function loads and its floor does not, the least of the runs per module, since other "
        "work only adds to it; importtime's own overhead inflates these, and a collection "
        "counts in the module during which it ran):",
        "",
    ]
    for name, fn in fns.items():
        a = fn["above_floor"]
        out.append(
            f"* {name}: {a['self_ms_above_floor']} ms in {a['modules_above_floor']} modules; "
            + ", ".join(f"{m} {ms}" for m, ms in a["largest_modules_ms"].items())
            + "."
        )
    out += [
        "",
        "Imported where they are used, not at a cold start (`tests/unit/test_cold_imports.py` "
        "fails if a function's import loads one again): the task library's handlers (on the "
        "first lookup of a handler's name: the dispatcher, sweeper, DLQ handler and API never "
        "run one), the API's routes, models and use-cases outside the API, each function's "
        "use-cases outside the others, the console's timeline; never on a Lambda's path: the "
        "in-memory fakes, the fault injector, the HTTP Device Management System client, the "
        "OpenAPI generator, the CLI, the local runtime, moto, yaml, rich, click.",
        "",
    ]
    if not c["met"]:
        worst = fns[c["worst"]]
        gcs = worst["full_collections"]
        off = worst.get(
            "without_collector", {"ratio": "n/a", "import_ms": "n/a", "floor_ms": "n/a"}
        )
        out += [
            "**Why it is missed.** What remains above the floors is the modules every "
            "invocation runs: the task and record models (pydantic class creation, even with "
            "their validators built on first use), the frozen dataclasses and protocols of the "
            "ports and services (each dataclass compiles its generated methods), the adapters "
            "the composition root builds, and for the API its routes, models and use-cases. "
            f"For {c['worst']}: {worst['above_floor']['self_ms_above_floor']} ms of module self "
            f"time above its floor under importtime; its import made {gcs['import']} full "
            f"garbage collection(s) against its floor's {gcs['floor']}, and with the collector "
            f"off in both its ratio is {off['ratio']} ({off['import_ms']} ms against "
            f"{off['floor_ms']} ms).",
            "",
            "**What would close it.** Fewer classes created at import on the paths every "
            "invocation takes: plain classes (or `__slots__` classes without generated "
            "methods) for the ports' and services' value types, the API's routes importing "
            "their use-cases and models on first call (a resolver per route group), and models "
            "that only some paths read (alerts, submissions, dependencies) in modules of their "
            "own. For the full collection: freezing the objects the libraries created "
            "(`gc.freeze()` in each function's module once its floor's libraries are imported) "
            "would spare every later collection the scan of them.",
            "",
        ]
    return out
