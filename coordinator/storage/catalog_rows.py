"""The model catalog's rows (tables.model_catalog): which spec and weights each model id is bound to.

Like the other row modules, everything takes the caller's session and never commits.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from contracts.models import ModelSpec
from coordinator.storage.tables import model_catalog

SOURCE_COORDINATOR = "coordinator"  # pinned: the verifier's own copy, or `mlxnet catalog pin`
SOURCE_NODE = "node"  # the first node that served the model


@dataclass(frozen=True)
class CatalogEntry:
    spec: ModelSpec
    source: str
    bound_by: str
    bound_at_ms: int


def _entry(row) -> CatalogEntry:  # type: ignore[no-untyped-def]
    return CatalogEntry(ModelSpec(**json.loads(row.spec_json)), row.source, row.bound_by, row.bound_at_ms)


def entry_for(session: Session, model_id: str) -> CatalogEntry | None:
    row = session.execute(select(model_catalog).where(model_catalog.c.model_id == model_id)).first()
    return None if row is None else _entry(row)


def all_entries(session: Session) -> list[CatalogEntry]:
    return [_entry(row) for row in session.execute(select(model_catalog).order_by(model_catalog.c.model_id))]


def bind(session: Session, spec: ModelSpec, source: str, bound_by: str, now_ms: int) -> None:
    """Bind the model id to this spec, replacing any binding it had."""
    values = dict(weights_digest=spec.weights_digest, spec_json=json.dumps(dataclasses.asdict(spec), sort_keys=True),
                  source=source, bound_by=bound_by[:128], bound_at_ms=now_ms)
    moved = session.execute(update(model_catalog).where(model_catalog.c.model_id == spec.model_id)
                            .values(**values)).rowcount
    if moved == 0:
        session.execute(insert(model_catalog).values(model_id=spec.model_id, **values))


def forget(session: Session, model_id: str) -> bool:
    return session.execute(delete(model_catalog).where(model_catalog.c.model_id == model_id)).rowcount == 1
