// The Live page: one panel per device, fed by GET /v1/devices/{i}/live (server-sent
// events). A canvas timeline of the last seconds (one row per lane, coloured by
// tenant, sliced kernels marked; pause, zoom by buttons or the mouse wheel), device
// time share per tenant against its weight, queue depth per class, latency per
// function, memory against quota, and the partition in force.

import { el, fit, formatBytes, formatUs, lineChart, swatch, tenantColor } from "./charts.js";

const LANES = ["whole", "reserved", "remainder"];
const KEEP_US = 60e6;
const MAX_RECORDS = 50000;
const HISTORY = 90;
const ZOOMS = [1, 2, 5, 10];

export class LivePage {
  constructor(root, session) {
    this.root = root;
    this.session = session;
    this.views = [];
  }

  start() {
    this.root.append(el("h2", {}, "Live"));
    for (let i = 0; i < this.session.devices; i++) {
      const view = new DeviceView(i, this.session.api);
      this.root.append(view.element);
      view.start();
      this.views.push(view);
    }
  }

  stop() {
    for (const v of this.views) v.stop();
  }
}

class DeviceView {
  constructor(index, api) {
    this.index = index;
    this.api = api;
    this.records = [];
    this.statuses = [];
    this.shares = [];
    this.depths = [];
    this.windowUs = 10e6;
    this.paused = false;
    this.clock = null;
    this.stopped = false;
    this.build();
  }

  build() {
    const i = this.index;
    this.title = el("strong", {}, `device ${i}`);
    this.facts = el("span", { class: "facts" });
    this.pauseButton = el("button", { type: "button", id: `pause-${i}`, onclick: () => this.togglePause() }, "Pause");
    this.zoomButtons = ZOOMS.map((s) =>
      el("button", { type: "button", "data-zoom": String(s), onclick: () => this.zoom(s * 1e6) }, `${s} s`),
    );
    this.state = el("span", { class: "facts" });
    this.canvas = el("canvas", { id: `timeline-${i}`, class: "timeline", "data-tenants": "[]", "data-kernels": "0" });
    this.canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      this.zoom(this.windowUs * (e.deltaY > 0 ? 1.25 : 0.8));
    });
    this.canvas.addEventListener("mousemove", (e) => this.hover(e));
    this.hoverLine = el("div", { class: "hover" });
    this.legend = el("div", { class: "legend" });
    this.shareCanvas = el("canvas");
    this.shareLegend = el("div", { class: "legend" });
    this.depthCanvas = el("canvas");
    this.latencyBody = el("tbody");
    this.memoryBox = el("div");
    this.element = el(
      "section",
      { class: "device", id: `device-${i}` },
      el("div", { class: "device-head" }, this.title, this.facts),
      el("div", { class: "toolbar" }, this.pauseButton, ...this.zoomButtons, el("span", { class: "spacer" }), this.state),
      this.canvas,
      this.legend,
      this.hoverLine,
      el(
        "div",
        { class: "grid" },
        el("div", { class: "card" }, el("h3", {}, "Device time share (solid) against its weight's share within its class (dashed)"), this.shareCanvas, this.shareLegend),
        el(
          "div",
          { class: "card" },
          el("h3", {}, "Queue depth per class"),
          this.depthCanvas,
          el("div", { class: "legend" }, swatch("#ff6b8b", "latency"), swatch("#4fb3ff", "batch")),
        ),
        el(
          "div",
          { class: "card" },
          el("h3", {}, "Latency per function (recent)"),
          el("table", {}, el("thead", {}, el("tr", {}, ...["function", "tenant", "n", "p50", "p99"].map((h) => el("th", {}, h)))), this.latencyBody),
        ),
        el("div", { class: "card" }, el("h3", {}, "Memory against quota"), this.memoryBox),
      ),
    );
    this.zoom(this.windowUs);
  }

  start() {
    this.connect();
    const frame = () => {
      if (this.stopped) return;
      if (!this.paused) this.drawTimeline();
      requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
  }

  stop() {
    this.stopped = true;
    if (this.abort) this.abort.abort();
  }

  connect() {
    this.abort = new AbortController();
    this.state.textContent = "connecting…";
    this.api
      .events(`/v1/devices/${this.index}/live`, this.abort.signal, (name, data) => this.onEvent(name, data))
      .then(
        () => this.retry("feed ended"),
        (e) => this.retry(e.name === "AbortError" ? null : e.message),
      );
  }

  retry(why) {
    if (this.stopped || why === null) return;
    this.state.textContent = `disconnected (${why}); reconnecting`;
    setTimeout(() => this.stopped || this.connect(), 2000);
  }

  onEvent(name, data) {
    this.clock = { us: data.now_us, at: performance.now() };
    if (name === "kernels") {
      this.state.textContent = data.missed ? `live (${data.missed} records missed)` : "live";
      for (const r of data.records) this.records.push(r);
      const oldest = data.now_us - KEEP_US;
      let drop = 0;
      while (drop < this.records.length && (this.records[drop].end_us < oldest || this.records.length - drop > MAX_RECORDS)) drop++;
      if (drop) this.records.splice(0, drop);
    } else if (name === "status") {
      if (this.state.textContent.startsWith("connecting")) this.state.textContent = "live";
      this.onStatus(data);
    }
  }

  nowUs() {
    if (!this.clock) return 0;
    return this.clock.us + (performance.now() - this.clock.at) * 1000;
  }

  togglePause() {
    this.paused = !this.paused;
    if (this.paused) this.frozenAt = this.nowUs();
    this.pauseButton.textContent = this.paused ? "Resume" : "Pause";
    this.pauseButton.classList.toggle("active", this.paused);
    this.drawTimeline();
  }

  zoom(windowUs) {
    this.windowUs = Math.min(KEEP_US / 2, Math.max(50e3, windowUs));
    for (const b of this.zoomButtons) b.classList.toggle("active", Number(b.dataset.zoom) * 1e6 === this.windowUs);
    this.drawTimeline();
  }

  lanes() {
    const seen = new Set(this.records.map((r) => r.lane));
    return LANES.filter((l) => l === "whole" || seen.has(l) || this.partitioned);
  }

  drawTimeline() {
    const lanes = this.lanes();
    const rowHeight = 34;
    const axis = 18;
    const labelWidth = 80;
    const { ctx, width, height } = fit(this.canvas, lanes.length * rowHeight + axis);
    const plot = width - labelWidth;
    const right = this.paused ? this.frozenAt : this.nowUs();
    const left = right - this.windowUs;
    ctx.clearRect(0, 0, width, height);
    ctx.font = "11px system-ui, sans-serif";
    lanes.forEach((lane, i) => {
      ctx.fillStyle = i % 2 ? "#141c23" : "#182028";
      ctx.fillRect(labelWidth, i * rowHeight, plot, rowHeight);
      ctx.fillStyle = "#8a99a8";
      ctx.fillText(lane, 6, i * rowHeight + rowHeight / 2 + 4);
    });
    const drawn = new Set();
    let count = 0;
    this.drawnRects = [];
    // Best-effort work first, latency work over it: short latency kernels stay visible.
    const visible = this.records.filter((r) => r.end_us >= left && r.start_us <= right);
    const ordered = visible.filter((r) => r.class !== "latency").concat(visible.filter((r) => r.class === "latency"));
    for (const r of ordered) {
      const row = lanes.indexOf(r.lane);
      if (row < 0) continue;
      const x0 = labelWidth + ((r.start_us - left) / this.windowUs) * plot;
      const x1 = labelWidth + ((r.end_us - left) / this.windowUs) * plot;
      const x = Math.max(labelWidth, x0);
      const w = Math.max(r.class === "latency" ? 2 : 1, Math.min(width, x1) - x);
      const y = row * rowHeight + 4;
      const h = rowHeight - 8;
      ctx.fillStyle = tenantColor(r.tenant);
      ctx.fillRect(x, y, w, h);
      if (r.sliced) {
        ctx.fillStyle = "#ffffff";
        ctx.fillRect(x, y, w, 3);
      }
      if (r.preempting) {
        ctx.fillStyle = "#ff6b8b";
        ctx.fillRect(x, y + h - 3, Math.max(2, w), 3);
      }
      drawn.add(r.tenant);
      count++;
      this.drawnRects.push({ x, y, w, h, r });
    }
    ctx.fillStyle = "#8a99a8";
    const axisY = lanes.length * rowHeight + 13;
    for (let k = 0; k <= 4; k++) {
      const x = labelWidth + (k / 4) * plot;
      const label = `-${formatUs(this.windowUs * (1 - k / 4))}`;
      ctx.fillText(k === 4 ? "now" : label, Math.min(x, width - 30), axisY);
    }
    const tenants = [...drawn].sort();
    const key = JSON.stringify(tenants);
    if (this.canvas.dataset.tenants !== key) {
      this.canvas.dataset.tenants = key;
      this.legend.replaceChildren(
        ...tenants.map((t) => swatch(tenantColor(t), t)),
        el("span", {}, "white top edge: a slice of a sliced kernel · red bottom edge: latency work that preempted waiting best-effort work"),
      );
    }
    this.canvas.dataset.kernels = String(count);
  }

  hover(e) {
    const rect = this.canvas.getBoundingClientRect();
    const x = e.clientX - rect.left;
    const y = e.clientY - rect.top;
    const hit = (this.drawnRects || []).find((d) => x >= d.x - 1 && x <= d.x + d.w + 1 && y >= d.y && y <= d.y + d.h);
    if (!hit) {
      this.hoverLine.textContent = "";
      return;
    }
    const r = hit.r;
    const parts = [r.tenant, r.function, r.op, r.class, `lane ${r.lane}`, formatUs(r.end_us - r.start_us), `waited ${formatUs(r.start_us - r.queued_us)}`];
    if (r.invocation) parts.push(`invocation ${r.invocation}`);
    if (r.sliced) parts.push("slice");
    if (r.preempting) parts.push("preempted best-effort work");
    this.hoverLine.textContent = parts.join(" · ");
  }

  onStatus(s) {
    this.partitioned = typeof s.partition === "string" ? !s.partition.startsWith("none") : Boolean(s.partition);
    const partition = typeof s.partition === "string" ? s.partition : JSON.stringify(s.partition);
    const p = s.preemption_latency;
    this.title.textContent = `device ${s.index}: ${s.device.name}`;
    this.facts.textContent = [
      `policy ${s.policy}`,
      `partition: ${partition}`,
      `preemption latency p50 ${formatUs(p.p50_us)} · p99 ${formatUs(p.p99_us)} (${p.count})`,
      `${s.kernels} kernels, ${s.sliced_kernels} sliced`,
      s.health.state === "healthy" ? "healthy" : `FAILED: ${s.health.reason}`,
    ].join(" · ");
    const previous = this.statuses[this.statuses.length - 1];
    this.statuses.push(s);
    if (this.statuses.length > 2) this.statuses.shift();
    this.depths.push(s.queued);
    if (this.depths.length > HISTORY) this.depths.shift();
    if (previous) this.shares.push(shareBetween(previous, s));
    if (this.shares.length > HISTORY) this.shares.shift();
    this.drawCards(s);
  }

  drawCards(s) {
    const tenants = [...new Set(this.shares.flatMap((x) => Object.keys(x.share)))].sort();
    const series = [];
    for (const t of tenants) {
      const color = tenantColor(t);
      series.push({ color, values: this.shares.map((x) => x.share[t] ?? 0) });
      series.push({ color, dash: true, values: this.shares.map((x) => x.fair[t] ?? 0) });
    }
    lineChart(this.shareCanvas, series, { yMax: 1, format: (v) => `${Math.round(v * 100)}%` });
    this.shareLegend.replaceChildren(...tenants.map((t) => swatch(tenantColor(t), `${t} (weight ${weightOf(s, t)})`)));
    lineChart(this.depthCanvas, [
      { color: "#ff6b8b", values: this.depths.map((d) => d.latency) },
      { color: "#4fb3ff", values: this.depths.map((d) => d.batch) },
    ]);
    this.latencyBody.replaceChildren(
      ...s.functions.map((f) =>
        el("tr", {}, el("td", {}, f.function), el("td", {}, f.tenant), el("td", {}, String(f.latency.count)), el("td", {}, formatUs(f.latency.p50_us)), el("td", {}, formatUs(f.latency.p99_us))),
      ),
    );
    this.memoryBox.replaceChildren(
      ...s.memory.map((m) => {
        const fill = el("div");
        const frac = m.quota_bytes ? Math.min(1, m.used_bytes / m.quota_bytes) : 0;
        fill.style.width = `${(frac * 100).toFixed(1)}%`;
        fill.style.background = tenantColor(m.tenant);
        return el("div", {}, el("div", {}, `${m.tenant}: ${formatBytes(m.used_bytes)} of ${formatBytes(m.quota_bytes)}`), el("div", { class: "bar" }, fill));
      }),
    );
  }
}

/**
 * Each tenant's share of the device time between two snapshots, and the share its
 * weight entitles it to. Weights share device time within a class (latency work has
 * strict priority over batch work), so the entitlement is each class's actual share
 * split by weight among the tenants of that class that ran.
 */
function shareBetween(a, b) {
  const rowKey = (t) => `${t.class}\u0000${t.tenant}`;
  const before = new Map(a.tenants.map((t) => [rowKey(t), t.device_time_us]));
  const ran = b.tenants
    .map((t) => ({ ...t, delta: Math.max(0, t.device_time_us - (before.get(rowKey(t)) || 0)) }))
    .filter((t) => t.delta > 0);
  const total = ran.reduce((sum, t) => sum + t.delta, 0);
  const share = {};
  const fair = {};
  for (const cls of new Set(ran.map((t) => t.class))) {
    const rows = ran.filter((t) => t.class === cls);
    const classShare = rows.reduce((sum, t) => sum + t.delta, 0) / (total || 1);
    const weights = rows.reduce((sum, t) => sum + t.weight, 0) || 1;
    for (const t of rows) {
      share[t.tenant] = (share[t.tenant] || 0) + t.delta / (total || 1);
      fair[t.tenant] = (fair[t.tenant] || 0) + (classShare * t.weight) / weights;
    }
  }
  return { share, fair };
}

function weightOf(status, tenant) {
  return Math.max(1, ...status.tenants.filter((t) => t.tenant === tenant).map((t) => t.weight));
}
