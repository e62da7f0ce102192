"""In-process hand-offs after commit: wake-ups, live token chunks, and live assignments."""
