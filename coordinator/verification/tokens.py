"""Was each output token what the seeded sampler picks? The rules live in contracts.token_checks,
shared with nodes that check their peers' jobs; this name stays for the verifier's modules."""

from contracts.token_checks import (
    NO_TOKEN, Sampling, TokenCheck, make_token_check, token_is_plausible,
)

__all__ = ["NO_TOKEN", "Sampling", "TokenCheck", "make_token_check", "token_is_plausible"]
