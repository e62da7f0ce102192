"""Accepting a consumer's job: validate every field, then record it as queued.

A request id chosen by the client makes a retried submit return the job it
already created, so a retry never creates a second job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy.orm import Session

from contracts.ids import JobId, job_id_for_request, new_job_id
from coordinator import records
from coordinator.catalog import model_catalog
from coordinator.config import CoordinatorConfig
from coordinator.errors import InvalidRequest, NotFound
from coordinator.records import JobRecord, JobStatus

SEED_MAX = (1 << 63) - 1  # stored in a signed 64-bit column


@dataclass(frozen=True)
class Submission:
    consumer_id: str
    model_id: str
    prompt: str
    max_tokens: int  # 0 means the configured default
    temperature: float
    top_p: float  # 0 means 1.0
    seed: int
    request_id: str
    min_decode_tokens_per_s: float


def _validate(sub: Submission, config: CoordinatorConfig) -> None:
    if not sub.model_id:
        raise InvalidRequest("model is required: name a model id or a path a node serves")
    if not sub.prompt.strip():
        raise InvalidRequest("prompt is empty: send the text to complete")
    if len(sub.prompt) > config.prompt_chars_max:
        raise InvalidRequest(f"prompt is {len(sub.prompt)} characters; the limit is "
                             f"{config.prompt_chars_max}")
    if sub.max_tokens < 0 or sub.max_tokens > config.max_tokens_max:
        raise InvalidRequest(f"max_tokens must be between 1 and {config.max_tokens_max} "
                             f"(0 means {config.max_tokens_default}); got {sub.max_tokens}")
    if not (math.isfinite(sub.temperature) and 0.0 <= sub.temperature <= 2.0):
        raise InvalidRequest("temperature must be between 0 (greedy) and 2")
    if not (math.isfinite(sub.top_p) and 0.0 <= sub.top_p <= 1.0):
        raise InvalidRequest("top_p must be between 0 and 1 (0 means 1)")
    if not 0 <= sub.seed <= SEED_MAX:
        raise InvalidRequest(f"seed must be between 0 and {SEED_MAX}")
    if len(sub.request_id) > config.request_id_chars_max:
        raise InvalidRequest(f"request_id is longer than {config.request_id_chars_max} characters")
    if not (math.isfinite(sub.min_decode_tokens_per_s) and sub.min_decode_tokens_per_s >= 0):
        raise InvalidRequest("min_decode_tokens_per_s must be zero or positive")


def submit(session: Session, sub: Submission, config: CoordinatorConfig,
           now_ms: int) -> tuple[JobRecord, bool]:
    """Record a queued job; returns (job, created). A retried request id returns the first job."""
    _validate(sub, config)
    job_id: JobId = (job_id_for_request(sub.consumer_id, sub.request_id)
                     if sub.request_id else new_job_id())
    if sub.request_id and (existing := records.job_by_id(session, job_id)) is not None:
        return existing, False
    catalog = model_catalog(records.all_nodes(session))
    spec = catalog.get(sub.model_id)
    if spec is None:
        known = ", ".join(sorted(catalog)) or "none yet"
        raise NotFound(f"model {sub.model_id!r} is not served by any node; served models: {known}")
    max_tokens = sub.max_tokens or config.max_tokens_default
    # UTF-8 bytes bound the token count of any byte-level tokenizer from above.
    context_tokens = min(spec.max_context_tokens, len(sub.prompt.encode()) + max_tokens)
    job = JobRecord(
        job_id=job_id, consumer_id=sub.consumer_id, request_id=sub.request_id or None,
        model_id=sub.model_id, prompt=sub.prompt, max_tokens=max_tokens,
        temperature=sub.temperature, top_p=sub.top_p or 1.0, seed=sub.seed,
        min_decode_tokens_per_s=sub.min_decode_tokens_per_s, context_tokens=context_tokens,
        status=JobStatus.QUEUED, created_at_ms=now_ms)
    if not records.insert_job(session, job):
        existing = records.job_by_id(session, job_id)
        assert existing is not None
        return existing, False
    return job, True
