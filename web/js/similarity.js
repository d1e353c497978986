// The sentence-similarity heat map of the Demos page: sentences embedded by the
// `minilm-embed` demo function (all-MiniLM-L6-v2, L2-normalised embeddings) and the
// cosine similarity of every pair drawn as a heat map.

import { el, fit } from "./charts.js";

const EXAMPLE = [
  "A cat sits on the mat.",
  "Un chat est assis sur le tapis.",
  "The kitten is resting on a rug.",
  "GPU kernels are scheduled between tenants.",
  "The scheduler preempts best-effort work.",
].join("\n");

export class SimilarityPanel {
  constructor(api) {
    this.api = api;
    this.function = el("input", { id: "similarity-function", value: "minilm-embed" });
    this.text = el("textarea", { id: "similarity-text", rows: "6", spellcheck: "false" });
    this.text.value = EXAMPLE;
    this.canvas = el("canvas", { id: "similarity-map" });
    this.canvas.hidden = true;
    this.status = el("p", { id: "similarity-status" });
    this.element = el(
      "section",
      { class: "card" },
      el("h3", {}, "Sentence similarity (one sentence per line)"),
      el(
        "div",
        { class: "toolbar" },
        el("label", { for: "similarity-function" }, "function"),
        this.function,
        el("button", { type: "button", id: "similarity-run", onclick: () => this.run() }, "Compare"),
      ),
      this.text,
      this.status,
      this.canvas,
    );
  }

  async run() {
    const sentences = this.text.value.split("\n").map((s) => s.trim()).filter(Boolean);
    if (sentences.length < 2) {
      this.status.textContent = "Give at least two sentences.";
      return;
    }
    this.status.className = "";
    this.status.textContent = "…";
    const request = { inputs: [{ name: "text", shape: [sentences.length], datatype: "BYTES", data: sentences }] };
    try {
      const out = await this.api.call("POST", `/v2/models/${encodeURIComponent(this.function.value.trim())}/infer`, request);
      const embedding = out.outputs.find((o) => o.name === "embedding");
      const dim = embedding.shape[1];
      const rows = sentences.map((_, i) => embedding.data.slice(i * dim, (i + 1) * dim));
      const cos = rows.map((a) => rows.map((b) => a.reduce((s, v, k) => s + v * b[k], 0)));
      this.status.textContent = "";
      this.draw(sentences, cos);
    } catch (e) {
      this.status.textContent = e.message;
      this.status.className = "error";
    }
  }

  draw(sentences, cos) {
    this.canvas.hidden = false;
    const n = sentences.length;
    const label = 260;
    const cell = Math.max(24, Math.min(56, Math.floor(360 / n)));
    const { ctx, width } = fit(this.canvas, n * cell + 8);
    ctx.clearRect(0, 0, width, n * cell + 8);
    ctx.font = "11px system-ui, sans-serif";
    for (let i = 0; i < n; i++) {
      ctx.fillStyle = "#d8e0e8";
      const text = sentences[i].length > 40 ? `${sentences[i].slice(0, 38)}…` : sentences[i];
      ctx.fillText(text, 4, i * cell + cell / 2 + 4);
      for (let j = 0; j < n; j++) {
        const v = Math.max(0, Math.min(1, cos[i][j]));
        ctx.fillStyle = `rgb(${Math.round(30 + 225 * v)}, ${Math.round(60 + 120 * v)}, ${Math.round(120 - 80 * v)})`;
        ctx.fillRect(label + j * cell, i * cell, cell - 2, cell - 2);
        ctx.fillStyle = v > 0.6 ? "#000" : "#fff";
        ctx.fillText(cos[i][j].toFixed(2), label + j * cell + 4, i * cell + cell / 2 + 4);
      }
    }
  }
}
