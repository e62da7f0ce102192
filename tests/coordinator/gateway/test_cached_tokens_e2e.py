"""A shared system prompt through the official OpenAI client, on one real MLX node: the node reuses its
KV cache, and usage reports the reused prompt tokens (prompt_tokens_details.cached_tokens)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from node_agent.inference.batch import PROMPT_CACHE_BLOCK
from tests.coordinator.gateway.conftest import MODEL_ID, GatewayNetwork, gateway_network

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[GatewayNetwork]:
    # One Mac: every job meets the prompt cache the last one left (placement does not seek it out).
    with gateway_network(tmp_path_factory.mktemp("cached-tokens"), tiny_model_dir, "sqlite",
                         (("mini", "m4-pro-64", "alice"),)) as net:
        yield net


def test_a_shared_system_prompt_is_reported_as_cached_tokens(one_node: GatewayNetwork) -> None:
    client = one_node.client(one_node.new_key("acme"))
    system = {"role": "system", "content": "You answer every question in one short word. " * 60}
    details = []
    for question in ("Why?", "How?"):
        answer = client.chat.completions.create(
            model=MODEL_ID, messages=[system, {"role": "user", "content": question}], max_tokens=4, temperature=0)
        details.append((answer.usage.prompt_tokens, answer.usage.prompt_tokens_details.cached_tokens))
    (first_prompt, first_cached), (second_prompt, second_cached) = details
    assert first_prompt > 512 and first_cached == 0
    # Whole blocks of the shared prefix, never the whole prompt (the question differs).
    assert 512 <= second_cached < second_prompt and second_cached % PROMPT_CACHE_BLOCK == 0
    streamed = list(client.chat.completions.create(
        model=MODEL_ID, messages=[system, {"role": "user", "content": "What?"}], max_tokens=4, temperature=0,
        stream=True, stream_options={"include_usage": True}))
    assert streamed[-1].usage.prompt_tokens_details.cached_tokens >= 512
    plain = client.completions.create(model=MODEL_ID, prompt="Hello", max_tokens=2)  # nothing shared
    assert plain.usage.prompt_tokens_details.cached_tokens == 0
