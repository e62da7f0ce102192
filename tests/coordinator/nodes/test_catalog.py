"""The model catalog cannot be poisoned (issue 25) and binds a model id to one set of weights
(issue 32): insane specs are refused, and a node disagreeing with the bound spec is refused
with the fields that differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.config import CoordinatorConfig
from coordinator.errors import InvalidRequest, WeightsMismatch
from coordinator.jobs.submission import Submission
from coordinator.nodes.catalog import spec_differences, spec_problems
from coordinator.service import CoordinatorService
from coordinator.storage import catalog_rows
from coordinator.storage.database import Database, upgrade_schema
from node_agent.hardware.profiles import simulated_profile
from node_agent.identity import load_or_create_identity
from tests.coordinator.verification.test_outcomes import MODEL, FakeClock
from tests.node_registration import register_node

MINI = simulated_profile("m4-pro-64")


@pytest.fixture
def service(database_url: str) -> Iterator[CoordinatorService]:
    upgrade_schema(database_url)
    db = Database(database_url)
    yield CoordinatorService(db, FakeClock(), CoordinatorConfig(database_url=database_url))  # type: ignore[arg-type]
    db.dispose()


def test_a_sane_spec_has_no_problems() -> None:
    assert spec_problems(MODEL) == []


@pytest.mark.parametrize("field, value, problem", [
    ("parameter_count", -1, "parameter_count -1 must be positive"),
    ("parameter_count", 10**18, "at most 8 per weight byte"),
    ("num_layers", 100_000, "num_layers must be 1 to 1024"),
    ("num_attention_heads", 4, "num_kv_heads <= num_attention_heads"),
    ("kv_bytes_per_element", 3, "kv_bytes_per_element must be one of"),
    ("vocab_size", 0, "vocab_size must be 1 to"),
    ("weights_digest", "not-a-digest", "weights_digest must be the sha256"),
    ("max_context_tokens", 2**30, "max_context_tokens must be 1 to"),
])
def test_insane_specs_are_named(field: str, value: object, problem: str) -> None:
    spec = dataclasses.replace(MODEL, num_kv_heads=8, **{field: value})
    assert any(problem in p for p in spec_problems(spec)), spec_problems(spec)


@given(st.integers(-(2**63), 2**63 - 1))
def test_any_parameter_count_is_judged_without_error(count: int) -> None:
    problems = spec_problems(dataclasses.replace(MODEL, parameter_count=count))
    assert (problems == []) == (MODEL.weights_bytes // 8 <= count <= MODEL.weights_bytes * 8)


def test_the_poisoned_spec_is_refused_and_submits_keep_working(service: CoordinatorService,
                                                               tmp_path: Path) -> None:
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    poisoned = dataclasses.replace(MODEL, parameter_count=-1)
    with pytest.raises(InvalidRequest, match=r"model 'small' refused: parameter_count -1 must be positive"):
        register_node(service, mallory, MINI, (poisoned,), "mallory")
    alice = load_or_create_identity(tmp_path / "alice.pem")
    register_node(service, alice, MINI, (MODEL,), "alice")
    job = service.jobs.submit(Submission(consumer_id="c", model_id="small", prompt="Hello", max_tokens=8,
                                         temperature=0.0, top_p=1.0, seed=0, request_id="",
                                         min_decode_tokens_per_s=0.0)).job
    assert job.node_ids == (alice.node_id,)


def test_a_node_declaring_other_weights_under_a_bound_id_is_refused(service: CoordinatorService,
                                                                   tmp_path: Path) -> None:
    alice = load_or_create_identity(tmp_path / "alice.pem")
    register_node(service, alice, MINI, (MODEL,), "alice")
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    other = dataclasses.replace(MODEL, weights_digest="ee" * 32, weights_bytes=MODEL.weights_bytes // 4)
    with pytest.raises(WeightsMismatch) as refused:
        register_node(service, mallory, MINI, (other,), "mallory")
    message = str(refused.value)
    assert f"bound by node {alice.node_id}, the first to serve it" in message
    assert f"weights_digest {'ee' * 32!r}" in message and "weights_bytes" in message
    register_node(service, mallory, MINI, (MODEL,), "mallory")  # the bound weights are welcome
    with service.db.transaction() as session:
        entry = catalog_rows.entry_for(session, MODEL.model_id)
    assert entry is not None and entry.spec == MODEL and entry.bound_by == alice.node_id


def test_a_pinned_model_is_not_set_by_whoever_registers_first(service: CoordinatorService,
                                                             tmp_path: Path) -> None:
    service.nodes.pin_models((MODEL,), "coordinator-verifier")
    mallory = load_or_create_identity(tmp_path / "mallory.pem")
    wrong = dataclasses.replace(MODEL, num_layers=MODEL.num_layers + 1)
    with pytest.raises(WeightsMismatch, match=r"pinned by the coordinator.*num_layers 9 \(bound: 8\)"):
        register_node(service, mallory, MINI, (wrong,), "mallory")


def test_differences_name_each_field() -> None:
    changed = dataclasses.replace(MODEL, head_dim=128, vocab_size=7)
    assert spec_differences(MODEL, changed) == ["head_dim 128 (bound: 64)", f"vocab_size 7 (bound: {MODEL.vocab_size})"]
