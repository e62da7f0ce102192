"""Conversions between contracts and protobuf messages that both ends of the wire share.

Below the coordinator and the node agent: imports only `contracts`, the generated
`*_pb2` and grpc, so either may use it without importing the other.

    models.py   ModelSpec <-> mlxnet.v1.ModelSpec
    channel.py  a gRPC channel to the coordinator, over TLS unless plaintext on loopback is asked for
"""
