"""Regenerate the committed protobuf and gRPC code, or check that it is current.

    python -m protos.generate          # rewrite protos/mlxnet/v1/*_pb2*.py(i)
    python -m protos.generate --check  # exit 1 when the committed code is stale

Pinned to one grpcio-tools version (pyproject's dev extra) so the output is stable.
"""

from __future__ import annotations

import argparse
import filecmp
import logging
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

GRPCIO_TOOLS_VERSION = "1.85.1"
ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos" / "mlxnet" / "v1"

log = logging.getLogger("protos.generate")


def _generate_into(out_dir: Path) -> list[Path]:
    from grpc_tools import protoc  # dev-only dependency, imported here on purpose

    import grpc_tools

    protos = sorted(PROTO_DIR.glob("*.proto"))
    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(p.relative_to(ROOT)) for p in protos],
    ]
    code = protoc.main(args)
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    return sorted((out_dir / "protos" / "mlxnet" / "v1").glob("*_pb2*.py*"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if generated code is stale")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    installed = metadata.version("grpcio-tools")
    if installed != GRPCIO_TOOLS_VERSION:
        log.error("grpcio-tools %s installed; pin is %s", installed, GRPCIO_TOOLS_VERSION)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        generated = _generate_into(Path(tmp))
        stale = [g.name for g in generated if not (PROTO_DIR / g.name).exists()
                 or not filecmp.cmp(g, PROTO_DIR / g.name, shallow=False)]
        if args.check:
            if stale:
                log.error("generated code is stale: %s; run `python -m protos.generate`", ", ".join(stale))
                return 1
            log.info("generated code is current (%d files)", len(generated))
            return 0
        for g in generated:
            shutil.copyfile(g, PROTO_DIR / g.name)
        log.info("wrote %d files to %s", len(generated), PROTO_DIR.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
