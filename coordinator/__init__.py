"""The coordinator: places whole jobs on Macs and pods, streams their tokens, checks and pays.

Rooms, lowest layer first; a room imports only rooms above it in this list (tests/layers.py
checks it, and `python -m tests.layers` prints any import that breaks it):

    model.py        the shared vocabulary: JobRecord, NodeRecord, TokenChunk, job states, error codes
    clock.py, errors.py, config.py   injected time, the one error hierarchy, the settings value
    tls.py          the coordinator's TLS identity: the operator's certificate or a self-signed one
    placement/      pure: where a job should run, and why (filters, scores, the fleet index)
    storage/        the SQL edge: engines and sessions, tables, node, job and key rows
    live/           in-process hand-offs: wake-ups, live token chunks, live assignments
    money/          a job's money (billing), API keys, ledger epochs
    verification/   proof checks: pure rules (tolerances, tokens, judge, policy), then their records
    jobs/           a job's life: submission, results and receipts, hand-back, stop sequences
    nodes/          registration, heartbeats and reports, benchmark checks, the model catalog
    scheduling/     the scheduler, the live fleet index, fleet reads, capacity
    service.py      the use cases, one transaction each, with wake-ups after commit
    rpc/            the gRPC edge: servicers, protobuf <-> domain, the status table
    world/          MLX World, the public pages and each operator's own
    gateway/        the HTTP edge: OpenAI-compatible routes
    background.py   the supervised background loops: reaper, sweeps, scheduler, verifier, epochs
    server.py       the process: gRPC and HTTP servers, background loops
"""
