"""Nodes: registration and sessions, heartbeats and reports, benchmark checks, the model catalog.

    registry.py         register (signed over the whole request and a nonce) and authenticate
    challenges.py       single-use registration nonces (RegisterChallenge)
    operators.py        the operator a node is lent by, proven with the operator's key
    admission.py        token buckets: registrations per source address and per operator
    reports.py          heartbeats, lending state, benchmarks, hand-backs, leaving
    benchmark_check.py  pure: does a benchmark fit the claimed chip? (claimed until it does)
    catalog.py          spec sanity, and each model id bound to one spec and weights digest
"""
