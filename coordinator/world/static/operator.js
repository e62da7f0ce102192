// An operator's own page, behind their operator key: Macs, earnings per epoch, jobs and payout proofs.
// The key stays in this tab's sessionStorage and only ever travels in the Authorization header.

import { ApiError, get, put } from "./api.js";
import { count, h, mlx, MODE_LABELS, replace, shortHex, stacked, statusPill, when } from "./dom.js";
import { verifyProof } from "./merkle.js";

const KEY_STORAGE = "mlxworld.operatorKey";
const JOBS_PAGE_SIZE = 25;

function money(value) {
  return value && value.base_units !== "0" ? mlx(value) : "–";
}

export class OperatorView {
  constructor(root, feed, announce) {
    this.root = root;
    this.announce = announce;
    this.key = sessionStorage.getItem(KEY_STORAGE);
    this.jobsPage = 1;
    this.epochsSection = null;
    this.showEmptyEpochs = false;
    // An epoch closed: earnings moved to "paid out" and a new proof exists.
    this.unsubscribe = feed.on("epoch", () => this.refreshMoney());
  }

  destroy() {
    this.unsubscribe();
  }

  async refreshMoney() {
    if (!this.key || !this.epochsSection) return;
    try {
      const [me, epochs] = await Promise.all([get("/operator/me", { key: this.key }), get("/operator/epochs", { key: this.key })]);
      this.balanceTiles.replaceWith(this.balance(me));
      this.epochsSection.replaceWith(this.epochsView(epochs));
      await this.loadJobs(this.jobsPage);
    } catch (error) {
      this.announce(`Could not refresh earnings: ${error.message}`);
    }
  }

  async mount() {
    if (!this.key) return this.renderSignIn();
    try {
      const [me, epochs] = await Promise.all([get("/operator/me", { key: this.key }), get("/operator/epochs", { key: this.key })]);
      this.render(me, epochs);
      await this.loadJobs(1);
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) {
        sessionStorage.removeItem(KEY_STORAGE);
        this.key = null;
        return this.renderSignIn(error.message);
      }
      replace(this.root, h("h2", {}, "Operator"), h("p", { class: "error", role: "alert" }, error.message));
    }
  }

  renderSignIn(problem = "") {
    const input = h("input", { type: "password", name: "key", id: "operator-key", required: true,
      autocomplete: "current-password", spellcheck: "false", placeholder: "mlxo_…" });
    replace(this.root, h("h2", {}, "Operator"),
      h("p", { class: "lede" }, "See what your Macs did and earned: each job's pay and check, your earnings per " +
        "epoch, and the Merkle proof of each payout, checked here in your browser against the root on chain."),
      h("form", { class: "signin", onsubmit: (event) => {
        event.preventDefault();
        sessionStorage.setItem(KEY_STORAGE, input.value.trim());
        this.key = input.value.trim();
        this.mount();
      } },
        h("label", { for: "operator-key" }, "Operator key"), input,
        h("button", { type: "submit" }, "Open my page"),
        problem ? h("p", { class: "error", role: "alert" }, problem) : null,
        h("p", { class: "sub" }, "Create one on the coordinator with ", h("code", {}, "mlxnet keys create --operator NAME"),
          ". The key is kept in this tab only.")));
  }

  signOut() {
    sessionStorage.removeItem(KEY_STORAGE);
    this.key = null;
    this.renderSignIn();
  }

  render(me, epochs) {
    this.jobsSection = h("section", { "aria-labelledby": "op-jobs-title", id: "operator-jobs" });
    this.proofSection = h("section", { "aria-labelledby": "op-proof-title", id: "proof", hidden: true });
    replace(this.root,
      h("div", { class: "operator-head" }, h("h2", {}, "Operator ", h("span", { id: "operator-id" }, me.operator_id)),
        h("button", { type: "button", class: "link", onclick: () => this.signOut() }, "Sign out")),
      this.balance(me),
      this.nodesSection(me.nodes),
      this.epochsView(epochs),
      this.proofSection,
      this.jobsSection);
  }

  balance(me) {
    this.balanceTiles = h("div", { class: "tiles small", id: "balance" },
      this.tile("available", "Available", mlx(me.balance.available), "swept to your payout address at each epoch's close"),
      this.tile("held", "Held", mlx(me.balance.held), "credits waiting for their proof check"),
      this.tile("earned", "Earned, all time", mlx(me.balance.earned_all_time), ""),
      this.tile("address", "Payout address", me.payout_address ? shortHex(me.payout_address, 8) : "not set",
        me.payout_address ? "" : "set it with mlxnet ledger set-payout-address"));
    return this.balanceTiles;
  }

  tile(id, label, value, detail) {
    return h("div", { class: "tile", id: `balance-${id}` }, h("div", { class: "tile-label" }, label), h("div", { class: "tile-value" }, value),
      h("div", { class: "tile-detail" }, detail));
  }

  nodesSection(nodes) {
    return h("section", { "aria-labelledby": "op-nodes-title" },
      h("h3", { id: "op-nodes-title" }, `Your Macs (${nodes.length})`),
      h("div", { class: "table-wrap" }, stacked(h("table", {},
        h("thead", {}, h("tr", {}, ["Mac", "Status", "Mode", "Jobs", "Tokens", "Reputation", "Region"].map((t) =>
          h("th", { scope: "col" }, t)))),
        h("tbody", {}, nodes.map((node) => h("tr", { dataset: { nodeId: node.node_id } },
          h("th", { scope: "row" }, node.name, h("span", { class: "sub" }, ` ${node.chip}`)),
          h("td", {}, statusPill(node.status)), h("td", {}, MODE_LABELS[node.mode] || node.mode),
          h("td", {}, count(node.jobs_served)), h("td", {}, count(node.tokens_generated)),
          h("td", {}, node.reputation.toFixed(2)), h("td", {}, this.regionForm(node)))))))));
  }

  regionForm(node) {
    const input = h("input", { type: "text", value: node.region || "", maxlength: "64", placeholder: "e.g. Europe/Lisbon",
      "aria-label": `Region of ${node.name}` });
    const note = h("span", { class: "sub", role: "status" });
    return h("form", { class: "inline", onsubmit: async (event) => {
      event.preventDefault();
      try {
        await put(`/operator/nodes/${encodeURIComponent(node.node_id)}/region`, { region: input.value.trim() || null },
          { key: this.key });
        note.textContent = "saved";
      } catch (error) {
        note.textContent = error.message;
      }
    } }, input, h("button", { type: "submit" }, "Save"), note);
  }

  epochsView(data) {
    const active = (epoch) => !epoch.closed || epoch.payout || epoch.seats?.length ||
      Object.values(epoch.earnings).some((amount) => amount.base_units !== "0");
    const hidden = data.epochs.filter((epoch) => !active(epoch)).length;
    const rows = data.epochs.filter((epoch) => this.showEmptyEpochs || active(epoch)).map((epoch) => {
      const e = epoch.earnings;
      const anchor = epoch.anchors?.[0];
      const { text: rootState, state } = this.rootState(epoch, anchor);
      return h("tr", { dataset: { epoch: epoch.epoch ?? "open" } },
        h("th", { scope: "row" }, epoch.closed ? `#${epoch.epoch}` : "open now",
          h("span", { class: "sub" }, epoch.closed ? ` closed ${when(epoch.window_end_us / 1000)}` : "")),
        h("td", {}, money(e.jobs)), h("td", { class: "seat" }, money(e.seat_reward)),
        h("td", { class: "seat" }, money(e.seat_bonus)), h("td", {}, money(e.held)), h("td", {}, money(e.rejected)),
        h("td", {}, money(e.paid_out)),
        h("td", { class: `root-state${state ? ` ${state}` : ""}`, title: epoch.chain?.root || epoch.root || "" }, rootState),
        h("td", {}, epoch.payout ? h("button", { type: "button", class: "proof-button",
          onclick: () => this.showProof(epoch.epoch) }, "Proof") : h("span", { class: "muted" }, "–")));
    });
    const seats = data.epochs.flatMap((epoch) => (epoch.seats || []).map((seat) =>
      h("li", {}, `#${epoch.epoch} ${seat.node_id}: ${seat.reason}`)));
    this.epochsSection = h("section", { "aria-labelledby": "op-epochs-title", id: "epochs" },
      h("h3", { id: "op-epochs-title" }, "Earnings per epoch"),
      hidden || this.showEmptyEpochs ? h("label", { class: "sub toggle" },
        h("input", { type: "checkbox", checked: this.showEmptyEpochs, onchange: (event) => {
          this.showEmptyEpochs = event.target.checked;
          this.refreshMoney();
        } }), ` show ${hidden} epoch${hidden === 1 ? "" : "s"} without earnings`) : null,
      h("div", { class: "table-wrap" }, stacked(h("table", {},
        h("thead", {}, h("tr", {}, ["Epoch", "Jobs", "Ultra-seat reward", "Ultra-seat bonus", "Held", "Rejected",
          "Paid out", "Root", "Payout proof"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, rows)))),
      seats.length ? h("details", {}, h("summary", {}, "Ultra-seat results"), h("ul", {}, seats)) : null);
    return this.epochsSection;
  }

  // The root as the chain holds it now (read by the coordinator through the RPC), beside the ledger's.
  rootState(epoch, anchor) {
    if (!epoch.closed) return { text: "open", state: "" };
    if (!epoch.root) return { text: "no payouts", state: "" };
    const check = epoch.chain?.check;
    if (check === "matches") return { text: `on chain, matches the ledger${anchor ? ` (block ${anchor.block_number})` : ""}`, state: "anchored" };
    if (check === "differs") return { text: `DIFFERS: the chain holds ${shortHex(epoch.chain.root)}, the ledger ${shortHex(epoch.root)}`, state: "mismatch" };
    if (check === "not_on_chain") return { text: anchor ? "recorded as anchored, but NOT on chain" : "not on chain yet", state: anchor ? "mismatch" : "" };
    const recorded = anchor ? `recorded on chain, block ${anchor.block_number}` : "not on chain yet";
    return { text: check === "unreachable" ? `${recorded} (chain unreachable now)` : recorded, state: anchor ? "anchored" : "" };
  }

  async showProof(epochNumber) {
    this.proofSection.hidden = false;
    replace(this.proofSection, h("h3", { id: "op-proof-title" }, `Payout proof, epoch #${epochNumber}`), h("p", {}, "Loading…"));
    let proof;
    try {
      proof = await get(`/operator/proofs/${epochNumber}`, { key: this.key });
    } catch (error) {
      return replace(this.proofSection, h("h3", { id: "op-proof-title" }, "Payout proof"),
        h("p", { class: "error", role: "alert" }, error.message));
    }
    const field = (id, label, value, attrs = {}, wide = false) => h("label", { class: `proof-field${wide ? " wide" : ""}` },
      h("span", {}, label), h("input", { id, type: "text", value, spellcheck: "false", autocomplete: "off", ...attrs }));
    const proofText = h("textarea", { id: "proof-siblings", rows: String(Math.max(2, proof.proof.length)), spellcheck: "false" },
      proof.proof.join("\n"));
    const result = h("p", { id: "proof-result", role: "status", class: "proof-result" });
    const differs = proof.chain_check === "differs" || (proof.chain_check === "not_on_chain" && proof.root_source === "anchor");
    const warning = !differs ? null : h("p", { class: "proof-result bad", id: "root-differs", role: "alert" },
      proof.chain_check === "differs"
        ? `The root on chain (${shortHex(proof.root)}) differs from the coordinator's ledger (${shortHex(proof.ledger_root)}): this payout cannot be claimed as listed. Run mlxnet ledger audit against the chain.`
        : "The coordinator recorded this root as anchored, but the chain does not hold it (a reorg, or a wrong record).");
    const source = proof.root_source === "chain" ? `read from the distributor on chain ${proof.chain_id} now`
      : proof.root_source === "anchor" ? `published on chain ${proof.chain_id} in block ${proof.block_number} (tx ${shortHex(proof.tx_hash)})`
        : "the ledger's own root: not yet published on chain";
    const verify = () => {
      const outcome = verifyProof({
        hashName: proof.hash, leafEncoding: proof.leaf_encoding,
        leaf: { epoch: this.proofSection.querySelector("#proof-epoch").value,
          address: this.proofSection.querySelector("#proof-address").value,
          amount: this.proofSection.querySelector("#proof-amount").value },
        proof: proofText.value.split(/\s+/).filter(Boolean),
        root: this.proofSection.querySelector("#proof-root").value });
      result.className = `proof-result ${outcome.ok ? "ok" : "bad"}`;
      result.textContent = outcome.ok
        ? `Verified: this payout is in the tree whose root is on chain (computed root ${shortHex(outcome.computedRoot)}).`
        : `Does not verify: ${outcome.problem}${outcome.computedRoot ? ` (computed ${shortHex(outcome.computedRoot)})` : ""}.`;
      this.announce(result.textContent);
    };
    replace(this.proofSection,
      h("h3", { id: "op-proof-title" }, `Payout proof, epoch #${proof.epoch}`),
      h("p", { class: "sub" }, `Leaf = ${proof.leaf_encoding}; pairs = ${proof.pair_rule}. Edit any field to see the check fail.`),
      h("div", { class: "proof-fields" },
        field("proof-epoch", "Epoch", String(proof.epoch), { inputmode: "numeric" }),
        field("proof-address", "Payout address", proof.address),
        field("proof-amount", "Amount (base units)", proof.amount.base_units, { inputmode: "numeric" }),
        h("label", { class: "proof-field wide" }, h("span", {}, "Proof (sibling hashes, one per line)"), proofText),
        field("proof-root", "Root", proof.root, {}, true)),
      h("p", { class: "sub" }, `Root source: ${source}. Amount: ${proof.amount.mlx}.`),
      warning,
      h("button", { type: "button", id: "verify-proof", onclick: verify }, "Verify in this browser"),
      result);
    this.proofSection.scrollIntoView({ block: "start" });
  }

  async loadJobs(page) {
    this.jobsPage = page;
    let data;
    try {
      data = await get("/operator/jobs", { key: this.key, params: { page, page_size: JOBS_PAGE_SIZE } });
    } catch (error) {
      return replace(this.jobsSection, h("h3", { id: "op-jobs-title" }, "Jobs"), h("p", { class: "error" }, error.message));
    }
    const pager = h("nav", { class: "pager", "aria-label": "Job pages" },
      h("button", { type: "button", disabled: page <= 1, onclick: () => this.loadJobs(page - 1) }, "Newer"),
      h("span", {}, `page ${page} of ${data.pages}`),
      h("button", { type: "button", disabled: page >= data.pages, onclick: () => this.loadJobs(page + 1) }, "Older"));
    replace(this.jobsSection, h("h3", { id: "op-jobs-title" }, `Jobs (${count(data.total)})`),
      h("div", { class: "table-wrap" }, stacked(h("table", {},
        h("thead", {}, h("tr", {}, ["Job", "Mac", "Status", "Tokens", "Pay", "Check and pay"].map((t) =>
          h("th", { scope: "col" }, t)))),
        h("tbody", {}, data.jobs.map((job) => h("tr", { dataset: { jobId: job.job_id }, class: `pay-${job.pay_state}` },
          h("th", { scope: "row" }, h("a", { href: `#/jobs/${encodeURIComponent(job.job_id)}` }, shortHex(job.job_id, 12)),
            h("span", { class: "sub" }, ` ${job.model_id}`)),
          h("td", {}, job.nodes.map((n) => n.name).join(" + ")),
          h("td", {}, job.status), h("td", {}, count(job.completion_tokens)),
          h("td", {}, money(job.pay)),
          h("td", {}, h("span", { class: `pill check-${job.pay_state}` }, job.pay_state), " ", job.pay_reason))))))),
      data.pages > 1 ? pager : null);
  }
}
