"""Issue 30, properties of the task-file schema (hypothesis): task files built from the schema's
fields, many of them given hostile values (huge, negative, of the wrong type, nested deep, long,
odd tenant names, dates that do not exist, a key given twice), applied both as `iotsched tasks
apply FILE` (YAML, the CLI in-process) and as `POST /tasks` (the same file as JSON, the API
in-process), each on its own empty in-memory store:

- the CLI and the API give the same verdict: both accept, or both refuse (the one difference the
  API states: a JSON body must use JSON's own types, where a YAML file may write `"30"` for 30;
  such a body is refused with exactly those problems), and both store the same definitions;
- a refused file writes nothing: the store (tasks, versions, audit, everything in it) is as it
  was, and nothing is sent;
- an accepted file's tasks are listed, shown, fired on the manual clock (the dispatcher's tick
  at the first one's next fire, the shards delivered) and deleted, through the CLI and the API
  alike, without an error or a 5xx.
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from iotsched.adapters.memory.queues import MemoryAlertSink, MemoryShardQueue
from iotsched.api.app import create_app
from iotsched.api.errors import strict_task_file_problems
from iotsched.cli.main import cli
from iotsched.services.wiring import Wiring
from iotsched.testing import TaskHarness
from tests.api.conftest import Answer, Client

# -- writing one file two ways ------------------------------------------------------------------


class Pairs(list[tuple[str, Any]]):
    """A mapping written with its keys in this order, one possibly twice."""


class Unreal(str):
    """A date or an instant that does not exist (`2026-02-30`): a plain YAML scalar (which YAML
    reads as a timestamp), a string in JSON."""

    __slots__ = ()


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(
    Pairs, lambda dumper, pairs: dumper.represent_mapping("tag:yaml.org,2002:map", list(pairs))
)
_Dumper.add_representer(
    Unreal, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:timestamp", str(text))
)


def to_yaml(data: Any) -> str:
    """The task file as YAML (block style; dates and instants as YAML timestamps)."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=2**31)


def to_json(data: Any) -> str:
    """The same file as a JSON body (dates and instants as ISO strings, a key given twice
    written twice)."""
    if isinstance(data, Pairs):
        return "{" + ", ".join(f"{json.dumps(k)}: {to_json(v)}" for k, v in data) + "}"
    if isinstance(data, dict):
        return to_json(Pairs(data.items()))
    if isinstance(data, list):
        return "[" + ", ".join(to_json(v) for v in data) + "]"
    if isinstance(data, date):  # a datetime too
        return json.dumps(data.isoformat())
    return json.dumps(data)


# -- strategies ---------------------------------------------------------------------------------

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)  # the harness's clock at its start
IDS = ["a", "b", "scan"]
TENANTS = ["acme", "t1", "a.b-c_d", "z" * 64]
BAD_TENANTS = ["Acme", "", "z" * 65, "a b", "a#b", "-", "*", "a/b", "t\n", "é", 7, None, ["acme"]]
ZONES = ["UTC", "Europe/Paris", "America/New_York", "Asia/Kathmandu"]
BAD_ZONES = ["Mars/Olympus", "", "utc+1", "../etc/passwd", 0]
CRONS = ["0 * * * *", "*/5 * * * *", "0 0 1 1 *", "30 2 * * 1-5", "0 0 29 2 *", "59 23 31 12 *"]
BAD_CRONS = ["61 * * * *", "* * * *", "@daily", "0 0 31 2 *", "", "* * * * * * *", 5]
RATES = ["1m", "15m", "1h", "6h", "1d", "366d"]
BAD_RATES = ["367d", "0m", "-1h", "1x", "90s", "", "1.5h", "9" * 30 + "d", 60]
#: Text in a file: any character but NEL, which PyYAML's emitter writes raw in a quoted scalar,
#: where its reader folds it into a blank (the file would not say what its JSON says).
TEXT = st.characters(exclude_characters="\x85")
NOOP_KEYS = {"seconds", "heartbeat_s", "fail", "fail_attempts", "log"}  # noop acts on these

#: Values of no field's type or past every field's bounds.
HOSTILE_SCALARS: list[Any] = [
    -1,
    0,
    2**31,
    2**63,
    10**18 + 1,
    10**30,
    -(10**30),
    1.5,
    30.0,
    math.inf,
    "30",
    "",
    "yes",
    True,
    None,
]


def hostile() -> st.SearchStrategy[Any]:
    """A value of the wrong type, out of bounds, long or nested deep."""
    return st.one_of(
        st.sampled_from(HOSTILE_SCALARS),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.integers(0, 300_000).map(lambda n: "x" * n),
        st.lists(st.integers(), max_size=3),
        st.integers(1, 90).map(nested),
        st.just({"unexpected": 1}),
    )


def nested(levels: int) -> dict[str, Any]:
    """A mapping nesting `levels` levels (`{}` is one)."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"k": value}
    return value


#: The face of `Mood.roll` that means "hostile" (neither end of the range drawn lands on it, nor
#: on the two faces after it, for every die rolled here).
ODD = 1


@dataclass(frozen=True)
class Mood:
    """How hostile one file is: `odds` in 1 of a field's values is hostile (0: none); `lax`:
    the hostile values are good ones as a YAML file may write them and JSON may not (`"30"`,
    `30.0`, `"yes"`)."""

    odds: int
    lax: bool = False

    @property
    def hostile(self) -> bool:
        """Whether values may be of no field's type, out of bounds, or the file malformed."""
        return self.odds > 0 and not self.lax

    def field(self, good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        """`good`, or now and then a hostile value (in a lax file, a good one written laxly)."""
        if self.lax:
            return self.roll(self.odds).flatmap(lambda n: good.map(laxed) if n == ODD else good)
        return self.either(good, hostile())

    def either(
        self, good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]
    ) -> st.SearchStrategy[Any]:
        """`good`, or in a hostile file one in `odds` times `bad`."""
        if not self.hostile:
            return good
        return self.roll(self.odds).flatmap(lambda n: bad if n == ODD else good)

    @staticmethod
    def roll(sides: int) -> st.SearchStrategy[int]:
        """A die of `sides` sides (0 to sides - 1). Hypothesis draws an integer range's ends far
        more often than its middle: a die read at its ends would be loaded."""
        return st.integers(0, 999).map(lambda n: n % sides)


def laxed(value: Any) -> Any:
    """`value` as lax validation takes it and strict refuses (numbers as text, a whole number as
    a float, a boolean as a word)."""
    if isinstance(value, bool):
        return "yes" if value else "off"
    if isinstance(value, int):
        return float(value) if value % 2 else str(value)
    if isinstance(value, float):
        return str(value)
    return value


def instants(low: int = 2000, high: int = 2999) -> st.SearchStrategy[datetime]:
    """Aware instants, mostly within a year of T0, some anywhere in the years given."""
    near = st.integers(-3 * 86_400, 366 * 86_400).map(
        lambda s: (T0 + timedelta(seconds=s)).replace(second=0)
    )
    anywhere = st.datetimes(
        min_value=datetime(low, 1, 1),
        max_value=datetime(high, 12, 31),
        timezones=st.sampled_from(
            [UTC, timezone(timedelta(hours=2)), timezone(-timedelta(hours=5))]
        ),
    )
    return st.one_of(near, near, anywhere)


def bad_instants() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.just(datetime(2026, 6, 1, 12, 0)),  # no offset
        st.just(datetime(1, 1, 1, tzinfo=UTC)),
        st.just(datetime(9999, 12, 31, 23, 59, tzinfo=UTC)),
        st.just(datetime(3000, 1, 1, tzinfo=UTC)),
        st.sampled_from([Unreal("2026-02-30T00:00:00Z"), Unreal("2026-13-01 00:00:00")]),
        st.just("tomorrow"),
        st.just(1_767_268_800),
    )


def dates(mood: Mood) -> st.SearchStrategy[Any]:
    """Dates to exclude; in a hostile file, some that do not exist."""
    return mood.either(
        st.dates(date(2000, 1, 1), date(2999, 12, 31)),
        st.sampled_from([Unreal("2026-02-30"), Unreal("2025-02-29"), Unreal("2026-04-31")]),
    )


def keys() -> st.SearchStrategy[str]:
    return st.text(TEXT, min_size=0, max_size=12).filter(lambda k: k not in NOOP_KEYS)


def params(mood: Mood) -> st.SearchStrategy[dict[str, Any]]:
    """Free-form params: scalars (dates among them), lists and mappings, at various depths and
    sizes; in a hostile file, some nest past 32 levels or take hundreds of KB."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(TEXT, max_size=20),
        st.dates(min_value=date(1970, 1, 1), max_value=date(2999, 12, 31)),
    )
    tree = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys(), inner, max_size=4),
        max_leaves=20,
    )
    good = st.dictionaries(keys(), tree, max_size=5)
    if not mood.hostile:
        return good
    big = st.one_of(
        st.integers(20, 40).map(nested),
        st.integers(200_000, 400_000).map(lambda n: {"blob": "p" * n}),
        st.integers(1, 3000).map(lambda n: {"many": list(range(n))}),
    )
    return Mood.roll(mood.odds).flatmap(lambda n: big if n == ODD else good)


def trigger(mood: Mood, earlier: list[str]) -> st.SearchStrategy[Any]:
    """One of the four kinds; `after` names tasks written before it (in a hostile file, any
    task, itself included)."""
    f = mood.field
    zone = f(st.sampled_from(ZONES))
    cron = st.fixed_dictionaries({"cron": f(st.sampled_from(CRONS))}, optional={"timezone": zone})
    rate = st.fixed_dictionaries(
        {"rate": f(st.sampled_from(RATES))},
        optional={"anchor": f(instants(1970, 2999)), "timezone": zone},
    )
    at = st.fixed_dictionaries({"at": f(instants())}, optional={"timezone": zone})
    parents = earlier if not mood.hostile else IDS
    after = st.fixed_dictionaries(
        {"after": f(st.lists(st.sampled_from(parents), min_size=1, max_size=2, unique=True))},
        optional={"timezone": zone},
    )
    good = st.one_of(cron, rate, rate, at, *([after] if parents else []))
    if not mood.hostile:
        return good
    two_kinds = st.just({"cron": "0 * * * *", "rate": "1h"})
    wrong = st.one_of(
        two_kinds,
        st.just({}),
        st.just("1h"),
        st.fixed_dictionaries({"at": bad_instants()}),
        st.fixed_dictionaries({"anchor": instants(), "rate": st.just("1h")}).map(
            lambda t: {**t, "anchor": datetime(1969, 12, 31, tzinfo=UTC)}
        ),
        st.just({"after": []}),
        st.just({"after": ["Not-An-Id"]}),
    )
    return Mood.roll(mood.odds).flatmap(lambda n: wrong if n == ODD else good)


def sharding(mood: Mood) -> st.SearchStrategy[Any]:
    f = mood.field
    static = st.fixed_dictionaries(
        {"strategy": st.just("static"), "shards": f(st.lists(params(mood), min_size=1, max_size=4))}
    )
    id_range = st.integers(0, 1000).flatmap(
        lambda low: st.fixed_dictionaries(
            {
                "strategy": st.just("id_range"),
                "shards": f(st.integers(1, 6)),
                "id_min": f(st.just(low)),
                "id_max": f(st.integers(low + 6, low + 10**6)),
            },
            optional={
                "key_space": f(st.sampled_from(["device_id", "meter"])),
                "prefix": f(st.sampled_from(["dev-", "", "m/"])),
                "width": f(st.integers(1, 20)),
            },
        )
    )
    custom = st.fixed_dictionaries(
        {
            "strategy": st.just("custom"),
            "planner": f(st.just("hash_buckets")),
            "params": st.fixed_dictionaries(
                {"buckets": f(st.integers(1, 6))},
                optional={"key_space": f(st.sampled_from(["device_id", "k" * 128]))},
            ),
        }
    )
    groups = st.fixed_dictionaries(
        {"strategy": st.just("groups")},
        optional={"tenant": f(st.sampled_from(TENANTS)), "source": st.just("device_directory")},
    )
    good = st.one_of(st.just({"strategy": "none"}), static, id_range, custom, groups)
    if not mood.hostile:
        return good
    wrong = st.sampled_from(
        [
            {"strategy": "custom", "planner": "hash_buckets", "params": {"buckets": 100_000_000}},
            {"strategy": "custom", "planner": "hash_buckets", "params": {"buckets": "3"}},
            {"strategy": "custom", "planner": "hash_buckets", "params": {"buckets": 3, "x": 1}},
            {"strategy": "custom", "planner": "nope"},
            {"strategy": "static", "shards": []},
            {"strategy": "id_range", "shards": 10, "id_min": 5, "id_max": 10},
            {"strategy": "id_range", "shards": 2, "id_max": 10**40},
            {"strategy": "groups", "tenant": "Not A Tenant"},
            {"strategy": "sideways"},
            {"shards": 3},
        ]
    )
    return Mood.roll(mood.odds).flatmap(lambda n: wrong if n == ODD else good)


def alerts(mood: Mood) -> st.SearchStrategy[Any]:
    f = mood.field
    recurring = st.fixed_dictionaries(
        {"cron": f(st.sampled_from(CRONS)), "duration": f(st.sampled_from(RATES[:4]))},
        optional={"timezone": f(st.sampled_from(ZONES))},
    )
    period = instants().flatmap(
        lambda start: st.fixed_dictionaries(
            {
                "start": f(st.just(start)),
                "end": f(st.integers(1, 10**6).map(lambda s: start + timedelta(seconds=s))),
            }
        )
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "severity": f(st.sampled_from(["low", "medium", "high", "critical"])),
            "route": f(st.text(TEXT, max_size=20)),
            "threshold": st.fixed_dictionaries(
                {
                    "count": f(st.integers(1, 1000)),
                    "window_s": f(st.integers(1, 1440).map(lambda m: m * 60)),
                }
            ),
            "silence": f(st.lists(recurring | period, max_size=3)),
            "recovery": f(st.booleans()),
        },
    )


def rollout(mood: Mood) -> st.SearchStrategy[Any]:
    f = mood.field
    cap = st.sampled_from(["max_shards_per_minute", "max_devices_per_minute"])
    return st.tuples(cap, st.integers(1, 1000)).flatmap(
        lambda pair: st.fixed_dictionaries(
            {pair[0]: f(st.just(pair[1]))},
            optional={
                "ramp": st.fixed_dictionaries(
                    {
                        "base": f(st.integers(1, pair[1])),
                        "factor": f(st.floats(1.01, 10)),
                        "every_succeeded": f(st.integers(1, 100)),
                    }
                ),
                "scope": f(st.sampled_from(["instance", "tenant"])),
            },
        )
    )


def window(mood: Mood) -> st.SearchStrategy[Any]:
    f = mood.field
    return st.fixed_dictionaries(
        {"cron": f(st.sampled_from(CRONS)), "duration": f(st.sampled_from(["30m", "2h", "1d"]))},
        optional={
            "timezone": f(st.sampled_from(ZONES)),
            "on_close": f(st.sampled_from(["defer", "cancel"])),
        },
    )


def task(mood: Mood, task_id: str, earlier: list[str]) -> st.SearchStrategy[Any]:
    """One task-file entry: its required fields and any of the others."""
    f = mood.field
    required = {
        "id": f(st.just(task_id)),
        "handler": mood.either(st.just("noop"), st.sampled_from(["nope", "", "Noop"])),
        "trigger": trigger(mood, earlier),
    }
    optional = {
        "tenant": mood.either(st.sampled_from(TENANTS), st.sampled_from(BAD_TENANTS)),
        "description": f(st.text(TEXT, max_size=40)),
        "enabled": f(st.booleans()),
        "priority": f(st.sampled_from(["high", "normal", "low"])),
        "params": params(mood),
        "business_date": f(st.sampled_from(["previous_day", "same_day"])),
        "sharding": sharding(mood),
        "blocking": st.fixed_dictionaries(
            {},
            optional={
                "policy": f(st.sampled_from(["discard", "serial", "cover", "parallel"])),
                "max_queued": f(st.integers(0, 100)),
            },
        ),
        "misfire": st.fixed_dictionaries(
            {},
            optional={
                "policy": f(st.sampled_from(["skip", "fire_once", "catch_up"])),
                "grace_s": f(st.integers(0, 30 * 86_400)),
                "max_catch_up": f(st.integers(1, 5)),
                "on_resume": f(st.sampled_from(["apply", "skip"])),
            },
        ),
        "retry": st.fixed_dictionaries(
            {},
            optional={
                "max_attempts": f(st.integers(1, 100)),
                "backoff_s": f(st.integers(0, 43_200)),
            },
        ),
        "timeout_s": f(st.integers(1, 900)),
        "instance_timeout_s": f(st.integers(1, 30 * 86_400)),
        "reduce": mood.either(st.just("noop"), st.sampled_from(["nope", ""])),
        "alerts": alerts(mood),
        "retention": st.fixed_dictionaries({"days": f(st.integers(1, 3650))}),
        "rollout": rollout(mood),
        "abort": st.fixed_dictionaries(
            {"failure_percent": f(st.floats(0.01, 100))},
            optional={
                "min_executed": f(st.integers(1, 10**6)),
                "action": f(st.sampled_from(["cancel", "pause"])),
            },
        ),
        "window": window(mood),
        "exclude": st.fixed_dictionaries(
            {},
            optional={
                "dates": f(st.lists(dates(mood), max_size=3)),
                "calendars": f(st.lists(st.sampled_from(["holidays", "freeze"]), max_size=2)),
            },
        ),
        "jitter_s": f(st.integers(0, 86_400)),
        "shard_spread_s": f(st.integers(0, 900)),
        "pause_on_failure": f(st.booleans()),
        "max_runs": f(st.integers(1, 10**9)),
        "end_at": f(instants()),
    }
    entry = st.fixed_dictionaries(required, optional=optional).map(_one_firing_per_opening)
    if not mood.hostile:
        return entry
    return st.tuples(entry, Mood.roll(mood.odds * 4), st.data()).map(_mutated)


def _one_firing_per_opening(entry: dict[str, Any]) -> dict[str, Any]:
    """A task behind a window under the default misfire policy: under `skip` or `catch_up`
    every slot that waited for an opening fires at it (docs/design.md, "Window"), and a task
    every 5 minutes behind a window open each 29 February fires 100,000 instances a tick there,
    more than this test delivers (the lead's report names it)."""
    misfire = entry.get("misfire")
    if "window" in entry and isinstance(misfire, dict) and "policy" in misfire:
        return {**entry, "misfire": {k: v for k, v in misfire.items() if k != "policy"}}
    return entry


def _mutated(drawn: tuple[dict[str, Any], int, Any]) -> Any:
    """Now and then, an entry with a key given twice, an unknown key or a required key left
    out."""
    entry, n, data = drawn
    if n == ODD and entry:
        first = next(iter(entry))
        again = data.draw(st.one_of(hostile(), st.just(entry[first])))
        return Pairs([*entry.items(), (first, again)])
    if n == ODD + 1:
        return {**entry, data.draw(st.sampled_from(["timeout", "retries", "Handler"])): 1}
    if n == ODD + 2:
        gone = data.draw(st.sampled_from(["id", "handler", "trigger"]))
        return {k: v for k, v in entry.items() if k != gone}
    return entry


def calendar(mood: Mood) -> st.SearchStrategy[Any]:
    f = mood.field
    return st.fixed_dictionaries(
        {
            "name": f(st.sampled_from(["holidays", "freeze"])),
            "dates": f(st.lists(dates(mood), max_size=3)),
        },
        optional={"description": f(st.text(TEXT, max_size=20))},
    )


def tenant_part(mood: Mood) -> st.SearchStrategy[Any]:
    f = mood.field
    quotas = st.fixed_dictionaries(
        {},
        optional={
            "max_concurrent_shards": f(st.integers(1, 1000)),
            "max_instances_per_minute": f(st.integers(1, 100_000)),
            "max_tasks": f(st.integers(1, 5)),
        },
    )
    return st.fixed_dictionaries(
        {"name": f(st.sampled_from(TENANTS))},
        optional={"alerts": alerts(mood), "quotas": quotas},
    )


#: Half the files clean, one in eight lax, the others hostile, one value in 6, 12 or 24.
MOODS = [Mood(0), Mood(0), Mood(0), Mood(0), Mood(4, lax=True), Mood(6), Mood(12), Mood(24)]


@st.composite
def task_files(draw: st.DrawFn) -> Any:
    """A task file: one to three tasks (ids from a small pool, so `after` finds its parents or
    does not), maybe named calendars and tenants; a third of the files clean, the others with
    one in `odds` values hostile."""
    mood = draw(st.sampled_from(MOODS))
    ids = draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=not mood.hostile))
    data: dict[str, Any] = {
        "tasks": [draw(task(mood, task_id, ids[:n])) for n, task_id in enumerate(ids)]
    }
    unique = (lambda part: str(part.get("name"))) if not mood.hostile else None
    if draw(Mood.roll(3)) == 1:
        data["calendars"] = draw(st.lists(calendar(mood), max_size=2, unique_by=unique))
    if draw(Mood.roll(4)) == 1:
        data["tenants"] = draw(st.lists(tenant_part(mood), max_size=2, unique_by=unique))
    if mood.hostile and draw(Mood.roll(16)) == ODD:
        return draw(st.sampled_from([[], "tasks", {"tasks": None}, {"task": data["tasks"]}]))
    return data


# -- the two ways in, each on its own store -----------------------------------------------------


class _Services:
    """The services the one API app answers on (each example's own)."""

    current: Wiring

    def __call__(self) -> Wiring:
        return self.current


_SERVICES = _Services()
_APP = create_app(_SERVICES)


@dataclass
class Side:
    """An empty in-memory store with a manual clock (the testing kit's, which delivers shard
    messages to the worker's code path), the CLI and the API on it."""

    harness: TaskHarness = field(default_factory=TaskHarness)

    @property
    def services(self) -> Wiring:
        return self.harness.services

    def cli(self, *args: str) -> Result:
        result = CliRunner().invoke(
            cli,
            list(args),
            obj={"services": self.services, "actor": "local:t"},
            env={"COLUMNS": "200"},
        )
        # Exit 0, 1 (a refusal ClickException names) or 2 (a file's problems): never a crash.
        crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
        assert not crashed, (args, result.output, result.exception)
        assert "Traceback" not in result.output, result.output
        return result

    def api(self, method: str, path: str, body: str | None = None, **query: str) -> Answer:
        _SERVICES.current = self.services
        headers = {"Content-Type": "application/json"} if body is not None else None
        answer = Client(_APP, self.services).call(
            method, path, body, query=query or None, headers=headers
        )
        assert answer.status < 500, (method, path, answer.body)
        return answer

    def snapshot(self) -> Any:
        """Everything the store holds, and what was sent."""
        store = vars(self.services.tasks)
        held = {k: copy.deepcopy(v) for k, v in store.items() if k != "_lock" and not callable(v)}
        queue = cast("MemoryShardQueue", self.services.queue)
        alerts = cast("MemoryAlertSink", self.services.alerts)
        return held, len(queue.sent), len(alerts.published)

    def definitions(self) -> str:
        stored = self.services.tasks.list_tasks()
        return json.dumps([t.definition.model_dump(mode="json") for t in stored], sort_keys=True)


def apply_cli(side: Side, text: str) -> bool:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tasks.yaml"
        path.write_text(text, encoding="utf-8")
        result = side.cli("tasks", "apply", str(path))
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    return result.exit_code == 0


def apply_api(side: Side, text: str) -> Answer:
    answer = side.api("POST", "/tasks", text)
    assert answer.status == 200 or 400 <= answer.status < 500, answer.body
    return answer


def deletion_order(side: Side) -> list[str]:
    """The stored tasks, each after every task whose `after` names it (a parent named by a task
    still stored is refused deletion)."""
    stored = {t.task_id: t.definition for t in side.services.tasks.list_tasks()}
    order: list[str] = []
    while stored:
        named = {p for d in stored.values() for p in getattr(d.trigger, "after", [])}
        free = sorted(set(stored) - named)
        assert free, f"tasks naming each other in a cycle were accepted: {sorted(stored)}"
        for task_id in free:
            order.append(task_id)
            del stored[task_id]
    return order


def fire_the_first(side: Side) -> None:
    """The clock moved to the earliest next fire of the file's tasks, the dispatcher's tick at
    that minute (and every message it sends delivered): each task due then is handled, its next
    fire moved past the slot; every instance it made reads back."""
    due = [t for t in side.services.tasks.list_tasks() if t.fires and t.next_fire is not None]
    if not due:
        return
    slot = min(cast("datetime", t.next_fire) for t in due)
    clock = side.harness.clock
    if slot - timedelta(minutes=1) > clock.now():
        clock.set(slot - timedelta(minutes=1))
    side.harness.advance(slot + timedelta(minutes=1) - clock.now())
    for before in due:
        if before.next_fire != slot:
            continue
        after = side.services.tasks.get_task(before.task_id)
        assert after is not None
        assert after.next_fire is None or after.next_fire > slot, (before, after)
        listed = side.api("GET", "/instances", task_id=before.task_id)
        assert listed.status == 200, listed.body
        event(f"fired: {len(listed.body)} instance(s)")
        for instance in listed.body:
            shown = side.api("GET", f"/instances/{instance['instance_id']}")
            assert shown.status == 200, shown.body
            assert side.api("GET", f"/instances/{instance['instance_id']}/shards").status == 200


def list_show_delete_cli(side: Side, ids: list[str]) -> None:
    listed = side.cli("tasks", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert sorted(v["id"] for v in json.loads(listed.output)) == sorted(ids)
    for task_id in ids:
        shown = side.cli("tasks", "show", task_id, "--json")
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.output)["id"] == task_id
    for task_id in deletion_order(side):
        deleted = side.cli("tasks", "delete", task_id, "--force")
        assert deleted.exit_code == 0, deleted.output
    assert side.services.tasks.list_tasks() == []


def list_show_fire_delete_api(side: Side, ids: list[str]) -> None:
    listed = side.api("GET", "/tasks")
    assert listed.status == 200, listed.body
    assert sorted(v["id"] for v in listed.body) == sorted(ids)
    for task_id in ids:
        shown = side.api("GET", f"/tasks/{task_id}")
        assert shown.status == 200, shown.body
    fire_the_first(side)
    for task_id in deletion_order(side):
        deleted = side.api("DELETE", f"/tasks/{task_id}", force="true")
        assert deleted.status == 200, deleted.body
    assert side.api("GET", "/tasks").body == []


@settings(
    max_examples=100,
    deadline=None,
    # A file is a few dozen draws, some of them long strings: generating one is most of what
    # an example costs, and a large one is the point.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(task_file=task_files())
def test_the_cli_and_the_api_agree_and_what_they_accept_works(task_file: Any) -> None:
    yaml_text, json_text = to_yaml(task_file), to_json(task_file)
    by_cli, by_api = Side(), Side()
    empty = by_cli.snapshot()
    assert by_api.snapshot() == empty

    accepted_by_cli = apply_cli(by_cli, yaml_text)
    answer = apply_api(by_api, json_text)
    accepted_by_api = answer.status == 200
    # (--hypothesis-show-statistics: how many files each way took)
    event(f"accepted by the CLI: {accepted_by_cli}, by the API: {accepted_by_api}")

    if accepted_by_cli and not accepted_by_api:
        # The one difference: a JSON body uses JSON's own types; such a body is refused with
        # exactly the problems of strict validation, which a YAML file is spared.
        strict = strict_task_file_problems(json_text, json.loads(json_text))
        assert strict, answer.body
        assert answer.problems == [p.model_dump() for p in strict], answer.body
        assert by_api.snapshot() == empty
        return
    assert accepted_by_cli == accepted_by_api, (accepted_by_cli, answer.body)
    if not accepted_by_cli:
        assert by_cli.snapshot() == empty
        assert by_api.snapshot() == empty
        return
    assert by_cli.snapshot() != empty  # (what the refusals' check would have seen)
    assert by_cli.definitions() == by_api.definitions()
    ids = [t.task_id for t in by_api.services.tasks.list_tasks()]
    list_show_delete_cli(by_cli, ids)
    list_show_fire_delete_api(by_api, ids)


# -- what a refusal costs -----------------------------------------------------------------------

#: The most memory (Python's allocations, traced) refusing any of the hostile files below may
#: take: docs/limits.md states it. Measured: 56 MiB for the file of 150,000 values (100,000
#: YAML nodes composed before the count refuses it), under 12 MiB for every other.
REFUSAL_PEAK_BYTES = 96 * 1024**2

_ENTRY = "  - {{id: t{n:05d}, handler: noop, trigger: {{rate: 1h}}}}\n"
_HEADER = "tasks:\n  - id: t\n    handler: noop\n    trigger: {rate: 1h}\n"
_TASK: dict[str, Any] = {"id": "t", "handler": "noop", "trigger": {"rate": "1h"}}


def _alias_bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 10)]
    return _HEADER + "    params:\n" + "".join(f"      {line}\n" for line in lines)


def _tasks_json(count: int) -> str:
    return json.dumps({"tasks": [{**_TASK, "id": f"t{n:05d}"} for n in range(count)]})


_BUCKETS = {"strategy": "custom", "planner": "hash_buckets", "params": {"buckets": 100_000_000}}

#: Each hostile file, as `tasks apply` reads it (YAML) and as `POST /tasks` does (JSON: YAML's
#: aliases have no JSON).
HOSTILE_FILES: dict[str, tuple[Callable[[], str], Callable[[], str] | None]] = {
    "alias-bomb": (_alias_bomb, None),
    "100M-hash-buckets": (
        lambda: _HEADER + f"    sharding: {json.dumps(_BUCKETS)}\n",
        lambda: json.dumps({"tasks": [{**_TASK, "sharding": _BUCKETS}]}),
    ),
    "deep-nesting": (
        lambda: _HEADER + "    params: {a: " + "[" * 10_000 + "]" * 10_000 + "}\n",
        lambda: json.dumps({"tasks": [{**_TASK, "params": {"a": "here"}}]}).replace(
            '"here"', "[" * 10_000 + "]" * 10_000
        ),
    ),
    "89484-tasks-in-5-MB": (
        lambda: "tasks:\n" + "".join(_ENTRY.format(n=n) for n in range(89_484)),
        lambda: _tasks_json(89_484),
    ),
    "18000-tasks-in-1-MB": (
        lambda: "tasks:\n" + "".join(_ENTRY.format(n=n) for n in range(18_000)),
        lambda: _tasks_json(13_000),
    ),
    "501-tasks": (
        lambda: "tasks:\n" + "".join(_ENTRY.format(n=n) for n in range(501)),
        lambda: _tasks_json(501),
    ),
    "150000-values-in-450-KB": (
        lambda: _HEADER + "    params: {a: [" + "1, " * 150_000 + "]}\n",
        lambda: json.dumps({"tasks": [{**_TASK, "params": {"a": [1] * 150_000}}]}),
    ),
}


def _peak(work: Callable[[], Any]) -> tuple[Any, int]:
    """What `work` returns, and the most memory it held at once (traced)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        done = work()
        return done, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


#: Every hostile file by each way in (YAML's aliases have no JSON form: the CLI's only).
WAYS = [
    (case, way)
    for case, (_, json_body) in HOSTILE_FILES.items()
    for way in ("cli", "api")
    if way == "cli" or json_body is not None
]


@pytest.mark.parametrize(("case", "way"), WAYS)
def test_a_hostile_file_is_refused_within_the_stated_memory_writing_nothing(
    case: str, way: str
) -> None:
    yaml_file, json_body = HOSTILE_FILES[case]
    side = Side()
    empty = side.snapshot()
    if way == "cli":
        text = yaml_file()
        accepted, peak = _peak(lambda: apply_cli(side, text))
    else:
        assert json_body is not None
        body = json_body()
        answer, peak = _peak(lambda: apply_api(side, body))
        accepted = answer.status == 200
    assert not accepted
    assert side.snapshot() == empty
    assert peak < REFUSAL_PEAK_BYTES, f"{peak / 1024**2:.1f} MiB"
