"""Distinct id types, so a node id can never be passed where a job id belongs."""

from __future__ import annotations

import hashlib
import uuid
from typing import NewType

NodeId = NewType("NodeId", str)
JobId = NewType("JobId", str)
OperatorId = NewType("OperatorId", str)
ConsumerId = NewType("ConsumerId", str)

NODE_ID_PREFIX = "node-"
JOB_ID_PREFIX = "job-"


def node_id_from_public_key(public_key_raw: bytes) -> NodeId:
    """A node's id is derived from its Ed25519 public key, so nobody can claim another's id."""
    assert len(public_key_raw) == 32, "Ed25519 public keys are 32 bytes"
    return NodeId(NODE_ID_PREFIX + hashlib.sha256(public_key_raw).hexdigest()[:24])


def new_job_id() -> JobId:
    return JobId(JOB_ID_PREFIX + uuid.uuid4().hex)


def job_id_for_request(consumer_id: str, request_id: str) -> JobId:
    """A client-chosen request id maps to one job id, so a retried submit finds its job."""
    digest = hashlib.sha256(f"{consumer_id}\x00{request_id}".encode()).hexdigest()
    return JobId(JOB_ID_PREFIX + digest[:32])
