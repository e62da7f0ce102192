"""Lending modes: the operator's terms (node.toml), the host's state, and when to hand work back."""
