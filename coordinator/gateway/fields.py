"""What the gateway does with each request field it knows of: honour it, refuse it, or take it
as a hint. Pure data, read by the error handler and published in the API's description.

A field the request schema does not declare is refused with a 400 that names it, never
dropped: an agent that sends `tools` or `response_format` must learn that they were not
honoured. Hints are fields OpenAI documents as optional information for the server
(`user`, `metadata`, `store`): accepted, and they change nothing in the answer.
"""

from __future__ import annotations

from contracts.structured_output import SUPPORTED as SCHEMA_FEATURES

# Fields refused with a reason more useful than "not supported" (any other unknown field gets
# the generic one). Keyed by the field's path as the error handler names it.
REFUSAL_REASONS: dict[str, str] = {
    "functions": "the legacy `functions` field is not supported; send `tools`",
    "function_call": "the legacy `function_call` field is not supported; send `tool_choice`",
    "logit_bias": "logit_bias is not supported",
    "audio": "audio output is not supported",
    "modalities": "only the text modality is supported",
    "prediction": "predicted outputs are not supported",
    "web_search_options": "web search is not supported",
    "service_tier": "service tiers are not offered; every job is placed on a Mac by "
                    "memory and bandwidth",
}

# Accepted and documented as hints; they change nothing in the answer.
HINTS = ("user", "metadata", "store", "safety_identifier", "prompt_cache_key")
HINT_DESCRIPTION = "a hint: accepted and recorded nowhere; it changes nothing in the answer"


def refused_field(param: str) -> str | None:
    """The top-level field a problem at `param` refuses, when it is one we explain."""
    top = param.split(".")[0].split("[")[0]
    return top if top in REFUSAL_REASONS else None


def refusal_message(param: str) -> str:
    """The 400's message for a field this gateway cannot honour."""
    last = param.split(".")[-1].split("[")[0]
    if ".schema." in param:  # a JSON-schema keyword structured output does not decode under
        return (f"{param} is not supported: the schema feature {last!r} is not one structured "
                f"output decodes under; supported: {SCHEMA_FEATURES}")
    reason = REFUSAL_REASONS.get(param) or REFUSAL_REASONS.get(last)
    detail = reason or "this gateway does not support it"
    return f"{param} is not supported: {detail}. Remove it, or see the API description for " \
           "the fields each route honours"
