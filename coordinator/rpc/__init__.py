"""The gRPC edge: servicers for nodes and consumers, protobuf <-> domain values, the status table.

    grpc_server.py     grpc.aio on its own event loop thread: an open stream holds no thread
    offload.py         blocking service calls in bounded pools (heartbeats, calls, stream steps)
    stream_limits.py   streams per node session, per API key (or address) and in total
    job_servicer.py, node_servicer.py   the services; convert.py, status.py the translations
"""
