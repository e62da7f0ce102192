from __future__ import annotations

import dataclasses

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contracts.ids import JobId, node_id_from_public_key
from contracts.receipts import FinishReason, Receipt, encode_receipt, output_digest, prompt_digest
from coordinator.jobs.receipt_check import ExpectedJob, check_receipt
from tests.proof_helpers import well_formed_commitment


def _keypair() -> tuple[Ed25519PrivateKey, bytes]:
    key = Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return key, raw


KEY, PUBLIC = _keypair()
NODE = node_id_from_public_key(PUBLIC)
EXPECTED = ExpectedJob(job_id="job-1", node_id=NODE, model_id="tiny", weights_digest="abc",
                       prompt="Hello", temperature=0.0, top_p=1.0, seed=3, max_tokens=8,
                       streamed_token_ids=(5, 6, 7))
RECEIPT = Receipt(JobId("job-1"), NODE, "tiny", "abc", prompt_digest("Hello"), 0.0, 1.0, 3, 8,
                  output_digest((5, 6, 7)), 2, 3, 100, 150, well_formed_commitment(3),
                  FinishReason.END_TOKEN, 120)


def test_matching_receipt_passes() -> None:
    body = encode_receipt(RECEIPT)
    verdict = check_receipt(body, KEY.sign(body), PUBLIC, EXPECTED)
    assert verdict.ok and verdict.problems == () and verdict.receipt == RECEIPT


def test_wrong_key_fails_signature() -> None:
    other, _ = _keypair()
    body = encode_receipt(RECEIPT)
    verdict = check_receipt(body, other.sign(body), PUBLIC, EXPECTED)
    assert not verdict.signature_ok and not verdict.ok


def test_each_mismatch_is_named() -> None:
    cases = {
        "model id": dataclasses.replace(RECEIPT, model_id="other"),
        "weights digest": dataclasses.replace(RECEIPT, weights_digest="xyz"),
        "prompt digest": dataclasses.replace(RECEIPT, prompt_digest=prompt_digest("Bye")),
        "seed": dataclasses.replace(RECEIPT, seed=4),
        "output digest": dataclasses.replace(RECEIPT, output_digest=output_digest((5, 6))),
        "completion token count": dataclasses.replace(RECEIPT, completion_tokens=2),
        "finished before": dataclasses.replace(RECEIPT, finished_at_ms=50),
        "first token time": dataclasses.replace(RECEIPT, first_token_at_ms=99),
        "stopped at max_tokens": dataclasses.replace(RECEIPT, finish_reason=FinishReason.LENGTH),
        "malformed": dataclasses.replace(RECEIPT, activation_commitment=b"\x01"),
        "need 1": dataclasses.replace(RECEIPT, activation_commitment=well_formed_commitment(40)),
        "version 1": dataclasses.replace(RECEIPT, activation_commitment=b"",
                                         finish_reason=FinishReason.LENGTH, first_token_at_ms=0,
                                         version=1),
    }
    for needle, receipt in cases.items():
        body = encode_receipt(receipt)
        verdict = check_receipt(body, KEY.sign(body), PUBLIC, EXPECTED)
        assert verdict.signature_ok
        assert any(needle in problem for problem in verdict.problems), (needle, verdict.problems)


def test_garbage_body_is_a_problem_not_a_crash() -> None:
    verdict = check_receipt(b"nonsense", KEY.sign(b"nonsense"), PUBLIC, EXPECTED)
    assert verdict.receipt is None and not verdict.ok
