"""The OpenAI-compatible HTTP gateway, served inside the coordinator process (see app.py)."""
