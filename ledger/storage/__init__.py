"""The ledger's SQL edge: the only ledger modules that build or issue statements.

- tables: the ledger's own MetaData (accounts, transfers, the chain head, epochs, anchors).
- store: accounts, transfers and the chain head (the write lock every writer takes first).
- epoch_store: epochs, payouts, seat results, payout addresses and anchors.
Every function works through the caller's Session and never commits.
"""
