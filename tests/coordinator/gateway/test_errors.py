"""Every coordinator error has one HTTP status, in OpenAI's error format."""

from __future__ import annotations

from coordinator import errors
from coordinator.gateway.errors import HTTP_FOR_ERROR, body_for, error_response, http_error_for


def _subclasses(kind: type) -> list[type]:
    found = []
    for sub in kind.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def test_every_coordinator_error_has_an_http_status() -> None:
    for kind in _subclasses(errors.CoordinatorError):
        error = Exception.__new__(kind)  # the status depends on the class alone
        assert 400 <= http_error_for(error).status < 600, kind


def test_the_codes_clients_handle() -> None:
    expected = {errors.InvalidRequest: 400, errors.Unauthenticated: 401,
                errors.InsufficientBalance: 402, errors.UnknownModel: 404, errors.NotFound: 404,
                errors.PromptTooLong: 413, errors.RateLimited: 429, errors.NoCapacityNow: 503}
    assert {kind: HTTP_FOR_ERROR[kind].status for kind in expected} == expected


def test_the_body_names_the_field_and_the_wait() -> None:
    body = body_for(errors.InvalidRequest("max_tokens must be positive", param="max_tokens"))
    assert body == {"error": {"message": "max_tokens must be positive",
                              "type": "invalid_request_error", "param": "max_tokens", "code": None}}
    response = error_response(errors.NoCapacityNow("busy", retry_after_s=3), job_id="job-1")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "3" and response.headers["x-mlxnet-job-id"] == "job-1"
