"""Types shared by the coordinator, the node agent and the ledger.

This package imports none of them, nor gRPC, SQLAlchemy or MLX: it is the
contract the three services agree on.
"""
