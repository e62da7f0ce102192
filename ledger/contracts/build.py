"""Compile the Solidity contracts with solc from npm and write (or check) the committed build outputs.

    python -m ledger.contracts.build          # compile, write ledger/contracts/build/*.json
    python -m ledger.contracts.build --check  # compile, exit 1 if the committed outputs differ

solc and OpenZeppelin come from ledger/contracts/package-lock.json (`npm ci` runs when
node_modules is missing). Compilation goes through solc's standard-JSON API with fixed
settings, so the same sources always give byte-identical outputs.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from pathlib import Path

LOG = logging.getLogger(__name__)

CONTRACTS_DIR = Path(__file__).resolve().parent
SOURCES_DIR = CONTRACTS_DIR / "src"
BUILD_DIR = CONTRACTS_DIR / "build"
CONTRACT_NAMES = ("MLXToken", "MerklePayoutDistributor")
EVM_VERSION = "cancun"
OPTIMIZER_RUNS = 200
COMPILE_TIMEOUT_S = 300
NPM_TIMEOUT_S = 600


def standard_json_input() -> dict[str, object]:
    sources = {
        path.name: {"content": path.read_text(encoding="utf-8")} for path in sorted(SOURCES_DIR.glob("*.sol"))
    }
    return {
        "language": "Solidity",
        "sources": sources,
        "settings": {
            "evmVersion": EVM_VERSION,
            "optimizer": {"enabled": True, "runs": OPTIMIZER_RUNS},
            "outputSelection": {"*": {"*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"]}},
        },
    }


def _ensure_node_modules() -> None:
    if (CONTRACTS_DIR / "node_modules" / "solc").is_dir():
        return
    LOG.info("installing solc and OpenZeppelin from package-lock.json (npm ci)")
    subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund"], cwd=CONTRACTS_DIR, check=True, timeout=NPM_TIMEOUT_S
    )


def compile_contracts() -> dict[str, str]:
    """File name -> JSON text of each contract's build output."""
    _ensure_node_modules()
    completed = subprocess.run(
        ["node", str(CONTRACTS_DIR / "compile.js")],
        input=json.dumps(standard_json_input()),
        capture_output=True,
        text=True,
        check=True,
        timeout=COMPILE_TIMEOUT_S,
    )
    result = json.loads(completed.stdout)
    output = result["output"]
    errors = [error for error in output.get("errors", []) if error["severity"] == "error"]
    if errors:
        raise SystemExit("solc failed:\n" + "\n".join(error["formattedMessage"] for error in errors))
    built: dict[str, str] = {}
    for name in CONTRACT_NAMES:
        contract = output["contracts"][f"{name}.sol"][name]
        artifact = {
            "contractName": name,
            "compiler": f"solc {result['version']}",
            "evmVersion": EVM_VERSION,
            "optimizerRuns": OPTIMIZER_RUNS,
            "abi": contract["abi"],
            "bytecode": "0x" + contract["evm"]["bytecode"]["object"],
            "deployedBytecode": "0x" + contract["evm"]["deployedBytecode"]["object"],
        }
        built[f"{name}.json"] = json.dumps(artifact, indent=2, sort_keys=True) + "\n"
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ledger.contracts.build", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed build outputs are stale")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    built = compile_contracts()
    if args.check:
        stale = [
            name for name, text in built.items()
            if not (BUILD_DIR / name).is_file() or (BUILD_DIR / name).read_text(encoding="utf-8") != text
        ]
        if stale:
            LOG.error("stale contract build outputs: %s; run `python -m ledger.contracts.build`", ", ".join(stale))
            return 1
        LOG.info("contract build outputs are current (%s)", ", ".join(sorted(built)))
        return 0
    BUILD_DIR.mkdir(exist_ok=True)
    for name, text in built.items():
        (BUILD_DIR / name).write_text(text, encoding="utf-8")
    LOG.info("wrote %s", ", ".join(str(BUILD_DIR / name) for name in sorted(built)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
