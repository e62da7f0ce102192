"""Which models the fleet serves, and the one spec and set of weights each model id means.

A spec is checked for sanity before anything is placed by it (a negative parameter count
once broke every keyed submit for its model). Each model id is then bound, in the
model_catalog table, to one spec and weights digest: pinned by the coordinator (its
verifier's own copy at start-up, or `mlxnet catalog pin`), else by the first node to
serve it. A node that declares other weights or another shape under a bound id is
refused (WeightsMismatch, FAILED_PRECONDITION: the request is well formed, and succeeds
once the node serves the bound weights) with the fields that differ, so a model id always
means one set of weights (issue 32) and a poisoned spec never reaches placement (issue 25).
A checker for a job is therefore found by weights digest (nodes_serving, checkable_by_peers).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from contracts.models import VOCAB_SIZE_MAX, ModelSpec
from coordinator.errors import InvalidRequest, WeightsMismatch
from coordinator.model import NodeRecord
from coordinator.storage import catalog_rows, node_rows

# Limits a real model stays far inside; each says why in the refusal.
LAYERS_MAX = 1_024
HEADS_MAX = 1_024
HEAD_DIM_MAX = 4_096
CONTEXT_TOKENS_MAX = 1 << 24
WEIGHTS_BYTES_MAX = 1 << 44  # 16 TiB: well past a trillion parameters at 8 bits
KV_BYTES_PER_ELEMENT = frozenset({1, 2, 4})
BYTES_PER_PARAMETER_MAX = 8  # fp32 weights plus overhead; one bit per weight is the floor
_DIGEST = re.compile(r"[0-9a-f]{64}")


def spec_problems(spec: ModelSpec) -> list[str]:
    """Why this spec cannot describe a real model (empty when it can)."""
    problems = []
    if not 0 < spec.parameter_count <= spec.weights_bytes * 8:
        problems.append(f"parameter_count {spec.parameter_count} must be positive and at most 8 "
                        f"per weight byte ({spec.weights_bytes} bytes)")
    elif spec.weights_bytes > spec.parameter_count * BYTES_PER_PARAMETER_MAX:
        problems.append(f"weights_bytes {spec.weights_bytes} is more than "
                        f"{BYTES_PER_PARAMETER_MAX} bytes per parameter")
    if not 0 < spec.weights_bytes <= WEIGHTS_BYTES_MAX:
        problems.append(f"weights_bytes must be 1 to {WEIGHTS_BYTES_MAX}")
    if not 0 < spec.num_layers <= LAYERS_MAX:
        problems.append(f"num_layers must be 1 to {LAYERS_MAX}")
    if not 0 < spec.num_kv_heads <= spec.num_attention_heads <= HEADS_MAX:
        problems.append(f"heads must satisfy 0 < num_kv_heads <= num_attention_heads <= {HEADS_MAX}")
    if not 0 < spec.head_dim <= HEAD_DIM_MAX:
        problems.append(f"head_dim must be 1 to {HEAD_DIM_MAX}")
    if not 0 < spec.max_context_tokens <= CONTEXT_TOKENS_MAX:
        problems.append(f"max_context_tokens must be 1 to {CONTEXT_TOKENS_MAX}")
    if spec.kv_bytes_per_element not in KV_BYTES_PER_ELEMENT:
        problems.append(f"kv_bytes_per_element must be one of {sorted(KV_BYTES_PER_ELEMENT)}")
    if not 0 < spec.vocab_size <= VOCAB_SIZE_MAX:
        problems.append(f"vocab_size must be 1 to {VOCAB_SIZE_MAX} (config.json vocab_size)")
    if not _DIGEST.fullmatch(spec.weights_digest):
        problems.append("weights_digest must be the sha256 of the weight files, 64 lowercase hex digits")
    return problems


def spec_differences(bound: ModelSpec, declared: ModelSpec) -> list[str]:
    """The fields in which a declared spec differs from the bound one."""
    return [f"{field.name} {getattr(declared, field.name)!r} (bound: {getattr(bound, field.name)!r})"
            for field in dataclasses.fields(ModelSpec)
            if getattr(bound, field.name) != getattr(declared, field.name)]


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def check_and_bind(session: Session, models: Iterable[ModelSpec], node_id: str, now_ms: int) -> None:
    """Refuse insane specs and specs that disagree with their binding; bind new model ids."""
    for spec in models:
        problems = spec_problems(spec)
        if problems:
            raise InvalidRequest(f"model {_short(spec.model_id)!r} refused: " + "; ".join(problems),
                                 param="models")
        entry = catalog_rows.entry_for(session, spec.model_id)
        if entry is None:
            try:
                with session.begin_nested():  # a node binding the same id at once wins; read it then
                    catalog_rows.bind(session, spec, catalog_rows.SOURCE_NODE, node_id, now_ms)
                continue
            except IntegrityError:
                entry = catalog_rows.entry_for(session, spec.model_id)
                assert entry is not None, "the binding that won the race is committed"
        differences = spec_differences(entry.spec, spec)
        if differences:
            who = ("pinned by the coordinator" if entry.source == catalog_rows.SOURCE_COORDINATOR
                   else f"bound by node {entry.bound_by}, the first to serve it")
            raise WeightsMismatch(
                f"model {_short(spec.model_id)!r} is bound to weights {entry.spec.weights_digest[:16]}... "
                f"({who}); this node declares " + "; ".join(differences) +
                ". Serve the bound weights, or serve yours under another model id")


def pin(session: Session, spec: ModelSpec, pinned_by: str, now_ms: int) -> None:
    """The coordinator binds the model id to these weights (its verifier's copy, or its admin)."""
    problems = spec_problems(spec)
    if problems:
        raise InvalidRequest(f"model {_short(spec.model_id)!r} cannot be pinned: " + "; ".join(problems))
    catalog_rows.bind(session, spec, catalog_rows.SOURCE_COORDINATOR, pinned_by, now_ms)


def model_catalog(nodes: Iterable[NodeRecord]) -> dict[str, ModelSpec]:
    """model_id -> spec of the registered nodes; registration keeps them all in agreement
    (check_and_bind), so which node's copy is kept does not matter."""
    catalog: dict[str, ModelSpec] = {}
    for node in sorted(nodes, key=lambda n: (n.registered_at_ms, n.node_id)):
        for spec in node.models:
            catalog.setdefault(spec.model_id, spec)
    return catalog


def nodes_serving(nodes: Iterable[NodeRecord], model_id: str, weights_digest: str) -> list[NodeRecord]:
    """The nodes that declare these very weights under this model id (the catalog keeps every
    registered node of a bound id on the bound digest, so the digest is the test that counts)."""
    return [node for node in nodes
            if any(s.model_id == model_id and s.weights_digest == weights_digest for s in node.models)]


def checkable_by_peers(nodes: Iterable[NodeRecord], operators_min: int = 2) -> frozenset[tuple[str, str]]:
    """(model id, weights digest) pairs served by nodes of at least `operators_min` operators:
    a job on one of them can be replayed by a node of another operator."""
    operators: dict[tuple[str, str], set[str]] = {}
    for node in nodes:
        for spec in node.models:
            operators.setdefault((spec.model_id, spec.weights_digest), set()).add(node.operator_id)
    return frozenset(pair for pair, who in operators.items() if len(who) >= operators_min)


class PeerCheckablePairs:
    """checkable_by_peers over the registered nodes, read at most every refresh_ms in the
    caller's session (a receipt's): the fleet changes slowly, receipts come often."""

    def __init__(self, now_ms: Callable[[], int], refresh_ms: int = 10_000) -> None:
        self._now_ms, self._refresh_ms = now_ms, refresh_ms
        self._pairs: frozenset[tuple[str, str]] = frozenset()
        self._read_at_ms: int | None = None

    def __call__(self, session: Session) -> frozenset[tuple[str, str]]:
        now = self._now_ms()
        if self._read_at_ms is None or now - self._read_at_ms >= self._refresh_ms:
            self._pairs = checkable_by_peers(n for n in node_rows.all_nodes(session) if n.left_at_ms is None)
            self._read_at_ms = now
        return self._pairs
