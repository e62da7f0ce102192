"""The payout chain through web3: the ONLY module that imports web3.

PayoutChain deploys or attaches to the MLX token and the Merkle payout distributor
(ledger/contracts/build/*.json), publishes epoch roots, reads them back, and claims.
PayoutChain.in_process() runs an eth-tester chain on py-evm inside this process (the
default: nothing to install or run); PayoutChain.connect(url, distributor) talks to any
JSON-RPC node. web3 objects and exceptions never leave this module: callers get bytes,
ints and ChainError.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eth_account import Account as EthAccount
from eth_tester.exceptions import TransactionFailed
from web3 import Web3
from web3.exceptions import ContractLogicError, TimeExhausted, Web3Exception
from web3.providers.eth_tester import EthereumTesterProvider

from ledger.chain_settings import GasCaps
from ledger.errors import ChainError, ChainSettingsError

log = logging.getLogger(__name__)

BUILD_DIR = Path(__file__).resolve().parent / "contracts" / "build"
RPC_TIMEOUT_S = 30
RECEIPT_TIMEOUT_S = 120
ZERO_ROOT = b"\0" * 32
# Blocks searched for an anchor's event: providers cap eth_getLogs ranges (often at 10,000),
# and an anchor looked up is recent (awaiting confirmations, or sent just before a crash).
PUBLICATION_LOOKBACK_BLOCKS = 9_000


@dataclass(frozen=True)
class ChainReceipt:
    tx_hash: str
    block_number: int
    gas_used: int


def _artifact(name: str) -> dict[str, Any]:
    return json.loads((BUILD_DIR / f"{name}.json").read_text(encoding="utf-8"))


class PayoutChain:
    """One distributor on one chain, and the account that publishes roots."""

    def __init__(self, w3: Web3, distributor_address: str, sender: str, private_key: str | None = None, *,
                 gas: GasCaps = GasCaps(), receipt_timeout_s: float = RECEIPT_TIMEOUT_S) -> None:
        self._w3 = w3
        self._sender = Web3.to_checksum_address(sender)
        self._key = private_key
        self._gas, self._receipt_timeout_s = gas, receipt_timeout_s
        self._distributor = w3.eth.contract(
            address=Web3.to_checksum_address(distributor_address), abi=_artifact("MerklePayoutDistributor")["abi"])
        self.chain_id = int(w3.eth.chain_id)
        self.distributor_address = self._distributor.address.lower()

    @classmethod
    def in_process(cls) -> PayoutChain:
        """A fresh eth-tester chain with both contracts deployed by its first account."""
        w3 = Web3(EthereumTesterProvider())
        return cls._deployed(w3, w3.eth.accounts[0])

    @classmethod
    def deploy(cls, rpc_url: str, private_key: str | None = None, *, chain_id: int | None = None,
               gas: GasCaps = GasCaps(), receipt_timeout_s: float = RECEIPT_TIMEOUT_S) -> PayoutChain:
        """Deploy both contracts over JSON-RPC, from the key's account (which then publishes roots)
        or, without one, from the node's first unlocked account, as on anvil."""
        w3 = Web3(Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": RPC_TIMEOUT_S}))
        try:
            if chain_id is not None and int(w3.eth.chain_id) != chain_id:
                raise ChainSettingsError(f"the RPC at {rpc_url} serves chain {int(w3.eth.chain_id)}, not the "
                                         f"--chain-id {chain_id} given: nothing deployed")
            sender = EthAccount.from_key(private_key).address if private_key else w3.eth.accounts[0]
            return cls._deployed(w3, sender, private_key, gas=gas, receipt_timeout_s=receipt_timeout_s)
        except (Web3Exception, OSError, ValueError, IndexError) as error:
            raise ChainError(f"cannot deploy the payout contracts at {rpc_url}: {error}") from error

    @classmethod
    def _deployed(cls, w3: Web3, sender: str, private_key: str | None = None, *, gas: GasCaps = GasCaps(),
                  receipt_timeout_s: float = RECEIPT_TIMEOUT_S) -> PayoutChain:
        token = _deploy(w3, sender, private_key, "MLXToken")
        distributor = _deploy(w3, sender, private_key, "MerklePayoutDistributor", token)
        chain = cls(w3, distributor, sender, private_key, gas=gas, receipt_timeout_s=receipt_timeout_s)
        contract = w3.eth.contract(address=token, abi=_artifact("MLXToken")["abi"])
        chain._send(contract.functions.setMinter(distributor))
        return chain

    def is_deployed(self) -> bool:
        """Whether the distributor's code is on this chain (a chain restarted without its state has none)."""
        try:
            return len(self._w3.eth.get_code(self._distributor.address)) > 0
        except (Web3Exception, OSError) as error:
            raise ChainError(f"payout chain call failed: {error}") from error

    @classmethod
    def connect(cls, rpc_url: str, distributor_address: str, private_key: str | None = None, *,
                chain_id: int | None = None, gas: GasCaps = GasCaps(),
                receipt_timeout_s: float = RECEIPT_TIMEOUT_S) -> PayoutChain:
        """Attach to a deployed distributor over JSON-RPC; without a key, use the node's first account.

        With chain_id, a node reporting another chain, or no distributor code at the address, is
        refused (ChainSettingsError): roots must never land where operators do not look."""
        w3 = Web3(Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": RPC_TIMEOUT_S}))
        try:
            sender = EthAccount.from_key(private_key).address if private_key else w3.eth.accounts[0]
            chain = cls(w3, distributor_address, sender, private_key, gas=gas, receipt_timeout_s=receipt_timeout_s)
        except (Web3Exception, OSError, ValueError, IndexError) as error:
            raise ChainError(f"cannot use the payout chain at {rpc_url}: {error}") from error
        if chain_id is not None and chain.chain_id != chain_id:
            raise ChainSettingsError(f"the RPC at {rpc_url} serves chain {chain.chain_id}, not the configured "
                                     f"--chain-id {chain_id}: check the URL")
        if chain_id is not None and not chain.is_deployed():
            raise ChainSettingsError(f"no payout distributor at {distributor_address} on chain {chain_id}: "
                                     "check --chain-distributor")
        return chain

    @property
    def sender(self) -> str:
        """The account that publishes roots (and pays their gas)."""
        return self._sender.lower()

    def block_number(self) -> int:
        """The newest block: how deep an anchor is, in confirmations."""
        try:
            return int(self._w3.eth.block_number)
        except (Web3Exception, OSError) as error:
            raise ChainError(f"payout chain call failed: {error}") from error

    def publication(self, epoch: int) -> ChainReceipt | None:
        """Where the epoch's root was published (its EpochPublished event in the last
        PUBLICATION_LOOKBACK_BLOCKS blocks), or None: never published, or longer ago (so deep)."""
        event = self._distributor.events.EpochPublished
        try:
            since = max(0, int(self._w3.eth.block_number) - PUBLICATION_LOOKBACK_BLOCKS)
            logs = event.get_logs(from_block=since, argument_filters={"epoch": epoch})
            if not logs:
                return None
            receipt = self._w3.eth.get_transaction_receipt(logs[-1]["transactionHash"])
        except (Web3Exception, OSError, ValueError) as error:
            raise ChainError(f"payout chain call failed: {error}") from error
        return ChainReceipt("0x" + bytes(receipt["transactionHash"]).hex().removeprefix("0x"),
                            int(receipt["blockNumber"]), int(receipt["gasUsed"]))

    @property
    def token_address(self) -> str:
        return str(self._call(self._distributor.functions.token())).lower()

    def epoch_root(self, epoch: int) -> bytes | None:
        """The root anchored for the epoch, or None when it was never published."""
        root = bytes(self._call(self._distributor.functions.epochRoot(epoch)))
        return None if root == ZERO_ROOT else root

    def epoch_head(self, epoch: int) -> bytes | None:
        """The digest of the epoch's signed record anchored with its root, or None."""
        head = bytes(self._call(self._distributor.functions.epochHead(epoch)))
        return None if head == ZERO_ROOT else head

    def publish(self, epoch: int, root: bytes, total: int, head: bytes) -> ChainReceipt:
        assert len(root) == 32 and root != ZERO_ROOT and total > 0 and len(head) == 32 and head != ZERO_ROOT
        return self._send(self._distributor.functions.publishEpoch(epoch, root, total, head))

    def verify(self, epoch: int, address: str, amount: int, proof: Sequence[bytes]) -> bool:
        """The contract's own check of a proof against the anchored root."""
        call = self._distributor.functions.verify(epoch, Web3.to_checksum_address(address), amount, list(proof))
        return bool(self._call(call))

    def claim(self, epoch: int, address: str, amount: int, proof: Sequence[bytes]) -> ChainReceipt:
        call = self._distributor.functions.claim(epoch, Web3.to_checksum_address(address), amount, list(proof))
        return self._send(call)

    def is_claimed(self, epoch: int, address: str) -> bool:
        return bool(self._call(self._distributor.functions.isClaimed(epoch, Web3.to_checksum_address(address))))

    def token_balance(self, address: str) -> int:
        token = self._w3.eth.contract(address=Web3.to_checksum_address(self.token_address),
                                      abi=_artifact("MLXToken")["abi"])
        return int(self._call(token.functions.balanceOf(Web3.to_checksum_address(address))))

    def _call(self, function: Any) -> Any:
        try:
            return function.call()
        except (Web3Exception, TransactionFailed, OSError) as error:
            raise ChainError(f"payout chain call failed: {error}") from error

    def _fees(self) -> dict[str, int]:
        """maxFeePerGas and maxPriorityFeePerGas within the caps; ChainError while the base fee is above them."""
        if self._gas == GasCaps():
            return {}  # the node's own suggestion, as web3 fills it in
        base_fee = int(self._w3.eth.get_block("latest").get("baseFeePerGas", 0))
        fees = self._gas.fees(base_fee, int(self._w3.eth.max_priority_fee))
        if fees is None:
            raise ChainError(f"the base fee ({base_fee} wei/gas) is above --chain-max-fee-gwei "
                             f"({self._gas.max_fee_per_gas_wei} wei/gas): waiting for cheaper blocks")
        return {"maxFeePerGas": fees[0], "maxPriorityFeePerGas": fees[1]}

    def _send(self, function: Any) -> ChainReceipt:
        try:
            if self._key is None:
                tx_hash = function.transact({"from": self._sender, **self._fees()})
            else:
                # The latest (mined) nonce, not the pending one: a send after a dropped or stuck
                # transaction replaces it rather than queueing behind it.
                tx = function.build_transaction({
                    "from": self._sender, "nonce": self._w3.eth.get_transaction_count(self._sender, "latest"),
                    **self._fees()})
                signed = self._w3.eth.account.sign_transaction(tx, self._key)
                tx_hash = self._w3.eth.send_raw_transaction(signed.raw_transaction)
            receipt = self._w3.eth.wait_for_transaction_receipt(tx_hash, timeout=self._receipt_timeout_s)
        except (ContractLogicError, TransactionFailed) as error:
            raise ChainError(f"the distributor refused the transaction: {error}") from error
        except (Web3Exception, TimeExhausted, OSError) as error:
            raise ChainError(f"payout chain transaction failed: {error}") from error
        if receipt["status"] != 1:
            raise ChainError(f"payout chain transaction {tx_hash.hex()} reverted")
        return ChainReceipt("0x" + bytes(tx_hash).hex().removeprefix("0x"), int(receipt["blockNumber"]),
                            int(receipt["gasUsed"]))


def _deploy(w3: Web3, sender: str, private_key: str | None, name: str, *args: Any) -> str:
    artifact = _artifact(name)
    constructor = w3.eth.contract(abi=artifact["abi"], bytecode=artifact["bytecode"]).constructor(*args)
    if private_key is None:
        tx_hash = constructor.transact({"from": sender})
    else:
        tx = constructor.build_transaction({"from": sender, "nonce": w3.eth.get_transaction_count(sender, "latest")})
        tx_hash = w3.eth.send_raw_transaction(w3.eth.account.sign_transaction(tx, private_key).raw_transaction)
    receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=RECEIPT_TIMEOUT_S)
    log.info("deployed %s at %s (gas %d)", name, receipt["contractAddress"], receipt["gasUsed"])
    return str(receipt["contractAddress"])
