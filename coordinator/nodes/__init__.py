"""Nodes: registration and sessions, heartbeats and reports, benchmark checks, the model catalog."""
