"""MLX World's own tables, in their own MetaData (created by migrations/versions/*_world.py).

Operators' keys (only a sha256 of each is kept) and what an operator declares
about a Mac for the public map that the node itself does not report: its region.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, MetaData, String, Table

metadata = MetaData()

operator_keys = Table(
    "operator_keys", metadata,
    Column("key_id", String(32), primary_key=True),
    Column("secret_sha256", String(64), nullable=False),
    Column("operator_id", String(128), nullable=False),
    Column("label", String(128), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("revoked_at_ms", BigInteger, nullable=True),
)
Index("ix_operator_keys_secret", operator_keys.c.secret_sha256, unique=True)
Index("ix_operator_keys_operator", operator_keys.c.operator_id)

# Declared by the node's operator through the operator API; never looked up from an address.
node_regions = Table(
    "node_regions", metadata,
    Column("node_id", String(64), primary_key=True),
    Column("region", String(64), nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
)
Index("ix_node_regions_region", node_regions.c.region)
