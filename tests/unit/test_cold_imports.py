"""What a Lambda cold start imports: each function's `app` module in a fresh interpreter.

The cold-start figure (bench/coldstart.py, `cold_start_ratio_to_floor`) is the import time of
these modules against their floors, so code that no invocation of a deployed function runs must
stay off their import path: the in-memory fakes, the local runtime and the CLI (moto, yaml,
rich, click), the fault injector of the chaos runs, the HTTP Device Management System client
(only with IOTSCHED_DMS_URL), the OpenAPI document generator. Code that only some invocations
run is imported where it is used (`DEFERRED`): the task library's handlers on the first lookup
of their name, and each function's use-cases stay out of the others. Two traps are checked as well: Powertools' batch utility imports every
event model of its parser when pydantic is already imported (so it must come first, as isort
orders `app.py` today), and the API's models build their validators on first use
(`defer_build`), not at import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = sorted(d.name for d in (ROOT / "functions").iterdir() if (d / "app.py").is_file())

#: Modules (and packages: their submodules too) no function's import may load.
NEVER_ON_A_LAMBDA_PATH = (
    "iotsched.adapters.memory",
    "iotsched.adapters.faults",
    "iotsched.adapters.dms_http",
    "iotsched.api.openapi",
    "iotsched.api.proxy",
    "iotsched.local",
    "iotsched.cli",
    "aws_lambda_powertools.utilities.parser",
    "moto",
    "yaml",
    "rich",
    "click",
    "typer",
)

#: The task library's handlers and planners, and what only they use: imported on the first
#: lookup of a handler's name (`iotsched.registry.HandlerRegistry`), by the worker that runs
#: it, or of a planner's (`iotsched.core.sharding.find_planner`), by the claim that plans.
TASK_LIBRARY = (
    "iotsched.tasklib.common",
    "iotsched.tasklib.planners",
    "iotsched.tasklib.noop",
    "iotsched.tasklib.chaos",
    "iotsched.tasklib.inspect_offline",
    "iotsched.tasklib.tenant_report",
    "iotsched.tasklib.archive_cold_data",
    "iotsched.tasklib.plan_expiry_reminders",
    "iotsched.tasklib.billing_settlement",
)
#: The API's routes, models and use-cases, and its resolver.
API_ONLY = (
    "iotsched.api",
    "iotsched.services.operations.actions",
    "iotsched.services.operations.on_demand",
    "iotsched.services.operations.views",
    "iotsched.services.definitions",
    "iotsched.core.trigger_text",
    "aws_lambda_powertools.event_handler",
)
#: What follows an instance's end (its follow-ups, a dependent's or a queued instance's
#: dispatch, the reduce's message): run by the completions that end an instance only.
END_OF_AN_INSTANCE = (
    "iotsched.services.scheduling.lifecycle",
    "iotsched.services.scheduling.send",
    "iotsched.services.scheduling.build",
    "iotsched.services.scheduling.fan_in",
    "iotsched.core.messages",
)
#: Modules (and packages) each function's import must not load: it runs them on some
#: invocations only, or never. The console's timeline is for the CLI and the console.
DEFERRED: dict[str, tuple[str, ...]] = {
    "api": (
        *TASK_LIBRARY,
        "iotsched.core.timeline",
        "iotsched.services.execution",
        "iotsched.services.execution.sweep",
        "iotsched.services.execution.dead_letters",
    ),
    "dispatcher": (
        *TASK_LIBRARY,
        *API_ONLY,
        "iotsched.core.timeline",
        "iotsched.services.execution.completion",
        "iotsched.services.execution",
        "iotsched.services.execution.sweep",
        "iotsched.services.execution.dead_letters",
        "aws_lambda_powertools.utilities.batch",
    ),
    "dlq": (
        *TASK_LIBRARY,
        *API_ONLY,
        "iotsched.core.timeline",
        *END_OF_AN_INSTANCE,
        "iotsched.services.scheduling.tick",
        "iotsched.services.execution.batch",
        "iotsched.services.execution.attempt",
        "iotsched.services.execution.start",
        "iotsched.services.execution.sweep",
    ),
    "sweeper": (
        *TASK_LIBRARY,
        *API_ONLY,
        "iotsched.core.timeline",
        "iotsched.services.execution.dead_letters",
        "aws_lambda_powertools.utilities.batch",
    ),
    "worker": (
        *TASK_LIBRARY,
        *API_ONLY,
        "iotsched.core.timeline",
        *END_OF_AN_INSTANCE,
        "iotsched.services.scheduling.tick",
        "iotsched.services.execution.sweep",
        "iotsched.services.execution.dead_letters",
    ),
}

_PROBE = textwrap.dedent(
    """
    import json, sys
    import app
    from pydantic import BaseModel

    def models(module):
        return [
            v.__name__ for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == module.__name__
        ]

    api_models = sys.modules.get("iotsched.api.models")
    print(json.dumps({
        "modules": sorted(sys.modules),
        "api_models": models(api_models) if api_models else [],
        "api_models_built": [
            name for name in (models(api_models) if api_models else [])
            if getattr(api_models, name).__pydantic_complete__
        ],
    }))
    """
)


def cold_import(function: str) -> dict[str, Any]:
    """`import app` in functions/<function>, as Lambda does, in a new interpreter."""
    env = {
        **os.environ,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "POWERTOOLS_SERVICE_NAME": "iotsched",
        "POWERTOOLS_METRICS_NAMESPACE": "iotsched-test",
    }
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=ROOT / "functions" / function,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    """The modules of `modules` that are one of `names` or inside one of them."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_every_function_of_the_template_is_checked() -> None:
    assert {"api", "dispatcher", "dlq", "sweeper", "worker"} <= set(FUNCTIONS)


@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_cold_start_imports_nothing_no_invocation_uses(function: str) -> None:
    modules = cold_import(function)["modules"]
    assert "iotsched.bootstrap" in modules  # the probe did import the function
    assert loaded(modules, NEVER_ON_A_LAMBDA_PATH) == []


def test_every_function_has_its_deferred_modules() -> None:
    assert set(DEFERRED) == set(FUNCTIONS)


@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_cold_start_leaves_what_only_some_invocations_run_to_them(function: str) -> None:
    modules = cold_import(function)["modules"]
    assert "iotsched.registry" in modules  # the registry is built, its handlers are not
    assert loaded(modules, DEFERRED[function]) == []


def _fresh(script: str) -> list[str]:
    """sys.modules after `script` in a new interpreter."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script + "\nimport json, sys; print(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    modules: list[str] = json.loads(done.stdout.splitlines()[-1])
    return modules


def test_a_handler_is_imported_on_the_first_lookup_of_its_name() -> None:
    script = (
        "from iotsched.tasklib import registry\n"
        "handlers = registry()\n"
        "assert 'inspect_offline' in handlers and 'no_such' not in handlers\n"
        "assert len(handlers) == len(list(handlers)) >= 8\n"
        "assert handlers.get('no_such') is None\n"
        "assert str(handlers.origin('noop')).startswith('iotsched ')\n"
    )
    assert loaded(_fresh(script), TASK_LIBRARY) == []  # names known, nothing imported
    looked_up = _fresh(script + "handlers['inspect_offline']\n")
    assert loaded(looked_up, TASK_LIBRARY) == [
        "iotsched.tasklib.common",
        "iotsched.tasklib.inspect_offline",
    ]


def test_a_planner_is_imported_on_the_first_use_of_its_name() -> None:
    script = (
        "from iotsched.core.sharding import find_planner, planner_names\n"
        "assert 'hash_buckets' in planner_names()\n"
    )
    assert loaded(_fresh(script), TASK_LIBRARY) == []
    looked_up = _fresh(script + "find_planner('hash_buckets')\n")
    assert loaded(looked_up, TASK_LIBRARY) == ["iotsched.tasklib.planners"]


def test_the_registry_loads_the_functions_the_modules_define() -> None:
    from iotsched.tasklib import registry
    from iotsched.tasklib.noop import noop
    from iotsched.tasklib.tenant_report import tenant_report

    handlers = registry()
    assert handlers["noop"].spec.fn is noop
    assert handlers["tenant_report"].spec.fn is tenant_report
    assert handlers["tenant_report"].value == "iotsched.tasklib.tenant_report:tenant_report"
    assert handlers["tenant_report"] is handlers["tenant_report"]  # loaded once
    assert sorted(dict(handlers)) == sorted(handlers)
    with pytest.raises(KeyError):
        handlers["no_such"]


def test_the_api_models_are_built_on_first_use_not_at_import() -> None:
    result = cold_import("api")
    assert {"TaskView", "InstanceView", "ErrorBody", "RunRequest"} <= set(result["api_models"])
    assert result["api_models_built"] == []


def test_the_probe_sees_a_module_that_is_imported() -> None:
    """The check has teeth: in a fresh interpreter, the fakes are found once the composition
    root builds services on them."""
    script = (
        "import json, sys; from iotsched.bootstrap import build_memory; build_memory(); "
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout.splitlines()[-1])
    found = loaded(modules, NEVER_ON_A_LAMBDA_PATH)
    assert "iotsched.adapters.memory" in found  # the fakes' package, and its modules only
    assert all(m.startswith("iotsched.adapters.memory") for m in found), found
