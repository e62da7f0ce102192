"""A job's life: submission, streamed results and receipts, hand-back when a node goes, stop sequences."""
