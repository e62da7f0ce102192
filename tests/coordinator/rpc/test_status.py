from __future__ import annotations

import grpc

from coordinator import errors
from coordinator.rpc.status import STATUS_FOR_ERROR, status_for


def test_every_coordinator_error_has_a_status() -> None:
    def subclasses(kind: type) -> list[type]:
        found = []
        for sub in kind.__subclasses__():
            found += [sub, *subclasses(sub)]
        return found

    for kind in subclasses(errors.CoordinatorError):
        error = Exception.__new__(kind)  # the status depends on the class alone
        assert isinstance(status_for(error), grpc.StatusCode), kind


def test_codes_are_the_ones_clients_expect() -> None:
    assert STATUS_FOR_ERROR[errors.InvalidRequest] is grpc.StatusCode.INVALID_ARGUMENT
    assert STATUS_FOR_ERROR[errors.NotFound] is grpc.StatusCode.NOT_FOUND
    assert STATUS_FOR_ERROR[errors.Unauthenticated] is grpc.StatusCode.UNAUTHENTICATED
