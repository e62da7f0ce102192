"""A local anvil chain (Foundry's JSON-RPC node) as a separate process, its state kept on disk.

The embedded payout chain: `make` installs the binary from npm (@foundry-rs/anvil, whose
platform package ships it) into .tools/; $MLXNET_ANVIL names another one. The chain's state
is dumped to `state_path` every few seconds and on exit, and loaded again at start, so a
restart keeps every anchored root and claim. Only this module starts the process; it talks
to it through ledger.anchor over JSON-RPC, like to any other chain.

Anvil never outlives the process that started it: it runs under ledger/anvil_watchdog.py,
which holds a pipe from this process and stops anvil (state dumped) when the pipe closes,
on Linux and macOS alike, even when this process is killed with SIGKILL.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from ledger.chain_settings import RECEIPT_TIMEOUT_S_DEFAULT, GasCaps
from ledger.errors import ChainError

log = logging.getLogger(__name__)

ANVIL_ENV = "MLXNET_ANVIL"
PROJECT_ANVIL = Path(__file__).resolve().parent.parent / ".tools" / "node_modules" / ".bin" / "anvil"
CHAIN_ID = 31_337
STATE_INTERVAL_S = 2  # how much chain time a kill -9 can lose (a clean stop dumps all)
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
OUTPUT_LINES_MAX = 200  # lines read while waiting for the port; anvil prints a few dozen
WATCHDOG = Path(__file__).resolve().with_name("anvil_watchdog.py")
_LISTENING = re.compile(r"Listening on ([0-9.]+):(\d+)")


def anvil_binary() -> Path | None:
    """$MLXNET_ANVIL, the project's own (.tools/), or one on PATH; None when there is none."""
    named = os.environ.get(ANVIL_ENV)
    if named:
        return Path(named)
    # npm's .bin/anvil is a node script that runs the platform package's binary as its child:
    # run that binary itself, so the watchdog's signals (and Linux's death signal) reach anvil.
    native = sorted(PROJECT_ANVIL.parent.parent.glob("@foundry-rs/anvil-*/bin/anvil"))
    if native and os.access(native[0], os.X_OK):
        return native[0]
    if PROJECT_ANVIL.exists():
        return PROJECT_ANVIL
    found = shutil.which("anvil")
    return None if found is None else Path(found)


@dataclass
class AnvilProcess:
    process: subprocess.Popen[str]
    rpc_url: str
    state_path: Path
    output: threading.Thread  # drains anvil's output until it exits

    def stop(self) -> None:
        """SIGTERM (the watchdog passes it on), so anvil dumps its state; a restart then finds every block."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.output.join(STOP_TIMEOUT_S)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


def start_anvil(state_path: Path, *, port: int = 0, binary: Path | None = None) -> AnvilProcess:
    """Start anvil on 127.0.0.1 with its state in state_path; returns once it listens.

    Port 0 lets anvil pick a free port, read back from its output.
    """
    binary = binary or anvil_binary()
    if binary is None:
        raise ChainError("no anvil binary: run `make compile` (it installs @foundry-rs/anvil into .tools/) "
                         f"or set {ANVIL_ENV}")
    state_path.parent.mkdir(parents=True, exist_ok=True)
    command = [str(binary), "--host", "127.0.0.1", "--port", str(port), "--chain-id", str(CHAIN_ID),
               "--state", str(state_path), "--state-interval", str(STATE_INTERVAL_S)]
    # stdin is the watchdog's pipe from us: never written, it closes when this process ends.
    process = subprocess.Popen([sys.executable, str(WATCHDOG), *command], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    address = _wait_listening(process)
    if address is None:
        process.terminate()  # the watchdog passes it on to anvil, if anvil is running at all
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        raise ChainError(f"anvil did not start within {START_TIMEOUT_S:.0f} s ({' '.join(command)})")
    output = _drain(process)
    log.info("anvil listening on %s, state in %s", address, state_path)
    return AnvilProcess(process, f"http://{address}", state_path, output)


def _wait_listening(process: subprocess.Popen[str]) -> str | None:
    """host:port from anvil's "Listening on" line, or None if it exits or times out first."""
    found: list[str] = []
    done = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for _ in range(OUTPUT_LINES_MAX):
            line = process.stdout.readline()
            if not line:
                break
            match = _LISTENING.search(line)
            if match:
                found.append(f"{match.group(1)}:{match.group(2)}")
                break
        done.set()

    threading.Thread(target=read, name="anvil-start", daemon=True).start()
    done.wait(START_TIMEOUT_S)
    return found[0] if found else None


def _drain(process: subprocess.Popen[str]) -> threading.Thread:
    """Keep reading anvil's output so its pipe never fills and blocks it."""

    def drain() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            log.debug("anvil: %s", line.rstrip())

    thread = threading.Thread(target=drain, name="anvil-output", daemon=True)
    thread.start()
    return thread


CONTRACTS_FILE = "contracts.json"  # beside the state: the RPC URL, chain id and addresses deployed once


def embedded_chain(directory: Path, *, port: int = 0, gas: GasCaps = GasCaps(),  # type: ignore[no-untyped-def]
                   receipt_timeout_s: float = RECEIPT_TIMEOUT_S_DEFAULT):
    """(the anvil process, a PayoutChain on it): started with its state in `directory`, and the
    contracts deployed on the first start only, their addresses recorded in contracts.json."""
    from ledger.anchor import PayoutChain  # web3 loads only when a chain is used

    process = start_anvil(directory / "state.json", port=port)
    record_path = directory / CONTRACTS_FILE
    try:
        chain = None
        if record_path.exists():
            recorded = json.loads(record_path.read_text(encoding="utf-8"))
            chain = PayoutChain.connect(process.rpc_url, recorded["distributor"], gas=gas,
                                        receipt_timeout_s=receipt_timeout_s)
            if not chain.is_deployed():
                log.warning("the recorded distributor %s is not on the restarted chain (its state was lost): "
                            "deploying again", recorded["distributor"])
                chain = None
        if chain is None:
            chain = PayoutChain.deploy(process.rpc_url, gas=gas, receipt_timeout_s=receipt_timeout_s)
        record = {"rpc_url": process.rpc_url, "chain_id": chain.chain_id, "distributor": chain.distributor_address,
                  "token": chain.token_address}
        temporary = record_path.with_suffix(".tmp")
        temporary.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        temporary.replace(record_path)
        return process, chain
    except BaseException:
        process.stop()
        raise
