"""The cancellation classifier (`iotsched.adapters.dynamodb.transact_outcomes`), property by property."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iotsched.adapters.dynamodb import transact_outcomes as transact
from iotsched.adapters.dynamodb.transact_outcomes import (
    Kind,
    Outcome,
    classify,
    retrying,
)
from iotsched.ports.store_errors import StoreContendedError

RETRYABLE = sorted(transact.RETRYABLE_REASONS)
INVALID = ["ValidationError", "ItemCollectionSizeLimitExceeded", "AnUnknownReason"]
CODES = ["None", "ConditionalCheckFailed", *RETRYABLE, *INVALID]


def cancellation(codes: list[str], *, as_none: bool = False) -> dict[str, Any]:
    """A TransactionCanceledException response; "None" entries as DynamoDB sends them (a
    reason without a code, or with the code "None")."""
    reasons = [{} if (c == "None" and as_none) else {"Code": c} for c in codes]
    return {
        "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
        "CancellationReasons": reasons,
    }


codes_lists = st.lists(st.sampled_from(CODES), min_size=1, max_size=100)


def test_no_error_is_committed() -> None:
    assert classify(None, 3) == Outcome(Kind.COMMITTED)


@given(codes_lists, st.booleans())
def test_a_failed_condition_is_named_by_index_whatever_else_failed(
    codes: list[str], as_none: bool
) -> None:
    outcome = classify(cancellation(codes, as_none=as_none), len(codes))
    failed = tuple(n for n, c in enumerate(codes) if c == "ConditionalCheckFailed")
    assert outcome.failed == failed
    assert outcome.reasons == tuple(codes)
    if failed:
        assert outcome.kind is Kind.CONDITION_FAILED


@given(codes_lists)
def test_without_a_failed_condition_invalid_wins_then_retry(codes: list[str]) -> None:
    codes = [c for c in codes if c != "ConditionalCheckFailed"] or ["None"]
    outcome = classify(cancellation(codes), len(codes))
    if any(c in INVALID for c in codes):
        assert outcome.kind is Kind.INVALID
    elif any(c in RETRYABLE for c in codes):
        assert outcome.kind is Kind.RETRY  # the bystanders ("None") go again with them
    else:  # every action "None": nothing says which failed
        assert outcome.kind is Kind.INVALID


@given(codes_lists, st.integers(min_value=-3, max_value=3).filter(lambda d: d != 0))
def test_reasons_that_do_not_match_the_actions_cannot_be_read(codes: list[str], d: int) -> None:
    outcome = classify(cancellation(codes), max(0, len(codes) + d))
    assert outcome.kind is Kind.INVALID


@given(st.sampled_from([*transact.RETRYABLE_ERRORS, "ValidationException", "AccessDenied", ""]))
def test_a_request_level_error_is_retry_only_when_it_says_not_now(code: str) -> None:
    outcome = classify({"Error": {"Code": code, "Message": "m"}}, 2)
    assert outcome.kind is (Kind.RETRY if code in transact.RETRYABLE_ERRORS else Kind.INVALID)
    assert outcome.reasons == ()


@given(
    st.integers(min_value=0, max_value=12),
    st.sampled_from([Kind.COMMITTED, Kind.CONDITION_FAILED, Kind.INVALID]),
    st.integers(min_value=1, max_value=8),
)
def test_retrying_sends_again_while_retry_then_stops_or_raises(
    retries: int, final: Kind, rounds: int
) -> None:
    answers = [Outcome(Kind.RETRY, error="x")] * retries + [Outcome(final, error="y")]
    sent: list[Outcome] = []
    pauses: list[float] = []

    def send() -> Outcome:
        sent.append(answers[len(sent)])
        return sent[-1]

    if retries < rounds:
        assert retrying(send, what="w", rounds=rounds, sleep=pauses.append).kind is final
        assert len(sent) == retries + 1
    else:
        with pytest.raises(StoreContendedError, match=f"w: not written after {rounds} tries"):
            retrying(send, what="w", rounds=rounds, sleep=pauses.append)
        assert len(sent) == rounds
    assert len(pauses) == len(sent) - 1  # no pause after the last send
    assert all(0 < p <= transact.BACKOFF_CAP_S for p in pauses)


@given(st.integers(min_value=0, max_value=40), st.floats(min_value=0.01, max_value=5))
def test_backoff_is_jittered_doubling_and_capped(round_: int, cap: float) -> None:
    ceiling = min(cap, transact.BACKOFF_CAP_S, transact.BACKOFF_BASE_S * 2.0**round_)
    assert ceiling / 2 <= transact.backoff_s(round_, cap_s=cap) <= ceiling


def test_a_failing_action_s_own_message_is_kept_for_the_error() -> None:
    # DynamoDB names the cause on the failing action only; the request's message lists codes.
    response = {
        "Error": {
            "Code": "TransactionCanceledException",
            "Message": "Transaction cancelled, please refer cancellation reasons for specific "
            "reasons [None, ValidationError]",
        },
        "CancellationReasons": [
            {"Code": "None"},
            {
                "Code": "ValidationError",
                "Message": "Item size has exceeded the maximum allowed size",
            },
        ],
    }
    outcome = classify(response, 2)
    assert outcome.kind is Kind.INVALID
    assert "action 1: Item size has exceeded the maximum allowed size" in outcome.describe()
