// The map: every Mac with a published place, on a world map drawn on a canvas. Macs close
// together on screen merge into one circle (its size the count, its colour the most common
// state); zooming in splits them. Zoomed in, pods are drawn as their members joined by cables.
// Map data and projection code are vendored from npm (static/vendor/README.md): no network.

import { get } from "./api.js";
import { count, h, replace } from "./dom.js";

const VENDOR = "/world/static/vendor/";
const SCRIPTS = ["d3-array.min.js", "d3-geo.min.js", "topojson-client.min.js"];
export const STATE_LABELS = { working: "working", idle: "idle", owner_back: "owner back", offline: "offline" };
const COLOURS = { working: "#2b8a3e", idle: "#1971c2", owner_back: "#e8590c", offline: "#868e96" };
const CLUSTER_PX = 36; // Macs in one square this wide on screen are drawn as one circle
const POD_RING_PX = 8; // pod members at one place sit on a ring this wide
const POD_ZOOM_MIN = 3; // below this zoom pods join the clusters: 200 rings would hide the map
const ZOOM_MIN = 1;
const ZOOM_MAX = 64;
const PULSE_MS = 1_400; // a job starting: a ring that grows and fades

let vendorLoaded = null;

function loadScript(src) {
  return new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = src;
    script.onload = resolve;
    script.onerror = () => reject(new Error(`could not load ${src}`));
    document.head.append(script);
  });
}

function loadVendor() {
  vendorLoaded ??= (async () => {
    for (const name of SCRIPTS) await loadScript(VENDOR + name); // in order: d3-geo needs d3-array
    const response = await fetch(VENDOR + "countries-110m.json");
    if (!response.ok) throw new Error(`could not load the world map (HTTP ${response.status})`);
    const atlas = await response.json();
    const { topojson } = window;
    return { land: topojson.feature(atlas, atlas.objects.countries),
      borders: topojson.mesh(atlas, atlas.objects.countries, (a, b) => a !== b) };
  })();
  return vendorLoaded;
}

function cssColour(element, name, fallback) {
  return getComputedStyle(element).getPropertyValue(name).trim() || fallback;
}

export class MapPanel {
  constructor(announce) {
    this.announce = announce;
    this.data = null; // the last /world/api/map answer
    this.query = {};
    this.zoom = 1;
    this.panX = 0;
    this.panY = 0;
    this.pulses = []; // [node index, started at]
    this.lastStates = new Map(); // node id -> state, to see jobs start
    this.drawn = []; // what the last frame drew: {x, y, r, indices}
    this.frame = null;
    this.generation = 0;
  }

  element() {
    this.canvas = h("canvas", { class: "map-canvas", role: "img", "aria-label": "World map of the Macs" });
    this.status = h("p", { class: "map-status", role: "status" }, "Loading the map…");
    this.detail = h("p", { class: "map-detail" });
    const button = (label, title, onclick) => h("button", { type: "button", title, "aria-label": title, onclick }, label);
    const legend = h("ul", { class: "map-legend", "aria-label": "Colours" },
      Object.entries(STATE_LABELS).map(([state, label]) => h("li", {},
        h("span", { class: `swatch swatch-${state}` }), label)));
    this.root = h("figure", { class: "map" },
      h("div", { class: "map-frame" }, this.canvas,
        h("div", { class: "map-zoom" }, button("+", "Zoom in", () => this.zoomBy(2)),
          button("−", "Zoom out", () => this.zoomBy(0.5)), button("⟲", "Whole world", () => this.resetView()))),
      h("figcaption", {}, this.status, legend, this.detail));
    this.attachGestures();
    window.__mlxWorldMap = this; // for the browser tests and bench/world_map.py
    return this.root;
  }

  destroy() {
    if (window.__mlxWorldMap === this) window.__mlxWorldMap = null;
    this.resizeObserver?.disconnect();
  }

  async load(query) {
    this.query = { ...query };
    const generation = ++this.generation;
    try {
      const [geometry, data] = await Promise.all([loadVendor(), get("/map", { params: this.filters() })]);
      if (generation !== this.generation) return;
      this.geometry = geometry;
      this.accept(data);
    } catch (error) {
      if (generation === this.generation) this.status.textContent = `Could not load the map: ${error.message}`;
    }
  }

  filters() {
    const { q, status, chip, tier, mode, region } = this.query;
    return { q, status, chip, tier, mode, region };
  }

  accept(data) {
    const macs = data.macs;
    const now = performance.now();
    const states = macs.state.map((code) => data.states[code]);
    const seen = new Map();
    macs.id.forEach((id, index) => {
      if (states[index] === "working" && this.lastStates.has(id) && this.lastStates.get(id) !== "working") {
        this.pulses.push([id, now]);
      }
      seen.set(id, states[index]);
    });
    this.lastStates = seen;
    this.data = { ...data, states: states };
    this.indexOf = new Map(macs.id.map((id, index) => [id, index]));
    this.pods = new Map();
    macs.pod.forEach((pod, index) => {
      if (pod) this.pods.set(pod, [...(this.pods.get(pod) || []), index]);
    });
    const shown = macs.id.length;
    this.canvas.dataset.shown = String(shown);
    this.status.textContent = `${count(shown)} Mac${shown === 1 ? "" : "s"} on the map` +
      (data.unplaced ? ` · ${count(data.unplaced)} without a published place` : "") +
      (data.truncated ? ` · the first ${count(data.matched)} matching` : "");
    this.project();
    this.schedule();
    if (this.pulses.length) this.animatePulses();
  }

  // --- geometry --------------------------------------------------------------

  size() {
    const rect = this.canvas.getBoundingClientRect();
    return { width: Math.max(1, rect.width), height: Math.max(1, rect.height) };
  }

  project() {
    // Base positions at zoom 1, in CSS pixels; zoom and pan are applied when drawing.
    if (!this.geometry || !this.data) return;
    const { width, height } = this.size();
    const { d3 } = window;
    this.projection = d3.geoNaturalEarth1().fitExtent([[4, 4], [width - 4, height - 4]], { type: "Sphere" });
    const path = d3.geoPath(this.projection);
    this.landPath = new Path2D(path(this.geometry.land));
    this.borderPath = new Path2D(path(this.geometry.borders));
    this.spherePath = new Path2D(path({ type: "Sphere" }));
    const { lon, lat } = this.data.macs;
    this.baseX = new Float32Array(lon.length);
    this.baseY = new Float32Array(lon.length);
    for (let i = 0; i < lon.length; i++) {
      const [x, y] = this.projection([lon[i], lat[i]]);
      this.baseX[i] = x;
      this.baseY[i] = y;
    }
    this.projectedFor = `${width}x${height}`;
  }

  toScreen(x, y) {
    return [x * this.zoom + this.panX, y * this.zoom + this.panY];
  }

  /** Where a place is drawn, in CSS pixels from the canvas's top left (tests use it). */
  placeOnScreen(lon, lat) {
    const [x, y] = this.projection([lon, lat]);
    return this.toScreen(x, y);
  }

  /** Where a Mac is drawn now (alone, in a cluster or on its pod's ring), or null. */
  positionOf(nodeId) {
    const index = this.indexOf?.get(nodeId);
    if (index === undefined) return null;
    const found = this.drawn.find((mark) => mark.indices.includes(index));
    return found ? { x: found.x, y: found.y, count: found.indices.length, state: this.data.states[index] } : null;
  }

  // --- drawing ---------------------------------------------------------------

  schedule() {
    if (this.frame === null) {
      this.frame = requestAnimationFrame(() => {
        this.frame = null;
        this.draw();
      });
    }
  }

  draw() {
    if (!this.data || !this.landPath) return;
    const { width, height } = this.size();
    if (this.projectedFor !== `${width}x${height}`) this.project();
    const ratio = window.devicePixelRatio || 1;
    if (this.canvas.width !== Math.round(width * ratio) || this.canvas.height !== Math.round(height * ratio)) {
      this.canvas.width = Math.round(width * ratio);
      this.canvas.height = Math.round(height * ratio);
    }
    const context = this.canvas.getContext("2d");
    context.setTransform(ratio, 0, 0, ratio, 0, 0);
    context.clearRect(0, 0, width, height);
    context.save();
    context.setTransform(ratio * this.zoom, 0, 0, ratio * this.zoom, ratio * this.panX, ratio * this.panY);
    context.fillStyle = cssColour(this.canvas, "--map-sea", "#e8eef5");
    context.fill(this.spherePath);
    context.fillStyle = cssColour(this.canvas, "--map-land", "#d5dbe2");
    context.fill(this.landPath);
    context.strokeStyle = cssColour(this.canvas, "--map-border", "#ffffff");
    context.lineWidth = 0.6 / this.zoom;
    context.stroke(this.borderPath);
    context.restore();
    this.drawn = [];
    this.drawClusters(context, width, height);
    this.drawPods(context);
    this.drawPulses(context);
  }

  drawClusters(context, width, height) {
    const { states, macs } = this.data;
    const cells = new Map();
    for (let i = 0; i < this.baseX.length; i++) {
      if (macs.pod[i] && this.zoom >= POD_ZOOM_MIN) continue; // drawn with its pod
      const [x, y] = this.toScreen(this.baseX[i], this.baseY[i]);
      if (x < -CLUSTER_PX || y < -CLUSTER_PX || x > width + CLUSTER_PX || y > height + CLUSTER_PX) continue;
      const key = `${Math.floor(x / CLUSTER_PX)},${Math.floor(y / CLUSTER_PX)}`;
      let cell = cells.get(key);
      if (!cell) cells.set(key, cell = { x: 0, y: 0, indices: [], byState: {} });
      cell.x += x;
      cell.y += y;
      cell.indices.push(i);
      cell.byState[states[i]] = (cell.byState[states[i]] || 0) + 1;
    }
    context.textAlign = "center";
    context.textBaseline = "middle";
    context.font = "600 11px system-ui, sans-serif";
    for (const cell of cells.values()) {
      const n = cell.indices.length;
      const x = cell.x / n;
      const y = cell.y / n;
      const state = Object.entries(cell.byState).sort((a, b) => b[1] - a[1])[0][0];
      const r = n === 1 ? 4.5 : Math.min(16, 7 + 2.2 * Math.log2(n));
      context.beginPath();
      context.arc(x, y, r, 0, 2 * Math.PI);
      context.fillStyle = COLOURS[state];
      context.globalAlpha = n === 1 ? 1 : 0.85;
      context.fill();
      context.globalAlpha = 1;
      context.lineWidth = 1.5;
      context.strokeStyle = "#ffffff";
      context.stroke();
      if (n > 1) {
        context.fillStyle = "#ffffff";
        context.fillText(n >= 1000 ? `${Math.round(n / 100) / 10}k` : String(n), x, y);
      }
      this.drawn.push({ x, y, r, indices: cell.indices });
    }
  }

  drawPods(context) {
    if (this.zoom < POD_ZOOM_MIN) return;
    const { states } = this.data;
    for (const members of this.pods.values()) {
      let cx = 0;
      let cy = 0;
      for (const i of members) {
        const [x, y] = this.toScreen(this.baseX[i], this.baseY[i]);
        cx += x;
        cy += y;
      }
      cx /= members.length;
      cy /= members.length;
      const spots = members.map((i, k) => {
        const angle = (2 * Math.PI * k) / members.length - Math.PI / 2;
        return [cx + POD_RING_PX * Math.cos(angle), cy + POD_RING_PX * Math.sin(angle), i];
      });
      context.beginPath(); // the cables: each member to the next, round the ring
      spots.forEach(([x, y], k) => (k === 0 ? context.moveTo(x, y) : context.lineTo(x, y)));
      if (spots.length > 2) context.closePath();
      context.strokeStyle = cssColour(this.canvas, "--map-cable", "#343a40");
      context.lineWidth = 1.5;
      context.stroke();
      for (const [x, y, i] of spots) {
        context.beginPath();
        context.arc(x, y, 3.5, 0, 2 * Math.PI);
        context.fillStyle = COLOURS[states[i]];
        context.fill();
        this.drawn.push({ x, y, r: 3.5, indices: [i], pod: this.data.macs.pod[i] });
      }
    }
  }

  drawPulses(context) {
    const now = performance.now();
    this.pulses = this.pulses.filter(([, started]) => now - started < PULSE_MS);
    for (const [id, started] of this.pulses) {
      const position = this.positionOf(id);
      if (!position) continue;
      const progress = (now - started) / PULSE_MS;
      context.beginPath();
      context.arc(position.x, position.y, 5 + 20 * progress, 0, 2 * Math.PI);
      context.strokeStyle = COLOURS.working;
      context.globalAlpha = 1 - progress;
      context.lineWidth = 2;
      context.stroke();
      context.globalAlpha = 1;
    }
  }

  animatePulses() {
    const step = () => {
      this.draw();
      if (this.pulses.length) requestAnimationFrame(step);
    };
    requestAnimationFrame(step);
  }

  // --- zoom and pan ----------------------------------------------------------

  zoomBy(factor, atX = null, atY = null) {
    const { width, height } = this.size();
    const x = atX ?? width / 2;
    const y = atY ?? height / 2;
    const zoom = Math.min(ZOOM_MAX, Math.max(ZOOM_MIN, this.zoom * factor));
    this.panX = x - ((x - this.panX) * zoom) / this.zoom;
    this.panY = y - ((y - this.panY) * zoom) / this.zoom;
    this.zoom = zoom;
    this.clampPan();
    this.schedule();
  }

  resetView() {
    this.zoom = 1;
    this.panX = 0;
    this.panY = 0;
    this.schedule();
  }

  clampPan() {
    const { width, height } = this.size();
    this.panX = Math.min(0, Math.max(width - width * this.zoom, this.panX));
    this.panY = Math.min(0, Math.max(height - height * this.zoom, this.panY));
  }

  panBy(dx, dy) {
    this.panX += dx;
    this.panY += dy;
    this.clampPan();
    this.schedule();
  }

  attachGestures() {
    const canvas = this.canvas;
    let dragging = null;
    canvas.addEventListener("wheel", (event) => {
      event.preventDefault();
      const rect = canvas.getBoundingClientRect();
      this.zoomBy(event.deltaY < 0 ? 1.25 : 0.8, event.clientX - rect.left, event.clientY - rect.top);
    }, { passive: false });
    canvas.addEventListener("pointerdown", (event) => {
      dragging = { x: event.clientX, y: event.clientY, moved: 0 };
      canvas.setPointerCapture(event.pointerId);
    });
    canvas.addEventListener("pointermove", (event) => {
      if (!dragging) return;
      const dx = event.clientX - dragging.x;
      const dy = event.clientY - dragging.y;
      dragging = { x: event.clientX, y: event.clientY, moved: dragging.moved + Math.abs(dx) + Math.abs(dy) };
      this.panBy(dx, dy);
    });
    canvas.addEventListener("pointerup", (event) => {
      const click = dragging && dragging.moved < 4;
      dragging = null;
      if (click) this.pick(event);
    });
    this.resizeObserver = new ResizeObserver(() => this.schedule());
    this.resizeObserver.observe(canvas);
  }

  pick(event) {
    const rect = this.canvas.getBoundingClientRect();
    const x = event.clientX - rect.left;
    const y = event.clientY - rect.top;
    const hit = this.drawn.find((mark) => (mark.x - x) ** 2 + (mark.y - y) ** 2 <= (mark.r + 3) ** 2);
    if (!hit) return;
    if (hit.indices.length > 1) {
      this.zoomBy(3, hit.x, hit.y);
      return;
    }
    const i = hit.indices[0];
    const { macs, states } = this.data;
    replace(this.detail, h("strong", {}, macs.name[i]), ` · ${STATE_LABELS[states[i]]}`,
      macs.pod[i] ? ` · pod ${macs.pod[i]}` : "");
    this.announce?.(`${macs.name[i]}: ${STATE_LABELS[states[i]]}`);
  }

  /** Draw `frames` frames while panning at `zoom`: frames per second, and each draw's mean and
   * worst milliseconds (bench/world_map.py). */
  measureFrames(frames, zoom = 1) {
    return new Promise((resolve) => {
      this.resetView();
      if (zoom !== 1) this.zoomBy(zoom);
      let left = frames;
      let drawing = 0;
      let worst = 0;
      const started = performance.now();
      const step = () => {
        this.panX += left % 60 < 30 ? -3 : 3;
        this.clampPan();
        const before = performance.now();
        this.draw();
        const spent = performance.now() - before;
        drawing += spent;
        worst = Math.max(worst, spent);
        if (--left > 0) requestAnimationFrame(step);
        else resolve({ fps: (frames * 1000) / (performance.now() - started), drawMs: drawing / frames, worstMs: worst });
      };
      requestAnimationFrame(step);
    });
  }
}
