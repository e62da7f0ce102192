"""In-process hand-offs after commit: wake-ups, live token chunks, and live assignments;
and pg_relay.py, which relays the wake-ups to other coordinators on the same PostgreSQL."""
