"""`mlxnet submit`: submit a job, print its tokens as they stream, then its receipt."""

from __future__ import annotations

import argparse
import sys

from mlxnet.consumer import JobRequestError, StreamedTokens, add_trust_arguments, client_from_args
from mlxnet.receipt_view import check_receipt_locally, render_receipt


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coordinator", default="127.0.0.1:50051",
                        help="coordinator HOST:PORT, or several of one network, comma-separated")
    add_trust_arguments(parser)
    parser.add_argument("--model", required=True, help="model id or path a node serves")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-tokens", type=int, default=0, help="0: the coordinator's default")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
    parser.add_argument("--top-p", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--request-id", default="", help="idempotency key for safe retries")
    parser.add_argument("--consumer", default="", help="consumer name sent with the request")


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    try:
        client = client_from_args(args, args.consumer)
    except JobRequestError as error:
        sys.stderr.write(f"mlxnet submit: {error.code}: {error.message}\n")
        return 1
    with client:
        try:
            job = client.submit(args.model, args.prompt, max_tokens=args.max_tokens,
                                temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                                request_id=args.request_id)
            out.write(f"job {job.job_id} submitted\n")
            token_ids: list[int] = []
            final = None
            for item in client.stream(job.job_id):
                if isinstance(item, StreamedTokens):
                    token_ids.extend(item.token_ids)
                    out.write(item.text)
                    out.flush()
                else:
                    final = item
        except JobRequestError as error:
            sys.stderr.write(f"mlxnet submit: {error.code}: {error.message}\n")
            return 1
    out.write("\n")
    assert final is not None, "a stream ends with the final job"
    if final.error:
        sys.stderr.write(f"job {final.job_id} failed: {final.error}\n")
        return 1
    out.write(f"ran on {', '.join(final.chips)} ({final.strategy}); "
              f"{final.prompt_tokens} prompt + {final.completion_tokens} generated tokens\n")
    check = check_receipt_locally(final.receipt.body, final.receipt.signature,
                                  final.signer_public_key, args.prompt, tuple(token_ids))
    out.write(render_receipt(check) + "\n")
    return 0 if check.ok else 1
