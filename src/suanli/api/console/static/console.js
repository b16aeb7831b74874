// Suanli web console: one page over the public API (/v1), with the user's own token.
// No framework and no build step: views are functions that fetch and render DOM nodes.
// Text from the server always goes in as textContent, never as HTML.
"use strict";

const TOKEN_KEY = "suanli.token";
// "1": the token is a console session (signing out ends it); "enrol": one that may only enrol a second factor
const SESSION_KEY = "suanli.session";
// How often the live part is fetched again. Tests shorten it (localStorage "suanli.refresh_ms",
// set before the page loads) so a page shows a change within a fraction of a second.
const REFRESH_MS = Number(localStorage.getItem("suanli.refresh_ms")) || 3000;
let me = null;
let timer = null;

// -- plumbing ------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + localStorage.getItem(TOKEN_KEY) };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = r.headers.get("content-type")?.includes("json") ? await r.json() : await r.text();
  if (!r.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(r.status, err.code || "http_error", err.message || String(data).slice(0, 300));
  }
  return data;
}

// A paged list (api.paging): every page, following X-Next-Cursor until a page has none.
async function apiAll(path) {
  const rows = [];
  let url = path + (path.includes("?") ? "&" : "?") + "limit=1000";
  for (;;) {
    const r = await fetch(url, { headers: { Authorization: "Bearer " + localStorage.getItem(TOKEN_KEY) } });
    const data = r.headers.get("content-type")?.includes("json") ? await r.json() : await r.text();
    if (!r.ok) {
      const err = (data && data.error) || {};
      throw new ApiError(r.status, err.code || "http_error", err.message || String(data).slice(0, 300));
    }
    rows.push(...data);
    const next = r.headers.get("X-Next-Cursor");
    if (!next) return rows;
    url = path + (path.includes("?") ? "&" : "?") + "limit=1000&cursor=" + encodeURIComponent(next);
  }
}

// The image catalog as renters pick from it: the default first, then by name.
async function imageCatalog() {
  const rows = await apiAll("/v1/images");
  return rows.sort((a, b) => (b.default - a.default) || a.name.localeCompare(b.name));
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === false || c === null || c === undefined) continue;  // `cond && el(...)` left out
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// A table in a box of its own that scrolls sideways, so a wide one never widens the page
// on a phone.
function table(columns, rows, empty) {
  if (!rows.length) return el("p", { class: "muted" }, t(empty));
  return el("div", { class: "scroll" }, el("table", {},
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", {}, t(c))))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c) =>
      c instanceof Node && c.tagName === "TD" ? c : el("td", {}, c)))))));
}

const num = (v) => el("td", { class: "num" }, String(v));
const stateCell = (s) => el("span", { class: `state state-${s}`, "data-state": s }, t(s));
const isOperator = () => me && (me.role === "admin" || me.role === "operator");

function flash(message, ok = false) {
  const f = document.getElementById("flash");
  f.textContent = message;
  f.className = ok ? "ok" : "";
  f.hidden = !message;
}

// Run an API call, say how it went, refresh the live part; true when it succeeded.
async function act(what, fn) {
  let ok = false;
  try {
    await fn();
    flash(what, true);
    ok = true;
  } catch (e) {
    flash(e instanceof ApiError ? `${e.message} (${e.code})` : String(e));
  }
  render();
  return ok;
}

function gpuDesc(o) {
  // asked for no model: the one it landed on, once placed
  const model = o.gpu_model || (o.allocations && o.allocations.length ? o.allocations[0].gpu_model : "any");
  if (o.gpu_milli) return `${model} × ${o.gpu_milli / 1000}`;
  if (o.gpu_count) return `${model} × ${o.gpu_count}`;
  return t("CPU only");
}

// why a waiting row waits (the API's ``waiting``: a code scripts branch on, translated
// here, and the detail); a row that does not wait shows its last reason
function waitingCode(code) {
  const names = { capacity: t("waiting for capacity"), gang: t("waiting for nodes for the whole gang"),
    "pinned-node": t("waiting for its pinned node"),
    quota: t("waiting for quota"), balance: t("waiting for funds"), "price-above-bid": t("spot price above the bid"),
    dependency: t("waiting for a dependency"), "never-fits": t("never fits"), scheduling: t("not yet scheduled") };
  return names[code] || code;
}

function whyCell(o) {
  const w = o.waiting;
  if (!w) return o.reason;
  return el("td", { class: "why", "data-waiting": w.code, title: w.since ? t("waiting since {since}", { since: w.since }) : "" },
    el("span", { class: "tag" }, waitingCode(w.code)), " ", w.detail);
}

const placed = (allocs) => allocs.map((a) => `${a.node} [${a.gpu_indices.join(",")}]`).join(" ");

function ago(iso) {
  if (!iso) return t("never");
  const s = Math.max(0, (Date.now() - new Date(iso).getTime()) / 1000);
  return s < 120 ? t("{n} s ago", { n: s.toFixed(0) }) : t("{n} min ago", { n: (s / 60).toFixed(0) });
}

// The log pane of one workload: it follows the log (fetched again every REFRESH_MS while
// open), staying at the end unless the reader scrolled up, until closed or the view changes.
let logsTimer = null;

function closeLogs() {
  clearTimeout(logsTimer);
  const pane = document.getElementById("logs");
  if (pane) pane.hidden = true;
}

async function showLogs(kind, w) {
  clearTimeout(logsTimer);
  const pane = document.getElementById("logs");
  const path = `/v1/${kind}s/${w.id}/logs`;
  const title = t(kind === "job" ? "Logs of job {id}" : "Logs of instance {id}", { id: w.id }) + (w.name ? ` (${w.name})` : "");
  const pre = el("pre", { class: "logs", id: "logs-text" }, "");
  pane.replaceChildren(el("h2", {}, title, " ", el("button", { class: "plain", id: "logs-close", onclick: closeLogs }, t("Close"))), pre);
  pane.hidden = false;
  const follow = async () => {
    if (pane.hidden || !pane.isConnected) return;
    try {
      const logs = await api("GET", path + "?tail_bytes=20000");
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = logs.text || t("(no output yet)");
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    } catch (e) {
      flash(e.message);
      return;
    }
    logsTimer = setTimeout(follow, REFRESH_MS);
  };
  await follow();
}

// Put text on the clipboard: the async Clipboard API where the page is a secure context
// (https, localhost), else the old copy command on a hidden field (plain-http servers).
async function copyText(text) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
    } else {
      const area = el("textarea", { readonly: true, style: "position:fixed;top:0;left:0;opacity:0" }, text);
      document.body.append(area);
      area.select();
      const done = document.execCommand("copy");
      area.remove();
      if (!done) throw new Error(t("the browser refused"));
    }
    flash(t("Copied: {text}", { text }), true);
  } catch (e) {
    flash(t("Could not copy ({error}): select the command and copy it by hand.", { error: e.message || e }));
  }
}

// -- instances: image, runtime, SSH, ports ------------------------------------------------

// What an image holds, as small tags: Python 3.11, CUDA 12.4, sshd, JupyterLab.
function contentTags(image) {
  if (!image) return [];
  const c = image.contents || {};
  return [c.python && `Python ${c.python}`, c.cuda && `CUDA ${c.cuda}`, c.sshd && "sshd", c.jupyterlab && "JupyterLab"]
    .filter(Boolean).map((tag) => el("span", { class: "tag" }, tag));
}

// "container", or the no-isolation fallback said loudly (a host process shares the host
// with every other tenant); with how its GPUs are given where it has any.
function runtimeCell(i) {
  if (!i.runtime) return el("span", { class: "muted" }, t("not started"));
  if (i.runtime.startsWith("process")) {
    return el("span", { class: "warn runtime", "data-runtime": "process",
      title: t("runs as a host process: no isolation from the host or from other tenants") }, t("process (no isolation)"));
  }
  return el("span", { class: "runtime", "data-runtime": i.runtime }, i.runtime,
    i.gpu_access && i.gpu_access !== "none" && el("span", { class: "tags" }, el("span", { class: "tag" }, t("GPUs: {access}", { access: i.gpu_access }))));
}

// A published port: a plain link to the port proxy, which serves every port on an origin
// of its own (http://ID-PORT.DOMAIN:PROXY_PORT/) because it serves renters' own pages: one
// instance's scripts can read no other's. Copying the link shares no token (opened bare,
// the proxy answers 401). A click opens it once with ?token=: the proxy trades that token
// for an HttpOnly, host-only cookie holding a pass for that one port and redirects to the
// same URL without it before relaying anything (api/proxy.py), so the renter's service
// never sees the console's token, not in its URL, its Referer (noreferrer) nor its scripts.
function portLink(port, url) {
  const a = el("a", { href: url, target: "_blank", rel: "noopener noreferrer", "data-port": port,
    title: t("port {port} of the instance, through the server's port proxy", { port }) }, `${port} ↗`);
  a.addEventListener("click", (ev) => {
    ev.preventDefault();
    const once = new URL(url);
    once.searchParams.set("token", localStorage.getItem(TOKEN_KEY));
    window.open(once.href, "_blank", "noopener,noreferrer");
  });
  return a;
}

function accessCell(i) {
  const ssh = i.ssh && `${i.ssh} -i KEYFILE`;
  const ports = Object.entries(i.ports || {});
  return el("div", { class: "access" },
    ssh && el("div", { class: "ssh" },
      el("code", { title: t("KEYFILE: the private key of a public key added under SSH keys") }, ssh),
      el("button", { class: "plain", type: "button", onclick: () => copyText(ssh) }, t("Copy"))),
    !ssh && i.state === "running" && el("span", { class: "muted" },
      i.runtime && i.runtime.startsWith("process") ? t("no SSH (process runtime)") : t("no SSH (image has no sshd)")),
    ports.length > 0 && el("div", { class: "ports" }, t("ports: "), ports.map(([p, u]) => portLink(p, u))));
}

// "8888, 6006" -> [8888, 6006]. Anything else throws with what is wrong, before anything is sent.
function parsePorts(text) {
  const parts = String(text || "").split(",").map((p) => p.trim());
  if (parts.length === 1 && parts[0] === "") return [];
  const out = [];
  for (const p of parts) {
    if (!/^[0-9]{1,5}$/.test(p) || Number(p) < 1 || Number(p) > 65535) {
      throw new Error(t("Ports: {port} is not a TCP port (1 to 65535); write them comma-separated, e.g. 8888, 6006. Nothing was sent.",
        { port: JSON.stringify(p) }));
    }
    if (out.includes(Number(p))) throw new Error(t("Ports: {port} is listed twice. Nothing was sent.", { port: p }));
    out.push(Number(p));
  }
  if (out.length > 16) throw new Error(t("Ports: at most 16 (got {n}). Nothing was sent.", { n: out.length }));
  return out;
}

function imageChoice(images) {
  const tags = el("span", { class: "tags", id: "image-contents" });
  const select = el("select", { name: "image" }, images.length
    ? images.map((im) => el("option", { value: im.name, selected: im.default },
      im.description ? `${im.name} — ${im.description}` : im.name))
    : el("option", { value: "" }, t("the platform's default")));
  const show = () => tags.replaceChildren(...contentTags(images.find((im) => im.name === select.value)));
  select.addEventListener("change", show);
  show();
  return [select, tags];
}

// -- views ---------------------------------------------------------------------------

// Money for display: ¥19.07; under a cent with 4 places (¥0.0033) so seconds of use read as
// something; "" for a null price (a model the price book does not price).
const SYMBOLS = { CNY: "¥", USD: "$", EUR: "€" };
function money(value, currency) {
  if (value === null || value === undefined) return "";
  const places = value !== 0 && Math.abs(value) < 0.01 ? 4 : 2;
  const text = Math.abs(value).toLocaleString(lang(), { minimumFractionDigits: places, maximumFractionDigits: places });
  const sym = SYMBOLS[currency];
  return `${value < 0 ? "-" : ""}${sym || ""}${text}${sym || !currency ? "" : " " + currency}`;
}

// A price cell: right-aligned, with what it is in a tooltip.
const priceCell = (value, currency, title, plan) =>
  el("td", { class: "num price", title, "data-price": plan }, money(value, currency));

function reservedTerm(g) {
  const h = g.reserved_term_hours;
  return !h ? "" : h % 8760 === 0 ? ` / ${h / 8760} y` : ` / ${h} h`;
}

// The 'verified' mark of `suanli verify`: passed with its ratios and date, or failed with why.
const pct = (r) => `${Math.round(r * 100)} %`;
function verifiedCell(v) {
  if (!v) return el("td", { class: "muted verified" }, t("not verified"));
  const day = v.at.slice(0, 10);
  if (v.status === "unmeasured") return el("td", { class: "muted verified", title: t("the check saw no GPU") }, t("unmeasured {day}", { day }));
  const ratios = [v.tflops_ratio !== null && `TFLOPS ${pct(v.tflops_ratio)}`, v.memory_ratio !== null && `mem ${pct(v.memory_ratio)}`]
    .filter(Boolean).join(", ");
  return v.status === "passed"
    ? el("td", { class: "verified ok", title: t("measured against the catalog's datasheet by suanli verify") },
      t("✓ verified {day}", { day }) + (ratios ? ` (${ratios})` : ""))
    : el("td", { class: "verified failed", title: (v.reasons || []).join("; ") }, t("✗ failed {day}: {reasons}", { day, reasons: (v.reasons || []).join("; ") }));
}

function verifiedModelCell(v) {
  if (!v) return el("td", { class: "muted verified" }, t("not verified"));
  const total = v.passed + v.failed + v.unmeasured;
  const tf = v.tflops_ratio !== null ? `, TFLOPS ≥ ${pct(v.tflops_ratio)}` : "";
  return el("td", { class: v.failed ? "verified failed" : "verified ok" },
    t("{passed}/{total} nodes verified {day}", { passed: v.passed, total, day: (v.at || "").slice(0, 10) }) + tf +
      (v.failed ? t(", {n} failed", { n: v.failed }) : ""));
}

async function viewGpus() {
  const gpus = await api("GET", "/v1/gpus");
  return el("section", {}, el("h2", {}, t("GPUs on offer")),
    table(["MODEL", "VENDOR", "MEMORY GiB", "TOTAL", "FREE", "FREE (fractional)", "NODES", "KIND",
      "ON DEMAND /GPU-h", "SPOT NOW /GPU-h", "MONTHLY /GPU", "RESERVED /GPU", "VERIFIED"],
      gpus.map((g) => [g.model, g.vendor || "", num(g.memory_gib), num(g.total), num(g.free), num((g.free_milli / 1000).toFixed(1)),
        num(g.nodes), el("span", { class: "tag" }, g.virtual ? t("virtual") : t("real")),
        g.price_per_gpu_hour === null ? el("td", { class: "muted", "data-price": "on-demand" }, t("not priced"))
          : priceCell(g.price_per_gpu_hour, g.currency, t("on demand, per GPU-hour"), "on-demand"),
        priceCell(g.spot_price_per_gpu_hour, g.currency, g.spot_utilisation_permille === null ? "" :
          t("spot, per GPU-hour now, at {pct} % utilisation; it rises with utilisation", { pct: (g.spot_utilisation_permille / 10).toFixed(1) }), "spot"),
        priceCell(g.monthly_price_per_gpu, g.currency, t("monthly plan, per GPU-month, paid up front"), "monthly"),
        el("td", { class: "num price", title: t("reserved plan, per GPU for the whole term, paid up front"), "data-price": "reserved" },
          g.reserved_price_per_gpu === null ? "" : money(g.reserved_price_per_gpu, g.currency) + reservedTerm(g)),
        verifiedModelCell(g.verified)]),
      "No GPUs registered yet."));
}

// A workload's cost so far and its rate now, with what each covers in the tooltip.
function costCell(w) {
  const c = w.cost;
  if (!c) return el("td", { class: "num" }, "");
  return el("td", { class: "num cost", "data-cost": c.so_far_micros,
    title: t("{rated} rated + {accruing} accruing, not yet rated", { rated: money(c.rated, c.currency), accruing: money(c.accruing, c.currency) }) },
    money(c.so_far, c.currency));
}

function rateCell(w) {
  const c = w.cost;
  if (!c) return el("td", { class: "num" }, "");
  const parts = [t("GPUs {price}/h", { price: money(c.gpu_per_hour, c.currency) })];
  if (c.storage_per_hour) parts.push(t("disk {price}/h", { price: money(c.storage_per_hour, c.currency) }));
  return el("td", { class: "num rate", "data-rate": c.per_hour_micros, title: t("now: {parts}", { parts: parts.join(" + ") }) },
    `${money(c.per_hour, c.currency)}/h`);
}

function priorityDesc(w) {
  return w.max_price ? `${t(w.priority)} ≤ ${w.max_price}/GPU-h` : t(w.priority);
}

function gpuChoice(gpus, name) {
  return el("select", { name }, gpus.map((g) => el("option", { value: g.model }, t("{model} ({free} free)", { model: g.model, free: g.free }))));
}

async function quoteInto(target, resources, diskGib) {
  try {
    const q = await api("POST", "/v1/billing/quote", { task: { run: ":", resources }, max_hours: 1, disk_gib: diskGib });
    const first = q.quotes[0];
    target.textContent = first ? t("costs {price} per hour ({plan})", { price: first.per_hour_text, plan: t(first.plan) }) + (first.plan === "spot" ? ` — ${first.note}` : "") : "";
  } catch (e) {
    target.textContent = e instanceof ApiError ? e.message : "";
  }
}

async function formInstance() {
  const [gpus, images] = await Promise.all([api("GET", "/v1/gpus"), imageCatalog()]);
  const price = el("span", { class: "muted", id: "instance-price" });
  const form = el("form", { class: "inline", id: "create-instance" },
    el("label", {}, t("Name"), el("input", { name: "name", placeholder: t("my-box") })),
    el("label", {}, t("GPU"), gpuChoice(gpus, "gpu_model")),
    el("label", {}, t("Count"), el("input", { name: "gpu_count", type: "number", min: 0, max: 64, value: 1, style: "width:5em" })),
    el("label", {}, t("or share of one"), el("select", { name: "share" },
      el("option", { value: "" }, t("whole GPUs")), [1, 2, 3, 4, 5, 6, 7, 8, 9].map((n) => el("option", { value: n * 100 }, `0.${n} GPU`)))),
    el("label", {}, t("Priority"), el("select", { name: "priority" }, ["on-demand", "spot", "reserved"].map((p) => el("option", { value: p }, t(p))))),
    el("label", { id: "max-price", style: "display:none" }, t("Max price / GPU-h"),
      el("input", { name: "max_price", inputmode: "decimal", placeholder: t("spot: optional, e.g. 1.20"), style: "width:9em" })),
    el("label", {}, t("Image"), imageChoice(images)),
    el("label", {}, t("Disk GiB"), el("input", { name: "disk_gib", type: "number", min: 1, value: 50, style: "width:6em" })),
    el("label", {}, t("Ports (e.g. 8888, 6006)"), el("input", { name: "ports", placeholder: t("none"), style: "width:10em" })),
    el("button", { type: "submit" }, t("Rent")), price);
  const body = () => {
    const f = new FormData(form);
    const share = Number(f.get("share") || 0);
    const b = { name: f.get("name"), gpu_model: f.get("gpu_model"), gpu_count: share ? 1 : Number(f.get("gpu_count")),
      gpu_milli: share, priority: f.get("priority"), image: f.get("image") || null, disk_gib: Number(f.get("disk_gib")) };
    const bid = String(f.get("max_price") || "").trim();
    if (b.priority === "spot" && bid) b.max_price = bid;  // a bid only means something for spot
    return b;
  };
  const requote = () => {
    const b = body();
    form.querySelector("#max-price").style.display = b.priority === "spot" ? "" : "none";
    quoteInto(price, { accelerators: `${b.gpu_model}:${b.gpu_count || 1}`, gpu_milli: b.gpu_milli || null, priority: b.priority,
      max_price: b.max_price || null }, b.disk_gib);
  };
  form.addEventListener("change", requote);
  form.addEventListener("invalid", () => flash(""), true);  // the browser blocked the submit: the last answer is old
  const portsInput = form.querySelector("input[name=ports]");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const b = body();
    try {
      b.ports = parsePorts(portsInput.value);
    } catch (e) {
      portsInput.setAttribute("aria-invalid", "true");
      portsInput.focus();
      flash(e.message);
      return;
    }
    portsInput.removeAttribute("aria-invalid");
    if (await act(t("Instance requested."), () => api("POST", "/v1/instances", b))) portsInput.value = "";
  });
  requote();
  return el("section", {}, el("h2", {}, t("Rent an instance")), form);
}

async function liveInstances() {
  const rows = await apiAll("/v1/instances");
  const actions = (i) => el("span", {},
    i.desired === "running" && !["stopped", "deleted", "failed"].includes(i.state) &&
      el("button", { class: "plain", onclick: () => act(t("Stopping instance {id}.", { id: i.id }), () => api("POST", `/v1/instances/${i.id}/stop`)) }, t("Stop")),
    i.state === "stopped" && el("button", { class: "plain", onclick: () => act(t("Starting instance {id}.", { id: i.id }), () => api("POST", `/v1/instances/${i.id}/start`)) }, t("Start")),
    el("button", { class: "plain", onclick: () => showLogs("instance", i) }, t("Logs")),
    el("button", { class: "plain", onclick: () => confirm(t("Delete instance {id} and its disk?", { id: i.id })) &&
      act(t("Deleting instance {id}.", { id: i.id }), () => api("DELETE", `/v1/instances/${i.id}`)) }, t("Delete")));
  return el("section", {}, el("h2", {}, t("Instances")),
    table(["ID", "NAME", "STATE", "GPU", "IMAGE", "RUNTIME", "PRIORITY", "PLACED ON", "COST", "RATE", "ACCESS", "WHY", ""],
      rows.map((i) => [String(i.id), i.name, stateCell(i.state), gpuDesc(i), i.image, runtimeCell(i), priorityDesc(i),
        placed(i.allocations), costCell(i), rateCell(i), accessCell(i), whyCell(i), actions(i)]),
      "No instances yet."));
}

async function formJob() {
  const gpus = await api("GET", "/v1/gpus");
  const form = el("form", { class: "inline", id: "launch-job" },
    el("label", {}, t("Name"), el("input", { name: "name", placeholder: t("train") })),
    el("label", {}, t("GPU"), gpuChoice(gpus, "gpu_model")),
    el("label", {}, t("GPUs per node"), el("input", { name: "count", type: "number", min: 1, max: 64, value: 1, style: "width:5em" })),
    el("label", {}, t("Nodes"), el("input", { name: "num_nodes", type: "number", min: 1, max: 64, value: 1, style: "width:5em" })),
    el("label", {}, t("Priority"), el("select", { name: "priority" }, ["on-demand", "spot", "reserved"].map((p) => el("option", { value: p }, t(p))))),
    el("label", {}, t("Checkpoint dir"), el("input", { name: "checkpoint_dir", placeholder: t("ckpt (optional)") })),
    el("label", { style: "flex-basis:100%" }, t("Run"), el("textarea", { name: "run", required: true, placeholder: "torchrun --nproc_per_node=$NPROC_PER_NODE train.py" })),
    el("button", { type: "submit" }, t("Launch")));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    const task = { name: f.get("name"), run: f.get("run"), num_nodes: Number(f.get("num_nodes")),
      resources: { accelerators: `${f.get("gpu_model")}:${f.get("count")}`, priority: f.get("priority") } };
    if (f.get("checkpoint_dir")) task.checkpoint_dir = f.get("checkpoint_dir");
    act(t("Job submitted."), () => api("POST", "/v1/jobs", task));
  });
  return el("section", {}, el("h2", {}, t("Launch a job")), form);
}

async function liveJobs() {
  const rows = await apiAll("/v1/jobs");
  const done = ["succeeded", "failed", "cancelled"];
  const actions = (j) => el("span", {},
    !done.includes(j.state) && !j.cancel_requested &&
      el("button", { class: "plain", onclick: () => act(t("Cancelling job {id}.", { id: j.id }), () => api("POST", `/v1/jobs/${j.id}/cancel`)) }, t("Cancel")),
    el("button", { class: "plain", onclick: () => showLogs("job", j) }, t("Logs")));
  // a pipeline's graph state: each dependency with its name and state, coloured like STATE
  const byId = new Map(rows.map((j) => [j.id, j]));
  const depsCell = (j) => el("td", { class: "deps" }, (j.depends_on || []).map((d) => {
    const dep = byId.get(d);
    return el("span", { class: `dep state-${dep ? dep.state : "unknown"}`, "data-job": d, title: dep ? t(dep.state) : "" },
      dep && dep.name ? `${d} ${dep.name}` : String(d));
  }));
  return el("section", {}, el("h2", {}, t("Jobs")),
    table(["ID", "NAME", "STATE", "GPU", "NODES", "PRIORITY", "PLACED ON", "COST", "RATE", "EXIT", "DEPENDS ON", "GROUP", "WHY", ""],
      rows.map((j) => [String(j.id), j.name, stateCell(j.state), gpuDesc(j), num(j.num_nodes), priorityDesc(j), placed(j.allocations),
        costCell(j), rateCell(j), j.exit_code ?? "", depsCell(j), j.group || "", whyCell(j), actions(j)]),
      "No jobs yet."));
}

// -- SSH keys and images ------------------------------------------------------------------

// The browser-side twin of control/keys.py's private-key markers: a private key pasted by
// mistake never leaves the page (the CLI checks the same before sending; the server refuses too).
const PRIVATE_KEY = /-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----|PuTTY-User-Key-File-|^\s*openssh-key-v1/m;

async function formKeys() {
  const text = el("textarea", { name: "public_key", required: true, spellcheck: "false",
    placeholder: t("ssh-ed25519 AAAA… you@laptop") });
  const file = el("input", { name: "file", type: "file", accept: ".pub,text/plain" });
  const form = el("form", { class: "inline", id: "add-key" },
    el("label", { style: "flex-basis:100%" }, t("Public key: one line of your .pub file (e.g. ~/.ssh/id_ed25519.pub), never the private key"), text),
    el("label", {}, t("Name"), el("input", { name: "name", placeholder: t("default: the key's comment"), maxlength: 100 })),
    el("label", {}, t("or read a .pub file"), file),
    el("button", { type: "submit" }, t("Add key")));
  file.addEventListener("change", async () => {
    if (file.files[0]) text.value = (await file.files[0].text()).slice(0, 20000);
    file.value = "";
  });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    const key = String(f.get("public_key") || "");
    if (PRIVATE_KEY.test(key)) {
      text.value = "";
      flash(t("This looks like a PRIVATE key; nothing was sent or stored. Paste the public key (the .pub file, e.g. ~/.ssh/id_ed25519.pub) and keep the private key to yourself."));
      return;
    }
    const body = { public_key: key };
    if (String(f.get("name") || "").trim()) body.name = String(f.get("name")).trim();
    if (await act(t("Key added: it opens your running instances now."), () => api("POST", "/v1/keys", body))) form.reset();
  });
  return el("section", {}, el("h2", {}, t("Add an SSH key")),
    el("p", { class: "muted" }, t("Your keys open your own instances (ssh, scp, sftp), nobody else's.")), form);
}

async function liveKeys() {
  const keys = await apiAll("/v1/keys");
  return el("section", {}, el("h2", {}, t("Your SSH keys")),
    table(["NAME", "TYPE", "FINGERPRINT", "ADDED", ""],
      keys.map((k) => [k.name, k.type, el("code", { class: "fp" }, k.fingerprint), new Date(k.created_at).toLocaleString(lang()),
        el("button", { class: "plain", onclick: () => confirm(t("Remove key {key}? It stops opening your instances.", { key: k.name || k.fingerprint })) &&
          act(t("Key {key} removed.", { key: k.name || k.fingerprint }), () => api("DELETE", `/v1/keys/${k.id}`)) }, t("Remove"))]),
      "No SSH keys yet: add one to reach your instances with ssh."));
}

async function formImages() {
  if (!isOperator()) return "";
  const form = el("form", { class: "inline", id: "add-image" },
    el("label", {}, t("Name"), el("input", { name: "name", required: true, placeholder: "pytorch", style: "width:9em" })),
    el("label", {}, t("Engine ref"), el("input", { name: "ref", required: true, placeholder: "localhost/suanli/python:3.11" })),
    el("label", { style: "flex:1" }, t("Description"), el("input", { name: "description" })),
    el("label", {}, t("Python"), el("input", { name: "python", placeholder: "3.11", style: "width:5em" })),
    el("label", {}, t("CUDA"), el("input", { name: "cuda", placeholder: "12.4", style: "width:5em" })),
    el("label", { class: "check" }, el("input", { name: "sshd", type: "checkbox" }), "sshd"),
    el("label", { class: "check" }, el("input", { name: "jupyterlab", type: "checkbox" }), "JupyterLab"),
    el("label", { class: "check" }, el("input", { name: "default", type: "checkbox" }), t("default")),
    el("button", { type: "submit" }, t("Offer image")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    const opt = (k) => String(f.get(k) || "").trim() || null;
    const body = { name: String(f.get("name")).trim(), ref: String(f.get("ref")).trim(), description: String(f.get("description") || ""),
      default: f.get("default") === "on",
      contents: { python: opt("python"), cuda: opt("cuda"), sshd: f.get("sshd") === "on", jupyterlab: f.get("jupyterlab") === "on" } };
    if (await act(t("Image {name} offered.", { name: body.name }), () => api("POST", "/v1/images", body))) form.reset();
  });
  return el("section", {}, el("h2", {}, t("Offer an image")), form);
}

async function liveImages() {
  const images = await imageCatalog();
  const here = (im) => im.present === null ? el("span", { class: "muted" }, t("no engine")) :
    im.present ? t("yes") : el("span", { class: "warn" }, t("no: build or pull it"));
  const actions = (im) => isOperator() && el("span", {},
    !im.default && el("button", { class: "plain", onclick: () => act(t("{name} is the default image.", { name: im.name }),
      () => api("PATCH", `/v1/images/${encodeURIComponent(im.name)}`, { default: true })) }, t("Make default")),
    el("button", { class: "plain", onclick: () => confirm(t("Stop offering image {name}?", { name: im.name })) &&
      act(t("Image {name} removed.", { name: im.name }), () => api("DELETE", `/v1/images/${encodeURIComponent(im.name)}`)) }, t("Remove")));
  return el("section", {}, el("h2", {}, t("Images renters can pick")),
    table(["NAME", "DESCRIPTION", "CONTAINS", "REF", "ON THIS HOST", ""],
      images.map((im) => [el("td", {}, im.name, im.default && el("span", { class: "tags" }, el("span", { class: "tag" }, t("default")))),
        im.description, el("span", { class: "tags" }, contentTags(im)), el("code", { class: "fp" }, im.ref), here(im), actions(im)]),
      "No images offered: operators add them here or with `suanli images add`."));
}

async function formBilling() {
  // Everyone: an alert when the balance runs low. Operators: top-ups and payment terms.
  const alert = el("form", { class: "inline", id: "low-balance" },
    el("label", {}, t("Alert me when less than this is left"), el("input", { name: "low_balance", placeholder: t("e.g. 50 (empty: off)"), style: "width:10em" })),
    el("button", { type: "submit" }, t("Set alert")));
  alert.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = String(new FormData(alert).get("low_balance") || "").trim();
    await act(v ? t("Low-balance alert set at {amount}.", { amount: v }) : t("Low-balance alert off."), () => api("PUT", "/v1/billing/terms", { low_balance: v }));
  });
  if (!isOperator()) return el("section", {}, el("h2", {}, t("Low-balance alert")), alert);
  const topup = el("form", { class: "inline", id: "topup" },
    el("label", {}, t("Tenant"), el("input", { name: "tenant", required: true, style: "width:9em" })),
    el("label", {}, t("Amount"), el("input", { name: "amount", required: true, placeholder: "500", style: "width:7em" })),
    el("label", {}, t("Memo"), el("input", { name: "memo", placeholder: t("bank transfer 7731") })),
    el("button", { type: "submit" }, t("Top up")));
  topup.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(topup);
    const body = { tenant: String(f.get("tenant")), amount: String(f.get("amount")), memo: String(f.get("memo") || "") };
    if (await act(t("Topped up {tenant} by {amount}.", { tenant: body.tenant, amount: body.amount }), () => api("POST", "/v1/billing/topups", body))) topup.reset();
  });
  const terms = el("form", { class: "inline", id: "terms" },
    el("label", {}, t("Tenant"), el("input", { name: "tenant", required: true, style: "width:9em" })),
    el("label", {}, t("Terms"), el("select", { name: "terms" }, ...["prepaid", "credit", "postpaid"].map((v) => el("option", { value: v }, t(v))))),
    el("label", {}, t("Credit limit"), el("input", { name: "credit_limit", placeholder: t("credit only"), style: "width:7em" })),
    el("label", {}, t("Grace (s)"), el("input", { name: "grace_s", type: "number", min: 0, placeholder: "300", style: "width:6em" })),
    el("label", {}, t("Storage debt limit"), el("input", { name: "storage_debt_limit", placeholder: "10", style: "width:6em" })),
    el("button", { type: "submit" }, t("Set terms")));
  terms.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(terms);
    const body = { tenant: String(f.get("tenant")), terms: String(f.get("terms")) };
    if (String(f.get("credit_limit") || "").trim()) body.credit_limit = String(f.get("credit_limit")).trim();
    if (String(f.get("grace_s") || "").trim()) body.grace_s = Number(f.get("grace_s"));
    if (String(f.get("storage_debt_limit") || "").trim()) body.storage_debt_limit = String(f.get("storage_debt_limit")).trim();
    await act(t("Terms of {tenant}: {terms}.", { tenant: body.tenant, terms: t(body.terms) }), () => api("PUT", "/v1/billing/terms", body));
  });
  return el("section", {}, el("h2", {}, t("Top-ups and payment terms")),
    el("p", { class: "muted" }, t("New tenants pay in advance: work starts only while their balance covers it.")),
    topup, terms, el("h2", {}, t("Low-balance alert (your tenant)")), alert);
}

async function viewBilling() {
  const b = await api("GET", "/v1/billing/bill");
  const terms = b.terms;
  const hours = (s) => (s / 3600).toFixed(2);
  return [
    el("section", {}, el("h2", {}, t("Account of {tenant} — {period}", { tenant: b.tenant, period: b.period })),
      el("div", { class: "cards" },
        el("div", {}, el("div", { class: "muted" }, t("Balance")), el("div", { class: "big", id: "balance" }, b.balance_text)),
        el("div", {}, el("div", { class: "muted" }, t("This month")), el("div", { class: "big" }, b.current_period_total_text)),
        el("div", {}, el("div", { class: "muted" }, t("Running now, not yet billed")), el("div", { class: "big" }, b.accruing_text)),
        terms && el("div", {}, el("div", { class: "muted" }, t("Terms: {terms}", { terms: t(terms.terms) }) +
            (terms.low_balance !== null ? t(", alert below {amount}", { amount: terms.low_balance }) : "")),
          el("div", { class: "big", id: "left" }, terms.terms === "postpaid" ? t("post-paid") : t("{amount} left", { amount: terms.left_text }))),
        b.budget && b.budget.limit !== null && el("div", {}, el("div", { class: "muted" }, t("Budget")),
          el("div", { class: "big" }, `${b.budget.limit} ${b.currency}${b.budget.hard_cap ? t(" (hard cap)") : ""}`)))),
    el("section", {}, el("h2", {}, t("Charges this month")),
      table(["KIND", "GPU", "PLAN", "HOURS", t("AMOUNT ({currency})", { currency: b.currency })],
        b.charges.map((c) => [t(c.kind), c.gpu_model || "", t(c.plan), num(hours(c.billed_seconds)), num(c.amount_text)]),
        "Nothing billed this month.")),
    el("section", {}, el("h2", {}, t("Notices")),
      table(["WHEN", "KIND", "MESSAGE"], b.notices.map((n) => [n.at, n.kind, n.message]), "No notices.")),
  ];
}

async function viewNodes() {
  const nodes = await apiAll("/v1/nodes");
  const actions = (n) => isOperator() && el("span", {},
    n.state === "ready"
      ? el("button", { class: "plain", onclick: () => act(t("{name} cordoned.", { name: n.name }), () => api("PATCH", `/v1/nodes/${n.name}`, { state: "cordoned" })) }, t("Cordon"))
      : el("button", { class: "plain", onclick: () => act(t("{name} ready.", { name: n.name }), () => api("PATCH", `/v1/nodes/${n.name}`, { state: "ready" })) }, t("Make ready")),
    // `suanli nodes verify NAME`: a whole-node job pinned there (it runs on a cordoned node
    // too); a cordoned node that passes is made ready
    n.state !== "down" && el("button", { class: "plain verify", title: t("run suanli verify there as a job in its own container"),
      onclick: () => act(t("Verification of {name} queued.", { name: n.name }),
        () => api("POST", `/v1/nodes/${n.name}/verify-runs`, { uncordon: n.state === "cordoned" })) }, t("Verify")));
  return el("section", {}, el("h2", {}, t("Nodes")),
    table(["NAME", "STATE", "BACKEND", "GPU", "FREE", "CPU used/total", "MEM GiB used/total", "ZONE", "HEARTBEAT", "KIND", "VERIFIED", ""],
      nodes.map((n) => [n.name, stateCell(n.state), n.backend, `${n.gpu_model} × ${n.gpu_count}`, num(n.gpus_free),
        `${n.cpu_used / 1000}/${n.cpu_milli / 1000}`, `${(n.mem_used / 1024).toFixed(0)}/${(n.memory_mib / 1024).toFixed(0)}`,
        n.zone, n.heartbeat_at ? ago(n.heartbeat_at) : t("not watched"), el("span", { class: "tag" }, n.virtual ? t("virtual") : t("real")), verifiedCell(n.verified), actions(n)]),
      "No nodes registered."));
}

async function viewEvents() {
  const events = await api("GET", "/v1/events?limit=100");
  return el("section", {}, el("h2", {}, t("Latest events")),
    table(["WHEN", "OBJECT", "FROM", "TO", "MESSAGE"],
      events.reverse().map((e) => [new Date(e.ts).toLocaleString(lang()), `${t(e.kind)} ${e.object_id}`, e.from_state ? t(e.from_state) : "", stateCell(e.to_state), e.message]),
      "No events."));
}

// -- dashboard --------------------------------------------------------------------------

// Chart.js (static/vendor, served by this server) draws the charts. A live part is built
// again on every refresh into charts of its own; the last one's are destroyed only when the
// new part replaces it (render), so a chart never goes blank while the API is asked again.
let charts = [];
const COLOURS = ["#2457c5", "#1b7f3b", "#a15c00", "#b3261e", "#6b3fa0", "#00838f", "#5d6b82"];

function chart(id, type, labels, datasets, yTitle, percent, registry) {
  const canvas = el("canvas", { id, height: 220, role: "img", "aria-label": yTitle });
  registry.push(new Chart(canvas, {
    type,
    data: { labels, datasets: datasets.map((d, i) => ({ borderColor: COLOURS[i % COLOURS.length], backgroundColor: COLOURS[i % COLOURS.length],
      pointRadius: 0, borderWidth: 2, ...d })) },
    options: { animation: false, responsive: true, maintainAspectRatio: false, interaction: { mode: "index", intersect: false },
      scales: { y: { beginAtZero: true, title: { display: true, text: yTitle }, max: percent ? 100 : undefined } },
      plugins: { legend: { display: datasets.length > 1 } } },
  }));
  return el("div", { class: "chart" }, canvas);
}

const dashboardDays = () => Number(localStorage.getItem("suanli.dashboard_days")) || 30;
const shortTime = (iso) => new Date(iso).toLocaleString(lang(), { month: "numeric", day: "numeric", hour: "numeric" });
const shortDay = (day) => new Date(day + "T00:00:00Z").toLocaleDateString(lang(), { month: "numeric", day: "numeric", timeZone: "UTC" });

function uptime(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - new Date(iso).getTime()) / 1000);
  const h = Math.floor(s / 3600);
  return h ? t("{h} h {m} min", { h, m: Math.floor((s % 3600) / 60) }) : t("{m} min", { m: Math.floor(s / 60) });
}

async function formDashboard() {
  const select = el("select", { name: "days", id: "dashboard-days" },
    [1, 7, 30, 90].map((d) => el("option", { value: d, selected: d === dashboardDays() }, t("last {n} days", { n: d }))));
  select.addEventListener("change", () => { localStorage.setItem("suanli.dashboard_days", select.value); render(); });
  return el("section", {}, el("h2", {}, t("Dashboard")), el("label", { class: "inline-label" }, t("Window"), " ", select));
}

// One workload's CPU and GPU use over the last hour (the metrics the platform collects),
// in a pane of its own below the live part.
let usageCharts = [];

async function showUsage(kind, w) {
  usageCharts.forEach((c) => c.destroy());
  usageCharts = [];
  const pane = document.getElementById("usage");
  const title = t(kind === "job" ? "Use of job {id}" : "Use of instance {id}", { id: w.id }) + (w.name ? ` (${w.name})` : "");
  pane.hidden = false;
  try {
    const points = await api("GET", `/v1/${kind}s/${w.id}/metrics`);
    const labels = points.map((p) => new Date(p.ts * 1000).toLocaleTimeString(lang()));
    const gpuMeasured = points.some((p) => p.gpu_util_percent !== null);
    const note = points.map((p) => p.gpu_note).find(Boolean);
    pane.replaceChildren(el("h2", {}, title, " ", el("button", { class: "plain", onclick: () => { pane.hidden = true; } }, t("Close"))),
      points.length ? chart("usage-chart", "line", labels, [
        { label: t("CPU % of one core"), data: points.map((p) => p.cpu_percent) },
        ...(gpuMeasured ? [{ label: t("GPU %"), data: points.map((p) => p.gpu_util_percent) }] : []),
      ], "%", false, usageCharts) : el("p", { class: "muted" }, t("No samples yet.")),
      !gpuMeasured && el("p", { class: "muted", id: "gpu-note" }, note || t("GPU use: not measured")));
  } catch (e) {
    pane.replaceChildren(el("h2", {}, title), el("p", { class: "muted" }, e.message));
  }
}

async function viewDashboard(made) {
  const days = dashboardDays();
  const [board, instances, jobs, alerts] = await Promise.all([api("GET", `/v1/dashboard?days=${days}`), apiAll("/v1/instances"),
    apiAll("/v1/jobs"), api("GET", "/v1/alerts")]);
  const cur = board.currency;
  const spend = board.spend.values.spend;
  const running = [...instances.filter((i) => i.state === "running").map((i) => ["instance", i]),
    ...jobs.filter((j) => j.state === "running").map((j) => ["job", j])];
  const perHour = running.reduce((sum, [, w]) => sum + (w.cost ? w.cost.per_hour : 0), 0);
  const out = [
    el("section", {}, el("h2", {}, t("Your spending")),
      el("div", { class: "cards" },
        el("div", {}, el("div", { class: "muted" }, t("Last {n} days", { n: days })),
          el("div", { class: "big", id: "spend-total" }, money(spend.reduce((a, b) => a + b, 0) / 1e6, cur))),
        // an operator's listings hold every tenant's work: say so
        el("div", {}, el("div", { class: "muted" }, isOperator() ? t("Running now, every tenant") : t("Running now")),
          el("div", { class: "big", id: "running-count" }, String(running.length))),
        el("div", {}, el("div", { class: "muted" }, isOperator() ? t("Costs now, every tenant") : t("Costs now")), el("div", { class: "big" }, t("{price} per hour", { price: money(perHour, cur) })))),
      chart("spend-chart", "bar", board.spend.starts.map(shortDay), [{ label: t("Spend per day"), data: spend.map((v) => v / 1e6) }],
        t("Spend ({currency})", { currency: cur }), false, made)),
    el("section", {}, el("h2", {}, isOperator() ? t("Running work, every tenant") : t("Running work")),
      table(["KIND", "ID", "NAME", "GPU", "UPTIME", "COST", "RATE", ""],
        running.map(([kind, w]) => [t(kind), String(w.id), w.name, gpuDesc(w), uptime(w.started_at || w.created_at), costCell(w), rateCell(w),
          el("button", { class: "plain", onclick: () => showUsage(kind, w) }, t("Use"))]),
        "Nothing running.")),
    el("section", { id: "alerts" }, el("h2", {}, t("Alerts")),
      table(["WHEN", "KIND", "OBJECT", "MESSAGE", "WEBHOOK"],
        alerts.slice(-10).reverse().map((a) => [new Date(a.created_at).toLocaleString(lang()), el("span", { class: `alert alert-${a.kind}` }, t(a.kind)),
          a.object, a.message, t(a.delivery)]),
        "No alerts.")),
  ];
  const c = board.cluster;
  if (c) {
    const models = Object.keys(c.allocation.values);
    out.push(el("section", {}, el("h2", {}, t("The platform")),
      el("div", { class: "cards" },
        el("div", {}, el("div", { class: "muted" }, t("Revenue, last {n} days", { n: days })),
          el("div", { class: "big", id: "revenue-total" }, money(c.revenue.values.revenue.reduce((a, b) => a + b, 0) / 1e6, cur))),
        el("div", {}, el("div", { class: "muted" }, t("Waiting")), el("div", { class: "big", id: "queue-length" }, String(c.queue.waiting))),
        el("div", {}, el("div", { class: "muted" }, t("GPUs held now")), el("div", { class: "big", id: "held-now" },
          Object.entries(c.held_now).filter(([, h]) => h.held).map(([m, h]) => `${m} ${h.held}/${h.total}`).join(", ") || "0")),
        el("div", {}, el("div", { class: "muted" }, t("Nodes")), el("div", { class: "big", id: "node-states" },
          Object.entries(c.nodes.states).map(([s, n]) => `${n} ${t(s)}`).join(", ") || "0"))),
      el("h2", {}, t("Allocated share of each GPU model")),
      chart("allocation-chart", "line", c.allocation.starts.map(shortTime),
        models.map((m) => ({ label: m, data: c.allocation.values[m].map((v) => 100 * v) })), t("% of GPUs held"), true, made),
      el("h2", {}, t("Revenue per day")),
      chart("revenue-chart", "bar", c.revenue.starts.map(shortDay), [{ label: t("Revenue per day"), data: c.revenue.values.revenue.map((v) => v / 1e6) }],
        t("Revenue ({currency})", { currency: cur }), false, made),
      el("h2", {}, t("Why work waits")),
      table(["WHY", "COUNT"], c.queue.reasons.map((r) => [r.reason, num(r.count)]), "Nothing waits.")));
  }
  return out;
}

// How an estimate was made: inference at a precision, context and batch; training by its
// method, sequence length and micro-batch (its estimate has no precision or context).
function memoryTerms(m) {
  if (m.method) {
    return t("{method}, sequence {seq}, micro-batch {batch}", { method: m.method === "full" ? t("full fine-tune") : m.method, seq: m.seq_len, batch: m.micro_batch });
  }
  return t("{precision}, context {context}, batch {batch}", { precision: m.precision, context: m.context, batch: m.batch });
}

// What to rent for a model: memory, then what this platform can rent (its own price book,
// GPU counts its nodes hold), then every catalog GPU at market reference prices. Each
// table's heading says what it is sorted by and each price says its plan.
async function formAdvisor() {
  const out = el("div", { id: "advice" });
  const form = el("form", { class: "inline", id: "advise" },
    el("label", {}, t("Model (e.g. llama-3.1-70b)"), el("input", { name: "model", placeholder: "qwen2.5-72b" })),
    el("label", {}, t("or parameters"), el("input", { name: "params", placeholder: "70B", style: "width:6em" })),
    el("label", {}, t("Task"), el("select", { name: "task" }, ["inference", "lora", "qlora", "full-finetune"].map((v) => el("option", { value: v }, t(v))))),
    el("label", {}, t("Precision"), el("select", { name: "precision" }, ["bf16", "fp8", "int8", "int4"].map((v) => el("option", {}, v)))),
    el("label", {}, t("Context"), el("input", { name: "context", type: "number", min: 1, value: 4096, style: "width:7em" })),
    el("label", {}, t("Batch"), el("input", { name: "batch", type: "number", min: 1, value: 1, style: "width:5em" })),
    el("label", {}, t("Plan"), el("select", { name: "plan" }, ["on-demand", "spot", "monthly", "reserved"].map((v) => el("option", { value: v }, t(v))))),
    el("button", { type: "submit" }, t("Advise")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    const q = { task: f.get("task"), precision: f.get("precision"), context: Number(f.get("context")), batch: Number(f.get("batch")) };
    if (f.get("model")) q.model = f.get("model");
    else if (f.get("params")) q.params = f.get("params");
    const gib = (b) => (b / 2 ** 30).toFixed(1);
    const price = (v) => num(v === null || v === undefined ? "" : v.toFixed(2));
    const plan = (p) => (p || "").replace("_", "-");
    try {
      const [mem, here, options] = await Promise.all([api("POST", "/v1/advise/memory", q),
        api("POST", "/v1/advise/platform", { ...q, plan: f.get("plan") }), api("POST", "/v1/advise/fit", q)]);
      flash("");
      const byTotal = here.sorted_by === "total_cost";
      const marketBy = q.task === "inference" ? t("price per hour") : t("price per unit of work (price / (GPUs x TFLOPS x MFU))");
      out.replaceChildren(
        el("p", {}, `${mem.model}: `, el("b", { id: "memory-total" }, `${gib(mem.total_bytes)} GiB`), t(" of GPU memory on one GPU ({terms}).", { terms: memoryTerms(mem) })),
        el("h2", {}, t("On this platform: {plan}, cheapest first", { plan: t(here.plan) })),
        table(["GPU", "GPUS", "NODES", "PARALLELISM", "MEMORY USED", "PLAN", "PRICE / GPU-HOUR", byTotal ? "TOTAL" : "PRICE / HOUR", "FREE NOW"],
          here.answers.map((a) => [a.model, num(a.gpus), num(a.nodes), a.parallelism, num(`${(100 * a.memory_used_fraction).toFixed(0)} %`),
            t(a.plan), price(a.price_per_gpu_hour), price(byTotal ? a.total_cost : a.price_per_hour),
            num(t("{answer}: {free} of {total}", { answer: a.free_now ? t("yes") : t("no"), free: a.free, total: a.total }) + (a.virtual ? t(" (virtual)") : ""))]),
          "No GPU offered here can hold it."),
        el("h2", {}, t("Market reference prices (seed articles' providers, not this platform), by {order}", { order: marketBy })),
        table(["GPU", "GPUS", "PARALLELISM", "PLAN", "PRICE / GPU-HOUR", "PRICE / HOUR"],
          options.slice(0, 12).map((o) => [o.gpu, num(o.gpus), o.parallelism, t(plan(o.price_plan)), price(o.price_per_gpu_hour),
            num(o.hourly_cost === null ? "" : o.hourly_cost.toFixed(2) + (o.billed_gpus && o.billed_gpus !== o.gpus ? t(" ({n} GPUs billed: whole nodes)", { n: o.billed_gpus }) : ""))]),
          "Nothing fits."));
    } catch (e) {
      out.replaceChildren();  // an answer to an earlier question is not this one's
      flash(e instanceof ApiError ? `${e.message} (${e.code})` : String(e));
    }
  });
  return el("section", {}, el("h2", {}, t("What do I need to rent?")), form, out);
}

function viewLogin() {
  // People sign in with name and password (and a TOTP code when two-factor sign-in is on);
  // programs' API tokens still work, pasted in the second form.
  const signIn = el("form", { class: "inline", id: "signin" },
    el("label", {}, t("User"), el("input", { name: "name", autocomplete: "username", required: true })),
    el("label", {}, t("Password"), el("input", { name: "password", type: "password", autocomplete: "current-password", required: true })),
    el("label", {}, t("Code (2FA)"), el("input", { name: "code", inputmode: "numeric", autocomplete: "one-time-code", size: 8 })),
    el("button", { type: "submit" }, t("Sign in")));
  signIn.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(signIn);
    try {
      const s = await fetch("/v1/sessions", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ name: f.get("name").trim(), password: f.get("password"), code: f.get("code").trim() || null }) });
      const data = await s.json();
      if (!s.ok) return flash((data.error && data.error.message) || t("sign-in failed"));
      localStorage.setItem(TOKEN_KEY, data.token);
      localStorage.setItem(SESSION_KEY, data.must_enrol_2fa ? "enrol" : "1");
      me = null;
      flash("");
      await render();
    } catch (e) {
      flash(String(e.message || e));
    }
  });
  const form = el("form", { class: "inline", id: "login" },
    el("label", { style: "flex:1" }, t("API token (the server prints the admin's at first start; `suanli login` uses the same)"),
      el("input", { name: "token", type: "password", autocomplete: "off", required: true })),
    el("button", { type: "submit" }, t("Use token")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    localStorage.setItem(TOKEN_KEY, new FormData(form).get("token").trim());
    localStorage.removeItem(SESSION_KEY);
    me = null;
    flash("");  // a refusal of an earlier token is not this one's
    await render();
  });
  return el("section", {}, el("h2", {}, t("Sign in")), signIn, el("h2", {}, t("Or use an API token")), form);
}

// Your tenant requires a second factor and you have none yet: this session may only enrol.
function viewEnrol() {
  const out = el("div", { id: "enrol" });
  const start = el("button", { type: "button", id: "enrol-start" }, t("Make my secret"));
  start.addEventListener("click", async () => {
    try {
      const e = await api("POST", "/v1/me/2fa");
      const confirm = el("form", { class: "inline", id: "enrol-confirm" },
        el("label", {}, t("Code from your app"), el("input", { name: "code", inputmode: "numeric", required: true, size: 8 })),
        el("button", { type: "submit" }, t("Turn on")));
      confirm.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        try {
          await api("POST", "/v1/me/2fa/confirm", { code: new FormData(confirm).get("code").trim() });
          await signOut();
          flash(t("Two-factor sign-in is on: sign in again with a code."), true);
        } catch (err) {
          flash(err.message);
        }
      });
      out.replaceChildren(
        el("p", {}, t("Add this secret to an authenticator app (or open the otpauth link on your phone):")),
        el("p", {}, el("code", { id: "enrol-secret" }, e.secret)),
        el("p", {}, el("a", { href: e.uri }, t("otpauth link"))),
        confirm);
    } catch (err) {
      flash(err.message);
    }
  });
  return el("section", {}, el("h2", {}, t("Turn on two-factor sign-in")),
    el("p", {}, t("Your tenant requires a code from an authenticator app at sign-in.")), start, out);
}

async function signOut() {
  if (localStorage.getItem(SESSION_KEY)) {
    try { await api("DELETE", "/v1/sessions/current"); } catch (e) { /* expired already */ }
  }
  localStorage.removeItem(TOKEN_KEY);
  localStorage.removeItem(SESSION_KEY);
  me = null;
  delete document.getElementById("view").dataset.view;
  flash("");
  render();
}

// A view: an optional form, built once when the view opens (so a refresh never eats what
// the user is typing), and live content, fetched again every REFRESH_MS.
const VIEWS = {
  dashboard: { form: formDashboard, live: viewDashboard },
  gpus: { live: viewGpus },
  instances: { form: formInstance, live: liveInstances },
  jobs: { form: formJob, live: liveJobs },
  keys: { form: formKeys, live: liveKeys },
  images: { form: formImages, live: liveImages },
  billing: { form: formBilling, live: viewBilling },
  nodes: { live: viewNodes },
  events: { live: viewEvents },
  advisor: { form: formAdvisor, live: async () => [] },
};

// -- the page --------------------------------------------------------------------------

// Renders overlap (a tab click while the refresh timer's render waits on the API): only
// the newest may touch the page, or an older one rebuilds a form the user is typing into.
let renderGen = 0;

async function render() {
  const gen = ++renderGen;
  const stale = () => gen !== renderGen;
  clearTimeout(timer);
  const view = document.getElementById("view");
  const tabs = document.getElementById("tabs");
  const who = document.getElementById("who");
  if (!localStorage.getItem(TOKEN_KEY)) {
    tabs.hidden = true;
    who.replaceChildren();
    delete view.dataset.view;
    view.replaceChildren(viewLogin());
    return;
  }
  try {
    me = me || await api("GET", "/v1/me");
    if (stale()) return;
  } catch (e) {
    if (stale()) return;
    if (e.status === 401) {
      localStorage.removeItem(TOKEN_KEY);
      localStorage.removeItem(SESSION_KEY);
      flash(t("That token was not accepted: {error}", { error: e.message }));
      return render();
    }
    flash(String(e.message || e));
    return;
  }
  tabs.hidden = false;
  for (const a of tabs.querySelectorAll("[data-role=operator]")) a.hidden = !isOperator();
  who.replaceChildren(`${me.name} (${t(me.role)})`, el("button", { class: "plain", onclick: signOut }, t("Sign out")));
  if (localStorage.getItem(SESSION_KEY) === "enrol") {
    tabs.hidden = true;
    if (view.dataset.view !== "enrol") {
      view.replaceChildren(viewEnrol());
      view.dataset.view = "enrol";
    }
    return;
  }
  const name = (location.hash.slice(1) in VIEWS) ? location.hash.slice(1) : "dashboard";
  for (const a of tabs.querySelectorAll("a")) a.classList.toggle("active", a.getAttribute("href") === "#" + name);
  try {
    if (view.dataset.view !== name) {
      const form = VIEWS[name].form ? await VIEWS[name].form() : "";
      if (stale()) return;
      view.replaceChildren(form, el("div", { id: "live" }), el("section", { id: "usage", hidden: true }), el("section", { id: "logs", hidden: true }));
      view.dataset.view = name;
    }
    const made = [];  // the charts this render draws
    const live = [await VIEWS[name].live(made)].flat();
    if (stale()) {
      made.forEach((c) => c.destroy());
      return;
    }
    charts.forEach((c) => c.destroy());
    charts = made;
    document.getElementById("live").replaceChildren(...live);
  } catch (e) {
    if (stale()) return;
    flash(e instanceof ApiError ? `${e.message} (${e.code})` : String(e));
  }
  timer = setTimeout(render, REFRESH_MS);
}

window.addEventListener("hashchange", () => { flash(""); closeLogs(); render(); });
document.getElementById("lang-switch").replaceChildren(languageSwitch(() => {
  delete document.getElementById("view").dataset.view;  // forms are built once per view: build them again
  flash("");
  render();
}));
loadLanguage().then(render);
