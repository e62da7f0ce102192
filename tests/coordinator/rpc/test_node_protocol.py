"""The node side of the protocol against a real coordinator on loopback.

The test plays the nodes with the agent's own gRPC client, so it can send
what an honest agent never would: results for jobs it does not hold, receipts
signed with the wrong key, duplicates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.hardware import ChipTier, HardwareReport
from contracts.ids import JobId, OperatorId
from contracts.models import ModelSpec
from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
from contracts.tls import CoordinatorTrust
from coordinator.config import CoordinatorConfig
from coordinator.verification.peers import PeerCheckPolicy
from coordinator.server import RunningCoordinator, start
from coordinator.verification.economics import StakePolicy
from coordinator.verification.policy import TrustPolicy
from ledger.book import balance
from ledger.jobs import operator_account_id
from mlxnet.consumer import JobClient
from node_agent.coordinator_client import CallRejected, CoordinatorClient
from node_agent.identity import Identity, load_or_create_identity
from protos.mlxnet.v1 import job_pb2
from tests.proof_helpers import well_formed_commitment
from tests.node_registration import operator_key_for

PLAINTEXT = CoordinatorTrust(insecure=True)  # the coordinator here serves plaintext on loopback

MODEL = ModelSpec(model_id="fake/model", weights_bytes=10_000_000, parameter_count=2_500_000,
                  num_layers=4, num_attention_heads=4, num_kv_heads=4, head_dim=64,
                  max_context_tokens=2048, weights_digest="ab" * 32, vocab_size=32_000)
HARDWARE = HardwareReport(chip="Apple M4 Pro", chip_family="M4", chip_tier=ChipTier.PRO,
                          memory_bytes=64 << 30, gpu_working_set_bytes=48 << 30, gpu_cores=20,
                          memory_bandwidth_gb_s=273.0, os_name="macOS (simulated)", simulated=True)
TOKENS = (11, 12, 13)


@pytest.fixture
def coordinator(database_url: str) -> Iterator[RunningCoordinator]:
    # No verifier runs here, no peer checks (the door is under test, not the replay), and the
    # check window closes at once, so held credits post as soon as release_due_credits runs
    # (the longer hold of a model nobody can check too).
    trust = TrustPolicy(check_window_s=0, stake=StakePolicy(unverifiable_hold_s=0))
    running = start(CoordinatorConfig(database_url=database_url, stream_poll_interval_s=0.2,
                                      allow_anonymous=True, trust=trust,
                                      peer_checks=PeerCheckPolicy(enabled=False)))
    try:
        yield running
    finally:
        running.stop(grace_s=0)


def _node(tmp_path: Path, name: str, coordinator: RunningCoordinator,
          operator: str) -> tuple[Identity, CoordinatorClient]:
    identity = load_or_create_identity(tmp_path / name / "identity.pem")
    client = CoordinatorClient(f"127.0.0.1:{coordinator.port}", PLAINTEXT)
    client.register(identity, HARDWARE, (MODEL,), operator, name, 1,
                    operator_key=operator_key_for(coordinator.service, operator))
    return identity, client


def _receipt(identity: Identity, job_id: str, prompt: str, tokens: tuple[int, ...]) -> Receipt:
    return Receipt(job_id=JobId(job_id), node_id=identity.node_id, model_id=MODEL.model_id,
                   weights_digest=MODEL.weights_digest, prompt_digest=prompt_digest(prompt),
                   temperature=0.0, top_p=1.0, seed=0, max_tokens=8,
                   output_digest=output_digest(tokens), prompt_tokens=3,
                   completion_tokens=len(tokens), started_at_ms=1, finished_at_ms=2,
                   finish_reason=FinishReason.END_TOKEN, first_token_at_ms=1,
                   activation_commitment=well_formed_commitment(len(tokens)))


def _credited(coordinator: RunningCoordinator, operator: str) -> int:
    with coordinator.service.db.transaction() as session:
        found = balance(session, operator_account_id(OperatorId(operator)))
        return found.net_posted if found else 0


def test_only_the_assigned_node_with_its_key_and_true_tokens_gets_paid(
        tmp_path: Path, coordinator: RunningCoordinator) -> None:
    address = f"127.0.0.1:{coordinator.port}"
    alice, alice_client = _node(tmp_path, "alice-node", coordinator, "alice")
    with JobClient(address, trust=PLAINTEXT) as consumer:
        job = consumer.submit(MODEL.model_id, "Hello there", max_tokens=8)
    assignment = next(alice_client.assignments())
    assert assignment.job_id == job.job_id
    mallory, mallory_client = _node(tmp_path, "mallory-node", coordinator, "mallory")
    alice_client.stream_tokens(job.job_id, iter([(0, TOKENS, "abc")]))
    honest = encode_receipt(_receipt(alice, job.job_id, "Hello there", TOKENS))

    with pytest.raises(CallRejected) as not_assigned:  # a node the job was not assigned to
        mallory_client.report_receipt(job.job_id, honest, mallory.sign(honest))
    assert not_assigned.value.code == "PERMISSION_DENIED"
    with pytest.raises(CallRejected) as wrong_key:  # the right node id, another node's key
        alice_client.report_receipt(job.job_id, honest, mallory.sign(honest))
    assert wrong_key.value.code == "PERMISSION_DENIED" and "not signed" in str(wrong_key.value)
    padded = encode_receipt(_receipt(alice, job.job_id, "Hello there", TOKENS + (14,)))
    with pytest.raises(CallRejected) as claims_more:  # more tokens than it streamed
        alice_client.report_receipt(job.job_id, padded, alice.sign(padded))
    assert claims_more.value.code == "INVALID_ARGUMENT" and "output digest" in str(claims_more.value)
    with JobClient(address, trust=PLAINTEXT) as consumer:
        assert consumer.get(job.job_id).status == job_pb2.JOB_STATUS_RUNNING
    assert _credited(coordinator, "alice") == 0 and _credited(coordinator, "mallory") == 0

    credited = alice_client.report_receipt(job.job_id, honest, alice.sign(honest))
    check = coordinator.service.checks.of_job(job.job_id)
    assert check is not None and check.operator_credit == credited > 0
    coordinator.service.money.release_due_credits()  # held until the (here zero) check window closes
    assert _credited(coordinator, "alice") == credited
    with pytest.raises(CallRejected) as duplicate:
        alice_client.report_receipt(job.job_id, honest, alice.sign(honest))
    assert duplicate.value.code == "ALREADY_EXISTS"
    assert _credited(coordinator, "alice") == credited
    with JobClient(address, trust=PLAINTEXT) as consumer:
        final = consumer.get(job.job_id)
    assert final.status == job_pb2.JOB_STATUS_COMPLETED and final.text == "abc"
    assert final.receipt.body == honest
    alice_client.close()
    mallory_client.close()


def test_tokens_out_of_order_or_for_others_jobs_are_refused(
        tmp_path: Path, coordinator: RunningCoordinator) -> None:
    address = f"127.0.0.1:{coordinator.port}"
    _, alice_client = _node(tmp_path, "alice-node", coordinator, "alice")
    with JobClient(address, trust=PLAINTEXT) as consumer:
        job = consumer.submit(MODEL.model_id, "Hello", max_tokens=8)
    next(alice_client.assignments())
    _, mallory_client = _node(tmp_path, "mallory-node", coordinator, "mallory")
    with pytest.raises(CallRejected) as foreign:
        mallory_client.stream_tokens(job.job_id, iter([(0, (1,), "x")]))
    assert foreign.value.code == "PERMISSION_DENIED"
    with pytest.raises(CallRejected) as gap:
        alice_client.stream_tokens(job.job_id, iter([(5, (1,), "x")]))
    assert gap.value.code == "INVALID_ARGUMENT" and "in order" in str(gap.value)
    with pytest.raises(CallRejected) as too_many:
        alice_client.stream_tokens(job.job_id, iter([(0, tuple(range(9)), "x")]))
    assert too_many.value.code == "INVALID_ARGUMENT"
    # A re-sent chunk is harmless: stored once.
    assert alice_client.stream_tokens(job.job_id, iter([(0, (1, 2), "ab")])) == 2
    assert alice_client.stream_tokens(job.job_id, iter([(0, (1, 2), "ab")])) == 0
    with pytest.raises(CallRejected) as overlap:  # other boundaries over stored tokens
        alice_client.stream_tokens(job.job_id, iter([(1, (2, 3), "bc")]))
    assert overlap.value.code == "INVALID_ARGUMENT" and "overlaps" in str(overlap.value)
    with JobClient(address, trust=PLAINTEXT) as consumer:
        assert consumer.get(job.job_id).text == "ab"
    alice_client.close()
    mallory_client.close()


def test_unauthenticated_node_calls_are_refused(coordinator: RunningCoordinator) -> None:
    from node_agent.coordinator_client import SessionExpired

    client = CoordinatorClient(f"127.0.0.1:{coordinator.port}", PLAINTEXT)
    with pytest.raises(SessionExpired):
        client.heartbeat(0)
    client.close()


def test_registration_with_a_bad_signature_is_refused(tmp_path: Path,
                                                      coordinator: RunningCoordinator) -> None:
    identity = load_or_create_identity(tmp_path / "identity.pem")
    other = load_or_create_identity(tmp_path / "other.pem")
    impostor = dataclasses.replace(identity, private_key=other.private_key)  # signs with another key
    client = CoordinatorClient(f"127.0.0.1:{coordinator.port}", PLAINTEXT)
    with pytest.raises(CallRejected) as refused:
        client.register(impostor, HARDWARE, (MODEL,), "alice", "x", 1)
    assert refused.value.code == "PERMISSION_DENIED"
    client.close()
