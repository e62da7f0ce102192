"""The leader's whole pod job: run every rank, then report it as one Mac's job is reported.

The run itself (mlx.launch and its ranks) is pods.runner's; the operator's hooks pick
which runner, if any, this node has. Tokens stream through the sender while it runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from node_agent.coordinator_client import Assignment
from node_agent.job_reports import JobReports
from node_agent.pods.outcome import PodJobResult
from node_agent.token_sender import TokenSender

log = logging.getLogger(__name__)

# (assignment, sender) -> how the run ended: the hooks' run_pod_job.
PodJobRun = Callable[[Assignment, TokenSender], PodJobResult]


def lead_pod_job(assignment: Assignment, sender: TokenSender, run: PodJobRun,
                 reports: JobReports) -> None:
    outcome = run(assignment, sender)
    chunks = sender.close()
    if outcome.failure_reason is not None:
        reports.failure(assignment.job_id, outcome.failure_reason,
                        prompt_too_long=outcome.prompt_too_long)
        return
    if outcome.handed_back_reason is not None:
        reports.hand_back(assignment.job_id, outcome.handed_back_reason)
        return
    result = outcome.result
    if sender.rejected or result is None or result.stopped_early:
        log.info("pod job %s stopped: %s", assignment.job_id, sender.error)
        return
    if sender.error is not None:  # the stream broke: re-send every chunk, harmlessly
        reports.resend_tokens(assignment.job_id, chunks)
    reports.receipt(assignment, result)
