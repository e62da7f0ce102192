"""Double-entry MLX token accounting on SQLAlchemy (TigerBeetle-style).

- units: base units per MLX and exact text conversion.
- policy: the earning policy, pure pricing of jobs.
- model: records, requests and result codes.
- rules: pure posting rules over a snapshot.
- chain: the hash chain's canonical encoding.
- tables: the ledger's own MetaData.
- store: the SQL shell (the only module issuing statements).
- book: the public API; audit: chain and balance verification.
- jobs: the job-payment flow the coordinator calls; job_batches: the same for many jobs per call.
"""
