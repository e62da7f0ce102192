"""Money: a job's payment (billing), consumers' API keys, and the coordinator's side of ledger epochs."""
