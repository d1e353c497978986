// The sluice HTTP API as the console uses it: JSON calls with the signed-in key,
// uploads with progress (XHR), and the live feed's server-sent events (read with
// fetch, since EventSource cannot send an Authorization header).

const KEY_ITEM = "sluice.key";

/** The key kept for this tab, or null. */
export function storedKey() {
  return sessionStorage.getItem(KEY_ITEM);
}

export function storeKey(key) {
  if (key) sessionStorage.setItem(KEY_ITEM, key);
  else sessionStorage.removeItem(KEY_ITEM);
}

/** An HTTP error with the server's JSON body ({error, code}). */
export class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? `${status} ${body.code}: ${body.error}` : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

export class Api {
  constructor(key) {
    this.key = key;
  }

  headers(extra = {}) {
    return { Authorization: `Bearer ${this.key}`, ...extra };
  }

  /** A JSON call; resolves to the parsed body, rejects with an ApiError. */
  async call(method, path, body) {
    const init = { method, headers: this.headers() };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = typeof body === "string" ? body : JSON.stringify(body);
    }
    const response = await fetch(path, init);
    const text = await response.text();
    let parsed = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = { error: text, code: "not_json" };
    }
    if (!response.ok) throw new ApiError(response.status, parsed);
    return parsed;
  }

  get(path) {
    return this.call("GET", path);
  }

  /** PUTs a file's bytes, reporting progress (0..1); resolves to the JSON reply. */
  upload(path, file, onProgress) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("PUT", path);
      xhr.setRequestHeader("Authorization", `Bearer ${this.key}`);
      xhr.setRequestHeader("Content-Type", "application/octet-stream");
      xhr.upload.onprogress = (e) => {
        if (e.lengthComputable) onProgress(e.loaded / e.total);
      };
      xhr.onload = () => {
        let body = null;
        try {
          body = JSON.parse(xhr.responseText);
        } catch {
          body = { error: xhr.responseText, code: "not_json" };
        }
        if (xhr.status >= 200 && xhr.status < 300) {
          onProgress(1);
          resolve(body);
        } else {
          reject(new ApiError(xhr.status, body));
        }
      };
      xhr.onerror = () => reject(new ApiError(0, { error: "network error", code: "network" }));
      xhr.send(file);
    });
  }

  /**
   * Reads a server-sent event stream, calling onEvent(name, data) for each event,
   * until `signal` aborts or the stream ends. Rejects with an ApiError on a non-200.
   */
  async events(path, signal, onEvent) {
    const response = await fetch(path, { headers: this.headers({ Accept: "text/event-stream" }), signal });
    if (!response.ok) {
      let body = null;
      try {
        body = await response.json();
      } catch {
        body = null;
      }
      throw new ApiError(response.status, body);
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) name = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length) onEvent(name, JSON.parse(data.join("\n")));
      }
    }
  }
}
