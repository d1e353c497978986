// The Demos page: a drawing pad for the `mnist` demo function, and the sentence
// similarity heat map of `minilm-embed` (similarity.js). The pad: The drawing is
// prepared the way MNIST's digits were (the digit's bounding box scaled to fit 20×20,
// centred by its centre of mass in 28×28, white on black), sent as one UINT8
// [1, 28, 28] image over the Open Inference Protocol, and the answer shown with
// each digit's probability.

import { el } from "./charts.js";
import { SimilarityPanel } from "./similarity.js";

const PAD = 280;
const STROKE = 20;

export class DemosPage {
  constructor(root, session) {
    this.root = root;
    this.session = session;
    this.api = session.api;
  }

  start() {
    this.root.append(el("h2", {}, "Demos"));
    if (this.session.admin) {
      this.root.append(el("p", { class: "hint" }, "Sign in with the key of a tenant that deployed `mnist` and `minilm-embed` (`cargo xtask serve` deploys them for `demo`)."));
      return;
    }
    this.pad = el("canvas", { id: "digit-pad", class: "pad", width: String(PAD), height: String(PAD) });
    this.function = el("input", { id: "digit-function", value: "mnist" });
    this.result = el("p", { id: "digit-result" });
    this.bars = el("div", { id: "digit-bars", class: "bars" });
    this.preview = el("canvas", { id: "digit-preview", class: "preview", width: "28", height: "28" });
    this.root.append(
      el("p", { class: "hint" }, "Draw a digit (0–9) with the mouse, then classify it with the MNIST CNN running on the scheduler."),
      el(
        "div",
        { class: "toolbar" },
        el("label", { for: "digit-function" }, "function"),
        this.function,
        el("button", { type: "button", id: "digit-classify", onclick: () => this.classify() }, "Classify"),
        el("button", { type: "button", id: "digit-clear", onclick: () => this.clear() }, "Clear"),
      ),
      el("div", { class: "digits" }, this.pad, el("div", {}, el("h3", {}, "what the model sees (28×28)"), this.preview, this.result, this.bars)),
      new SimilarityPanel(this.api).element,
    );
    this.ctx = this.pad.getContext("2d");
    this.clear();
    let drawing = false;
    const at = (e) => {
      const r = this.pad.getBoundingClientRect();
      return [((e.clientX - r.left) * PAD) / r.width, ((e.clientY - r.top) * PAD) / r.height];
    };
    this.pad.addEventListener("pointerdown", (e) => {
      drawing = true;
      this.pad.setPointerCapture(e.pointerId);
      const [x, y] = at(e);
      this.ctx.beginPath();
      this.ctx.moveTo(x, y);
      this.ctx.lineTo(x + 0.01, y);
      this.ctx.stroke();
    });
    this.pad.addEventListener("pointermove", (e) => {
      if (!drawing) return;
      const [x, y] = at(e);
      this.ctx.lineTo(x, y);
      this.ctx.stroke();
    });
    const end = () => (drawing = false);
    this.pad.addEventListener("pointerup", end);
    this.pad.addEventListener("pointercancel", end);
  }

  stop() {}

  clear() {
    const c = this.ctx;
    c.fillStyle = "#000";
    c.fillRect(0, 0, PAD, PAD);
    c.strokeStyle = "#fff";
    c.lineWidth = STROKE;
    c.lineCap = "round";
    c.lineJoin = "round";
    this.result.textContent = "";
    delete this.result.dataset.digit;
    this.bars.replaceChildren();
    this.preview.getContext("2d").clearRect(0, 0, 28, 28);
  }

  /** The drawing as MNIST prepares digits: 784 bytes, or null for an empty pad. */
  pixels() {
    const data = this.ctx.getImageData(0, 0, PAD, PAD).data;
    let [x0, y0, x1, y1] = [PAD, PAD, -1, -1];
    for (let y = 0; y < PAD; y++) {
      for (let x = 0; x < PAD; x++) {
        if (data[(y * PAD + x) * 4] > 0) {
          x0 = Math.min(x0, x);
          x1 = Math.max(x1, x);
          y0 = Math.min(y0, y);
          y1 = Math.max(y1, y);
        }
      }
    }
    if (x1 < 0) return null;
    // The bounding box scaled to fit 20×20, keeping its aspect ratio.
    const w = x1 - x0 + 1;
    const h = y1 - y0 + 1;
    const scale = 20 / Math.max(w, h);
    const [sw, sh] = [Math.max(1, Math.round(w * scale)), Math.max(1, Math.round(h * scale))];
    const small = document.createElement("canvas");
    small.width = 28;
    small.height = 28;
    const s = small.getContext("2d", { willReadFrequently: true });
    s.fillStyle = "#000";
    s.fillRect(0, 0, 28, 28);
    s.imageSmoothingEnabled = true;
    s.imageSmoothingQuality = "high";
    s.drawImage(this.pad, x0, y0, w, h, (28 - sw) / 2, (28 - sh) / 2, sw, sh);
    const boxed = s.getImageData(0, 0, 28, 28).data;
    // Centred by its centre of mass.
    let [mass, mx, my] = [0, 0, 0];
    for (let y = 0; y < 28; y++) {
      for (let x = 0; x < 28; x++) {
        const v = boxed[(y * 28 + x) * 4];
        mass += v;
        mx += v * x;
        my += v * y;
      }
    }
    const dx = Math.round(13.5 - mx / mass);
    const dy = Math.round(13.5 - my / mass);
    const out = new Array(784).fill(0);
    for (let y = 0; y < 28; y++) {
      for (let x = 0; x < 28; x++) {
        const [tx, ty] = [x + dx, y + dy];
        if (tx >= 0 && tx < 28 && ty >= 0 && ty < 28) out[ty * 28 + tx] = boxed[(y * 28 + x) * 4];
      }
    }
    const preview = this.preview.getContext("2d");
    const image = preview.createImageData(28, 28);
    out.forEach((v, i) => image.data.set([v, v, v, 255], i * 4));
    preview.putImageData(image, 0, 0);
    return out;
  }

  async classify() {
    const pixels = this.pixels();
    if (!pixels) {
      this.result.textContent = "Draw a digit first.";
      return;
    }
    const name = this.function.value.trim();
    const request = { inputs: [{ name: "image", shape: [1, 28, 28], datatype: "UINT8", data: pixels }] };
    this.result.className = "";
    // Until this drawing's answer arrives, no digit is shown as its answer.
    delete this.result.dataset.digit;
    try {
      const out = await this.api.call("POST", `/v2/models/${encodeURIComponent(name)}/infer`, request);
      const output = (n) => out.outputs.find((o) => o.name === n);
      const logits = output("logits").data;
      const top = Math.max(...logits);
      const exp = logits.map((v) => Math.exp(v - top));
      const sum = exp.reduce((a, b) => a + b, 0);
      this.result.textContent = `${output("digit").data[0]}`;
      this.result.dataset.digit = String(output("digit").data[0]);
      this.bars.replaceChildren(
        ...exp.map((v, d) => {
          const fill = el("div");
          fill.style.width = `${((v / sum) * 100).toFixed(1)}%`;
          return el("div", { class: "digit-bar" }, el("span", {}, String(d)), el("div", { class: "bar" }, fill));
        }),
      );
    } catch (e) {
      this.result.textContent = e.message;
      this.result.className = "error";
      delete this.result.dataset.digit;
    }
  }
}
