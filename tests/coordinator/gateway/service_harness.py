"""A coordinator service on a real database with a fake clock and fake (registered) nodes."""

from __future__ import annotations

import time
from dataclasses import dataclass

from contracts.hardware import ChipTier, HardwareReport
from contracts.ids import ConsumerId
from contracts.models import ModelSpec
from coordinator.config import CoordinatorConfig
from coordinator.jobs.submission import Submission
from coordinator.model import NodeRecord
from coordinator.money.api_keys import Caller, KeyLimits
from coordinator.service import CoordinatorService
from coordinator.storage.database import Database, upgrade_schema
from ledger.book import balance
from ledger.jobs import consumer_account_id
from ledger.model import Balance
from ledger.units import BASE_UNITS_PER_MLX
from mlxnet import keys_cli
from node_agent.identity import Identity
from tests.node_registration import register_node as register_signed_node

GIB = 1 << 30
MODEL = ModelSpec(model_id="test/small", weights_bytes=GIB, parameter_count=500_000_000,
                  num_layers=8, num_attention_heads=8, num_kv_heads=8, head_dim=64,
                  max_context_tokens=4096, weights_digest="5a" * 32, vocab_size=32_000)


class FakeClock:
    def __init__(self) -> None:
        self.ms = time.time_ns() // 1_000_000

    def now_ms(self) -> int:
        return self.ms


def make_service(database_url: str, **config: object) -> CoordinatorService:
    upgrade_schema(database_url)
    return CoordinatorService(Database(database_url), FakeClock(),
                              CoordinatorConfig(database_url=database_url, **config))  # type: ignore[arg-type]


def register_node(service: CoordinatorService, identity: Identity, max_concurrent_jobs: int = 1,
                  models: tuple[ModelSpec, ...] = (MODEL,)) -> NodeRecord:
    """A simulated Mac that never runs anything itself: tests play its part."""
    hardware = HardwareReport(chip="Apple M4 Max", chip_family="M4", chip_tier=ChipTier.MAX,
                              memory_bytes=64 * GIB, gpu_working_set_bytes=48 * GIB, gpu_cores=40,
                              memory_bandwidth_gb_s=546.0, os_name="macOS", simulated=True)
    _, token = register_signed_node(service, identity, hardware, models, "alice",
                                    max_concurrent_jobs=max_concurrent_jobs)
    return service.nodes.authenticate(token)


@dataclass(frozen=True)
class Consumer:
    caller: Caller
    key: str

    def submission(self, **changes: object) -> Submission:
        fields = dict(consumer_id=self.caller.consumer_id, model_id=MODEL.model_id,
                      prompt="In the beginning", max_tokens=8, temperature=0.0, top_p=0.0, seed=0,
                      request_id="", min_decode_tokens_per_s=0.0,
                      api_key_id=self.caller.key.key_id if self.caller.key else None)
        fields.update(changes)
        return Submission(**fields)  # type: ignore[arg-type]


def new_consumer(service: CoordinatorService, name: str, deposit_mlx: int = 1,
                 limits: KeyLimits = KeyLimits()) -> Consumer:
    _, key = keys_cli.create(service.db, name, limits, deposit_amount=deposit_mlx * BASE_UNITS_PER_MLX)
    return Consumer(service.jobs.authenticate_consumer(key), key)


def consumer_balance(service: CoordinatorService, name: str) -> Balance:
    with service.db.transaction() as session:
        found = balance(session, consumer_account_id(ConsumerId(name)))
    return found or Balance()
