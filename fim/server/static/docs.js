// A small, dependency-free renderer of /openapi.json with "try it" forms: the interactive
// API reference of `fim serve`, served from the package (no CDN).

const $ = (s) => document.querySelector(s);
const KEY = "fim.apiKey";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) node.append(c instanceof Node ? c : String(c));
  return node;
}

let doc;
const resolve = (schema, seen = new Set()) => {
  if (!schema || typeof schema !== "object") return schema;
  if (schema.$ref) {
    const name = schema.$ref.split("/").pop();
    if (seen.has(name)) return { $ref: name };
    return resolve(doc.components.schemas[name], new Set([...seen, name]));
  }
  if (Array.isArray(schema)) return schema.map((s) => resolve(s, seen));
  return Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, typeof v === "object" ? resolve(v, seen) : v]));
};

function example(schema) {
  schema = resolve(schema);
  if (!schema) return null;
  if (schema.default !== undefined) return schema.default;
  if (schema.anyOf) return example(schema.anyOf.find((s) => s.type !== "null") || schema.anyOf[0]);
  if (schema.enum) return schema.enum[0];
  switch (schema.type) {
    case "object": {
      const out = {};
      for (const name of schema.required || Object.keys(schema.properties || {}).slice(0, 2)) out[name] = example(schema.properties?.[name]);
      return out;
    }
    case "array": return [];
    case "string": return "";
    case "integer": case "number": return 0;
    case "boolean": return false;
    default: return null;
  }
}

function operation(path, method, op) {
  const params = op.parameters || [];
  const body = op.requestBody?.content?.["application/json"]?.schema;
  const out = el("pre", { "aria-live": "polite" });
  const fields = params.map((p) => el("label", {}, `${p.name} (${p.in})`, el("input", { name: p.name, "data-in": p.in, required: p.required })));
  const text = body ? el("textarea", { rows: 5, "aria-label": "Request body (JSON)", class: "mono" }, JSON.stringify(example(body), null, 2)) : null;
  const send = async (e) => {
    e.preventDefault();
    let url = path;
    const query = new URLSearchParams();
    for (const f of fields.map((l) => l.querySelector("input"))) {
      if (f.dataset.in === "path") url = url.replace(`{${f.name}}`, encodeURIComponent(f.value));
      else if (f.value) query.set(f.name, f.value);
    }
    const key = $("#key").value || sessionStorage.getItem(KEY);
    const headers = key ? { Authorization: `Bearer ${key}` } : {};
    if (text) headers["Content-Type"] = "application/json";
    out.textContent = "…";
    try {
      const res = await fetch(url + (query.size ? `?${query}` : ""), { method: method.toUpperCase(), headers, body: text ? text.value : undefined });
      let shown = await res.text();
      try {
        shown = JSON.stringify(JSON.parse(shown), null, 2);
      } catch {
        // not JSON (an event stream): shown as it came
      }
      out.textContent = `${res.status} ${res.statusText}\n${shown}`;
    } catch (err) {
      out.textContent = String(err);
    }
  };
  return el(
    "details",
    { class: "cards", id: op.operationId },
    el("summary", {}, el("strong", { class: "mono" }, `${method.toUpperCase()} ${path}`), ` — ${op.summary || ""}`),
    el("p", { class: "muted" }, `responses: ${Object.keys(op.responses || {}).join(", ")}`),
    body ? el("details", {}, el("summary", {}, "Request body schema"), el("pre", {}, JSON.stringify(resolve(body), null, 2))) : null,
    Object.entries(op.responses || {}).filter(([, r]) => r.content?.["application/json"]).map(([code, r]) =>
      el("details", {}, el("summary", {}, `Response ${code} schema`), el("pre", {}, JSON.stringify(resolve(r.content["application/json"].schema), null, 2)))),
    el("form", { class: "inputs", onsubmit: send }, fields, text, el("button", { type: "submit" }, "Send")),
    out,
  );
}

async function start() {
  doc = await (await fetch("openapi.json")).json();
  $("#title").textContent = doc.info.title;
  $("#version").textContent = `${doc.info.version} · OpenAPI ${doc.openapi}`;
  $("#description").textContent = doc.info.description;
  const byTag = {};
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) (byTag[op.tags?.[0] || "other"] ||= []).push(operation(path, method, op));
  }
  $("#operations").replaceChildren(...Object.entries(byTag).map(([tag, ops]) => el("section", {}, el("h2", {}, tag), ops)));
  document.body.dataset.ready = "true";
}

start();
