"""The coordinator's failures, one hierarchy, mapped to gRPC codes in one table.

    CoordinatorError
    ├── InvalidRequest       bad field in a request (says which and how to fix)
    │   └── PromptTooLong    the prompt and max_tokens exceed the model's context
    ├── NotFound             unknown job or model
    │   └── UnknownModel     no node serves the model
    ├── Unauthenticated      missing or unknown node session or API key
    ├── PermissionDenied     a node acting on a job that is not its own, a bad signature
    ├── WeightsMismatch      a node declares other weights under a model id the catalog binds
    ├── AlreadyDone          the job already ended; the request changes nothing
    ├── Unplaceable          nothing in the fleet could ever run the job
    ├── InsufficientBalance  the consumer's prepaid balance or key spend limit is too low
    ├── RateLimited          the API key's request rate or concurrent-job limit is reached
    ├── NoCapacityNow        every Mac that could run the job is busy or offline right now
    ├── DatabaseUnavailable  the database cannot be reached or refused the transaction; retry
    └── JobFailed            the job ran and failed (its node failed or stopped mid-stream)

The gateway maps the same classes to HTTP codes in coordinator/gateway/errors.py.
"""

from __future__ import annotations


class CoordinatorError(Exception):
    """Base of every failure the coordinator reports to a caller."""


class InvalidRequest(CoordinatorError):
    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param  # the request field at fault, when there is one


class PromptTooLong(InvalidRequest):
    pass


class NotFound(CoordinatorError):
    pass


class UnknownModel(NotFound):
    pass


class Unauthenticated(CoordinatorError):
    pass


class SessionUnbound(Unauthenticated):
    """A live session used on a connection it is not bound to: the edge hands the node
    bind_nonce to sign in BindSession (coordinator/nodes/connection_bindings.py)."""

    def __init__(self, message: str, bind_nonce: bytes) -> None:
        super().__init__(message)
        self.bind_nonce = bind_nonce


class PermissionDenied(CoordinatorError):
    pass


class WeightsMismatch(CoordinatorError):
    """The request is well formed but conflicts with the catalog's binding of the model id:
    it succeeds once the node serves the bound weights (or another id), so a precondition."""


class AlreadyDone(CoordinatorError):
    pass


class Unplaceable(CoordinatorError):
    pass


class InsufficientBalance(CoordinatorError):
    pass


class RateLimited(CoordinatorError):
    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class NoCapacityNow(CoordinatorError):
    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class DatabaseUnavailable(CoordinatorError):
    """The database is away (restarting, unreachable) or refused the transaction (a conflict,
    a lock wait): nothing was written, and the same request can be sent again."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class JobFailed(CoordinatorError):
    pass
