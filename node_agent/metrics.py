"""The node's own Prometheus metrics, served on a local port only when asked (--metrics-port).

What the coordinator cannot label without node ids is served here, by the node itself:

    mlxnet:num_requests_running          jobs generating now (the batch size)
    mlxnet:node_kv_cache_bytes           KV cache held by those jobs, estimated from their tokens
    mlxnet:prompt_tokens_total           prompt tokens of jobs started here
    mlxnet:generation_tokens_total       tokens generated here
    mlxnet:node_decode_tokens_per_second the last job's decode speed (first token to last)
    mlxnet:node_hand_backs_total         jobs handed back unfinished (the owner came back)
    mlxnet:prefix_cache_queries_total    prompt tokens looked up in the prompt cache (as vLLM's, in tokens)
    mlxnet:prefix_cache_hits_total       of those, tokens reused from it (a shared system prompt, a chat history)

Recording is in memory and safe from any thread; nothing is served unless serve() is called.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics, start_http_server

from contracts.models import ModelSpec

disable_created_metrics()
PREFIX = "mlxnet:"
RUNNING = PREFIX + "num_requests_running"
KV_CACHE_BYTES = PREFIX + "node_kv_cache_bytes"
PROMPT_TOKENS = PREFIX + "prompt_tokens"
GENERATION_TOKENS = PREFIX + "generation_tokens"
DECODE_TOKENS_PER_S = PREFIX + "node_decode_tokens_per_second"
HAND_BACKS = PREFIX + "node_hand_backs"
PREFIX_CACHE_QUERIES = PREFIX + "prefix_cache_queries"
PREFIX_CACHE_HITS = PREFIX + "prefix_cache_hits"
JOBS_TRACKED_MAX = 1_024  # far above any node's concurrency; a bound keeps a leak from growing


def kv_bytes_per_token(model: ModelSpec) -> int:
    """Keys and values for every layer: 2 x layers x kv heads x head dim x bytes per element."""
    return 2 * model.num_layers * model.num_kv_heads * model.head_dim * model.kv_bytes_per_element


@dataclass
class _Job:
    model_id: str
    kv_bytes_per_token: int
    tokens_held: int = 0  # prompt and generated tokens in its KV cache
    generated: int = 0
    first_token_s: float | None = None
    last_token_s: float | None = None


class NodeMetrics:
    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        model = ("model_name",)
        running = Gauge(RUNNING, "Jobs generating on this node now (its batch size).",
                        registry=registry)
        running.set_function(lambda: len(self._jobs))
        kv = Gauge(KV_CACHE_BYTES, "KV cache bytes held by the jobs generating now, estimated "
                   "from their tokens and their models' shapes.", registry=registry)
        kv.set_function(self._kv_bytes)
        self.prompt_tokens = Counter(PROMPT_TOKENS, "Prompt tokens of jobs run here.", model,
                                     registry=registry)
        self.generation_tokens = Counter(GENERATION_TOKENS, "Tokens generated here.", model,
                                         registry=registry)
        self.decode_tokens_per_s = Gauge(DECODE_TOKENS_PER_S, "The last finished job's decode "
                                         "speed, first token to last.", model, registry=registry)
        self.hand_backs = Counter(HAND_BACKS, "Jobs handed back unfinished (the owner came back, "
                                  "or the operator's terms stopped them).", registry=registry)
        self.prefix_cache_queries = Counter(PREFIX_CACHE_QUERIES, "Prompt tokens looked up in the "
                                            "prompt cache.", model, registry=registry)
        self.prefix_cache_hits = Counter(PREFIX_CACHE_HITS, "Prompt tokens reused from the prompt "
                                         "cache (a shared prefix's KV cache).", model, registry=registry)

    def _kv_bytes(self) -> int:
        with self._lock:
            return sum(job.tokens_held * job.kv_bytes_per_token for job in self._jobs.values())

    def job_started(self, job_id: str, model: ModelSpec) -> None:
        with self._lock:
            if len(self._jobs) < JOBS_TRACKED_MAX:
                self._jobs[job_id] = _Job(model.model_id, kv_bytes_per_token(model))

    def prompt_counted(self, job_id: str, tokens: int) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None:
                job.tokens_held += tokens
                self.prompt_tokens.labels(job.model_id).inc(tokens)

    def prompt_cache_looked_up(self, job_id: str, prompt_tokens: int, reused_tokens: int) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None:
                self.prefix_cache_queries.labels(job.model_id).inc(prompt_tokens)
                self.prefix_cache_hits.labels(job.model_id).inc(reused_tokens)

    def token_made(self, job_id: str) -> None:
        now = time.monotonic()
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return
            job.tokens_held += 1
            job.generated += 1
            job.first_token_s = job.first_token_s or now
            job.last_token_s = now
            self.generation_tokens.labels(job.model_id).inc()

    def job_ended(self, job_id: str) -> None:
        with self._lock:
            job = self._jobs.pop(job_id, None)
        if job is None or job.first_token_s is None or job.last_token_s is None or job.generated < 2:
            return
        decode_s = job.last_token_s - job.first_token_s
        if decode_s > 0:
            self.decode_tokens_per_s.labels(job.model_id).set((job.generated - 1) / decode_s)

    def handed_back(self) -> None:
        self.hand_backs.inc()

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve /metrics on host:port (0 picks one) from a daemon thread; returns the port."""
        server, _thread = start_http_server(port, host, registry=self.registry)
        return int(server.server_port)
