// The Functions page: the caller's functions (versions, signature, class, weight),
// deploy of a component with artifacts (uploads with progress, staged then published
// as one version), delete, and a try-it panel that builds an Open Inference Protocol
// request from the function's signature (GET /v2/models/{m}) and shows the response.

import { ApiError } from "./api.js";
import { el, formatBytes } from "./charts.js";

/** Example data for a datatype. */
function example(datatype, count) {
  const n = Math.max(1, count);
  if (datatype === "BYTES") return Array.from({ length: n }, (_, i) => `text ${i + 1}`);
  if (datatype === "BOOL") return Array.from({ length: n }, (_, i) => i % 2 === 0);
  return Array.from({ length: n }, (_, i) => i + 1);
}

/** The OIP request a signature suggests (a generic one without a signature). */
export function exampleRequest(metadata) {
  const inputs = (metadata.inputs || []).map((spec) => {
    const shape = spec.shape.map((d) => (d < 0 ? 1 : d));
    const count = shape.reduce((a, b) => a * b, 1);
    return { name: spec.name, shape, datatype: spec.datatype, data: example(spec.datatype, count) };
  });
  if (!inputs.length) inputs.push({ name: "x", shape: [2], datatype: "FP32", data: [1, 2] });
  return { inputs };
}

function signature(metadata) {
  if (!metadata) return "…";
  const side = (specs) => specs.map((s) => `${s.name}: ${s.datatype}[${s.shape.join(",")}]`).join(", ");
  if (!(metadata.inputs || []).length && !(metadata.outputs || []).length) return "any (no signature declared)";
  return `(${side(metadata.inputs || [])}) → (${side(metadata.outputs || [])})`;
}

export class FunctionsPage {
  constructor(root, session) {
    this.root = root;
    this.session = session;
    this.api = session.api;
    this.metadata = new Map();
  }

  start() {
    this.root.append(el("h2", {}, "Functions"));
    if (this.session.admin) {
      this.root.append(el("p", { class: "hint" }, "The admin key manages tenants and owns no functions: sign in with a tenant's key to deploy and try functions."));
      return;
    }
    this.message = el("p", { id: "functions-message" });
    this.tableBody = el("tbody", { id: "functions-list" });
    this.root.append(
      this.message,
      el(
        "table",
        {},
        el("thead", {}, el("tr", {}, ...["name", "serving", "versions", "class", "weight", "signature", "artifacts", ""].map((h) => el("th", {}, h)))),
        this.tableBody,
      ),
      el("div", { class: "split" }, this.deployForm(), this.tryPanel()),
    );
    this.refresh();
  }

  stop() {}

  async refresh() {
    let list;
    try {
      const summaries = (await this.api.get("/v1/functions")).functions;
      // Each function's versions and the one serving.
      list = await Promise.all(summaries.map((f) => this.api.get(`/v1/functions/${encodeURIComponent(f.name)}`)));
    } catch (e) {
      this.say(e.message, "error");
      return;
    }
    this.tableBody.replaceChildren(...list.map((f) => this.row(f)));
    const names = list.filter((f) => f.serving_version != null).map((f) => f.name);
    const current = this.trySelect.value;
    this.trySelect.replaceChildren(el("option", { value: "" }, "choose a function"), ...names.map((n) => el("option", { value: n }, n)));
    if (names.includes(current)) this.trySelect.value = current;
    for (const f of list) {
      if (f.serving_version == null || this.metadata.has(f.name)) continue;
      this.api.get(`/v2/models/${encodeURIComponent(f.name)}`).then(
        (m) => {
          this.metadata.set(f.name, m);
          const cell = document.getElementById(`signature-${f.name}`);
          if (cell) cell.textContent = signature(m);
        },
        () => {},
      );
    }
  }

  row(f) {
    const v = f.versions.find((x) => x.version === f.serving_version) || f.versions[f.versions.length - 1];
    const options = v.options || {};
    const artifacts = Object.entries(v.artifacts || {}).map(([name, blob]) => `${name} (${formatBytes(blob.size)})`).join(", ");
    const del = el("button", { type: "button", class: "danger", id: `delete-${f.name}` }, "Delete");
    del.addEventListener("click", async () => {
      if (del.dataset.armed !== "yes") {
        del.dataset.armed = "yes";
        del.textContent = "Confirm delete";
        return;
      }
      try {
        await this.api.call("DELETE", `/v1/functions/${encodeURIComponent(f.name)}`);
        this.metadata.delete(f.name);
        this.say(`Deleted ${f.name}.`, "ok");
      } catch (e) {
        this.say(e.message, "error");
      }
      this.refresh();
    });
    return el(
      "tr",
      { id: `function-${f.name}` },
      el("td", {}, f.name),
      el("td", {}, f.serving_version != null ? `v${f.serving_version}` : "staged only"),
      el("td", {}, f.versions.map((x) => `v${x.version}${x.staged ? " (staged)" : ""}`).join(", ")),
      el("td", {}, options.priority || ""),
      el("td", {}, options.weight == null ? "tenant's" : String(options.weight)),
      el("td", { id: `signature-${f.name}` }, signature(this.metadata.get(f.name))),
      el("td", {}, artifacts || "—"),
      el("td", {}, del),
    );
  }

  say(text, kind) {
    this.message.textContent = text;
    this.message.className = kind;
  }

  deployForm() {
    const name = el("input", { id: "deploy-name", required: "", pattern: "[a-z0-9][a-z0-9._\\-]{0,62}", placeholder: "my-function" });
    const component = el("input", { id: "deploy-component", type: "file", accept: ".wasm", required: "" });
    const artifacts = el("input", { id: "deploy-artifacts", type: "file", multiple: "" });
    const priority = el("select", { id: "deploy-priority" }, el("option", { value: "latency" }, "latency"), el("option", { value: "batch" }, "batch"));
    const weight = el("input", { id: "deploy-weight", type: "number", min: "1", placeholder: "tenant's" });
    const progress = el("progress", { id: "deploy-progress", max: "1", value: "0" });
    const status = el("p", { id: "deploy-status" });
    const form = el(
      "form",
      { id: "deploy-form" },
      el("h3", {}, "Deploy"),
      el(
        "div",
        { class: "form-grid" },
        el("label", { for: "deploy-name" }, "name"), name,
        el("label", { for: "deploy-component" }, "component (.wasm)"), component,
        el("label", { for: "deploy-artifacts" }, "artifacts (named by file, without extension)"), artifacts,
        el("label", { for: "deploy-priority" }, "class"), priority,
        el("label", { for: "deploy-weight" }, "weight"), weight,
        el("span", {}, ""), el("button", { type: "submit", id: "deploy-button" }, "Deploy"),
      ),
      progress,
      status,
    );
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const files = [...artifacts.files];
      const query = new URLSearchParams({ priority: priority.value });
      if (weight.value) query.set("weight", weight.value);
      if (files.length) query.set("staged", "true");
      const base = `/v1/functions/${encodeURIComponent(name.value)}`;
      // Progress over every byte uploaded: the component, then each artifact.
      const total = [component.files[0], ...files].reduce((a, f) => a + f.size, 0) || 1;
      let done = 0;
      const step = (file) => (p) => (progress.value = (done + p * file.size) / total);
      status.className = "";
      try {
        status.textContent = "uploading the component…";
        const version = await this.api.upload(`${base}?${query}`, component.files[0], step(component.files[0]));
        done += component.files[0].size;
        for (const file of files) {
          const artifact = file.name.replace(/\.[^.]*$/, "");
          status.textContent = `uploading artifact ${artifact}…`;
          await this.api.upload(`${base}/artifacts/${encodeURIComponent(artifact)}`, file, step(file));
          done += file.size;
        }
        if (files.length) await this.api.call("POST", `${base}/versions/${version.version}/publish`);
        progress.value = 1;
        status.textContent = `Deployed ${name.value} v${version.version}${files.length ? ` with ${files.length} artifact(s)` : ""}.`;
        status.className = "ok";
        this.metadata.delete(name.value);
        this.refresh();
      } catch (err) {
        status.textContent = err instanceof ApiError ? err.message : String(err);
        status.className = "error";
      }
    });
    return form;
  }

  tryPanel() {
    this.trySelect = el("select", { id: "try-function" });
    const request = el("textarea", { id: "try-request", rows: "10", spellcheck: "false" });
    const response = el("pre", { id: "try-response" });
    const send = el("button", { type: "button", id: "try-send" }, "Send");
    this.trySelect.addEventListener("change", async () => {
      const name = this.trySelect.value;
      if (!name) return;
      let m = this.metadata.get(name);
      if (!m) {
        m = await this.api.get(`/v2/models/${encodeURIComponent(name)}`).catch(() => ({}));
        this.metadata.set(name, m);
      }
      request.value = JSON.stringify(exampleRequest(m), null, 2);
      response.textContent = "";
    });
    send.addEventListener("click", async () => {
      const name = this.trySelect.value;
      if (!name) return;
      response.className = "";
      response.textContent = "…";
      const started = performance.now();
      try {
        const out = await this.api.call("POST", `/v2/models/${encodeURIComponent(name)}/infer`, request.value);
        response.textContent = `${(performance.now() - started).toFixed(1)} ms\n${JSON.stringify(out, null, 2)}`;
      } catch (e) {
        response.textContent = e.message;
        response.className = "error";
      }
    });
    return el(
      "div",
      { id: "try-panel" },
      el("h3", {}, "Try it (Open Inference Protocol)"),
      el("div", { class: "toolbar" }, this.trySelect, send),
      request,
      response,
    );
  }
}
