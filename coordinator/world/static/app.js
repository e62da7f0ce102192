// MLX World: routes (#/fleet, #/pods, #/jobs/<id>, #/operator), the totals strip and the live feed.

import { LiveFeed } from "./api.js";
import { FleetView } from "./fleet.js";
import { JobView } from "./job.js";
import { OperatorView } from "./operator.js";
import { PodsView } from "./pods.js";
import { TotalsStrip } from "./totals.js";

const LIVE_LABELS = { live: "live", reconnecting: "reconnecting…", offline: "offline: reload to retry" };

const liveBadge = document.getElementById("live");
const announcer = document.getElementById("announcer");
const view = document.getElementById("view");
const totalsElement = document.getElementById("totals");

function announce(message) {
  announcer.textContent = "";
  setTimeout(() => { announcer.textContent = message; }, 50);
}

const feed = new LiveFeed((state) => {
  liveBadge.textContent = LIVE_LABELS[state] || state;
  liveBadge.dataset.state = state;
});
const totals = new TotalsStrip(totalsElement, feed);
let current = null;

function parseRoute() {
  const hash = window.location.hash.replace(/^#\/?/, "");
  const [path, query = ""] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { name: parts[0] || "fleet", arg: parts[1] || "", params: Object.fromEntries(new URLSearchParams(query)) };
}

function route() {
  const { name, arg, params } = parseRoute();
  current?.destroy();
  document.querySelectorAll("nav.sections a").forEach((link) => {
    link.toggleAttribute("aria-current", link.dataset.route === name);
    if (link.dataset.route === name) link.setAttribute("aria-current", "page");
  });
  totalsElement.hidden = name === "operator";
  if (name === "pods") current = new PodsView(view, feed);
  else if (name === "jobs") current = new JobView(view, arg);
  else if (name === "operator") current = new OperatorView(view, feed, announce);
  else current = new FleetView(view, feed, announce, params);
  document.title = `MLX World · ${name === "jobs" ? "job" : name}`;
  current.mount();
}

window.addEventListener("hashchange", route);
feed.start();
totals.load().catch((error) => { totalsElement.textContent = `Could not load totals: ${error.message}`; });
route();
