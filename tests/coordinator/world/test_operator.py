"""Operator keys and the operator's own page on SQLite and PostgreSQL: own data only, epochs, proofs."""

from __future__ import annotations

import json

import pytest

from coordinator.errors import InvalidRequest, NotFound, PermissionDenied, Unauthenticated
from coordinator.model import JobStatus
from coordinator.verification import store as check_store
from coordinator.verification.store import CheckRecord, CheckStatus, CreditState
from coordinator.world import operator_keys
from coordinator.world.world import World, chain_reader_from_environment
from ledger.anchor import ChainError
from ledger.storage.epoch_store import AnchorRecord, insert_anchor
from ledger.merkle import PayoutLeaf, verify_proof
from tests.coordinator.world.conftest import SECRET_OUTPUT, WorldEnv, add_job, add_node, pay_out_epoch

ALICE_ADDRESS = "0x" + "a1" * 20
BOB_ADDRESS = "0x" + "b2" * 20


def _key(env: WorldEnv, operator: str) -> str:
    with env.session() as session:
        _, text = operator_keys.create_operator_key(session, operator, "test", env.clock.now)
    return text


def _two_operators(env: WorldEnv) -> dict[str, str]:
    now = env.clock.now
    with env.session() as session:
        ids = {"mini": add_node(session, "Alice mini", "alice", now),
               "studio": add_node(session, "Bob studio", "bob", now, profile="m3-ultra-512"),
               "laptop": add_node(session, "Alice laptop", "alice", now)}
        ids["alice_job"] = add_job(session, (ids["mini"],), now, operator="alice", tokens=40)
        ids["bob_job"] = add_job(session, (ids["studio"],), now, operator="bob", tokens=60)
        ids["failed_job"] = add_job(session, (ids["laptop"],), now, status=JobStatus.FAILED)
        ids["pod_job"] = add_job(session, (ids["studio"], ids["laptop"]), now, operator="bob")
    return ids


def test_keys_authenticate_until_revoked(world_env: WorldEnv) -> None:
    text = _key(world_env, "alice")
    assert text.startswith("mlxo_")
    key = world_env.world.authenticate(text)
    assert key.operator_id == "alice"
    with world_env.session() as session:
        operator_keys.revoke_operator_key(session, key.key_id, world_env.clock.now)
        assert [k.key_id for k in operator_keys.operator_keys_of(session, "alice")] == [key.key_id]
    with pytest.raises(Unauthenticated, match="revoked"):
        world_env.world.authenticate(text)


@pytest.mark.parametrize(("key", "needle"), [
    (None, "operator key is required"),
    ("", "operator key is required"),
    ("mlxk_0123456789abcdef_" + "x" * 40, "malformed"),  # a consumer API key is not an operator key
    ("mlxo_0123456789abcdef_" + "x" * 40, "not valid"),
    ("mlxo_" + "x" * 200, "malformed"),
])
def test_bad_keys_are_refused_with_a_reason(world_env: WorldEnv, key: str | None, needle: str) -> None:
    with pytest.raises(Unauthenticated, match=needle):
        world_env.world.authenticate(key)


def test_operator_ids_and_labels_are_checked(world_env: WorldEnv) -> None:
    with world_env.session() as session, pytest.raises(InvalidRequest):
        operator_keys.create_operator_key(session, "has space", "", world_env.clock.now)
    with world_env.session() as session, pytest.raises(InvalidRequest):
        operator_keys.create_operator_key(session, "alice", "x" * 129, world_env.clock.now)


def test_an_operator_declares_regions_for_their_own_macs_only(world_env: WorldEnv) -> None:
    ids = _two_operators(world_env)
    alice = world_env.world.authenticate(_key(world_env, "alice"))
    world_env.world.set_region(alice, ids["mini"], "Europe/Lisbon")
    assert world_env.world.fleet_page({"region": "Europe/Lisbon"})["nodes"][0]["name"] == "Alice mini"
    with pytest.raises(PermissionDenied):
        world_env.world.set_region(alice, ids["studio"], "Europe/Lisbon")
    with pytest.raises(NotFound):
        world_env.world.set_region(alice, "node-nope", "Europe/Lisbon")
    for bad in ("", " ", "<script>", "x" * 65):
        with pytest.raises(InvalidRequest):
            world_env.world.set_region(alice, ids["mini"], bad)
    world_env.world.set_region(alice, ids["mini"], None)
    assert world_env.world.fleet_page({"region": "Europe/Lisbon"})["total"] == 0


def test_an_operator_sees_their_own_macs_jobs_and_balance_only(world_env: WorldEnv) -> None:
    ids = _two_operators(world_env)
    alice = world_env.world.authenticate(_key(world_env, "alice"))
    summary = world_env.world.operator_summary(alice)
    assert summary["operator_id"] == "alice"
    assert sorted(n["name"] for n in summary["nodes"]) == ["Alice laptop", "Alice mini"]
    assert int(summary["balance"]["available"]["base_units"]) > 0
    jobs = world_env.world.operator_jobs(alice, {})
    by_id = {job["job_id"]: job for job in jobs["jobs"]}
    assert set(by_id) == {ids["alice_job"], ids["failed_job"], ids["pod_job"]}
    assert by_id[ids["alice_job"]]["pay_state"] == "paid"
    assert by_id[ids["failed_job"]]["pay_state"] == "unpaid"
    assert "out of memory" in by_id[ids["failed_job"]]["pay_reason"]
    pod = by_id[ids["pod_job"]]  # bob's node signed, so bob was paid; alice sees only her own Mac
    assert pod["nodes"] == [{"node_id": ids["laptop"], "name": "Alice laptop"}] and pod["pay_state"] == "unpaid"
    assert SECRET_OUTPUT not in json.dumps(jobs) and "prompt" not in json.dumps(jobs).replace("prompt_tokens", "")
    with pytest.raises(InvalidRequest):
        world_env.world.operator_jobs(alice, {"page_size": "1000"})


def test_epochs_split_job_pay_from_the_ultra_seat_bonus_and_prove_each_payout(world_env: WorldEnv) -> None:
    ids = _two_operators(world_env)
    with world_env.session() as session:
        number = pay_out_epoch(session, {"alice": ALICE_ADDRESS, "bob": BOB_ADDRESS})
    alice = world_env.world.authenticate(_key(world_env, "alice"))
    bob = world_env.world.authenticate(_key(world_env, "bob"))
    epochs = world_env.world.operator_epochs(alice, {})["epochs"]
    open_window, closed = epochs[0], epochs[1]
    assert open_window["closed"] is False and closed["epoch"] == number
    earned = int(closed["earnings"]["jobs"]["base_units"])
    assert earned > 0 and closed["earnings"]["paid_out"]["base_units"] == str(earned)
    assert closed["earnings"]["seat_reward"]["base_units"] == "0"  # no Ultra seat: no bonus, shown apart
    assert closed["payout"]["address"] == ALICE_ADDRESS
    proof = world_env.world.operator_proof(alice, number)
    leaf = PayoutLeaf(number, ALICE_ADDRESS, int(proof["amount"]["base_units"]))
    root = bytes.fromhex(proof["root"][2:])
    assert proof["root_source"] == "ledger" and proof["root"] == closed["root"]
    assert verify_proof(leaf, [bytes.fromhex(p[2:]) for p in proof["proof"]], root)
    bobs = world_env.world.operator_proof(bob, number)
    assert bobs["address"] == BOB_ADDRESS and bobs["root"] == proof["root"] and bobs["leaf"] != proof["leaf"]
    carol = world_env.world.authenticate(_key(world_env, "carol"))
    with pytest.raises(NotFound, match="paid nothing"):
        world_env.world.operator_proof(carol, number)
    with pytest.raises(NotFound, match="not closed"):
        world_env.world.operator_proof(alice, number + 10)
    assert ids  # the fleet the epoch paid for


class FakeChain:
    chain_id = 31337
    distributor_address = "0x" + "d" * 40

    def __init__(self, root: bytes | None, fail: bool = False) -> None:
        self.root, self.fail, self.asked = root, fail, []

    def epoch_root(self, epoch: int) -> bytes | None:
        self.asked.append(epoch)
        if self.fail:
            raise ChainError("payout chain call failed: connection refused")
        return self.root


def test_the_root_comes_from_the_chain_then_the_anchor_then_the_ledger(world_env: WorldEnv) -> None:
    _two_operators(world_env)
    with world_env.session() as session:
        number = pay_out_epoch(session, {"alice": ALICE_ADDRESS})
    alice = world_env.world.authenticate(_key(world_env, "alice"))
    ledger_root = world_env.world.operator_proof(alice, number)["root"]
    chain = FakeChain(bytes.fromhex(ledger_root[2:]))
    on_chain = World(world_env.service, chain).operator_proof(alice, number)
    assert (on_chain["root_source"], on_chain["chain_id"], chain.asked) == ("chain", 31337, [number])
    with world_env.session() as session:
        insert_anchor(session, AnchorRecord(number, 61, "0x" + "e" * 40, ledger_root, "0x" + "f" * 64, 12, 50_000, 1))
    down = World(world_env.service, FakeChain(None, fail=True)).operator_proof(alice, number)
    assert (down["root_source"], down["block_number"], down["root"]) == ("anchor", 12, ledger_root)
    unpublished = World(world_env.service, FakeChain(None)).operator_proof(alice, number)
    assert unpublished["root_source"] == "anchor"


def test_the_page_reads_each_root_from_the_chain_and_says_when_it_differs(world_env: WorldEnv) -> None:
    _two_operators(world_env)
    with world_env.session() as session:
        number = pay_out_epoch(session, {"alice": ALICE_ADDRESS})
    alice = world_env.world.authenticate(_key(world_env, "alice"))
    ledger_root = world_env.world.operator_proof(alice, number)["root"]

    def closed(world: World) -> dict[str, object]:
        return next(e for e in world.operator_epochs(alice, {})["epochs"] if e["epoch"] == number)

    same = FakeChain(bytes.fromhex(ledger_root[2:]))
    assert closed(World(world_env.service, same))["chain"] == {
        "check": "matches", "root": ledger_root, "chain_id": 31337, "distributor": FakeChain.distributor_address}
    forged = FakeChain(b"\x42" * 32)  # the chain holds another root than the coordinator's database
    world = World(world_env.service, forged)
    listed = closed(world)["chain"]
    assert listed["check"] == "differs" and listed["root"] == "0x" + "42" * 32  # type: ignore[index]
    proof = world.operator_proof(alice, number)
    assert (proof["chain_check"], proof["root_source"], proof["root"], proof["ledger_root"]) == (
        "differs", "chain", "0x" + "42" * 32, ledger_root)
    leaf = PayoutLeaf(number, ALICE_ADDRESS, int(proof["amount"]["base_units"]))
    assert not verify_proof(leaf, [bytes.fromhex(p[2:]) for p in proof["proof"]], b"\x42" * 32)
    closed(world)
    assert forged.asked.count(number) == 2  # the list is cached a few seconds; the proof reads the chain now
    with world_env.session() as session:
        insert_anchor(session, AnchorRecord(number, 61, "0x" + "e" * 40, ledger_root, "0x" + "f" * 64, 12, 50_000, 1))
    gone = World(world_env.service, FakeChain(None))  # recorded as anchored, but not on chain (a reorg)
    assert closed(gone)["chain"]["check"] == "not_on_chain"  # type: ignore[index]
    assert gone.operator_proof(alice, number)["chain_check"] == "not_on_chain"
    down = World(world_env.service, FakeChain(None, fail=True))
    assert closed(down)["chain"]["check"] == "unreachable"  # type: ignore[index]
    assert closed(world_env.world)["chain"]["check"] == "no_chain"  # type: ignore[index]


def test_an_operator_reads_why_a_check_held_or_refused_their_pay(world_env: WorldEnv) -> None:
    ids = _two_operators(world_env)
    now = world_env.clock.now
    with world_env.session() as session:
        check_store.insert_check(session, CheckRecord(
            job_id=ids["alice_job"], node_id=ids["mini"], operator_id="alice", status=CheckStatus.UNCHECKED,
            check_rate=0.03, sampled=False, operator_credit=5, credit_state=CreditState.PENDING,
            hold_until_ms=now + 60_000, completed_at_ms=now, reason="not sampled at a 3% check rate"))
    alice = world_env.world.authenticate(_key(world_env, "alice"))
    job = next(j for j in world_env.world.operator_jobs(alice, {})["jobs"] if j["job_id"] == ids["alice_job"])
    assert job["check"] == {"status": "unchecked", "reason": "not sampled at a 3% check rate",
                            "hold_until_ms": now + 60_000, "checked_at_ms": None}


def test_a_misconfigured_chain_falls_back_to_the_recorded_root(world_env: WorldEnv,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _two_operators(world_env)
    with world_env.session() as session:
        number = pay_out_epoch(session, {"alice": ALICE_ADDRESS})
    alice = world_env.world.authenticate(_key(world_env, "alice"))
    monkeypatch.delenv("MLXNET_PAYOUT_RPC_URL", raising=False)
    assert chain_reader_from_environment() is None  # no real chain configured: anchors are the source
    monkeypatch.setenv("MLXNET_PAYOUT_RPC_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("MLXNET_PAYOUT_DISTRIBUTOR", raising=False)  # the URL without its contract
    reader = chain_reader_from_environment()
    assert reader is not None
    proof = World(world_env.service, reader).operator_proof(alice, number)
    assert proof["root_source"] == "ledger"
