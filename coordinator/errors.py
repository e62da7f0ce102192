"""The coordinator's failures, one hierarchy, mapped to gRPC codes in one table.

    CoordinatorError
    ├── InvalidRequest       bad field in a request (says which and how to fix)
    ├── NotFound             unknown job or model
    ├── Unauthenticated      missing or unknown node session
    ├── PermissionDenied     a node acting on a job that is not its own, a bad signature
    ├── AlreadyDone          the job already ended; the request changes nothing
    └── Unplaceable          nothing in the fleet could ever run the job
"""

from __future__ import annotations


class CoordinatorError(Exception):
    """Base of every failure the coordinator reports to a caller."""


class InvalidRequest(CoordinatorError):
    pass


class NotFound(CoordinatorError):
    pass


class Unauthenticated(CoordinatorError):
    pass


class PermissionDenied(CoordinatorError):
    pass


class AlreadyDone(CoordinatorError):
    pass


class Unplaceable(CoordinatorError):
    pass
