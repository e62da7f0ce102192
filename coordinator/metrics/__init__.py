"""Prometheus metrics for those who run a coordinator, served at /metrics on its HTTP port.

    names.py      every metric's name, help text and labels, and the histogram buckets
    timing.py     pure: a finished job's request figures (finish reason, TTFT, queue, latency)
    recorder.py   the process's registry, and the few recording calls the service makes
    readings.py   the network's figures read from the database at scrape time (Macs by state,
                  queue, checks, credits, ledger transfers), as a Prometheus collector

Names follow vLLM's (`vllm:time_to_first_token_seconds` is `mlxnet:time_to_first_token_seconds`),
labelled by model_name, so existing dashboards adapt by a rename. Labels are bounded: no job or
node ids; per-node figures are served by the node agent itself (node_agent/metrics.py).
"""
