"""MLX World on a real database (SQLite and PostgreSQL), with a held clock and a small fleet builder."""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from sqlalchemy.orm import Session

from contracts.ids import JobId, NodeId, OperatorId
from contracts.lending import LendingMode, LendingState
from contracts.models import ModelSpec
from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
from coordinator.config import CoordinatorConfig
from coordinator.model import JobRecord, JobStatus, NodeRecord, TokenChunk
from coordinator.service import CoordinatorService
from coordinator.storage import job_rows, node_rows
from coordinator.storage.database import Database, upgrade_schema
from coordinator.world.world import World
from ledger import jobs as ledger_jobs
from ledger.epochs import close_epoch, due_epoch, set_payout_address
from ledger.policy import price_job
from node_agent.hardware.profiles import simulated_profile

MODEL = ModelSpec(model_id="test/tiny", weights_bytes=12_000_000, parameter_count=3_000_000, num_layers=4,
                  num_attention_heads=4, num_kv_heads=2, head_dim=32, max_context_tokens=2048,
                  weights_digest="ab" * 32)
SECRET_PROMPT = "the secret prompt: zebra quartz 4471"
SECRET_OUTPUT = "the secret output: violet anchor 9902"
OFFLINE_AFTER_MS = 10_000
_numbers = itertools.count(1)


class FakeClock:
    def __init__(self) -> None:
        self.now = time.time_ns() // 1_000_000

    def now_ms(self) -> int:
        return self.now


@dataclass
class WorldEnv:
    db: Database
    clock: FakeClock
    service: CoordinatorService
    world: World

    def session(self):  # type: ignore[no-untyped-def]
        return self.db.transaction()


@pytest.fixture
def world_env(database_url: str) -> Iterator[WorldEnv]:
    upgrade_schema(database_url)
    db = Database(database_url)
    clock = FakeClock()
    config = CoordinatorConfig(database_url=database_url, node_offline_after_ms=OFFLINE_AFTER_MS)
    service = CoordinatorService(db, clock, config)
    world = World(service, cache_ttl_s=0)  # these tests read back what they just wrote
    try:
        yield WorldEnv(db, clock, service, world)
    finally:
        world.close()
        db.dispose()


def add_node(session: Session, name: str, operator: str, now_ms: int, *, profile: str = "m4-pro-64",
             mode: LendingMode = LendingMode.IDLE, heartbeat_age_ms: int = 0, joined_ago_ms: int = 0) -> str:
    number = next(_numbers)
    node_id = f"node-{number:024x}"
    node = NodeRecord(
        node_id=NodeId(node_id), public_key=number.to_bytes(32, "big"), operator_id=OperatorId(operator),
        display_name=name, hardware=simulated_profile(profile), models=(MODEL,), max_concurrent_jobs=1,
        registered_at_ms=now_ms - joined_ago_ms, last_heartbeat_ms=now_ms - heartbeat_age_ms,
        lending=LendingState(mode=mode), warm_models=(MODEL.model_id,))
    node_rows.save_node(session, node, f"{number:064x}")
    return node_id


def add_job(session: Session, node_ids: tuple[str, ...], now_ms: int, *, status: JobStatus = JobStatus.COMPLETED,
            operator: str | None = None, tokens: int = 8, error: str | None = None) -> str:
    """A job placed on node_ids; completed ones carry a verified receipt and, with operator, a credit."""
    job_id = JobId(f"job-{next(_numbers):032x}")
    job_rows.insert_job(session, JobRecord(
        job_id=job_id, consumer_id="anonymous", request_id=None, model_id=MODEL.model_id, prompt=SECRET_PROMPT,
        max_tokens=tokens, temperature=0.0, top_p=1.0, seed=7, min_decode_tokens_per_s=0.0, context_tokens=64,
        status=JobStatus.QUEUED, created_at_ms=now_ms - 3_000,
        explanation_json='{"job_id": "x", "memory": {"weights_bytes": 1, "kv_cache_bytes": 1, "overhead_bytes": 1, '
                         '"total_bytes": 3}, "macs": {"total": 1, "filtered": {}, "feasible": 1, "scored": 1}, '
                         '"pods": {"total": 0, "considered": false, "filtered": {}, "feasible": 0, "scored": 0}, '
                         f'"top_candidates": [{{"id": "{node_ids[0]}", "kind": "mac", "strategy": "single", '
                         '"total": 0.9, "scores": {"speed": 0.8}, "free_memory_bytes": 5, '
                         '"predicted_decode_tokens_per_s": 120.0}], '
                         f'"chosen": "{node_ids[0]}", "notes": []}}'))
    job_rows.transition_job(session, job_id, frozenset({JobStatus.QUEUED}), status=JobStatus.ASSIGNED, attempt=1,
                           strategy="single", assigned_at_ms=now_ms - 2_500)
    job_rows.add_assignments(session, job_id, 1, tuple((n, 1_000, MODEL.num_layers) for n in node_ids))
    job_rows.append_tokens(session, job_id, TokenChunk(0, tuple(range(tokens)), SECRET_OUTPUT))
    if status is JobStatus.COMPLETED:
        receipt = Receipt(job_id=job_id, node_id=NodeId(node_ids[0]), model_id=MODEL.model_id,
                          weights_digest=MODEL.weights_digest, prompt_digest=prompt_digest(SECRET_PROMPT),
                          temperature=0.0, top_p=1.0, seed=7, max_tokens=tokens,
                          output_digest=output_digest(range(tokens)), prompt_tokens=5, completion_tokens=tokens,
                          started_at_ms=now_ms - 2_000, finished_at_ms=now_ms - 1_000,
                          finish_reason=FinishReason.LENGTH, first_token_at_ms=now_ms - 1_900)
        price = price_job(MODEL.parameter_count, 5, tokens)
        if operator is not None:
            assert ledger_jobs.credit_operator_for_job(session, job_id, OperatorId(operator), price).ok
        job_rows.transition_job(session, job_id, frozenset({JobStatus.ASSIGNED}), status=JobStatus.COMPLETED,
                               prompt_tokens=5, completion_tokens=tokens, receipt_body=encode_receipt(receipt),
                               receipt_signature=b"\x01" * 64, receipt_verified=True,
                               credited_base_units=price.operator_credit if operator else 0,
                               started_at_ms=now_ms - 2_000, finished_at_ms=now_ms - 1_000)
        job_rows.release_assignments(session, job_id)
    elif status is JobStatus.FAILED:
        job_rows.transition_job(session, job_id, frozenset({JobStatus.ASSIGNED}), status=JobStatus.FAILED,
                               error=error or f"node {node_ids[0]}: out of memory", finished_at_ms=now_ms - 1_000)
        job_rows.release_assignments(session, job_id)
    return job_id


def pay_out_epoch(session: Session, addresses: dict[str, str]) -> int:
    """Give operators payout addresses and close the latest finished one-second epoch; returns its number."""
    for operator, address in addresses.items():
        set_payout_address(session, operator, address)
    now_us = time.time_ns() // 1_000
    number = due_epoch(now_us, 1)
    result = close_epoch(session, number, length_s=1, now_us=now_us)
    assert result.ok, result.code
    return number


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]


def spki_pin(certificate_path: str) -> str:
    """Chromium's pin for a certificate: base64 of the SHA-256 of its public key info."""
    certificate = x509.load_pem_x509_certificate(Path(certificate_path).read_bytes())
    info = certificate.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(info).digest()).decode()


@pytest.fixture(scope="module")
def browser_args() -> list[str]:
    """Chromium flags beyond CHROMIUM_ARGS; a module overrides it, e.g. to pin a certificate."""
    return []


@pytest.fixture(scope="module")
def browser(browser_args: list[str]) -> Iterator[object]:
    """Debian's headless Chromium through Playwright, one per test module (never a downloaded browser)."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"MLX World's browser tests need Debian's chromium at {CHROMIUM} (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *browser_args])
        try:
            yield launched
        finally:
            launched.close()
