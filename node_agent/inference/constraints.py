"""Decoding under a grammar: each step's logits lose every token the grammar forbids.

Only this module imports llguidance. The node applies a constraint while it decodes
and the verifier while it replays, built the same way from the job's prompt text, so
a constrained token passes the verifier's check exactly as a free one does.

Once the grammar is complete only the end-of-sequence tokens are allowed, so the
output ends there, with finish_reason stop.
"""

from __future__ import annotations

import logging

import llguidance
import llguidance.hf
import numpy as np
from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

log = logging.getLogger(__name__)


class GrammarError(ValueError):
    """The grammar does not compile (an unsupported JSON-schema feature, say)."""


class TokenConstraint:
    """Which tokens may come next; advance() with each token chosen."""

    def __init__(self, tokenizer, grammar: str) -> None:  # type: ignore[no-untyped-def]
        hf = tokenizer._tokenizer  # mlx_lm's wrapper around the Hugging Face tokenizer
        self._vocab = llguidance.hf.from_tokenizer(hf, n_vocab=len(hf))
        self._matcher = llguidance.LLMatcher(self._vocab, llguidance.grammar_from("lark", grammar))
        if self._matcher.is_error():
            raise GrammarError(f"the grammar does not compile: {self._matcher.get_error()}")
        self._end_ids = np.array(sorted(int(t) for t in tokenizer.eos_token_ids), dtype=np.int64)
        self._bitmask = allocate_token_bitmask(1, self._vocab.vocab_size)
        self.violated = False  # a token the grammar forbids was advanced over (replay only)

    def allowed(self, logits_size: int) -> np.ndarray:
        """A boolean mask over the logits: the tokens the grammar allows next."""
        mask = np.zeros(logits_size, dtype=bool)
        if self._matcher.is_stopped() or self.violated:
            mask[self._end_ids[self._end_ids < logits_size]] = True
            return mask
        fill_next_token_bitmask(self._matcher, self._bitmask, 0)
        bits = np.unpackbits(self._bitmask[0].view(np.uint8), bitorder="little")
        size = min(logits_size, self._vocab.vocab_size)
        mask[:size] = bits[:size].astype(bool)
        return mask

    def mask_logits(self, logits: np.ndarray) -> np.ndarray:
        """The row with every forbidden token at -inf (float32, as a copy)."""
        masked = np.array(logits, dtype=np.float32).reshape(-1)
        masked[~self.allowed(masked.size)] = -np.inf
        return masked

    def advance(self, token_id: int) -> None:
        if self._matcher.is_stopped() or self.violated:
            return
        if not self._matcher.consume_token(token_id):
            log.info("token %d breaks the grammar: %s", token_id, self._matcher.get_error())
            self.violated = True
