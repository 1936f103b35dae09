"""Named calendars and the fields the tick reads for fire instants, on the fake and on
DynamoDB: calendar items stored and listed, a task's resolved calendar dates set without
touching its clock, its run count moved only by the clock's advance and read by the tick."""

from __future__ import annotations

from datetime import date, timedelta

from iotsched.core.calendars import Calendar
from iotsched.core.task_record import TaskRecord
from iotsched.ports.tasks import TaskAdvance
from tests.contract.conftest import Store
from tests.support import T0, task, task_record

M = timedelta(minutes=1)
H = timedelta(hours=1)
XMAS = [date(2026, 12, 25), date(2026, 12, 26)]


def named(definition_id: str) -> TaskRecord:
    definition = task(definition_id, exclude={"calendars": ["holidays"]})
    return task_record(definition, next_fire=T0).model_copy(
        update={"calendars": {"holidays": XMAS}}
    )


def test_calendars_are_stored_listed_and_replaced(store: Store) -> None:
    assert store.get_calendar("holidays") is None and store.list_calendars() == []
    holidays = Calendar(name="holidays", description="public holidays", dates=XMAS)
    freeze = Calendar(name="freeze", dates=[date(2026, 12, 20)])
    store.put_calendars([holidays, freeze], {})
    assert store.get_calendar("holidays") == holidays
    assert [c.name for c in store.list_calendars()] == ["freeze", "holidays"]
    replaced = holidays.model_copy(update={"dates": [date(2027, 1, 1)]})
    store.put_calendars([replaced], {})
    assert store.get_calendar("holidays") == replaced
    assert len(store.list_calendars()) == 2


def test_resolved_dates_are_set_without_touching_the_clock(store: Store) -> None:
    store.put_tasks([named("a"), named("b")])
    assert store.advance_task("a", expected_next_fire=T0, next_fire=T0 + H, last_slot=T0, runs=1)
    new_year = Calendar(name="holidays", dates=[date(2027, 1, 1)])
    # "gone" was never stored: it is left out, and the rest is written.
    store.put_calendars(
        [new_year], {"a": {"holidays": [date(2027, 1, 1)]}, "gone": {"holidays": []}}
    )
    a = store.get_task("a")
    assert a is not None
    assert a.calendars == {"holidays": [date(2027, 1, 1)]}
    assert (a.next_fire, a.last_slot, a.runs) == (T0 + H, T0, 1)
    b = store.get_task("b")
    assert b is not None and b.calendars == {"holidays": XMAS}
    assert store.get_task("gone") is None
    assert store.get_calendar("holidays") == new_year
    store.put_calendars([], {"b": {}})
    b = store.get_task("b")
    assert b is not None and b.calendars == {}


def test_the_run_count_moves_with_the_clock_and_survives_a_rewrite(store: Store) -> None:
    store.put_tasks([named("a"), named("b")])
    assert store.advance_task("a", expected_next_fire=T0, next_fire=T0 + H, last_slot=T0, runs=2)
    # A stale advance adds nothing.
    assert not store.advance_task(
        "a", expected_next_fire=T0, next_fire=T0 + 2 * H, last_slot=T0, runs=5
    )
    assert store.advance_tasks(
        [
            TaskAdvance(
                "a", expected_next_fire=T0 + H, next_fire=T0 + 2 * H, last_slot=T0 + H, runs=1
            ),
            TaskAdvance("b", expected_next_fire=T0, next_fire=T0 + H, last_slot=T0),
        ]
    ) == [True, True]
    a, b = store.get_task("a"), store.get_task("b")
    assert a is not None and b is not None and (a.runs, b.runs) == (3, 0)
    # A re-apply rewrites the definition and keeps the count (it is the dispatcher's).
    store.put_tasks([named("a").model_copy(update={"version": 2, "next_fire": T0 + 2 * H})])
    a = store.get_task("a")
    assert a is not None and (a.version, a.runs) == (2, 3)
    # The tick reads the count and the calendars from the due index.
    due = {t.task_id: t for t in store.due_tasks(T0 + 2 * H)}
    assert (due["a"].runs, due["a"].calendars) == (3, {"holidays": XMAS})
