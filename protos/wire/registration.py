"""The bytes a node signs to register: the whole request, canonically encoded.

Both sides compute them from the message itself, so the signature covers every field
(hardware, models, operator, lending, benchmark, the coordinator's nonce); a replayed
registration, or one with any field changed, does not verify.
"""

from __future__ import annotations

from protos.mlxnet.v1 import node_pb2

REGISTER_DOMAIN = b"mlxnet.register.v2\x00"


def registration_signing_bytes(request: node_pb2.RegisterRequest) -> bytes:
    unsigned = node_pb2.RegisterRequest()
    unsigned.CopyFrom(request)
    unsigned.ClearField("signature")
    return REGISTER_DOMAIN + unsigned.SerializeToString(deterministic=True)
