"""MLX World end to end: a real coordinator (gateway at /world) and node agents, driven in headless Chromium.

Screenshots at 1280x800 and 390x844 go to artifacts/world/ (gitignored).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from contracts.tls import CoordinatorTrust
from coordinator.storage.database import Database
from coordinator.storage.tables import job_assignments, jobs, nodes
from coordinator.world import operator_keys
from ledger.epochs import set_payout_address
from mlxnet.consumer import JobClient, StreamedTokens
from mlxnet.processes import Child, spawn_node, start_coordinator, start_nodes, wait_until_registered
from tests.conftest import fresh_postgres_database
from tests.coordinator.world.conftest import spki_pin

pytestmark = pytest.mark.e2e

MODEL_ID = "test/tiny-llama"
PROMPT = "And the LORD said unto Abram, zebra quartz"
ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts" / "world"
SIZES = ((1280, 800), (390, 844))
UI_WAIT_MS = 90_000  # live updates arrive within a second or two; this bounds a stuck test
JOB_TIMEOUT_S = 120
ADDRESSES = {"alice": "0x" + "a1" * 20, "bob": "0x" + "b2" * 20}
EPOCH_LENGTH_S = "2"  # the coordinator closes an epoch every 2 s and anchors its root on its chain


@dataclass
class WorldNetwork:
    name: str
    work_dir: Path
    database_url: str
    model_dir: Path
    coordinator: Child
    nodes: list[Child]
    keys: dict[str, str]

    @property
    def url(self) -> str:
        return f"{self.coordinator.extra['url']}/world"  # https: MLX World is served over TLS


@pytest.fixture(scope="module")
def browser_args(world_network: WorldNetwork) -> list[str]:
    """Chromium trusts the coordinator's self-signed certificate by its pinned key, nothing else."""
    return [f"--ignore-certificate-errors-spki-list={spki_pin(world_network.coordinator.extra['certificate'])}"]


def _prepare_operators(database_url: str) -> dict[str, str]:
    db = Database(database_url)
    try:
        with db.transaction() as session:
            for operator, address in ADDRESSES.items():
                set_payout_address(session, operator, address)
            return {operator: operator_keys.create_operator_key(session, operator, "e2e", 1)[1]
                    for operator in ("alice", "bob")}
    finally:
        db.dispose()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def world_network(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                  tiny_model_dir: Path) -> Iterator[WorldNetwork]:
    work_dir = tmp_path_factory.mktemp(f"world-{request.param}")
    with contextlib.ExitStack() as stack:
        database_url = (f"sqlite:///{work_dir / 'coordinator.db'}" if request.param == "sqlite"
                        else stack.enter_context(fresh_postgres_database()))
        # The verifier replays each new Mac's first jobs, so their credits post within seconds.
        coordinator = start_coordinator(work_dir, database_url=database_url, heartbeat_interval_ms=500,
                                        allow_anonymous=True, env={"MLXNET_EPOCH_LENGTH_S": EPOCH_LENGTH_S},
                                        verify_models=(f"{MODEL_ID}={tiny_model_dir}",))
        network = WorldNetwork(request.param, work_dir, database_url, tiny_model_dir, coordinator, [], {})
        try:
            network.keys = _prepare_operators(database_url)
            model = [f"{MODEL_ID}={tiny_model_dir}"]
            network.nodes = start_nodes(work_dir, coordinator.extra["address"],
                                        [("alice-mini", model, "m4-pro-64", "alice"),
                                         ("bob-studio", model, "m3-ultra-512", "bob")],
                                        coordinator.trust)
            yield network
        finally:
            for child in [*network.nodes, coordinator]:
                child.stop()


@pytest.fixture(scope="module")
def pages(browser, world_network: WorldNetwork) -> Iterator[dict[tuple[int, int], object]]:  # type: ignore[no-untyped-def]
    """One page per screen size; the first is 1280x800."""
    contexts = [browser.new_context(viewport={"width": w, "height": h}) for w, h in SIZES]
    opened = {size: context.new_page() for size, context in zip(SIZES, contexts)}
    for page in opened.values():
        page.set_default_timeout(UI_WAIT_MS)
    yield opened
    for context in contexts:
        context.close()


def _shoot(page, network: WorldNetwork, name: str) -> None:  # type: ignore[no-untyped-def]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size
    path = ARTIFACTS / f"{name}-{size['width']}x{size['height']}-{network.name}.png"
    page.screenshot(path=str(path), full_page=False)
    assert path.stat().st_size > 0


def _run_job(address: str, trust: CoordinatorTrust) -> tuple[str, str]:
    with JobClient(address, trust=trust) as client:
        job = client.submit(MODEL_ID, PROMPT, max_tokens=16)
        text = "".join(item.text for item in client.stream(job.job_id) if isinstance(item, StreamedTokens))
    return job.job_id, text


def _operator_of_jobs(database_url: str, completed_only: bool = True) -> dict[str, set[str]]:
    """Job id -> the operators of the Macs it ran (or was placed) on."""
    db = Database(database_url)
    try:
        with db.transaction() as session:
            rows = session.execute(
                select(jobs.c.job_id, nodes.c.operator_id)
                .join(job_assignments, (job_assignments.c.job_id == jobs.c.job_id)
                      & (job_assignments.c.attempt == jobs.c.attempt))
                .join(nodes, nodes.c.node_id == job_assignments.c.node_id)
                .where(jobs.c.status == "completed" if completed_only else jobs.c.job_id.is_not(None))).all()
    finally:
        db.dispose()
    found: dict[str, set[str]] = {}
    for job_id, operator in rows:
        found.setdefault(job_id, set()).add(operator)
    return found


def test_a_newly_joined_mac_appears_without_reload(world_network: WorldNetwork, pages) -> None:  # type: ignore[no-untyped-def]
    for page in pages.values():
        page.goto(world_network.url + "#/fleet")
        page.locator(".fleet-row .name", has_text="bob-studio").wait_for()
        page.locator("#live[data-state='live']").wait_for()
        page.evaluate("window.__sameDocument = true")
    child = spawn_node(world_network.work_dir, "carol-max", world_network.coordinator.extra["address"],
                       [f"{MODEL_ID}={world_network.model_dir}"], profile="m4-max-128", operator="carol",
                       trust=world_network.coordinator.trust)
    world_network.nodes.append(child)
    wait_until_registered(child)
    for page in pages.values():
        row = page.locator(".fleet-row", has=page.locator(".name", has_text="carol-max"))
        row.wait_for()
        assert page.evaluate("window.__sameDocument") is True  # it arrived live: the page never reloaded
        assert "Apple M4 Max" in row.inner_text()
        page.locator("#total-macs .tile-value", has_text="3").wait_for()
        _shoot(page, world_network, "fleet")


def test_a_jobs_placement_and_receipt_are_shown(world_network: WorldNetwork, pages) -> None:  # type: ignore[no-untyped-def]
    address = world_network.coordinator.extra["address"]
    ran: dict[str, set[str]] = {}
    for _ in range(5):  # until both alice's and bob's Macs have run a job (each takes one at a time)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(_run_job, address, world_network.coordinator.trust) for _ in range(4)]
            outputs = dict(future.result(timeout=JOB_TIMEOUT_S) for future in futures)
        ran = _operator_of_jobs(world_network.database_url)
        if {"alice", "bob"} <= set().union(*ran.values()):
            break
    assert {"alice", "bob"} <= set().union(*ran.values())
    job_id, output = next(iter(outputs.items()))
    for page in pages.values():
        page.goto(f"{world_network.url}#/jobs/{job_id}")
        page.locator("#check-status", has_text="receipt verified").wait_for()
        placement = page.locator("#placement").inner_text()
        assert "chosen" in placement and any(name in placement for name in ("alice-mini", "bob-studio", "carol-max"))
        assert "Needs" in placement and "Macs considered" in placement
        receipt = page.locator("#receipt").inner_text()
        assert "yes: signature, model, sampling and tokens match" in receipt and "Signature" in receipt
        assert "Proof check" in receipt
        assert "16 generated" in receipt or "generated (end token)" in receipt
        content = page.content()
        assert PROMPT not in content and (not output.strip() or output not in content)
        _shoot(page, world_network, "job")


def _sign_in(page, network: WorldNetwork, operator: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(network.url + "#/operator")
    page.evaluate("sessionStorage.clear()")
    page.reload()
    page.fill("#operator-key", network.keys[operator])
    page.click("form.signin button[type=submit]")
    page.locator("#operator-id", has_text=operator).wait_for()


def test_an_operator_sees_their_own_earnings_and_not_others(world_network: WorldNetwork, pages) -> None:  # type: ignore[no-untyped-def]
    page = pages[SIZES[0]]
    ran = _operator_of_jobs(world_network.database_url)
    for operator, other in (("alice", "bob"), ("bob", "alice")):
        _sign_in(page, world_network, operator)
        macs = page.locator("section[aria-labelledby='op-nodes-title']").inner_text()
        assert f"{operator}-" in macs and f"{other}-" not in macs
        page.locator("#operator-jobs tr[data-job-id]").first.wait_for()
        shown = set(page.eval_on_selector_all("#operator-jobs tr[data-job-id]", "rows => rows.map(r => r.dataset.jobId)"))
        placed = _operator_of_jobs(world_network.database_url, completed_only=False)
        assert shown and all(operator in placed[job_id] for job_id in shown)  # only jobs on their own Macs
        mine = {job_id for job_id, operators in ran.items() if operator in operators}
        assert mine <= shown or len(shown) == 25  # and every one of them, up to the first page
        # The verifier's replay posts the held credit; the page refreshes itself at each epoch's close.
        page.locator("#operator-jobs .check-paid").first.wait_for()
        page.locator("#balance-earned .tile-value", has_text=re.compile(r"[1-9].* MLX")).wait_for()
        assert "passed its replay check" in page.locator("#operator-jobs").inner_text()


def test_the_payout_proof_verifies_in_the_browser_and_a_tampered_one_does_not(world_network: WorldNetwork,
                                                                              pages) -> None:  # type: ignore[no-untyped-def]
    for page in pages.values():
        _sign_in(page, world_network, "alice")
        # An epoch closes every 2 s; the page refreshes itself when one does and when its root is on chain.
        row = page.locator("#epochs tr", has=page.locator("td.root-state.anchored")).filter(
            has=page.locator(".proof-button")).first
        row.wait_for()
        page.locator("#operator-jobs tr[data-job-id]").first.wait_for()
        _shoot(page, world_network, "operator")
        row.locator(".proof-button").click()
        assert "on chain, matches the ledger" in row.locator("td.root-state").inner_text()
        page.locator("#proof-root").wait_for()
        # The root comes from the coordinator's anvil through its RPC, not from the database.
        assert "read from the distributor on chain 31337 now" in page.locator("#proof").inner_text()
        assert page.locator("#root-differs").count() == 0
        page.click("#verify-proof")
        page.locator("#proof-result.ok", has_text="Verified").wait_for()
        _shoot(page, world_network, "operator-proof")
        amount = page.input_value("#proof-amount")
        page.fill("#proof-amount", str(int(amount) + 1))
        page.click("#verify-proof")
        page.locator("#proof-result.bad", has_text="Does not verify").wait_for()
        page.fill("#proof-amount", amount)
        page.click("#verify-proof")
        page.locator("#proof-result.ok").wait_for()
        siblings = page.input_value("#proof-siblings")
        root = page.input_value("#proof-root")
        page.fill("#proof-root", root[:-1] + ("0" if root[-1] != "0" else "1"))
        page.click("#verify-proof")
        page.locator("#proof-result.bad").wait_for()
        page.fill("#proof-root", root)
        if siblings.strip():
            page.fill("#proof-siblings", siblings.strip()[:-1] + ("0" if siblings.strip()[-1] != "0" else "1"))
            page.click("#verify-proof")
            page.locator("#proof-result.bad").wait_for()
        _shoot(page, world_network, "operator-tampered")


# Every control needs a name a screen reader can say; every drawing a text alternative.
_UNNAMED = """() => [...document.querySelectorAll('input, select, textarea, button, [role=img], a')]
  .filter((el) => !(el.labels?.length || el.getAttribute('aria-label') || el.getAttribute('aria-labelledby')
                    || el.getAttribute('title') || el.textContent.trim()))
  .map((el) => el.outerHTML.slice(0, 120))"""


def test_public_pages_show_no_keys_prompts_or_outputs(world_network: WorldNetwork, pages) -> None:  # type: ignore[no-untyped-def]
    page = pages[SIZES[0]]
    page.goto(world_network.url + "#/pods")
    page.evaluate("sessionStorage.clear()")
    for route in ("#/fleet", "#/pods", "#/jobs", "#/operator"):
        page.goto(world_network.url + route)
        page.locator("#view h2").wait_for()
        assert page.evaluate(_UNNAMED) == [], route
        assert page.evaluate("document.documentElement.lang") == "en"
        content = page.content()
        assert PROMPT not in content
        assert not any(key in content for key in world_network.keys.values())
        assert not re.search(r"mlx[ok]_[0-9a-f]{16}_", content)  # no key of any kind
    _shoot(page, world_network, "pods")
