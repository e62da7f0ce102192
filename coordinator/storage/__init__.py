"""The SQL edge for nodes, jobs and keys: engines and sessions, the tables, rows in and records out.

Each function takes the caller's session and never commits.
"""
