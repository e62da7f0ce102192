// The network totals strip: figures now, with a small chart of the last hour under each.

import { get } from "./api.js";
import { sparkline } from "./charts.js";
import { count, h, memory, mlx, params, replace } from "./dom.js";

const SAMPLES_MAX = 360;

export class TotalsStrip {
  constructor(element, feed) {
    this.element = element;
    this.history = { at_ms: [], series: {} };
    this.totals = null;
    feed.on("totals", (totals) => this.update(totals));
  }

  async load() {
    const data = await get("/totals");
    this.history = data.history;
    this.update(data.totals, false);
  }

  update(totals, record = true) {
    if (record) this.record(totals);
    this.totals = totals;
    this.render();
  }

  record(totals) {
    // Live totals extend the server's history so the charts move between page loads.
    const series = this.history.series;
    const push = (name, value) => {
      series[name] = [...(series[name] || []), value].slice(-SAMPLES_MAX);
    };
    push("macs_online", totals.macs_online);
    push("memory_lendable_bytes", totals.memory_lendable_bytes);
    push("jobs_per_minute", totals.jobs_per_minute);
    push("tokens_per_s", totals.tokens_per_s);
    push("mlx_paid_base_units", totals.mlx_paid_base_units);
  }

  tile(id, label, value, detail, seriesName) {
    const values = (this.history.series[seriesName] || []).map(Number);
    return h("div", { class: "tile", id: `total-${id}` },
      h("div", { class: "tile-label" }, label),
      h("div", { class: "tile-value" }, value),
      h("div", { class: "tile-detail" }, detail),
      seriesName ? sparkline(values, label) : null);
  }

  render() {
    const t = this.totals;
    if (!t) return;
    const largest = t.largest_model;
    replace(this.element,
      h("h2", { class: "visually-hidden" }, "Network totals"),
      h("div", { class: "tiles" },
        this.tile("macs", "Macs online", count(t.macs_online),
          `${count(t.macs_busy)} busy · ${count(t.macs_total)} joined · ${count(t.pods_online)} pods`, "macs_online"),
        this.tile("memory", "Memory lendable", memory(t.memory_lendable_bytes), "unified memory, online Macs",
          "memory_lendable_bytes"),
        this.tile("largest", "Largest model now", largest ? `${params(largest.params_4bit)} params` : "–",
          largest ? `4-bit, on ${largest.where} (${memory(largest.free_bytes)} free)` : "no Mac free", null),
        this.tile("jobs", "Jobs per minute", count(t.jobs_per_minute), "completed, last minute", "jobs_per_minute"),
        this.tile("tokens", "Tokens per second", t.tokens_per_s.toLocaleString("en-US"), "generated, last minute",
          "tokens_per_s"),
        this.tile("paid", "MLX paid", mlx({ mlx: t.mlx_paid }), `to operators · ${mlx({ mlx: t.mlx_held })} held`,
          "mlx_paid_base_units")));
  }
}
