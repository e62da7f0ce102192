"""Conversions between contracts and protobuf messages that both ends of the wire share.

Below the coordinator and the node agent: imports only `contracts` and the generated
`*_pb2`, so either may use it without importing the other.

    models.py   ModelSpec <-> mlxnet.v1.ModelSpec
"""
