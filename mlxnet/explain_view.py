"""Renders a placement explanation (the JSON a job carries) for people."""

from __future__ import annotations

import json

MB = 1_000_000


def render_explanation(explanation_json: str, names: dict[str, str] | None = None) -> str:
    """A few lines: what the job needs, what was filtered and why, who scored best."""
    if not explanation_json:
        return "  (no placement decision recorded)"
    data = json.loads(explanation_json)
    names = names or {}
    memory = data["memory"]
    macs = data["macs"]
    filtered = ", ".join(f"{count} {reason}" for reason, count in macs["filtered"].items())
    lines = [
        f"  needs {memory['total_bytes'] / MB:,.1f} MB (weights {memory['weights_bytes'] / MB:,.1f}"
        f" + KV {memory['kv_cache_bytes'] / MB:,.1f} + overhead {memory['overhead_bytes'] / MB:,.1f})",
        f"  {macs['total']} Macs: {macs['feasible']} could take it"
        + (f"; filtered: {filtered}" if filtered else ""),
    ]
    for rank, candidate in enumerate(data["top_candidates"][:3], start=1):
        scores = " ".join(f"{name}={value:.2f}" for name, value in candidate["scores"].items())
        label = names.get(candidate["id"], candidate["id"])
        lines.append(f"  #{rank} {label}: total {candidate['total']:.3f} ({scores}), "
                     f"~{candidate['predicted_decode_tokens_per_s']:,.0f} tok/s predicted")
    return "\n".join(lines)
