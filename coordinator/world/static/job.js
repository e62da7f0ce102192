// One job: where it ran and why, how long each step took, its receipt and whether it checked out.

import { get } from "./api.js";
import { bytes, duration, h, replace, shortHex, when } from "./dom.js";

function definitions(pairs) {
  return h("dl", { class: "facts" }, pairs.filter(Boolean).map(([term, value]) =>
    [h("dt", {}, term), h("dd", {}, value ?? "–")]));
}

function explanationSection(explanation, chosenIds) {
  if (!explanation) return h("p", { class: "muted" }, "No placement decision was recorded.");
  const memory = explanation.memory;
  const macs = explanation.macs;
  const filtered = Object.entries(macs.filtered || {});
  const scoreNames = [...new Set(explanation.top_candidates.flatMap((c) => Object.keys(c.scores)))];
  return h("div", { class: "explanation" },
    h("p", {}, `Needs ${bytes(memory.total_bytes)}: weights ${bytes(memory.weights_bytes)} + KV cache ` +
      `${bytes(memory.kv_cache_bytes)} + overhead ${bytes(memory.overhead_bytes)}.`),
    h("p", {}, `${macs.total} Macs considered, ${macs.feasible} could take it, ${macs.scored} scored` +
      (explanation.pods?.considered ? `; ${explanation.pods.total} pods, ${explanation.pods.feasible} feasible.` : ".")),
    filtered.length ? h("ul", { class: "filtered" }, filtered.map(([reason, n]) =>
      h("li", {}, `${n} filtered: ${reason.replaceAll("_", " ")}`))) : null,
    explanation.top_candidates.length ? h("div", { class: "table-wrap" }, h("table", { class: "candidates" },
      h("caption", {}, "Best candidates, best first"),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Candidate"), h("th", { scope: "col" }, "Total"),
        scoreNames.map((name) => h("th", { scope: "col" }, name.replaceAll("_", " "))),
        h("th", { scope: "col" }, "Predicted tok/s"), h("th", { scope: "col" }, "Free"))),
      h("tbody", {}, explanation.top_candidates.map((c) => h("tr", { class: chosenIds.has(c.id) ? "chosen" : "" },
        h("th", { scope: "row" }, c.name, chosenIds.has(c.id) ? h("span", { class: "pill chosen-pill" }, "chosen") : null,
          h("span", { class: "sub" }, ` ${c.kind}, ${c.strategy}`)),
        h("td", {}, c.total.toFixed(3)),
        scoreNames.map((name) => h("td", {}, c.scores[name] === undefined ? "–" : c.scores[name].toFixed(2))),
        h("td", {}, Math.round(c.predicted_decode_tokens_per_s).toLocaleString("en-US")),
        h("td", {}, bytes(c.free_memory_bytes))))))) : null,
    explanation.notes?.length ? h("ul", { class: "notes" }, explanation.notes.map((note) => h("li", {}, note))) : null);
}

function receiptSection(receipt) {
  if (!receipt) return h("p", { class: "muted" }, "No receipt yet.");
  if (!receipt.decodable) return h("p", { class: "error" }, `The stored receipt does not decode: ${receipt.problem}`);
  return definitions([
    ["Format", `version ${receipt.version}, ${receipt.body_bytes} bytes`],
    ["Signed by node", receipt.node_id],
    ["Model", receipt.model_id],
    ["Weights digest", h("code", {}, shortHex(receipt.weights_digest, 12))],
    ["Sampling", `temperature ${receipt.temperature}, top-p ${receipt.top_p}, at most ${receipt.max_tokens} tokens`],
    ["Tokens", `${receipt.prompt_tokens} prompt, ${receipt.completion_tokens} generated (${receipt.finish_reason.replaceAll("_", " ")})`],
    ["Activation commitment", receipt.activation_commitment_bytes ? `${receipt.activation_commitment_bytes} bytes` : "none"],
    ["Signature", h("code", { class: "wrap" }, receipt.signature)],
    ["Signer key", h("code", { class: "wrap" }, receipt.signer_public_key)],
  ]);
}

function proofCheck(proof) {
  if (!proof) return "none recorded";
  if (proof.status === "passed") return `passed: replayed by the verifier ${when(proof.checked_at_ms)}`;
  if (proof.status === "failed") return `failed: the replay did not match (checked ${when(proof.checked_at_ms)})`;
  if (proof.status === "waiting") return "sampled: waiting for the verifier's replay";
  return `not sampled: pay is held until ${when(proof.hold_until_ms)}`;
}

export class JobView {
  constructor(root, jobId) {
    this.root = root;
    this.jobId = jobId;
  }

  destroy() {}

  lookupForm() {
    const input = h("input", { type: "text", name: "job", value: this.jobId || "", placeholder: "job-…",
      maxlength: "64", required: true, autocomplete: "off", spellcheck: "false" });
    return h("form", { class: "lookup", role: "search", "aria-label": "Look up a job",
      onsubmit: (event) => {
        event.preventDefault();
        if (input.value.trim()) window.location.hash = `#/jobs/${encodeURIComponent(input.value.trim())}`;
      } },
      h("label", {}, h("span", {}, "Job id"), input), h("button", { type: "submit" }, "Look up"));
  }

  async mount() {
    replace(this.root, h("h2", {}, "Job"), this.lookupForm());
    if (!this.jobId) return;
    this.root.append(h("p", { class: "sub", id: "job-loading" }, "Loading…"));
    try {
      this.render(await get(`/jobs/${encodeURIComponent(this.jobId)}`));
    } catch (error) {
      replace(this.root, h("h2", {}, "Job"), this.lookupForm(), h("p", { class: "error", role: "alert" }, error.message));
    }
  }

  render(job) {
    const t = job.timing;
    const placement = job.placement;
    const chosen = new Set(placement.explanation?.chosen ? [placement.explanation.chosen] : []);
    const check = job.check;
    replace(this.root, h("h2", {}, "Job"), this.lookupForm(),
      h("article", { class: "job", "aria-labelledby": "job-title" },
        h("header", { class: "job-head" },
          h("h3", { id: "job-title" }, h("code", {}, job.job_id)),
          h("span", { class: `pill job-${job.status}` }, job.status),
          h("span", { class: `pill check-${check.pay_state}`, id: "check-status" }, check.summary)),
        job.error ? h("p", { class: "error" }, job.error) : null,
        h("section", { "aria-labelledby": "placement-title", id: "placement" },
          h("h4", { id: "placement-title" }, "Where it ran, and why"),
          definitions([
            ["Model", job.model_id],
            ["Ran on", placement.nodes.length ? placement.nodes.map((n) =>
              `${n.name} (${n.chip}${placement.nodes.length > 1 ? `, ${n.layers} layers` : ""})`).join(" + ") : "not placed"],
            ["Strategy", placement.strategy || "–"],
            ["Attempt", String(job.attempt)],
          ]),
          explanationSection(placement.explanation, chosen)),
        h("section", { "aria-labelledby": "timing-title" },
          h("h4", { id: "timing-title" }, "Timing"),
          definitions([
            ["Submitted", when(t.created_at_ms)], ["Waited in queue", duration(t.queued_ms)],
            ["First token after", duration(t.time_to_first_token_ms)], ["Ran on the Mac", duration(t.node_run_ms)],
            ["Generation speed", t.tokens_per_s ? `${t.tokens_per_s} tokens/s` : "–"],
            ["Finished", when(t.finished_at_ms)], ["Total", duration(t.total_ms)],
          ])),
        h("section", { "aria-labelledby": "receipt-title", id: "receipt" },
          h("h4", { id: "receipt-title" }, "Receipt and check"),
          definitions([
            ["Receipt verified", check.receipt_verified ? "yes: signature, model, sampling and tokens match" : "no"],
            ["Proof check", proofCheck(check.proof_check)],
            ["Operator pay", `${check.pay.mlx} (${check.pay_state})`],
          ]),
          receiptSection(job.receipt))));
  }
}
