"""Scheduling: fleet reads, the live placement index, the scheduler's passes, live capacity per model."""
