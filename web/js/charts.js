// Small canvas helpers: a canvas sized to its box at the device's pixel ratio, line
// charts over time, and stable colours per tenant.

const PALETTE = ["#4fb3ff", "#ffb74f", "#5fd38d", "#d77bff", "#ff6b8b", "#4fe0d0", "#e0d04f", "#9aa7ff"];
const FIXED = { other: "#7a8794", sluice: "#3d4a57" };
const assigned = new Map();

/** The colour of a tenant, the same for the whole session. */
export function tenantColor(tenant) {
  if (FIXED[tenant]) return FIXED[tenant];
  if (!assigned.has(tenant)) assigned.set(tenant, PALETTE[assigned.size % PALETTE.length]);
  return assigned.get(tenant);
}

/** The 2-D context of `canvas`, its backing store matched to its CSS size. */
export function fit(canvas, cssHeight) {
  const ratio = window.devicePixelRatio || 1;
  const width = Math.max(1, Math.floor(canvas.clientWidth * ratio));
  const height = Math.floor(cssHeight * ratio);
  if (canvas.width !== width || canvas.height !== height) {
    canvas.width = width;
    canvas.height = height;
    canvas.style.height = `${cssHeight}px`;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return { ctx, width: width / ratio, height: cssHeight };
}

/**
 * Draws `series` ({color, dash, values}) as lines over the same x positions (the
 * newest value at the right), from 0 to `yMax` (or their maximum), with `unit` on the
 * axis label.
 */
export function lineChart(canvas, series, { height = 140, yMax = null, format = (v) => String(v) } = {}) {
  const { ctx, width } = fit(canvas, height);
  ctx.clearRect(0, 0, width, height);
  const pad = { left: 44, right: 8, top: 8, bottom: 16 };
  const n = Math.max(2, ...series.map((s) => s.values.length));
  const top = yMax ?? Math.max(1, ...series.flatMap((s) => s.values));
  const x = (i) => pad.left + (i / (n - 1)) * (width - pad.left - pad.right);
  const y = (v) => pad.top + (1 - v / top) * (height - pad.top - pad.bottom);
  ctx.strokeStyle = "#2a3642";
  ctx.fillStyle = "#8a99a8";
  ctx.font = "11px system-ui, sans-serif";
  ctx.lineWidth = 1;
  for (const f of [0, 0.5, 1]) {
    ctx.beginPath();
    ctx.moveTo(pad.left, y(top * f));
    ctx.lineTo(width - pad.right, y(top * f));
    ctx.stroke();
    ctx.fillText(format(top * f), 2, y(top * f) + 4);
  }
  for (const s of series) {
    if (!s.values.length) continue;
    ctx.strokeStyle = s.color;
    ctx.lineWidth = s.dash ? 1 : 2;
    ctx.setLineDash(s.dash ? [4, 4] : []);
    ctx.beginPath();
    const offset = n - s.values.length;
    s.values.forEach((v, i) => (i === 0 ? ctx.moveTo(x(i + offset), y(v)) : ctx.lineTo(x(i + offset), y(v))));
    ctx.stroke();
  }
  ctx.setLineDash([]);
}

/** A legend entry: a colour swatch and a label. */
export function swatch(color, label) {
  const item = document.createElement("span");
  const box = document.createElement("span");
  box.className = "swatch";
  box.style.background = color;
  item.append(box, label);
  return item;
}

/** Microseconds as a short human duration. */
export function formatUs(us) {
  if (us >= 1e6) return `${(us / 1e6).toFixed(2)} s`;
  if (us >= 1e3) return `${(us / 1e3).toFixed(2)} ms`;
  return `${Math.round(us)} µs`;
}

/** Bytes as a short human size. */
export function formatBytes(b) {
  if (b == null) return "∞";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) {
    b /= 1024;
    i++;
  }
  return `${b.toFixed(i ? 1 : 0)} ${units[i]}`;
}

/** An element with a class and children. */
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  e.append(...children);
  return e;
}
