"""`mlxnet coordinator`'s TLS flags into the identity it serves with (None: plaintext)."""

from __future__ import annotations

import argparse
import logging

from contracts.tls import PlaintextRefused, is_loopback
from coordinator.tls import ServerTls, TlsSetupError, load, load_or_create

log = logging.getLogger(__name__)


def server_tls(args: argparse.Namespace) -> ServerTls | None:
    """--tls-cert/--tls-key, else the self-signed identity in --data-dir; --insecure: None."""
    if args.insecure:
        if not is_loopback(args.host):
            raise PlaintextRefused(f"--insecure is only allowed on a loopback --host, not {args.host}")
        log.warning("serving plaintext gRPC and HTTP on %s (--insecure): loopback only", args.host)
        return None
    if (args.tls_cert is None) != (args.tls_key is None):
        raise TlsSetupError("give both --tls-cert and --tls-key, or neither (a self-signed "
                            "certificate is then made in --data-dir)")
    if args.tls_cert is not None:
        tls = load(args.tls_cert, args.tls_key)
    else:
        tls = load_or_create(args.data_dir, args.host)
        log.info("self-signed certificate %s; nodes pin it with --coordinator-fingerprint",
                 tls.cert_path)
    log.info("coordinator certificate SHA-256 fingerprint: %s", tls.fingerprint)
    return tls
