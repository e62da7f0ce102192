"""The gRPC edge: servicers for nodes and consumers, protobuf <-> domain values, the status table."""
