"""Ledger transfers: the ledger's rules, not per-row triggers, check the accounts and pending ids.

Every transfer is validated under the ledger's write lock (an unknown account or pending
transfer is refused with its result code and nothing is written), accounts are never
deleted, and `mlxnet ledger audit` names any transfer whose account or pending transfer
does not exist. PostgreSQL's foreign-key triggers cost a fifth of the batched payment
rate (`python -m bench.ledger`) and caught nothing the rules do not.

Revision ID: 0008_ledger_transfer_keys
Revises: 0007_verification
"""

from alembic import op

revision = "0008_ledger_transfer_keys"
down_revision = "0007_verification"
branch_labels = None
depends_on = None

# PostgreSQL's own names for 0002's unnamed keys; SQLite's batch copy names them the same way.
_NAMING = {"fk": "%(table_name)s_%(column_0_name)s_fkey"}
_KEYS = (
    ("debit_account", "ledger_accounts"),
    ("credit_account", "ledger_accounts"),
    ("pending_id", "ledger_transfers"),
)


def upgrade() -> None:
    with op.batch_alter_table("ledger_transfers", naming_convention=_NAMING) as batch:
        for column, _ in _KEYS:
            batch.drop_constraint(f"ledger_transfers_{column}_fkey", type_="foreignkey")


def downgrade() -> None:
    with op.batch_alter_table("ledger_transfers", naming_convention=_NAMING) as batch:
        for column, referred in _KEYS:
            batch.create_foreign_key(f"ledger_transfers_{column}_fkey", referred, [column], ["id"])
