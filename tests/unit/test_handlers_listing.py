"""`iotsched handlers list/show` and `GET /handlers[/{name}]`: every installed handler, where
it comes from, what it does, its params' JSON Schema; one that cannot be loaded is listed with
its error rather than breaking the listing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from iotsched import bootstrap
from iotsched.api.app import create_app
from iotsched.cli.main import cli
from iotsched.clock import ManualClock
from tests.api.conftest import Client
from tests.distributions import installed
from tests.support import T0

ACME = '''
    from pydantic import BaseModel, Field
    from iotsched import handler

    class CloseParams(BaseModel):
        currency: str = "EUR"
        accounts: int = Field(ge=1)

    @handler("billing_close", params=CloseParams)
    def billing_close(ctx, params):
        """Close the day's bills
        of every account.

        Longer text that is not the summary.
        """
'''

CLOSE = {
    "name": "billing_close",
    "package": "acme-jobs",
    "version": "1.4.2",
    "entry_point": "acme_jobs.billing:billing_close",
    "summary": "Close the day's bills of every account.",
    "params": "CloseParams",
    "error": None,
}


@pytest.fixture(autouse=True)
def acme(tmp_path: Path) -> Iterator[None]:
    with installed(tmp_path / "site") as dists:
        dists.add(
            "acme-jobs",
            "1.4.2",
            handlers={
                "billing_close": "acme_jobs.billing:billing_close",
                "broken": "acme_jobs.missing:run",
            },
            modules={"acme_jobs.billing": ACME},
        )
        yield


def invoke(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(cli, list(args), env={"COLUMNS": "250"})
    return done.exit_code, done.output


def test_list_gives_every_handler_with_its_package_and_a_broken_one_s_error() -> None:
    code, output = invoke("handlers", "list", "--json")
    assert code == 0, output
    views = {v["name"]: v for v in json.loads(output)}
    assert views["billing_close"] == CLOSE
    assert views["noop"]["package"] == "iotsched"
    assert views["noop"]["entry_point"] == "iotsched.tasklib.noop:noop"
    broken = views["broken"]
    assert (broken["package"], broken["version"]) == ("acme-jobs", "1.4.2")
    assert "module 'acme_jobs.missing' is not installed" in broken["error"]
    code, table = invoke("handlers", "list")
    assert code == 0 and "Traceback" not in table
    assert "acme-jobs 1.4.2" in table and "error: handler 'broken'" in table


def test_show_gives_the_params_schema() -> None:
    code, output = invoke("handlers", "show", "billing_close", "--json")
    assert code == 0, output
    view = json.loads(output)
    assert {k: view[k] for k in CLOSE} == CLOSE
    schema = view["params_schema"]
    assert schema["title"] == "CloseParams" and schema["required"] == ["accounts"]
    assert schema["properties"]["accounts"]["minimum"] == 1
    code, text = invoke("handlers", "show", "billing_close")
    assert code == 0 and '"accounts"' in text and "acme-jobs 1.4.2" in text


def test_show_a_broken_or_unknown_handler() -> None:
    code, output = invoke("handlers", "show", "broken", "--json")
    assert code == 0, output
    assert json.loads(output)["params_schema"] is None
    assert "is not installed" in json.loads(output)["error"]
    code, output = invoke("handlers", "show", "nope")
    assert code == 2 and "no handler 'nope'" in output and "billing_close" in output


def test_the_api_lists_and_shows_the_handlers() -> None:
    services = bootstrap.build_memory(clock=ManualClock(T0))
    api = Client(create_app(lambda: services), services)
    listed = api.get("/handlers")
    assert listed.status == 200
    views = {v["name"]: v for v in listed.body}
    assert views["billing_close"] == CLOSE and "error" in views["broken"]
    shown = api.get("/handlers/billing_close")
    assert shown.status == 200
    assert shown.body["params_schema"]["title"] == "CloseParams"
    missing = api.get("/handlers/nope")
    assert (missing.status, missing.body["message"]) == (404, "no handler 'nope'")
