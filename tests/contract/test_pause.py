"""Pause and resume, on the fake and on DynamoDB: a paused task is never due."""

from __future__ import annotations

from datetime import timedelta

from iotsched.services.definitions.control import (
    pause_task,
    resume_task,
)
from tests.contract.conftest import Store
from tests.support import T0, task, task_record

H = timedelta(hours=1)


def test_a_paused_task_is_not_due_and_a_resumed_one_is(store: Store) -> None:
    store.put_tasks([task_record(task("p"), next_fire=T0, last_slot=T0 - H)])
    assert [t.task_id for t in store.due_tasks(T0)] == ["p"]
    assert store.set_paused("p", paused=True)
    assert store.due_tasks(T0 + 5 * H) == []
    paused = store.get_task("p")
    assert paused is not None and paused.paused and paused.next_fire == T0
    assert store.set_paused("p", paused=False, restart=(T0, T0 - H))
    assert [t.task_id for t in store.due_tasks(T0 + 5 * H)] == ["p"]
    assert not store.set_paused("missing", paused=True)


def test_re_applying_a_paused_task_keeps_it_paused(store: Store) -> None:
    from iotsched.services.definitions.apply import apply_tasks

    apply_tasks([task("p")], store, now=T0)
    record = store.get_task("p")
    assert record is not None
    store.set_paused("p", paused=True)
    apply_tasks([task("p", description="changed")], store, now=T0 + H)
    again = store.get_task("p")
    assert again is not None and again.paused and again.version == 2
    assert store.due_tasks(T0 + 10 * H) == []


def test_resume_applies_or_skips_the_missed_slots(store: Store) -> None:
    from dataclasses import replace

    from iotsched import bootstrap
    from iotsched.clock import ManualClock

    clock = ManualClock(T0 + 10 * H + timedelta(minutes=7))
    services = replace(bootstrap.build_memory(clock=clock), tasks=store, instances=store)
    store.put_tasks(
        [
            task_record(task("apply"), next_fire=T0 + H, last_slot=T0),
            task_record(
                task("skip", misfire={"on_resume": "skip"}), next_fire=T0 + H, last_slot=T0
            ),
        ]
    )
    for task_id in ("apply", "skip"):
        pause_task(task_id, services)
    applied = resume_task("apply", services)
    skipped = resume_task("skip", services)
    # apply: the clock stays where the pause left it; the next tick sees the missed slots
    assert (applied.paused, applied.next_fire, applied.last_slot) == (False, T0 + H, T0)
    # skip: the clock restarts at the first slot after now
    assert (skipped.paused, skipped.next_fire, skipped.last_slot) == (False, T0 + 11 * H, None)
    assert resume_task("apply", services) == store.get_task("apply")  # resuming twice: no-op


def test_a_pause_carries_its_note_a_re_apply_keeps_it_and_a_resume_clears_it(
    store: Store,
) -> None:
    from iotsched.services.definitions.apply import apply_tasks

    apply_tasks([task("p")], store, now=T0)
    record = store.get_task("p")
    assert record is not None and record.pause_note is None
    note = "firmware 4.2 recalled [ops-113]: wait for 4.2.1"
    assert store.set_paused("p", paused=True, note=note)
    paused = store.get_task("p")
    assert paused is not None and paused.paused and paused.pause_note == note
    assert [t.pause_note for t in store.list_tasks()] == [note]
    apply_tasks([task("p", description="changed")], store, now=T0 + H)
    again = store.get_task("p")
    assert again is not None and again.paused and again.pause_note == note
    # a pause without a note replaces the note (an operator's new pause says nothing more)
    store.set_paused("p", paused=True)
    assert (store.get_task("p") or again).pause_note is None
    store.set_paused("p", paused=True, note=note)
    assert store.set_paused("p", paused=False, restart=(again.next_fire, None))
    resumed = store.get_task("p")
    assert resumed is not None and not resumed.paused and resumed.pause_note is None
    assert [t.task_id for t in store.due_tasks(T0 + 10 * H)] == ["p"]


def test_a_pause_keeps_the_clock_a_dispatcher_moved_after_the_pause_s_read(store: Store) -> None:
    store.put_tasks([task_record(task("p"), next_fire=T0, last_slot=T0 - H)])
    read = store.get_task("p")  # what the pause read
    assert read is not None
    # a dispatcher that found the task due before the pause claims T0 and moves the clock on
    assert store.advance_task("p", expected_next_fire=T0, next_fire=T0 + H, last_slot=T0)

    assert store.set_paused("p", paused=True, note="inspecting")

    paused = store.get_task("p")
    assert paused is not None
    assert (paused.paused, paused.next_fire, paused.last_slot) == (True, T0 + H, T0)
    assert store.due_tasks(T0 + 5 * H) == []
    # resumed as read after the move: due again from the clock the dispatcher left
    assert store.set_paused("p", paused=False, restart=(paused.next_fire, paused.last_slot))
    assert [t.next_fire for t in store.due_tasks(T0 + 5 * H)] == [T0 + H]


def test_a_task_re_applied_while_paused_is_due_again_once_resumed(store: Store) -> None:
    from iotsched.services.definitions.apply import apply_tasks

    apply_tasks([task("p")], store, now=T0)
    assert store.set_paused("p", paused=True)
    apply_tasks([task("p", description="changed")], store, now=T0 + H)  # stored paused
    again = store.get_task("p")
    assert again is not None and again.paused and again.next_fire is not None
    assert store.set_paused("p", paused=False, restart=(again.next_fire, again.last_slot))
    assert [t.task_id for t in store.due_tasks(again.next_fire)] == ["p"]
