"""The demo's last act: an epoch closes, its root is anchored on the coordinator's own anvil, and
an operator checks their payout against the chain and claims it, as they would by hand.

The operators' payout addresses are anvil's public development accounts, whose keys everyone
knows: fine for a demo chain that lives in the demo's directory, never for a real one.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from mlxnet.processes import Child

# anvil's development accounts 1-3 (from its well-known test mnemonic), one per demo operator.
PAYOUT_KEYS = {
    "alice": "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "bob": "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "carol": "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
}
PAYOUT_ADDRESSES = {
    "alice": "0x70997970c51812dc3a010c7d01b50e0d17dc79c8",
    "bob": "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc",
    "carol": "0x90f79bf6eb2c4f870365e785982e1f101e93b906",
}
EPOCH_LENGTH_S = 3  # the demo closes an epoch every few seconds (a real network: an hour)
ANCHOR_WAIT_S = 60.0


@dataclass(frozen=True)
class AnchoredPayout:
    epoch: int
    root: str
    tx_hash: str
    block_number: int
    amount: int
    bundle: dict[str, object]


def set_payout_addresses(database_url: str) -> None:
    from coordinator.storage.database import Database
    from ledger.api import set_payout_address

    db = Database(database_url)
    try:
        with db.transaction() as session:
            for operator, address in PAYOUT_ADDRESSES.items():
                set_payout_address(session, operator, address)
    finally:
        db.dispose()


def _epoch_events(coordinator: Child) -> Iterator[None]:
    """One item per `epoch` event of MLX World's stream (an epoch closed or a root anchored)."""
    context = ssl.create_default_context(cafile=coordinator.extra["certificate"])
    with urllib.request.urlopen(f"{coordinator.extra['url']}/world/api/events", context=context,
                                timeout=ANCHOR_WAIT_S) as stream:
        for raw in stream:
            if raw.decode().strip() == "event: epoch":
                yield None


def _anchored_payout(database_url: str, operator: str, after_us: int) -> AnchoredPayout | None:
    """The newest epoch closed after after_us that pays the operator and is anchored, if any."""
    from coordinator.storage.database import Database
    from ledger.api import anchors_of_epoch, last_epoch, operator_statement, previous_epoch

    db = Database(database_url)
    try:
        with db.transaction() as session:
            epoch = last_epoch(session)
            while epoch is not None and epoch.cutoff_us > after_us:
                anchors = anchors_of_epoch(session, epoch.number, 1)
                statement = operator_statement(session, operator, epoch.number) if anchors else None
                if statement is not None and statement.proof is not None and statement.payout is not None:
                    return AnchoredPayout(epoch.number, str(epoch.root), anchors[0].tx_hash,
                                          anchors[0].block_number, statement.payout.amount, statement.proof)
                epoch = previous_epoch(session, epoch.number)
            return None
    finally:
        db.dispose()


def wait_for_anchored_payout(coordinator: Child, database_url: str, operator: str,
                             after_us: int) -> AnchoredPayout:
    """Woken by each epoch event until an epoch closed after after_us, paying the operator, is on chain."""
    deadline = time.monotonic() + ANCHOR_WAIT_S
    for _ in _epoch_events(coordinator):
        found = _anchored_payout(database_url, operator, after_us)
        if found is not None:
            return found
        if time.monotonic() > deadline:
            break
    raise TimeoutError(f"no anchored epoch paid {operator} within {ANCHOR_WAIT_S:.0f} s")


def show_verification(payout: AnchoredPayout, operator: str, data_dir: Path, out: TextIO) -> bool:
    """Check the payout against the chain as the operator would (no coordinator call), claim it, and
    print the commands that do the same by hand."""
    from ledger.api import ChainError, bundle_root, connect_chain, format_mlx, leaf_from_bundle

    record = json.loads((data_dir / "anvil" / "contracts.json").read_text(encoding="utf-8"))
    rpc_url, distributor = record["rpc_url"], record["distributor"]
    out.write(f"\nepoch {payout.epoch} closed: root {payout.root}, anchored on chain {record['chain_id']} "
              f"in block {payout.block_number} (tx {payout.tx_hash}); distributor {distributor}\n")
    leaf, proof, _ = leaf_from_bundle(payout.bundle)
    chain = connect_chain(rpc_url, distributor, PAYOUT_KEYS[operator])
    onchain = chain.epoch_root(leaf.epoch)
    verified = onchain == bundle_root(payout.bundle) and chain.verify(leaf.epoch, leaf.address, leaf.amount, proof)
    out.write(f"{operator}'s payout of {format_mlx(payout.amount)} to {leaf.address}: proof "
              f"{'VERIFIED against the root on chain' if verified else 'NOT verified'} "
              f"({len(proof)}-hash proof, root read from {rpc_url})\n")
    try:
        receipt = chain.claim(leaf.epoch, leaf.address, leaf.amount, proof)
        out.write(f"claimed from {operator}'s payout key: tx {receipt.tx_hash}, gas {receipt.gas_used}; "
                  f"{leaf.address} now holds {format_mlx(chain.token_balance(leaf.address))} (MLX ERC-20 "
                  f"{record['token']})\n")
    except ChainError as error:
        out.write(f"claim refused: {error}\n")
        return False
    out.write("verify a payout yourself, with no call to the coordinator (with --work-dir DIR the chain's state "
              "stays in DIR; `mlxnet coordinator --data-dir DIR/coordinator` brings it back, and "
              "`mlxnet ledger chain --data-dir DIR/coordinator` prints its new RPC URL):\n"
              f"  mlxnet ledger statement --operator {operator} --epoch {payout.epoch} --json "
              f"--data-dir {data_dir} > {operator}.json\n"
              f"  mlxnet ledger verify-proof --proof {operator}.json --rpc-url {rpc_url} --distributor {distributor}\n"
              f"  MLXNET_CLAIM_KEY=<{operator}'s payout key> mlxnet ledger claim --proof {operator}.json "
              f"--rpc-url {rpc_url} --distributor {distributor}\n")
    return verified
