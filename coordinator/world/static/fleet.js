// The fleet: filters, and a virtualized list. The server pages (100 Macs a request); the page
// renders only the rows in view, so 10,000 Macs cost what 40 do.

import { get } from "./api.js";
import { count, h, memory, MODE_LABELS, replace, statusPill } from "./dom.js";
import { MapPanel } from "./map.js";

const PAGE_SIZE = 100;
const OVERSCAN_ROWS = 8;
const SEARCH_DEBOUNCE_MS = 250;
const FILTERS = ["q", "status", "chip", "tier", "mode", "region", "sort"];
// A change is fetched at once; changes that arrive meanwhile wait for that fetch to end, then
// one fetch takes them all, at least this long after the last began (a big fleet changes often).
const REFRESH_GAP_MS = 400;
const FACETS_INTERVAL_MS = 30_000;

function rowHeight(element) {
  const value = getComputedStyle(element).getPropertyValue("--row-height");
  return parseFloat(value) || 56;
}

function option(value, label, selected) {
  return h("option", { value, selected: value === selected }, label);
}

export class FleetView {
  constructor(root, feed, announce, initialQuery = {}) {
    this.root = root;
    this.announce = announce;
    this.query = Object.fromEntries(FILTERS.map((name) => [name, initialQuery[name] || ""]));
    this.total = 0;
    this.pages = new Map(); // page number -> rows
    this.loading = new Set();
    this.generation = 0; // bumped when the filters change; late answers for older filters are dropped
    this.frame = null;
    this.refreshTimer = null;
    this.refreshing = false; // a refresh's fetches are under way
    this.refreshDue = false; // the fleet changed during them
    this.lastRefresh = 0;
    this.lastFacets = 0;
    this.unsubscribe = feed.on("fleet", () => this.scheduleRefresh());
  }

  destroy() {
    this.unsubscribe();
    this.map?.destroy();
    clearTimeout(this.refreshTimer);
  }

  scheduleRefresh() {
    if (this.refreshing) {
      this.refreshDue = true; // taken when the fetch under way ends
      return;
    }
    if (this.refreshTimer !== null) return; // one is already due: it will fetch the latest
    const wait = Math.max(0, this.lastRefresh + REFRESH_GAP_MS - Date.now());
    this.refreshTimer = setTimeout(async () => {
      this.refreshTimer = null;
      this.lastRefresh = Date.now();
      this.refreshing = true;
      try {
        await this.refresh();
      } finally {
        this.refreshing = false;
        if (this.refreshDue) {
          this.refreshDue = false;
          this.scheduleRefresh();
        }
      }
    }, wait);
  }

  async mount() {
    this.scroller = h("div", { class: "fleet-scroll", tabindex: "0", "aria-label": "Macs in the network" });
    this.spacer = h("div", { class: "fleet-spacer" });
    this.rows = h("div", { class: "fleet-rows", role: "rowgroup" });
    this.table = h("div", { class: "fleet-table", role: "table", "aria-label": "Every Mac in the network",
      "aria-rowcount": "1" }, this.header(), h("div", { class: "fleet-body" }, this.scroller));
    this.spacer.append(this.rows);
    this.scroller.append(this.spacer);
    this.scroller.addEventListener("scroll", () => this.schedule(), { passive: true });
    window.addEventListener("resize", () => this.schedule(), { passive: true });
    this.summary = h("p", { class: "fleet-summary", role: "status" }, "Loading the fleet…");
    this.filters = h("form", { class: "filters", role: "search", "aria-label": "Filter Macs",
      onsubmit: (event) => event.preventDefault() });
    this.map = new MapPanel(this.announce); // the map shares the table's filters
    replace(this.root, h("h2", {}, "Fleet"), this.filters, this.map.element(), this.summary, this.table);
    this.renderFilters();
    this.loadFacets();
    await this.reload();
  }

  header() {
    const cells = ["Mac", "Memory", "Bandwidth", "Region", "Mode", "Status", "Warm models", "Jobs", "Tokens",
      "Reputation"];
    return h("div", { class: "fleet-row fleet-header", role: "row", "aria-rowindex": "1" },
      cells.map((text) => h("div", { role: "columnheader", class: "cell" }, text)));
  }

  async loadFacets() {
    this.lastFacets = Date.now();
    try {
      const facets = await get("/fleet/facets");
      this.fillOptions(this.chipSelect, facets.chips);
      this.fillOptions(this.regionSelect, facets.regions);
    } catch (error) {
      this.summary.textContent = `Could not load the filters: ${error.message}`;
    }
  }

  fillOptions(select, values) {
    // Only the options change: the form, its focus and what the user typed stay as they are.
    const chosen = select.value;
    replace(select, option("", "any", chosen), values.map((v) => option(v.value, `${v.value} (${count(v.count)})`, chosen)));
    if (chosen && !values.some((v) => v.value === chosen)) select.append(option(chosen, chosen, chosen));
  }

  renderFilters() {
    const q = this.query;
    const select = (name, options) => h("select", { name, onchange: (event) => this.setFilter(name, event.target.value) },
      option("", "any", q[name]), options);
    const labelled = (label, control) => h("label", { class: "filter" }, h("span", {}, label), control);
    const search = h("input", { type: "search", name: "q", value: q.q, placeholder: "name or node id",
      maxlength: "64", autocomplete: "off",
      oninput: (event) => {
        clearTimeout(this.searchTimer);
        this.searchTimer = setTimeout(() => this.setFilter("q", event.target.value.trim()), SEARCH_DEBOUNCE_MS);
      } });
    this.chipSelect = select("chip", q.chip ? [option(q.chip, q.chip, q.chip)] : []);
    this.regionSelect = select("region", q.region ? [option(q.region, q.region, q.region)] : []);
    const wide = window.matchMedia("(min-width: 641px)").matches;
    replace(this.filters,
      h("label", { class: "filter filter-search" }, h("span", {}, "Search"), search),
      h("details", { class: "more-filters", open: wide },
        this.filterSummary = h("summary", {}, this.filterLabel()),
        h("div", { class: "filter-set" },
          labelled("Status", select("status", ["online", "busy", "offline"].map((v) => option(v, v, q.status)))),
          labelled("Tier", select("tier", ["base", "pro", "max", "ultra"].map((v) => option(v, v, q.tier)))),
          labelled("Chip", this.chipSelect),
          labelled("Mode", select("mode", Object.entries(MODE_LABELS).map(([v, label]) => option(v, label, q.mode)))),
          labelled("Region", this.regionSelect),
          h("label", { class: "filter" }, h("span", {}, "Sort"),
            h("select", { name: "sort", onchange: (event) => this.setFilter("sort", event.target.value) },
              option("", "newest first", q.sort), option("name", "name", q.sort),
              option("memory", "most memory", q.sort), option("bandwidth", "fastest memory", q.sort))))));
  }

  filterLabel() {
    const chosen = ["status", "tier", "chip", "mode", "region", "sort"].filter((name) => this.query[name]).length;
    return chosen ? `Filters and sort (${chosen} set)` : "Filters and sort";
  }

  setFilter(name, value) {
    if (this.query[name] === value) return;
    this.query[name] = value;
    this.filterSummary.textContent = this.filterLabel();
    const params = new URLSearchParams(Object.entries(this.query).filter(([, v]) => v));
    history.replaceState(null, "", `#/fleet${params.toString() ? "?" + params : ""}`);
    this.reload();
  }

  async reload() {
    this.generation += 1;
    this.pages.clear();
    this.loading.clear();
    this.scroller.scrollTop = 0;
    this.map.load(this.query);
    await this.fetchPage(1, this.generation);
    this.render();
  }

  async refresh() {
    // The fleet changed: fetch again what is in view, keeping the old rows until the new arrive.
    const before = this.total;
    const visible = this.visiblePages();
    this.loading.clear();
    // The map's fetch too: a newer one would drop its answer, so a busy fleet could starve the map.
    await Promise.all([this.map.load(this.query), ...visible.map((page) => this.fetchPage(page, this.generation, true))]);
    for (const page of [...this.pages.keys()]) if (!visible.includes(page)) this.pages.delete(page);
    this.render();
    if (this.total > before) this.announce(`${this.total - before} Mac${this.total - before > 1 ? "s" : ""} joined`);
    if (Date.now() - this.lastFacets > FACETS_INTERVAL_MS) this.loadFacets();
  }

  async fetchPage(page, generation, force = false) {
    if (!force && (this.pages.has(page) || this.loading.has(page))) return;
    this.loading.add(page);
    try {
      const data = await get("/fleet", { params: { ...this.query, page, page_size: PAGE_SIZE } });
      if (generation !== this.generation) return;
      this.total = data.total;
      this.pages.set(page, data.nodes);
    } catch (error) {
      if (generation === this.generation) this.summary.textContent = `Could not load Macs: ${error.message}`;
    } finally {
      this.loading.delete(page);
    }
  }

  visibleRange() {
    const height = rowHeight(this.table);
    const first = Math.max(0, Math.floor(this.scroller.scrollTop / height) - OVERSCAN_ROWS);
    const last = Math.min(this.total - 1,
      Math.ceil((this.scroller.scrollTop + this.scroller.clientHeight) / height) + OVERSCAN_ROWS);
    return { first, last, height };
  }

  visiblePages() {
    const { first, last } = this.visibleRange();
    const pages = [];
    for (let page = Math.floor(first / PAGE_SIZE) + 1; page <= Math.floor(Math.max(first, last) / PAGE_SIZE) + 1; page++) {
      pages.push(page);
    }
    return pages;
  }

  schedule() {
    if (this.frame === null) {
      this.frame = requestAnimationFrame(() => {
        this.frame = null;
        this.render();
      });
    }
  }

  render() {
    const { first, last, height } = this.visibleRange();
    this.spacer.style.height = `${this.total * height}px`;
    this.table.setAttribute("aria-rowcount", String(this.total + 1));
    this.summary.textContent = `${count(this.total)} Mac${this.total === 1 ? "" : "s"}` +
      (Object.values(this.query).some(Boolean) ? " match these filters" : " in the network");
    const missing = this.visiblePages().filter((page) => !this.pages.has(page));
    const generation = this.generation;
    if (missing.length) Promise.all(missing.map((page) => this.fetchPage(page, generation))).then(() => this.schedule());
    const rows = [];
    for (let index = first; index <= last && this.total > 0; index++) {
      const page = this.pages.get(Math.floor(index / PAGE_SIZE) + 1);
      const node = page ? page[index % PAGE_SIZE] : null;
      rows.push(node ? this.row(node, index) : h("div", { class: "fleet-row placeholder", role: "row",
        "aria-rowindex": index + 2 }, h("div", { class: "cell", role: "cell" }, "…")));
    }
    this.rows.style.transform = `translateY(${first * height}px)`;
    replace(this.rows, rows);
  }

  row(node, index) {
    const bandwidth = node.measured_bandwidth_gb_s ?? node.bandwidth_gb_s;
    const cell = (cls, ...children) => h("div", { class: `cell ${cls}`, role: "cell" }, ...children);
    return h("div", { class: `fleet-row status-row-${node.status}`, role: "row", "aria-rowindex": index + 2,
      dataset: { nodeId: node.node_id } },
      cell("mac", h("span", { class: "name" }, node.name),
        h("span", { class: "sub" }, `${node.chip} · ${node.tier}${node.gpu_cores ? ` · ${node.gpu_cores} GPU cores` : ""}`,
          node.pod_id ? h("span", { class: "pod-tag" }, ` · pod ${node.pod_id}`) : null)),
      cell("memory", memory(node.memory_bytes), h("span", { class: "sub" }, `${memory(node.lendable_bytes)} lendable`)),
      cell("bandwidth", `${Math.round(bandwidth)} GB/s`,
        h("span", { class: "sub" }, node.measured_bandwidth_gb_s ? (node.benchmark_flagged ? "measured, flagged" : "measured")
          : "declared")),
      cell("region", node.region || h("span", { class: "muted" }, "not declared")),
      cell("mode", MODE_LABELS[node.mode] || node.mode),
      cell("status", statusPill(node.status)),
      cell("warm", node.warm_models.length ? node.warm_models.join(", ") : h("span", { class: "muted" }, "none")),
      cell("jobs num", count(node.jobs_served)),
      cell("tokens num", count(node.tokens_generated)),
      h("div", { class: "cell reputation num", role: "cell",
        title: `${node.checks.passed} proof checks passed, ${node.checks.failed} failed` +
          (node.checks.quarantined ? "; quarantined" : "") },
      node.checks.quarantined ? h("span", { class: "pill status-offline" }, "quarantined") : node.reputation.toFixed(2)));
  }
}
