"""The project's own tiny language model: built, not downloaded, in seconds.

Not runtime inference: `make demo` and `mlxnet model build-tiny` build it as the default
model, every node builds it as its self-benchmark's reference, and tests and benchmarks
build it to run real MLX. Same seed and architecture, same bytes.

    builder.py   build_tiny_model: corpus statistics -> tokenizer, weights, model directory
    corpus/      the text it is built from (Genesis 1-22, King James Version), and its source
"""

from node_agent.tiny_model.builder import ARCHITECTURES, CORPUS_PATH, build_tiny_model

__all__ = ["ARCHITECTURES", "CORPUS_PATH", "build_tiny_model"]
