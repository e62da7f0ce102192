"""The `mlxnet` command: runs the coordinator, a node agent, the demo and the client."""
