// MemLens analytics page.  Memory text is untrusted: it is only ever set with textContent,
// and chart labels go through esc() (the page's CSP forbids inline scripts as well).
// What the page shows is in its URL (run, view, stream, request, item, diff), so a link
// reopens the same view; elements a script may drive carry data-testid (docs/how-to/debug-in-the-page.md).
"use strict";
const TOKEN = document.querySelector('meta[name="memlens-token"]').content;
const LIMIT = { timeline: 40, heatmap: 30, graph: 15 };
const offsets = { timeline: 0, heatmap: 0, graph: 0 };
const totals = { timeline: 0, heatmap: 0, graph: 0 };
const TIER_COLORS = { wm: "#2b8a3e", stc: "#e8a317", lts: "#5c7cfa", new: "#bbb" };
const TIER_NAMES = { wm: "working memory", stc: "short-term cache", lts: "long-term store", new: "not yet written" };
const URL_KEYS = ["run", "view", "stream", "request", "item", "diff"];
const ALL_STREAMS = "*";  // the URL's stream for "all streams"
const VIEWS = { runs: "picker", timeline: "timeline-view", heatmap: "heatmap-view", graph: "graph-view",
  request: "influence-view", item: "item-view", whatif: "interventions-view", diff: "diff-view", train: "train-view" };
const CHART_CONFIG = { displaylogo: false, responsive: true, displayModeBar: false };
let RUN = null, SUMMARY = null, RUNS = [];
const S = {};  // the URL's state
// plotly.js (the cartesian bundle, 1.5 MB) loads async: the data is fetched meanwhile, charts wait for it here
const plotlyReady = new Promise(resolve => {
  if (window.Plotly) resolve();
  else document.getElementById("plotly-js").addEventListener("load", () => resolve());
});

function esc(s) {
  return String(s ?? "").replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}
function short(s, n = 40) { s = String(s ?? ""); return s.length > n ? s.slice(0, n) + "…" : s; }
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text ?? "");
  if (cls) e.className = cls;
  return e;
}
function button(text, testid, onclick) {
  const b = el("button", text); b.type = "button";
  if (testid) b.dataset.testid = testid;
  b.addEventListener("click", ev => { ev.stopPropagation(); onclick(ev); });
  return b;
}
function row(tbody, cells) {
  const tr = el("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? wrapTd(c) : el("td", c));
  tbody.appendChild(tr);
  return tr;
}
function wrapTd(node) { const td = el("td"); td.appendChild(node); return td; }
function clear(sel) { const n = document.querySelector(sel); n.replaceChildren(); return n; }
function fmt(v) { return v === null || v === undefined ? "–" : (typeof v === "number" ? +v.toFixed(4) : v); }
function mark(view, state) { document.body.dataset[view] = state; }
function tierName(t) { return TIER_NAMES[t] ?? (t || "–"); }
function naturalKey(s) { return String(s).split(/(\d+)/).map(p => /^\d+$/.test(p) ? p.padStart(20, "0") : p).join(""); }
function naturalSort(list) { return [...list].sort((a, b) => naturalKey(a) < naturalKey(b) ? -1 : naturalKey(a) > naturalKey(b) ? 1 : 0); }

async function get(path, params) {
  const q = new URLSearchParams(params);
  const r = await fetch(`/api/${path}?${q}`);
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}
async function post(path, body) {
  const r = await fetch(`/api/${path}`, {
    method: "POST", headers: { "Content-Type": "application/json", "X-MemLens-Token": TOKEN },
    body: JSON.stringify(body) });
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}
function status(text) { document.getElementById("status").textContent = text; }
function stream() { return document.getElementById("stream").value; }
function pageLabel(view) {
  const n = document.querySelector(`.pager[data-view="${view}"] .page`);
  const lo = offsets[view], hi = Math.min(lo + LIMIT[view], totals[view]);
  n.textContent = `${totals[view] ? lo + 1 : 0}–${hi} of ${totals[view]}`;
}

// ---------------------------------------------------------------- the URL
function readUrl() {
  const q = new URLSearchParams(location.search);
  return Object.fromEntries(URL_KEYS.map(k => [k, q.get(k)]));
}
function linkFor(patch) {
  const next = { ...S, ...patch }, q = new URLSearchParams();
  for (const k of URL_KEYS) if (next[k] !== null && next[k] !== undefined && next[k] !== "") q.set(k, next[k]);
  return "?" + q;
}
function setUrl(patch, push = true) {
  Object.assign(S, patch);
  const href = linkFor({});
  if (href !== location.search) history[push ? "pushState" : "replaceState"](null, "", href);
}
function linkError(text) {
  const p = document.getElementById("link-error");
  if (p.hidden) p.replaceChildren();
  p.appendChild(el("span", text + " ")); p.hidden = false; mark("link", "error");
}
function showView(view, focus = true) {
  const id = VIEWS[view];
  if (!id) { linkError(`this link names view "${view}", which the page does not have (views: ${Object.keys(VIEWS).join(", ")})`); return; }
  for (const a of document.querySelectorAll("#nav a")) a.toggleAttribute("aria-current", a.dataset.view === view);
  const section = document.getElementById(id);
  section.scrollIntoView({ block: "start" });
  if (focus) { const target = section.querySelector("[tabindex='-1']") || section; target.setAttribute("tabindex", "-1"); target.focus({ preventScroll: true }); }
}
function drawNav() {
  const nav = clear("#nav");
  for (const view of Object.keys(VIEWS)) {
    const a = el("a", view); a.href = linkFor({ view }); a.dataset.view = view; a.dataset.testid = `nav-${view}`;
    a.addEventListener("click", ev => { ev.preventDefault(); setUrl({ view }); showView(view); drawNav(); });
    nav.appendChild(a);
  }
}

// ---------------------------------------------------------------- charts
async function drawTimeline() {
  mark("timeline", "loading");
  const s = stream();
  const d = await get("timeline", { run: RUN, stream: s, offset: offsets.timeline, limit: LIMIT.timeline });
  totals.timeline = d.total_items; pageLabel("timeline");
  const traces = [];
  await plotlyReady;
  const span = d.segments.length ? Math.max(...d.segments.map(g => s ? g.t_end : g.end)) - Math.min(...d.segments.map(g => s ? g.t_start : g.start)) : 1;
  for (const tier of ["wm", "stc", "lts"]) {
    const segs = d.segments.filter(g => g.tier === tier);
    traces.push({ type: "bar", orientation: "h", name: tierName(tier), marker: { color: TIER_COLORS[tier] },
      y: segs.map(g => `#${g.item} ${esc(short(g.item_id, 24))}`),
      base: segs.map(g => s ? g.t_start : g.start),
      x: segs.map(g => s ? Math.max(g.t_end - g.t_start, span / 200 || 0.5) : Math.max(g.end - g.start, 0.5)),
      customdata: segs.map(g => `${esc(tierName(tier))}: t ${fmt(g.t_start)}–${fmt(g.t_end)}, event ${g.start}–${g.end} (in its stream ${g.local_start}–${g.local_end})`),
      hovertemplate: "%{y}<br>%{customdata}<extra></extra>" });
  }
  const n = new Set(d.segments.map(g => g.item)).size;
  await Plotly.react("timeline", traces, { barmode: "overlay", height: 80 + 16 * Math.max(n, 5), showlegend: true,
    legend: { title: { text: "tier" }, orientation: "h", y: 1.02, yanchor: "bottom" },
    margin: { l: 160, r: 10, t: 30, b: 40 }, xaxis: { title: { text: s ? `trace time (stream ${esc(s)})` : "event index (all streams)" } },
    yaxis: { autorange: "reversed", type: "category", title: { text: "item" } } }, CHART_CONFIG);
  const t = document.getElementById("timeline");
  t.dataset.segments = d.segments.length;
  t.setAttribute("aria-label", `Timeline of ${n} items ${s ? "of stream " + s : "of all streams"} across working memory, short-term cache and long-term store`);
  mark("timeline", "ready");
}

async function drawHeatmap() {
  mark("heatmap", "loading");
  const s = stream();
  const d = await get("heatmap", { run: RUN, stream: s, offset: offsets.heatmap, limit: LIMIT.heatmap });
  totals.heatmap = d.total_items; pageLabel("heatmap");
  document.getElementById("heatmap-note").textContent = d.items.length ? "" : "This policy records no values (not a scoring policy).";
  await plotlyReady;
  const local = d.axis === "local";
  const x = local ? d.bins_t.map((t, k) => t ?? d.bins[k]) : d.bins;
  const trace = { type: "heatmap", z: d.z, x, y: d.items.map((it, k) => `#${d.item_index[k]} ${esc(short(it, 24))}`),
    colorscale: "Viridis", hoverongaps: false, colorbar: { title: { text: "value" } },
    customdata: d.z.map(r => r.map((_v, k) => `${local ? "stream event" : "event"} ${Math.round(d.bins[k])}`)),
    hovertemplate: "%{y}<br>%{customdata}, t %{x}<br>value %{z}<extra></extra>" };
  await Plotly.react("heatmap", d.items.length ? [trace] : [], { height: 80 + 16 * Math.max(d.items.length, 5),
    margin: { l: 160, r: 10, t: 10, b: 40 }, xaxis: { title: { text: local ? `trace time (stream ${esc(s)})` : "event index (all streams)" } },
    yaxis: { type: "category", title: { text: "item" } } }, CHART_CONFIG);
  const hm = document.getElementById("heatmap");
  hm.style.display = d.items.length ? "" : "none";
  hm.dataset.rows = d.z.length; hm.dataset.cols = d.z.length ? d.z[0].length : 0;
  hm.setAttribute("aria-label", `Value of ${d.items.length} items over ${local ? "the trace time of stream " + s : "the event index"}, colour: value`);
  mark("heatmap", "ready");
}

function graphTraces(d) {
  const streams = naturalSort(new Set([...d.requests.map(r => r.stream), ...d.items.map(i => i.stream)]));
  const sy = new Map(streams.map((s, k) => [s, k]));
  const rpos = new Map(d.requests.map(r => [r.request, [r.t, sy.get(r.stream) - 0.2]]));
  const ipos = new Map(d.items.map(i => [i.item, [i.t, sy.get(i.stream) + 0.2]]));
  const lines = (pairs, name, line) => {
    const x = [], y = [];
    for (const [a, b] of pairs) if (a && b) { x.push(a[0], b[0], null); y.push(a[1], b[1], null); }
    return { type: "scatter", mode: "lines", x, y, name, hoverinfo: "skip", line };
  };
  const need = hit => lines(d.edges.filter(e => e.hit === hit).map(e => [rpos.get(e.request), ipos.get(e.item)]),
    hit ? "need: hit" : "need: miss", { color: hit ? "#2b8a3e" : "#c92a2a", dash: hit ? "solid" : "dot" });
  const derived = lines(d.derived.map(e => [ipos.get(e.parent), ipos.get(e.child)]), "derived from", { color: "#888", dash: "dash" });
  const items = tier => {
    const list = d.items.filter(i => (i.tier ?? "none") === tier);
    const name = tier === "none" ? "item (not needed on this page)" : `item (${tierName(tier)} when needed)`;
    return { type: "scatter", mode: "markers", name, marker: { size: 10, color: TIER_COLORS[tier] ?? "#bbb", symbol: tier === "none" ? "circle-open" : "circle" },
      x: list.map(i => ipos.get(i.item)[0]), y: list.map(i => ipos.get(i.item)[1]),
      text: list.map(i => `${esc(short(i.item_id, 30))} (written at event ${i.event})`), customdata: list.map(i => ["item", i.item_id]),
      hovertemplate: "%{text}<extra></extra>" };
  };
  const reqs = { type: "scatter", mode: "markers", name: "request", marker: { size: 10, symbol: "diamond", color: "#333" },
    x: d.requests.map(r => r.t), y: d.requests.map(r => rpos.get(r.request)[1]),
    text: d.requests.map(r => `${esc(short(r.request_id, 30))} (event ${r.event})`), customdata: d.requests.map(r => ["request", r.request]),
    hovertemplate: "%{text}<extra></extra>" };
  const tiers = ["wm", "stc", "lts", "new", "none"].filter(t => d.items.some(i => (i.tier ?? "none") === t));
  return { traces: [need(true), need(false), derived, reqs, ...tiers.map(items)], streams };
}

async function drawGraph() {
  mark("graph", "loading");
  const d = await get("graph", { run: RUN, stream: stream(), offset: offsets.graph, limit: LIMIT.graph });
  totals.graph = d.total_requests; pageLabel("graph");
  await plotlyReady;
  const { traces, streams } = graphTraces(d);
  const g = document.getElementById("graph");
  await Plotly.react("graph", traces, { height: 160 + 60 * Math.max(streams.length, 1), showlegend: true,
    legend: { orientation: "h", y: 1.02, yanchor: "bottom" }, margin: { l: 120, r: 20, t: 40, b: 40 },
    xaxis: { title: { text: "trace time" } },
    yaxis: { title: { text: "stream" }, tickvals: streams.map((_s, k) => k), ticktext: streams.map(s => esc(s)), autorange: "reversed" } }, CHART_CONFIG);
  if (!g.dataset.bound) {
    g.dataset.bound = "1";
    g.on("plotly_click", ev => {
      const c = ev.points[0]?.customdata;
      if (c && c[0] === "request") openRequest(c[1]);
      else if (c && c[0] === "item") openItem(c[1]);
    });
  }
  g.dataset.nodes = d.requests.length + d.items.length; g.dataset.edges = d.edges.length;
  g.dataset.derived = d.derived.length;
  g.setAttribute("aria-label", `Memory graph: ${d.requests.length} requests and ${d.items.length} items on a time axis by stream, ${d.edges.length} need edges, ${d.derived.length} derived-from edges`);
  mark("graph", "ready");
}

// ---------------------------------------------------------------- requests and causes
async function drawRequests() {
  const d = await get("requests", { run: RUN, stream: stream(), limit: 15 });
  const tb = clear("#requests tbody");
  for (const r of d.rows) {
    const open = el("a", r.request_id); open.href = linkFor({ view: "request", request: r.request });
    open.addEventListener("click", ev => { ev.preventDefault(); ev.stopPropagation(); openRequest(r.request); });
    const tr = row(tb, [open, r.stream, r.event, r.needs, r.misses]);
    tr.dataset.request = r.request; tr.dataset.testid = "request-row"; tr.className = "pick";
    tr.addEventListener("click", () => openRequest(r.request));
  }
  mark("requests", "ready");
}

function actions(itemId, event) {
  // pin, rescore (to the value typed) and annotate (the note typed) the item a need or cause names
  const box = el("span", undefined, "actions");
  const value = el("input"); value.type = "number"; value.min = "0"; value.max = "1"; value.step = "0.05"; value.value = "0.9";
  value.setAttribute("aria-label", `value for ${itemId}`); value.dataset.testid = "action-value";
  const note = el("input"); note.setAttribute("aria-label", `note on ${itemId}`); note.placeholder = "note"; note.dataset.testid = "action-note";
  box.append(button("pin", "action-pin", () => intervene({ item_id: itemId, action: "pin" })),
    button("rescore", "action-rescore", () => intervene({ item_id: itemId, action: "rescore", value: Number(value.value) })), value,
    button("annotate", "action-annotate", () => intervene({ item_id: itemId, action: "annotate", note: note.value || null,
      value: note.value ? null : Number(value.value) })), note);
  box.dataset.item = itemId;
  if (event !== undefined) box.dataset.event = event;
  return box;
}

function itemLink(itemId) {
  const a = el("a", itemId); a.href = linkFor({ view: "item", item: itemId });
  a.addEventListener("click", ev => { ev.preventDefault(); openItem(itemId); });
  return a;
}

function drawChain(n) {
  const ol = el("ol", undefined, "chain"); ol.dataset.item = n.item_id;
  for (const step of n.chain || []) {
    const li = el("li"); li.dataset.testid = "cause"; li.dataset.step = step.step; li.dataset.item = step.item_id;
    li.append(el("span", `${step.text}${step.t !== null && step.t !== undefined ? ` (t ${fmt(step.t)})` : ""} `), itemLink(step.item_id), " ", actions(step.item_id, step.event));
    ol.appendChild(li);
  }
  return ol;
}

let drawing = { influence: 0, item: 0 };
async function drawInfluence(request) {
  mark("influence", "loading");
  const mine = ++drawing.influence;
  let d, err;
  try { d = await get("influence", { run: RUN, request }); } catch (e) { err = e; }
  if (mine !== drawing.influence) return;  // a later pick is being drawn
  const box = clear("#influence");
  if (err) { const e = err; box.appendChild(el("p", `request ${request}: ${e.message}`, "error")); linkError(`this link names request ${request}: ${e.message}`); mark("influence", "error"); return; }
  box.appendChild(el("h3", `request ${d.request_id} (event ${d.event}, t ${fmt(d.t)}, stream ${d.stream})`));
  box.appendChild(el("h4", "needs"));
  const needs = el("table"); needs.id = "influence-needs"; box.appendChild(needs);
  for (const n of d.needs) {
    const tr = row(needs, [itemLink(n.item_id), n.hit ? "hit" : "miss", tierName(n.tier), short(n.text, 60)]);
    tr.className = n.hit ? "hit" : "miss"; tr.dataset.testid = n.hit ? "need-hit" : "need-miss"; tr.dataset.item = n.item_id;
    if (!n.hit) {
      tr.appendChild(wrapTd(actions(n.item_id)));
      const ev = n.evicted;
      const why = ev ? `evicted at event ${ev.event} (${ev.reason}${ev.cause_item_id ? ": " + ev.cause_item_id : ""}), value ${fmt(ev.value)}, to ${tierName(ev.to_tier)}; kept instead: ${ev.kept_instead.map(k => `${k.item_id} (${fmt(k.value)})`).join(", ")}`
        : "never evicted (not in working memory yet, or declined)";
      const w = row(needs, ["", "why", "", why]); w.className = "why"; w.dataset.item = n.item_id;
      const c = el("tr", undefined, "causes"); const td = el("td"); td.colSpan = 5;
      td.append(el("strong", "chain of causes: "), drawChain(n)); c.appendChild(td); c.dataset.item = n.item_id; needs.appendChild(c);
    }
  }
  box.appendChild(el("h4", "in context (working memory) at the request"));
  const ctx = el("table"); ctx.id = "influence-context"; box.appendChild(ctx);
  for (const it of d.context) row(ctx, [it.item_id, short(it.text, 60), tierName(it.tier), fmt(it.value), actions(it.item_id)]);
  mark("influence", "ready");
}

async function openRequest(request, push = true) {
  setUrl({ view: "request", request }, push); drawNav();
  showView("request", false);
  await drawInfluence(request);
  document.getElementById("influence").focus({ preventScroll: true });
}

async function drawItem(itemId) {
  mark("item", "loading");
  const mine = ++drawing.item;
  let d, err;
  try { d = await get("item", { run: RUN, item: itemId }); } catch (e) { err = e; }
  if (mine !== drawing.item) return;
  const box = clear("#item");
  if (err) { const e = err; box.appendChild(el("p", `item ${itemId}: ${e.message}`, "error")); linkError(`this link names item ${itemId}: ${e.message}`); mark("item", "error"); return; }
  box.appendChild(el("h3", `item ${d.item_id} (stream ${d.stream}, written at event ${d.event}, t ${fmt(d.t)}, ${d.tokens} tokens, ${d.item_type})`));
  box.appendChild(el("p", short(d.text, 400)));
  if (d.derived_from.length) box.appendChild(el("p", `derived from: ${d.derived_from.join(", ")}`));
  box.appendChild(actions(d.item_id));
  const moves = el("table"); moves.id = "item-moves"; box.appendChild(moves);
  for (const m of d.moves) row(moves, [`event ${m.event}`, `t ${fmt(m.t)}`, m.kind, `${tierName(m.tier_before)} → ${tierName(m.tier_after)}`, m.reason + (m.cause_item_id ? `: ${m.cause_item_id}` : "")]);
  const needs = el("table"); needs.id = "item-needs"; box.appendChild(needs);
  for (const n of d.needs) {
    const a = el("a", n.request_id); a.href = linkFor({ view: "request", request: n.request });
    a.addEventListener("click", ev => { ev.preventDefault(); openRequest(n.request); });
    row(needs, [a, `event ${n.event}`, n.kind, tierName(n.tier)]).className = n.kind;
  }
  mark("item", "ready");
}

async function openItem(itemId, push = true) {
  setUrl({ view: "item", item: itemId }, push); drawNav();
  showView("item", false);
  await drawItem(itemId);
  document.getElementById("item").focus({ preventScroll: true });
}

// ---------------------------------------------------------------- interventions, what-if
async function intervene(body) {
  const out = document.getElementById("iv-result");
  try {
    const r = await post("feedback", { run: RUN, ...body });
    out.textContent = r.existing ? `already there: ${r.action} of ${body.item_id} (intervention ${r.id}); nothing added`
      : `added: ${r.action} of ${body.item_id} after event ${r.event_index} (intervention ${r.id})`;
    await drawFeedback();
  } catch (e) { out.textContent = `refused: ${e.message}`; }
}

async function undo(id) {
  const out = document.getElementById("iv-result");
  try {
    const r = await post("undo", { run: RUN, ...(id === undefined ? {} : { id }) });
    out.textContent = `undone: intervention ${r.id}`;
    await drawFeedback();
  } catch (e) { out.textContent = `undo refused: ${e.message}`; }
}

async function drawFeedback() {
  const d = await get("feedback", { run: RUN });
  const tb = clear("#feedback-rows tbody");
  for (const r of d.rows) {
    const tr = row(tb, [r.event_index, r.item_id, r.action, fmt(r.value), r.note ?? "", r.mine ? "this session" : (r.author ?? "other"),
      button("undo", "action-undo", () => undo(r.id))]);
    tr.dataset.id = r.id; tr.dataset.testid = "intervention";
  }
  mark("feedback", String(d.rows.length));
}

function intervalText(iv) {
  if (!iv) return "none (not decomposable over streams)";
  if (iv.low === undefined || iv.low === null) {
    const few = (iv.note || "").startsWith("n<");
    return few ? `none: ${iv.n_streams} stream(s), an interval needs at least ${iv.note.slice(2)}` : `none (${iv.note})`;
  }
  const star = iv.low > 0 || iv.high < 0 ? " (excludes 0)" : "";
  return `[${fmt(iv.low)}, ${fmt(iv.high)}] over ${iv.n_streams} streams${star}`;
}

async function whatIf() {
  mark("whatif", "loading");
  const tb = clear("#whatif-result tbody"), list = clear("#whatif-changed");
  const scope = document.getElementById("whatif-scope").value;
  const summary = document.getElementById("whatif-summary");
  summary.textContent = "replaying…";
  try {
    const d = await post("whatif", { run: RUN, scope });
    const who = scope === "session" ? "this session's" : "every person";
    summary.textContent = `${d.interventions} intervention(s) applied (${who}); ${d.changed_total} request(s) changed: ${d.gained} gained, ${d.lost} lost`;
    for (const [k, m] of Object.entries(d.metrics)) {
      row(tb, [k, fmt(m.before), fmt(m.after), fmt(m.delta), intervalText(m.interval)]).dataset.metric = k;
    }
    for (const c of d.changed) {
      const li = el("li"); li.dataset.testid = "whatif-changed"; li.dataset.request = c.request; li.dataset.change = c.gained ? "gained" : "lost";
      const a = el("a", c.request_id); a.href = linkFor({ view: "request", request: c.request, stream: c.stream });
      a.addEventListener("click", ev => { ev.preventDefault(); openRequest(c.request); });
      li.append(el("span", c.gained ? "gained (now every need hits): " : "lost (a need now misses): ", c.gained ? "hit" : "miss"), a,
        el("span", ` — stream ${c.stream}, event ${c.event}, t ${fmt(c.t)}`));
      list.appendChild(li);
    }
    if (d.changed_total > d.changed.length) list.appendChild(el("li", `… and ${d.changed_total - d.changed.length} more`));
    mark("whatif", "ready");
  } catch (e) { summary.textContent = `what-if refused: ${e.message}`; mark("whatif", "error"); }
}

// ---------------------------------------------------------------- diff
function fillDiffTargets() {
  const selB = document.getElementById("run-b");
  const mine = RUNS.find(r => r.run === RUN);
  const same = RUNS.filter(r => r.run !== RUN && mine && r.trace_sha256 === mine.trace_sha256);
  selB.replaceChildren();
  for (const r of same) { const o = el("option", `${r.run} — ${r.policy} @ ${r.budget}`); o.value = r.run; selB.appendChild(o); }
  if (!same.length) { const o = el("option", "no other run of this trace"); o.value = ""; o.disabled = true; selB.appendChild(o); }
  document.getElementById("diff-go").disabled = !same.length;
  if (S.diff) {
    if (same.some(r => r.run === S.diff)) selB.value = S.diff;
    else linkError(`this link names diff target "${S.diff}", which is not another run of this run's trace`);
  }
}

async function drawDiff() {
  mark("diff", "loading");
  const b = document.getElementById("run-b").value;
  setUrl({ diff: b, view: "diff" }); drawNav();
  const tb = clear("#diff tbody");
  const p = document.getElementById("diff-first");
  try {
    const d = await get("diff", { a: RUN, b });
    const f = d.first_divergence;
    p.textContent = f ? `first divergence at move ${f.move}: A ${f.a.kind ?? "–"} ${f.a.item_id ?? ""} @${f.a.event ?? "–"} vs B ${f.b.kind ?? "–"} ${f.b.item_id ?? ""} @${f.b.event ?? "–"}; ${d.total} request(s) differ`
      : `identical moves; ${d.total} request(s) differ`;
    for (const r of d.rows) {
      const tr = row(tb, [r.request_id, r.event, r.a_hits, r.b_hits]); tr.dataset.request = r.request;
    }
    await plotlyReady;
    const x = d.over_time.map(g => (g.start + g.end) / 2), w = d.over_time.map(g => g.end - g.start);
    await Plotly.react("diff-chart", [
      { type: "bar", name: `only A (${esc(RUN)}) hits`, x, width: w, y: d.over_time.map(g => g.a_only), marker: { color: "#2b8a3e" } },
      { type: "bar", name: `only B (${esc(b)}) hits`, x, width: w, y: d.over_time.map(g => -g.b_only), marker: { color: "#c92a2a" } }],
      { barmode: "relative", height: 240, showlegend: true, legend: { orientation: "h", y: 1.05, yanchor: "bottom" }, margin: { l: 60, r: 10, t: 30, b: 40 },
        xaxis: { title: { text: "event index" } }, yaxis: { title: { text: "requests (B below 0)" } } }, CHART_CONFIG);
    document.getElementById("diff-chart").setAttribute("aria-label", `Requests whose outcome differs between ${RUN} and ${b} over the event index: ${d.total} in all`);
    mark("diff", "ready");
  } catch (e) { p.textContent = `diff refused: ${e.message}`; mark("diff", "error"); }
}

// ---------------------------------------------------------------- train
function ivCell(iv) {
  if (!iv || iv.estimate === null || iv.estimate === undefined) return "–";
  return iv.low === undefined || iv.low === null ? `${fmt(iv.estimate)} (${iv.note ?? "no interval"})` : `${fmt(iv.estimate)} [${fmt(iv.low)}, ${fmt(iv.high)}]`;
}

async function trainRun() {
  mark("train", "running");
  const list = clear("#train-progress"), tb = clear("#train-result tbody");
  const summary = document.getElementById("train-summary");
  summary.textContent = "";
  try {
    let job = await post("train", { run: RUN, with_simulated: document.getElementById("train-simulated").checked });
    while (job.state === "running") {
      list.replaceChildren(...job.progress.map(t => el("li", t)));
      await new Promise(r => setTimeout(r, 500));
      job = await get("train", { job: job.id });
    }
    list.replaceChildren(...job.progress.map(t => el("li", t)));
    if (job.state !== "done") throw new Error(job.error);
    const r = job.result;
    summary.textContent = `new model from ${r.n_feedback} feedback rows: ${r.model}; held-out streams: ${r.test_streams.join(", ")}; to use it: ${r.use}`;
    for (const block of r.test) {
      for (const [name, iv] of Object.entries(block.hit_rate)) {
        const tr = row(tb, [block.budget, name === "new" ? "new model" : name === "default" ? "bundled model (old)" : name, ivCell(iv),
          name === "new" ? "" : ivCell(block.new_minus[name])]);
        tr.dataset.policy = name;
      }
    }
    mark("train", "done");
  } catch (e) { summary.textContent = `training refused: ${e.message}`; mark("train", "error"); }
}

// ---------------------------------------------------------------- runs and the URL state
async function openRun(name, wanted = {}) {
  RUN = name;
  for (const v of Object.keys(offsets)) offsets[v] = 0;
  status(`run ${name}`);
  const s = await get("summary", { run: name });
  SUMMARY = s;
  const streams = naturalSort(s.streams);
  const sel = document.getElementById("stream");
  sel.replaceChildren(el("option", "all streams")); sel.firstChild.value = "";
  for (const st of streams) { const o = el("option", st); o.value = st; sel.appendChild(o); }
  // "*" in a link: all streams (the filter's first entry); none: the first stream
  let pick = wanted.stream === ALL_STREAMS ? "" : (wanted.stream ?? streams[0] ?? "");
  if (wanted.stream && wanted.stream !== ALL_STREAMS && !streams.includes(wanted.stream)) {
    linkError(`this link names stream "${wanted.stream}", which run ${name} does not have; showing ${streams[0]}`);
    pick = streams[0] ?? "";
  }
  sel.value = pick;
  setUrl({ run: name, stream: pick || ALL_STREAMS }, false);
  const id = s.identity;
  document.getElementById("run-info").textContent = `${id.policy} @ ${id.budget} tokens · ${s.rows} log rows · ${s.items} items · ${s.requests} requests · ${streams.length} stream(s) · hit rate ${fmt(id.hit_rate)}`;
  fillDiffTargets();
  drawNav();
  await redraw();
}

async function redraw() {
  await Promise.all([drawTimeline(), drawHeatmap(), drawGraph(), drawRequests(), drawFeedback()]);
  mark("page", "ready");
}

async function applyUrl(want, push = false) {
  Object.assign(S, want);
  document.getElementById("link-error").hidden = true;
  let run = want.run;
  if (run && !RUNS.some(r => r.run === run)) {
    linkError(`this link names run "${run}", which is not a run with an event log under the root; showing the newest run`);
    run = null;
  }
  run = run || RUNS[0]?.run;
  if (!run) { status("no runs with events.parquet under the root"); mark("page", "empty"); return; }
  document.getElementById("run").value = run;
  mark("page", "loading");
  await openRun(run, want);
  if (want.view) showView(want.view);
  if (want.request !== null && want.request !== undefined) {
    if (!/^\d+$/.test(want.request)) linkError(`this link names request "${want.request}": a request index (a whole number) is needed`);
    else await openRequest(Number(want.request), push);
  }
  if (want.item) await openItem(want.item, push);
  if (want.diff && want.view === "diff" && document.getElementById("run-b").value === want.diff) await drawDiff();
  if (want.view && !want.request && !want.item) showView(want.view);
  mark("url", "applied");
}

async function init() {
  const d = await get("runs", {});
  RUNS = d.local;
  const sel = document.getElementById("run");
  for (const r of d.local) {
    const o = el("option", `${r.run} — ${r.trace || "?"} · ${r.policy} @ ${r.budget}`); o.value = r.run; sel.appendChild(o);
  }
  const tb = clear("#mlflow-runs tbody");
  for (const r of d.mlflow) {
    const open = r.run ? el("a", r.run) : el("span", "(its artifacts are not under the page's root)");
    if (r.run) { open.href = linkFor({ run: r.run, request: null, item: null, diff: null }); open.addEventListener("click", ev => { ev.preventDefault(); sel.value = r.run; applyUrl({ run: r.run }); }); }
    row(tb, [r.name, r.trace ?? "–", r.policy, r.budget, fmt(r.hit_rate), open]);
  }
  sel.addEventListener("change", () => { setUrl({ run: sel.value, stream: null, request: null, item: null, diff: null }); applyUrl({ ...S }); });
  document.getElementById("stream").addEventListener("change", () => {
    for (const v in offsets) offsets[v] = 0; setUrl({ stream: stream() || ALL_STREAMS }); mark("page", "loading"); redraw(); });
  for (const pager of document.querySelectorAll(".pager")) {
    const view = pager.dataset.view;
    const draw = { timeline: drawTimeline, heatmap: drawHeatmap, graph: drawGraph }[view];
    pager.querySelector(".prev").addEventListener("click", () => { offsets[view] = Math.max(0, offsets[view] - LIMIT[view]); draw(); });
    pager.querySelector(".next").addEventListener("click", () => { if (offsets[view] + LIMIT[view] < totals[view]) { offsets[view] += LIMIT[view]; draw(); } });
  }
  document.getElementById("intervene").addEventListener("submit", ev => {
    ev.preventDefault();
    const v = document.getElementById("iv-value").value, e = document.getElementById("iv-event").value;
    const note = document.getElementById("iv-note").value;
    intervene({ item_id: document.getElementById("iv-item").value, action: document.getElementById("iv-action").value,
      value: v === "" ? null : Number(v), note: note || null, event: e === "" ? null : Number(e) });
  });
  document.getElementById("undo").addEventListener("click", () => undo());
  document.getElementById("whatif").addEventListener("click", whatIf);
  document.getElementById("diff-go").addEventListener("click", drawDiff);
  document.getElementById("train").addEventListener("click", trainRun);
  window.addEventListener("popstate", () => applyUrl(readUrl()));
  await applyUrl(readUrl());
}

window.addEventListener("DOMContentLoaded", () => init().catch(e => { status(`error: ${e.message}`); linkError(`the page could not open: ${e.message}`); mark("page", "error"); }));
