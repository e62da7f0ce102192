"""MLX World: every Mac in the network, live, in the browser; and each operator's own earnings.

    routes.py          the HTTP edge (FastAPI): /world, /world/api/..., mount_world(app, service)
    world.py           use cases: one read transaction each, the proof tree cache, the chain root
    live.py            one reader thread -> server-sent events for every open page
    queries.py         SQL for the public pages (fleet pages, facets, pods, totals)
    job_lookup.py      SQL for one job's public page
    operator_view.py   SQL for an operator's page (their Macs, jobs, epochs, payout leaves)
    operator_keys.py   operator keys (mlxo_...) and operator-declared regions
    fleet.py, totals.py, earnings.py, public_job.py   pure: what is shown, and how it is computed
    tables.py          operator_keys and node_regions
    static/            the web app (plain HTML, CSS and JavaScript modules; no build step)

The JSON API is documented in API.md beside this file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator.world.world import World

__all__ = ["mount_world"]


def mount_world(app: Any, service: Any, chain: Any = None) -> World:
    """Serve MLX World on the gateway's FastAPI app (see routes.mount_world).

    Imported lazily, so the keys CLI and migrations can use this package without FastAPI.
    """
    from coordinator.world.routes import mount_world as mount

    return mount(app, service, chain)
