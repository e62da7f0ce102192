"""Double-entry MLX token accounting on SQLAlchemy (TigerBeetle-style).

Callers outside the ledger (the coordinator, the CLI) import `ledger.api` only;
tests/layers.py checks it. Lowest first:

- units: base units per MLX and exact text conversion.
- policy: the earning policy, pure pricing of jobs.
- model: records, requests and result codes.
- rules: pure posting rules over a snapshot.
- chain: the hash chain's canonical encoding.
- merkle: payout leaves, trees and proofs; seats: Ultra-seat availability and rewards, pure.
- errors: the few real failures (LedgerError and below).
- storage/: the SQL edge, the only modules that build or issue statements:
  tables (the ledger's own MetaData), store (accounts, transfers, the chain head),
  epoch_store (epochs, payouts, seat results, payout addresses, anchors), queue_store.
- book: accounts, transfers and pending resolution; audit: chain and balance verification.
- jobs: the job-payment flow; job_batches: the same for many jobs per call; posting_queue:
  completions queued by receipts (storage/queue_store) and posted by one writer in group commits.
- clawbacks: posted credits taken back after a failed check, and the debt they leave.
- epochs: closing an epoch (seat rewards, payout sweep, Merkle root); statements: an operator's own.
- full_audit: `mlxnet ledger audit`, one pass over everything an operator can recompute.
- anchoring: publishing roots through an injected chain; anchor: the web3 chain (the only web3 import).
- api: the public API, re-exporting the above.
"""
