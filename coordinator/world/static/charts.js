// Small line charts for the totals, drawn as SVG. Decorative: each tile states its figure in text.

import { svg } from "./dom.js";

const WIDTH = 120;
const HEIGHT = 32;

export function sparkline(values, label) {
  const numbers = values.map(Number).filter((value) => Number.isFinite(value));
  const chart = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: "spark", role: "img",
    "aria-label": `${label}: ${numbers.length} recent samples` });
  if (numbers.length < 2) {
    chart.append(svg("line", { x1: 0, y1: HEIGHT - 1, x2: WIDTH, y2: HEIGHT - 1, class: "spark-base" }));
    return chart;
  }
  const low = Math.min(...numbers);
  const high = Math.max(...numbers);
  const span = high - low || 1;
  const step = WIDTH / (numbers.length - 1);
  const points = numbers.map((value, i) => {
    const x = (i * step).toFixed(1);
    const y = (HEIGHT - 2 - ((value - low) / span) * (HEIGHT - 4)).toFixed(1);
    return `${x},${y}`;
  });
  chart.append(
    svg("polygon", { points: `0,${HEIGHT} ${points.join(" ")} ${WIDTH},${HEIGHT}`, class: "spark-fill" }),
    svg("polyline", { points: points.join(" "), class: "spark-line" }),
  );
  return chart;
}
