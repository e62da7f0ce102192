"""The browser's proof check (static/merkle.js) in real Chromium, against the ledger's own tree and hashes."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from eth_hash.auto import keccak

from coordinator.world.earnings import LEAF_ENCODING
from ledger.merkle import PayoutLeaf, build_tree

STATIC = Path(__file__).resolve().parents[3] / "coordinator" / "world" / "static"
ORIGIN = "http://world.test"


@pytest.fixture(scope="module")
def page(browser) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """A page whose origin serves the static files from disk, so merkle.js loads as a module."""
    context = browser.new_context()
    opened = context.new_page()

    def serve(route) -> None:  # type: ignore[no-untyped-def]
        name = route.request.url.removeprefix(f"{ORIGIN}/")
        if name == "":
            route.fulfill(status=200, content_type="text/html", body="<!doctype html><title>merkle</title>")
        else:
            route.fulfill(status=200, content_type="text/javascript", body=(STATIC / name).read_text())
    opened.route(f"{ORIGIN}/**", serve)
    opened.goto(f"{ORIGIN}/")
    yield opened
    context.close()


def _run(page, script: str, argument: object) -> object:  # type: ignore[no-untyped-def]
    return page.evaluate(f"async (arg) => {{ const m = await import('{ORIGIN}/merkle.js'); {script} }}", argument)


def test_keccak256_and_sha256_match_python_across_block_boundaries(page) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(3)
    messages = [bytes(rng.randrange(256) for _ in range(n)) for n in (0, 1, 31, 32, 55, 56, 63, 64, 65, 135, 136,
                                                                     137, 271, 272, 300)]
    digests = _run(page, "return arg.map((hex) => [m.toHex(m.keccak256(m.fromHex(hex))), "
                         "m.toHex(m.sha256(m.fromHex(hex)))]);", ["0x" + msg.hex() for msg in messages])
    assert digests == [["0x" + keccak(msg).hex(), "0x" + hashlib.sha256(msg).hexdigest()] for msg in messages]


def _cases(seed: int) -> list[dict[str, object]]:
    """Trees of 1 to 40 leaves, amounts past 2**53, and for each a leaf with its proof."""
    rng = random.Random(seed)
    cases = []
    for size in (1, 2, 3, 5, 8, 13, 40):
        epoch = rng.randrange(2**40)
        leaves = [PayoutLeaf(epoch, "0x" + rng.randbytes(20).hex(), rng.randrange(1, 2**63)) for _ in range(size)]
        tree = build_tree(leaves)
        leaf = rng.choice(leaves)
        cases.append({"hashName": "keccak256", "leafEncoding": LEAF_ENCODING,
                      "leaf": {"epoch": str(leaf.epoch), "address": leaf.address, "amount": str(leaf.amount)},
                      "proof": ["0x" + p.hex() for p in tree.proof(leaf)], "root": "0x" + tree.root.hex()})
    return cases


def _flip(hex_text: str) -> str:
    last = hex_text[-1]
    return hex_text[:-1] + ("0" if last != "0" else "1")


def test_proofs_from_the_ledger_verify_in_the_browser(page) -> None:  # type: ignore[no-untyped-def]
    results = _run(page, "return arg.map((c) => m.verifyProof(c));", _cases(1))
    assert all(result["ok"] for result in results), results  # type: ignore[union-attr]


def test_every_kind_of_tampering_fails(page) -> None:  # type: ignore[no-untyped-def]
    tampered = []
    for case in _cases(2):
        leaf = case["leaf"]
        assert isinstance(leaf, dict)
        tampered += [
            {**case, "leaf": {**leaf, "amount": str(int(leaf["amount"]) + 1)}},
            {**case, "leaf": {**leaf, "epoch": str(int(leaf["epoch"]) + 1)}},
            {**case, "leaf": {**leaf, "address": _flip(leaf["address"])}},
            {**case, "root": _flip(str(case["root"]))},
        ]
        proof = case["proof"]
        assert isinstance(proof, list)
        if proof:
            tampered.append({**case, "proof": [_flip(proof[0]), *proof[1:]]})
            tampered.append({**case, "proof": proof[:-1]})
    results = _run(page, "return arg.map((c) => m.verifyProof(c));", tampered)
    assert not any(result["ok"] for result in results)  # type: ignore[union-attr]


def test_malformed_input_is_a_failure_with_a_reason_not_an_exception(page) -> None:  # type: ignore[no-untyped-def]
    case = _cases(3)[2]
    bad = [{**case, "root": "0x1234"}, {**case, "proof": ["not hex"]},
           {**case, "leaf": {**case["leaf"], "amount": "-1"}},  # type: ignore[dict-item]
           {**case, "hashName": "md5"}, {**case, "leafEncoding": "something else"}]
    results = _run(page, "return arg.map((c) => m.verifyProof(c));", bad)
    assert [r["ok"] for r in results] == [False] * 5  # type: ignore[index]
    assert all(r["problem"] for r in results)  # type: ignore[index]
