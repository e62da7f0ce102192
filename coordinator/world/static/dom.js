// Small DOM and formatting helpers. Text always goes in as text nodes, never as HTML:
// Mac names and regions are operators' own words.

export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") element.className = value;
    else if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(element.dataset, value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

export function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function replace(element, ...children) {
  element.replaceChildren();
  return append(element, children);
}

const SVG_NS = "http://www.w3.org/2000/svg";

export function svg(tag, attributes = {}, ...children) {
  const element = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined) element.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

const GB = 1e9;

export function bytes(value) {
  if (value === null || value === undefined) return "–";
  if (value >= 1e12) return `${(value / 1e12).toFixed(value >= 1e13 ? 0 : 1)} TB`;
  if (value >= GB) return `${(value / GB).toFixed(value >= 1e11 ? 0 : 1)} GB`;
  return `${(value / 1e6).toFixed(1)} MB`;
}

// Unified memory in Apple's sense of "GB" (2^30 bytes): a 512 GB Mac Studio shows as 512 GB.
export function memory(value) {
  if (value === null || value === undefined) return "–";
  const gib = value / 2 ** 30;
  if (gib >= 1024) return `${(gib / 1024).toFixed(gib >= 10240 ? 0 : 1)} TB`;
  return `${gib >= 100 || Number.isInteger(gib) ? Math.round(gib) : gib.toFixed(1)} GB`;
}

export function count(value) {
  if (value === null || value === undefined) return "–";
  return Number(value).toLocaleString("en-US");
}

export function params(value) {
  if (!value) return "–";
  if (value >= 1e12) return `${(value / 1e12).toFixed(1)}T`;
  if (value >= 1e9) return `${Math.round(value / 1e9)}B`;
  return `${Math.round(value / 1e6)}M`;
}

export function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

export function when(ms) {
  if (!ms) return "–";
  return new Date(ms).toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "medium" });
}

export function mlx(money) {
  // money is {base_units: "123", mlx: "0.000000123 MLX"}: exact text from the server.
  if (!money) return "–";
  return money.mlx.replace(/(\.\d*?[1-9])0+ MLX$/, "$1 MLX").replace(/\.0+ MLX$/, " MLX");
}

export const MODE_LABELS = { idle: "idle lending", dedicated: "dedicated seat", ultra_seat: "Ultra seat" };
export const STATUS_LABELS = { online: "online", busy: "busy", offline: "offline" };

export function statusPill(status) {
  return h("span", { class: `pill status-${status}` }, STATUS_LABELS[status] || status);
}

export function shortHex(text, keep = 10) {
  if (!text) return "–";
  return text.length <= keep * 2 + 1 ? text : `${text.slice(0, keep)}…${text.slice(-6)}`;
}

// Gives each body cell its column's name, so a phone can show a table as labelled stacks.
export function stacked(table) {
  table.classList.add("stack");
  const names = [...table.querySelectorAll("thead th")].map((th) => th.textContent);
  for (const row of table.querySelectorAll("tbody tr")) {
    [...row.children].forEach((cell, i) => { if (names[i]) cell.dataset.label = names[i]; });
  }
  return table;
}
