"""The ledger records whose __init__ is written out by hand behave as the generated one would."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.model import (
    ExpirePending,
    PostPending,
    Transfer,
    TransferKind,
    TransferRequest,
    TransferResult,
    TransferState,
    VoidPending,
)

HAND_WRITTEN = (Transfer, TransferResult, TransferRequest, PostPending, VoidPending)


@pytest.mark.parametrize("record", HAND_WRITTEN, ids=lambda record: record.__name__)
def test_the_constructor_takes_the_fields_in_order_with_their_defaults(record: type) -> None:
    fields = dataclasses.fields(record)
    parameters = list(inspect.signature(record.__init__).parameters.values())[1:]
    assert [parameter.name for parameter in parameters] == [field.name for field in fields]
    for parameter, field in zip(parameters, fields, strict=True):
        assert parameter.default == (inspect.Parameter.empty if field.default is dataclasses.MISSING
                                     else field.default), field.name
        assert (parameter.kind is inspect.Parameter.KEYWORD_ONLY) == field.kw_only, field.name


texts = st.text(min_size=1, max_size=8)
kinds = st.sampled_from(TransferKind)


@given(texts, texts, texts, st.integers(1, 10**18), kinds, st.none() | texts, st.booleans())
def test_a_request_holds_what_it_was_given_and_stays_frozen(
    transfer_id: str, debit: str, credit: str, amount: int, kind: TransferKind, job_id: str | None, pending: bool,
) -> None:
    request = TransferRequest(id=transfer_id, debit_account=debit, credit_account=credit, amount=amount, kind=kind,
                              job_id=job_id, pending=pending)
    assert dataclasses.asdict(request) == dict(id=transfer_id, debit_account=debit, credit_account=credit,
                                               amount=amount, kind=kind, job_id=job_id, policy_version=None,
                                               pending=pending, timeout_s=0)
    assert request == TransferRequest(id=transfer_id, debit_account=debit, credit_account=credit, amount=amount,
                                      kind=kind, job_id=job_id, pending=pending)
    assert hash(request) == hash(dataclasses.replace(request))
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.amount = amount + 1  # type: ignore[misc]


def test_resolutions_default_like_their_dataclass_fields() -> None:
    assert dataclasses.asdict(PostPending(id="p", pending_id="r")) == dict(
        id="p", pending_id="r", amount=None, kind=None, policy_version=None, debit_account=None,
        credit_account=None)
    assert dataclasses.asdict(VoidPending(id="v", pending_id="r")) == dict(
        id="v", pending_id="r", kind=None, debit_account=None, credit_account=None)
    assert VoidPending(id="v", pending_id="r") != ExpirePending(id="v", pending_id="r")
    with pytest.raises(TypeError):
        PostPending("p", "r")  # type: ignore[misc]  # keyword-only, as the dataclass declares


def test_a_transfer_is_frozen() -> None:
    transfer = Transfer(1, "t", "a", "b", 5, TransferState.POSTED, None, 0, None, TransferKind.DEPOSIT, None, 1,
                        "0" * 64, "1" * 64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        transfer.amount = 6  # type: ignore[misc]
