"""A gRPC channel to the coordinator over TLS (or, on loopback when asked, plaintext).

Both the node agent and the consumer client open theirs here, after contracts.tls has
decided whether and how the coordinator's certificate is trusted.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from contracts.tls import CoordinatorTrust, Fetch, TrustDecision, decide, fetch_certificate

ChannelOptions = Sequence[tuple[str, object]]


def open_channel(address: str, trust: CoordinatorTrust, options: ChannelOptions = (),
                 fetch: Fetch = fetch_certificate) -> tuple[grpc.Channel, TrustDecision]:
    """The channel and the decision behind it; raises contracts.tls.TransportRefused or OSError."""
    decision = decide(address, trust, fetch)
    if decision.basis == "plaintext":
        return grpc.insecure_channel(address, options=list(options)), decision
    credentials = grpc.ssl_channel_credentials(root_certificates=decision.root_pem)
    channel_options = list(options)
    if decision.server_name:
        channel_options.append(("grpc.ssl_target_name_override", decision.server_name))
    return grpc.secure_channel(address, credentials, options=channel_options), decision
