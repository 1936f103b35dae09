"""The order a taker reads a tenant's slot groups in (`core.quotas.slot_groups`): every slot
below the cap once, its home group first, the rest wrapping round."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from iotsched.core.quotas import slot_groups, slot_order


@given(
    holder=st.text(min_size=1, max_size=40),
    cap=st.integers(min_value=1, max_value=1000),
    size=st.integers(min_value=1, max_value=50),
)
def test_groups_cover_every_slot_once_from_the_holders_own(
    holder: str, cap: int, size: int
) -> None:
    groups = slot_groups(holder, cap, size)
    assert [s for g in sorted(groups, key=lambda g: g.start) for s in g] == list(range(cap))
    assert all(len(g) == size for g in groups if g.stop < cap)
    # The home group holds the slot the holder's own order starts at; the rest follow it.
    assert slot_order(holder, list(range(cap)), cap)[0] in groups[0]
    starts = [g.start // size for g in groups]
    assert starts == [(starts[0] + j) % len(groups) for j in range(len(groups))]


def test_no_cap_has_no_groups() -> None:
    assert slot_groups("h", 0, 25) == []
