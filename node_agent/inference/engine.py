"""Runs generation with mlx-lm. Only this package imports mlx.

The engine is driven from one thread (the agent's worker): MLX work is never
spread over request threads. Loaded models stay warm, least recently used
first out.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm import load, stream_generate
from mlx_lm.sample_utils import make_sampler

log = logging.getLogger(__name__)

WARM_MODELS_MAX = 2


@dataclass(frozen=True)
class GenerationRequest:
    model_path: str
    prompt: str
    max_tokens: int
    temperature: float
    top_p: float
    seed: int


@dataclass(frozen=True)
class GenerationResult:
    token_ids: tuple[int, ...]
    text: str
    prompt_tokens: int
    started_at_ms: int
    finished_at_ms: int
    stopped_early: bool  # on_token asked to stop (the job was cancelled)


# on_token(index, token_id, text) -> keep going?
TokenSink = Callable[[int, int, str], bool]


class PromptTooLong(ValueError):
    """The prompt and max_tokens do not fit the model's context."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Engine:
    def __init__(self) -> None:
        self._loaded: collections.OrderedDict[str, tuple] = collections.OrderedDict()

    def warm_models(self) -> tuple[str, ...]:
        return tuple(self._loaded)

    def _model(self, path: str) -> tuple:
        if path in self._loaded:
            self._loaded.move_to_end(path)
            return self._loaded[path]
        log.info("loading model %s", path)
        model_and_tokenizer = load(path)
        self._loaded[path] = model_and_tokenizer
        while len(self._loaded) > WARM_MODELS_MAX:
            evicted, _ = self._loaded.popitem(last=False)
            log.info("unloaded model %s", evicted)
        return model_and_tokenizer

    def count_prompt_tokens(self, model_path: str, prompt: str) -> int:
        _, tokenizer = self._model(model_path)
        return len(tokenizer.encode(prompt))

    def generate(self, request: GenerationRequest, max_context_tokens: int,
                 on_token: TokenSink) -> GenerationResult:
        """Generate, handing each token to on_token one step late so its text is final."""
        model, tokenizer = self._model(request.model_path)
        prompt_tokens = self.count_prompt_tokens(request.model_path, request.prompt)
        if prompt_tokens + request.max_tokens > max_context_tokens:
            raise PromptTooLong(f"prompt is {prompt_tokens} tokens; with max_tokens "
                                f"{request.max_tokens} that exceeds the model's context of "
                                f"{max_context_tokens}")
        mx.random.seed(request.seed)
        sampler = make_sampler(temp=request.temperature, top_p=request.top_p)
        started = _now_ms()
        token_ids: list[int] = []
        texts: list[str] = []
        stopped = False
        for response in stream_generate(model, tokenizer, request.prompt,
                                        max_tokens=request.max_tokens, sampler=sampler):
            if response.finish_reason == "stop":  # an end-of-sequence token, not output
                if texts:
                    texts[-1] += response.text  # the detokenizer's final flush
                break
            if texts and not on_token(len(texts) - 1, token_ids[-1], texts[-1]):
                stopped = True
                break
            token_ids.append(int(response.token))
            texts.append(response.text)
        if texts and not stopped:
            on_token(len(texts) - 1, token_ids[-1], texts[-1])
        if stopped:
            del token_ids[len(texts) - 1:], texts[len(texts) - 1:]
        return GenerationResult(tuple(token_ids), "".join(texts), prompt_tokens, started,
                                _now_ms(), stopped)


def device_info() -> dict[str, object]:
    """MLX's view of the device, including the GPU working-set budget on Metal."""
    return dict(mx.device_info())
