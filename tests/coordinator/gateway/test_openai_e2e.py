"""The official OpenAI client, unchanged, against a coordinator and real MLX nodes (processes).

Sync, async and streaming; chat through the node's template; logprobs, stop and usage;
the job's record and verifiable receipt; a client that leaves mid-stream pays for the
tokens made; the gRPC JobService with the same keys.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib

import httpx
import openai
import pytest
from mlx_lm import load, stream_generate

from contracts.chat import ChatMessage, encode_chat_prompt
from contracts.ids import ConsumerId
from ledger.book import balance
from ledger.jobs import consumer_account_id
from ledger.policy import price_job
from mlxnet.consumer import JobClient, JobRequestError, StreamedTokens
from mlxnet.receipt_view import check_receipt_locally
from node_agent.model_files import describe_model
from protos.mlxnet.v1 import common_pb2, job_pb2, job_pb2_grpc
from protos.wire.channel import open_channel
from tests.coordinator.gateway.conftest import MESSAGES, MODEL_ID, GatewayNetwork

pytestmark = pytest.mark.e2e
MLX = 10**9


def _client(network: GatewayNetwork, key: str) -> openai.OpenAI:
    return network.client(key)


def _direct_chat_text(network: GatewayNetwork, max_tokens: int) -> str:
    model, tokenizer = load(str(network.model_dir))
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)
    return "".join(r.text for r in stream_generate(model, tokenizer, prompt, max_tokens=max_tokens))


def _balance(network: GatewayNetwork, consumer: str):  # type: ignore[no-untyped-def]
    with network.db.transaction() as session:
        return balance(session, consumer_account_id(ConsumerId(consumer)))


def _final_job(network: GatewayNetwork, key: str, job_id: str) -> tuple[job_pb2.Job, tuple[int, ...]]:
    """Waits for the job's end on the gRPC stream: its final record and every token id."""
    with JobClient(network.grpc_address, api_key=key, trust=network.trust) as client:
        items = list(client.stream(job_id))
    tokens = tuple(t for item in items if isinstance(item, StreamedTokens) for t in item.token_ids)
    final = items[-1]
    assert isinstance(final, job_pb2.Job)
    return final, tokens


def test_chat_runs_the_models_template_on_the_node_and_is_receipted(network: GatewayNetwork) -> None:
    key = network.new_key("acme")
    raw = _client(network, key).chat.completions.with_raw_response.create(
        model=MODEL_ID, messages=MESSAGES, max_tokens=24, temperature=0)
    job_id = raw.headers["x-mlxnet-job-id"]
    answer = raw.parse()
    assert answer.choices[0].message.content == _direct_chat_text(network, 24)
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert answer.usage.completion_tokens > 0 and answer.usage.prompt_tokens > 20  # templated
    job = _client(network, key).get(f"/jobs/{job_id}", cast_to=object)
    assert job["status"] == "completed" and job["usage"] == {
        **answer.usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"}),
        "prompt_tokens_details": {"cached_tokens": answer.usage.prompt_tokens_details.cached_tokens}}
    assert job["nodes"][0]["chip"] and job["cost"]["paid_by"] == "consumer"
    receipt = _client(network, key).get(f"/jobs/{job_id}/receipt", cast_to=object)
    _, tokens = _final_job(network, key, job_id)
    canonical = encode_chat_prompt(tuple(ChatMessage(m["role"], m["content"]) for m in MESSAGES))
    check = check_receipt_locally(base64.b64decode(receipt["body_base64"]),
                                  base64.b64decode(receipt["signature_base64"]),
                                  base64.b64decode(receipt["signer_public_key_base64"]),
                                  canonical, tokens)
    assert check.ok, check.problems
    assert receipt["fields"]["prompt_digest"] == hashlib.sha256(canonical.encode()).hexdigest()


def test_streaming_matches_the_whole_answer_and_ends_with_usage(network: GatewayNetwork) -> None:
    client = _client(network, network.new_key("acme"))
    whole = client.completions.create(model=MODEL_ID, prompt="In the beginning", max_tokens=20,
                                      temperature=0)
    chunks = list(client.completions.create(model=MODEL_ID, prompt="In the beginning",
                                            max_tokens=20, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    chat = list(client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, max_tokens=8,
                                               temperature=0, stream=True))
    assert chat[0].choices[0].delta.role == "assistant"
    assert all(c.usage is None for c in chat)


def test_logprobs_and_stop_sequences(network: GatewayNetwork) -> None:
    client = _client(network, network.new_key("acme"))
    full = client.completions.create(model=MODEL_ID, prompt="And God said", max_tokens=16,
                                     temperature=0, logprobs=2)
    text = full.choices[0].text
    logprobs = full.choices[0].logprobs
    assert "".join(logprobs.tokens) == text and len(logprobs.tokens) == full.usage.completion_tokens
    assert all(len(top) <= 2 and max(top.values()) >= chosen - 1e-4
               for top, chosen in zip(logprobs.top_logprobs, logprobs.token_logprobs))
    stop = text.split()[2]
    cut = client.completions.create(model=MODEL_ID, prompt="And God said", max_tokens=16,
                                    temperature=0, stop=[stop])
    assert cut.choices[0].text == text[:text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    chat = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, max_tokens=6,
                                          temperature=0, logprobs=True, top_logprobs=3)
    content = chat.choices[0].logprobs.content
    assert "".join(entry.token for entry in content) == chat.choices[0].message.content
    assert all(len(entry.top_logprobs) == 3 and entry.logprob <= 0 for entry in content)


def test_the_async_client_runs_requests_concurrently(network: GatewayNetwork) -> None:
    key = network.new_key("acme")

    async def run() -> list[str]:
        async with openai.AsyncOpenAI(
                base_url=network.base_url, api_key=key, max_retries=0, timeout=60,
                http_client=openai.DefaultAsyncHttpxClient(verify=network.ssl_context())) as client:
            answers = await asyncio.gather(*(
                client.chat.completions.create(model=MODEL_ID, max_tokens=12, temperature=0,
                                               messages=[{"role": "user", "content": prompt}])
                for prompt in ("And Noah", "And Abram", "And Lot")))
            stream = await client.completions.create(model=MODEL_ID, prompt="And Sarah",
                                                     max_tokens=6, stream=True, temperature=0)
            streamed = "".join([chunk.choices[0].text async for chunk in stream if chunk.choices])
        return [a.choices[0].message.content or "" for a in answers] + [streamed]

    answers = asyncio.run(run())
    assert len(answers) == 4 and all(answers)


def test_a_client_that_leaves_mid_stream_pays_only_for_tokens_proven(network: GatewayNetwork) -> None:
    """Issue 28: a job cut off mid-stream charges only tokens a verified partial receipt proves
    (the node signs one every few dozen tokens), never more than the node made."""
    key = network.new_key("leaver")
    raw = _client(network, key).completions.with_raw_response.create(
        model=MODEL_ID, prompt="In the beginning", max_tokens=1500, temperature=0, stream=True)
    job_id = raw.headers["x-mlxnet-job-id"]
    stream = raw.parse()
    for _ in zip(range(3), stream):
        pass
    stream.close()
    final, tokens = _final_job(network, key, job_id)
    assert final.status == job_pb2.JOB_STATUS_FAILED and final.error_code == "cancelled"
    assert 3 <= len(tokens) < 1500
    with httpx.Client(verify=network.ssl_context(), timeout=60) as http:
        answer = http.get(f"{network.base_url}/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200
    charged = answer.json()["cost"]["charged_base_units"]
    spec = describe_model(MODEL_ID, network.model_dir)
    prices = {price_job(spec.parameter_count, final.prompt_tokens, n).consumer_charge
              for n in range(1, len(tokens) + 1)}
    assert charged == 0 or charged in prices  # the price of some proven count, never above the tokens made
    after = _balance(network, "leaver")
    assert after.debits_pending == 0 and after.available == 10 * MLX - charged


def test_a_prompt_over_the_models_context_is_413_and_costs_nothing(network: GatewayNetwork) -> None:
    key = network.new_key("verbose")
    prompt = "And God said, Let there be light: and there was light. " * 500  # ~6,000 tokens
    with pytest.raises(openai.APIStatusError) as raised:
        _client(network, key).completions.create(model=MODEL_ID, prompt=prompt, max_tokens=8)
    assert raised.value.status_code == 413 and "context" in raised.value.message
    after = _balance(network, "verbose")
    assert after.debits_pending == 0 and after.available == 10 * MLX


def test_grpc_takes_the_same_keys_and_shows_a_consumer_only_its_jobs(network: GatewayNetwork) -> None:
    alice, bob = network.new_key("alice-grpc"), network.new_key("bob-grpc")
    with JobClient(network.grpc_address, api_key="", trust=network.trust) as anonymous:
        with pytest.raises(JobRequestError) as raised:
            anonymous.submit(MODEL_ID, "hello", max_tokens=4)
        assert raised.value.code == "UNAUTHENTICATED"
    with JobClient(network.grpc_address, api_key=alice, trust=network.trust) as client:
        job = client.submit(MODEL_ID, "And Abraham", max_tokens=6)
    final, tokens = _final_job(network, alice, job.job_id)
    assert final.status == job_pb2.JOB_STATUS_COMPLETED and final.reserved_base_units > 0
    with JobClient(network.grpc_address, api_key=bob, trust=network.trust) as client:
        with pytest.raises(JobRequestError) as raised:
            client.get(job.job_id)
        assert raised.value.code == "NOT_FOUND"
    with JobClient(network.grpc_address, api_key=alice, trust=network.trust) as client:
        stub = job_pb2_grpc.JobServiceStub(client._channel)
        metadata = (("authorization", f"Bearer {alice}"),)
        chat = stub.SubmitJob(job_pb2.SubmitJobRequest(
            model=MODEL_ID, messages=[common_pb2.ChatMessage(**m) for m in MESSAGES],
            sampling=common_pb2.SamplingParams(max_tokens=5), logprobs=True, top_logprobs=2),
            metadata=metadata, timeout=30).job
        streamed = list(stub.StreamJob(job_pb2.StreamJobRequest(job_id=chat.job_id),
                                       metadata=metadata, timeout=60))
    entries = [entry for message in streamed for entry in message.logprobs]
    assert streamed[-1].final_job.prompt_format == "chat"
    assert len(entries) == sum(len(m.token_ids) for m in streamed) > 0
    assert all(len(entry.top) == 2 for entry in entries)


def test_grpc_stop_sequences_cut_the_text_and_end_the_job(network: GatewayNetwork) -> None:
    key = network.new_key("stopper")
    metadata = (("authorization", f"Bearer {key}"),)
    with open_channel(network.grpc_address, network.trust)[0] as channel:
        stub = job_pb2_grpc.JobServiceStub(channel)

        def run(max_tokens: int = 16, **fields: object) -> list[job_pb2.StreamJobResponse]:
            job = stub.SubmitJob(job_pb2.SubmitJobRequest(
                model=MODEL_ID, prompt="And God said",
                sampling=common_pb2.SamplingParams(max_tokens=max_tokens), **fields),
                metadata=metadata, timeout=30).job
            return list(stub.StreamJob(job_pb2.StreamJobRequest(job_id=job.job_id),
                                       metadata=metadata, timeout=60))

        full = "".join(message.text for message in run())
        stop = full.split()[2]
        # Room to run on after the stop: with 16 tokens a loaded machine's node could finish
        # (and the job complete) before the stop's cancel arrived.
        cut = run(max_tokens=256, stop=[stop])
    assert "".join(message.text for message in cut) == full[:full.index(stop)]
    assert cut[-1].final_job.error_code == "stop_sequence"
    after = _balance(network, "stopper")
    assert after.debits_pending == 0

