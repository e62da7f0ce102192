// Pods: Macs cabled together on one desk, drawn as a group with their cables.

import { get } from "./api.js";
import { h, memory, replace, statusPill, svg } from "./dom.js";

const SIZE = 220;
const RELOAD_DELAY_MS = 5_000;
const RADIUS = 72;

function drawing(pod) {
  const center = SIZE / 2;
  const place = new Map(pod.members.map((member, i) => {
    const angle = (2 * Math.PI * i) / pod.members.length - Math.PI / 2;
    return [member.node_id, [center + RADIUS * Math.cos(angle), center + RADIUS * Math.sin(angle)]];
  }));
  const cables = pod.links.map((link) => {
    const [x1, y1] = place.get(link.a) || [center, center];
    const [x2, y2] = place.get(link.b) || [center, center];
    return svg("line", { x1, y1, x2, y2, class: `cable cable-${link.transport.toLowerCase()}`,
      "stroke-width": 2 + link.cables });
  });
  const macs = pod.members.map((member, i) => {
    const [x, y] = place.get(member.node_id);
    return svg("g", { class: `pod-mac status-${member.status}` },
      svg("circle", { cx: x, cy: y, r: 18 }),
      svg("text", { x, y: y + 4, "text-anchor": "middle", class: "rank" }, String(i)));
  });
  return svg("svg", { viewBox: `0 0 ${SIZE} ${SIZE}`, class: "pod-drawing", role: "img",
    "aria-label": `${pod.members.length} Macs joined by ${pod.links.length} cables` }, cables, macs);
}

function card(pod) {
  const transports = [...new Set(pod.links.map((link) => link.transport))].join(" + ") || "no cables";
  return h("article", { class: "pod-card", "aria-labelledby": `pod-${pod.pod_id}` },
    h("header", {},
      h("h3", { id: `pod-${pod.pod_id}` }, `Pod ${pod.pod_id}`),
      h("span", { class: `pill strategy-${pod.strategy}` },
        pod.strategy === "tensor" ? "tensor parallel" : "pipeline parallel"),
      h("span", { class: "pill" }, transports),
      pod.online ? statusPill("online") : statusPill("offline")),
    drawing(pod),
    h("ol", { class: "pod-members", start: "0" }, pod.members.map((member) =>
      h("li", {}, h("span", { class: "name" }, member.name), " ", h("span", { class: "sub" }, member.chip), " ",
        statusPill(member.status)))),
    h("ul", { class: "pod-links" }, pod.links.map((link) => {
      const name = (id) => pod.members.find((m) => m.node_id === id)?.name || id;
      return h("li", {}, `${name(link.a)} ↔ ${name(link.b)}: ${link.transport}` +
        (link.cables > 1 ? ` × ${link.cables} cables` : ""));
    })),
    h("p", { class: "sub" }, `${memory(pod.lendable_bytes)} lendable together`));
}

export class PodsView {
  constructor(root, feed) {
    this.root = root;
    this.timer = null;
    // Fleet events come every second in a big network; pods change rarely, so reload at most every 5 s.
    this.unsubscribe = feed.on("fleet", () => {
      if (this.timer === null) this.timer = setTimeout(() => { this.timer = null; this.load(); }, RELOAD_DELAY_MS);
    });
  }

  destroy() {
    this.unsubscribe();
    clearTimeout(this.timer);
  }

  async mount() {
    replace(this.root, h("h2", {}, "Pods"), h("p", { class: "sub" }, "Loading pods…"));
    await this.load();
  }

  async load() {
    try {
      const data = await get("/pods");
      replace(this.root, h("h2", {}, "Pods"),
        h("p", { class: "lede" }, "Macs cabled together on one desk run a job as one. All-RDMA pods with a cable " +
          "between every pair can split every layer (tensor parallel); others split the model into runs of layers " +
          "(pipeline)."),
        data.pods.length ? h("div", { class: "pod-grid" }, data.pods.map(card))
          : h("p", { class: "muted" }, "No pods have been declared yet."));
    } catch (error) {
      replace(this.root, h("h2", {}, "Pods"), h("p", { class: "error", role: "alert" }, error.message));
    }
  }
}
