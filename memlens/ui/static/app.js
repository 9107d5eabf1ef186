// MemLens analytics page.  Memory text is untrusted: it is only ever set with textContent,
// and chart labels go through esc() (the page's CSP forbids inline scripts as well).
"use strict";
const TOKEN = document.querySelector('meta[name="memlens-token"]').content;
const LIMIT = { timeline: 40, heatmap: 30, graph: 15 };
const offsets = { timeline: 0, heatmap: 0, graph: 0 };
const totals = { timeline: 0, heatmap: 0, graph: 0 };
const TIER_COLORS = { wm: "#2b8a3e", stc: "#e8a317", lts: "#5c7cfa", new: "#bbb" };
let RUN = null;
// plotly.min.js (4.8 MB) loads async: the data is fetched meanwhile, charts wait for it here
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
function row(tbody, cells, onclick) {
  const tr = el("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? wrapTd(c) : el("td", c));
  if (onclick) { tr.className = "pick"; tr.addEventListener("click", onclick); }
  tbody.appendChild(tr);
  return tr;
}
function wrapTd(node) { const td = el("td"); td.appendChild(node); return td; }
function clear(sel) { const n = document.querySelector(sel); n.replaceChildren(); return n; }
function fmt(v) { return v === null || v === undefined ? "–" : (typeof v === "number" ? +v.toFixed(4) : v); }
function mark(view, state) { document.body.dataset[view] = state; }

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

async function drawTimeline() {
  mark("timeline", "loading");
  const d = await get("timeline", { run: RUN, stream: stream(), offset: offsets.timeline, limit: LIMIT.timeline });
  totals.timeline = d.total_items; pageLabel("timeline");
  const traces = [];
  await plotlyReady;
  for (const tier of ["wm", "stc", "lts"]) {
    const segs = d.segments.filter(s => s.tier === tier);
    traces.push({ type: "bar", orientation: "h", name: tier, marker: { color: TIER_COLORS[tier] },
      y: segs.map(s => `#${s.item} ${esc(short(s.item_id, 24))}`), base: segs.map(s => s.start),
      x: segs.map(s => Math.max(s.end - s.start, 0.5)), hoverinfo: "name+y" });
  }
  await Plotly.react("timeline", traces, { barmode: "overlay", height: 60 + 16 * Math.max(new Set(d.segments.map(s => s.item)).size, 5),
    margin: { l: 160, r: 10, t: 10, b: 40 }, xaxis: { title: { text: "event" } }, yaxis: { autorange: "reversed", type: "category" } },
    { displaylogo: false, responsive: true });
  document.getElementById("timeline").dataset.segments = d.segments.length;
  mark("timeline", "ready");
}

async function drawHeatmap() {
  mark("heatmap", "loading");
  const d = await get("heatmap", { run: RUN, stream: stream(), offset: offsets.heatmap, limit: LIMIT.heatmap });
  totals.heatmap = d.total_items; pageLabel("heatmap");
  document.getElementById("heatmap-note").textContent = d.items.length ? "" : "This policy records no values (not a scoring policy).";
  await plotlyReady;
  const trace = { type: "heatmap", z: d.z, x: d.bins, y: d.items.map((s, k) => `#${d.item_index[k]} ${esc(short(s, 24))}`),
    colorscale: "Viridis", hoverongaps: false };
  await Plotly.react("heatmap", d.items.length ? [trace] : [], { height: 80 + 16 * Math.max(d.items.length, 5),
    margin: { l: 160, r: 10, t: 10, b: 40 }, xaxis: { title: { text: "event" } }, yaxis: { type: "category" } },
    { displaylogo: false, responsive: true });
  const hm = document.getElementById("heatmap");
  hm.style.display = d.items.length ? "" : "none";
  hm.dataset.rows = d.z.length; hm.dataset.cols = d.z.length ? d.z[0].length : 0;
  mark("heatmap", "ready");
}

async function drawGraph() {
  mark("graph", "loading");
  const d = await get("graph", { run: RUN, stream: stream(), offset: offsets.graph, limit: LIMIT.graph });
  totals.graph = d.total_requests; pageLabel("graph");
  await plotlyReady;
  const ry = new Map(d.requests.map((r, k) => [r.request, k]));
  const iy = new Map(d.items.map((it, k) => [it.item, k * Math.max(d.requests.length, 1) / Math.max(d.items.length, 1)]));
  const edge = hit => {
    const x = [], y = [];
    for (const e of d.edges.filter(e => e.hit === hit)) { x.push(0, 1, null); y.push(ry.get(e.request), iy.get(e.item), null); }
    return { type: "scatter", mode: "lines", x, y, name: hit ? "hit" : "miss", hoverinfo: "skip",
      line: { color: hit ? "#2b8a3e" : "#c92a2a", dash: hit ? "solid" : "dot" } };
  };
  const nodes = (list, xv, ys, label, color, name) => ({ type: "scatter", mode: "markers+text", name,
    x: list.map(() => xv), y: list.map(ys), text: list.map(label), textposition: xv ? "middle right" : "middle left",
    marker: { size: 9, color }, hoverinfo: "text" });
  const derived = { type: "scatter", mode: "lines", name: "derived from", hoverinfo: "skip", x: [], y: [],
    line: { color: "#888", dash: "dash", shape: "spline" } };
  for (const e of d.derived) {  // an arc on the items' side: parent -> child
    const a = iy.get(e.parent), b = iy.get(e.child);
    derived.x.push(1, 1.35, 1, null); derived.y.push(a, (a + b) / 2, b, null);
  }
  const traces = [edge(true), edge(false), derived,
    nodes(d.requests, 0, r => ry.get(r.request), r => esc(short(r.request_id, 20)), "#333", "requests"),
    nodes(d.items, 1, it => iy.get(it.item), it => esc(short(it.item_id, 20)), "#5c7cfa", "items")];
  await Plotly.react("graph", traces, { height: 120 + 22 * Math.max(d.requests.length, 5), showlegend: true,
    margin: { l: 160, r: 160, t: 10, b: 20 }, xaxis: { visible: false, range: [-0.6, 1.6] }, yaxis: { visible: false, autorange: "reversed" } },
    { displaylogo: false, responsive: true });
  const g = document.getElementById("graph");
  g.dataset.nodes = d.requests.length + d.items.length; g.dataset.edges = d.edges.length;
  g.dataset.derived = d.derived.length;
  mark("graph", "ready");
}

async function drawRequests() {
  const d = await get("requests", { run: RUN, stream: stream(), limit: 15 });
  const tb = clear("#requests tbody");
  for (const r of d.rows) {
    row(tb, [r.request_id, r.stream, r.event, r.needs, r.misses], () => drawInfluence(r.request)).dataset.request = r.request;
  }
  mark("requests", "ready");
}

function itemCells(it) {
  const pinBtn = el("button", "pin");
  pinBtn.addEventListener("click", ev => { ev.stopPropagation(); intervene({ item_id: it.item_id, action: "pin" }); });
  return [it.item_id, short(it.text, 60), it.tier ?? "", fmt(it.value), pinBtn];
}

async function drawInfluence(request) {
  mark("influence", "loading");
  const d = await get("influence", { run: RUN, request });
  const box = clear("#influence");
  box.appendChild(el("h3", `request ${d.request_id} (event ${d.event}, stream ${d.stream})`));
  box.appendChild(el("h4", "needs"));
  const needs = el("table"); needs.id = "influence-needs"; box.appendChild(needs);
  for (const n of d.needs) {
    const tr = row(needs, [n.item_id, n.hit ? "hit" : "miss", n.tier ?? "", short(n.text, 60)]);
    tr.className = n.hit ? "hit" : "miss";
    if (!n.hit) {
      const ev = n.evicted;
      const why = ev ? `evicted at event ${ev.event} (${ev.reason}${ev.cause_item_id ? ": " + ev.cause_item_id : ""}), value ${fmt(ev.value)}, to ${ev.to_tier}; kept instead: ${ev.kept_instead.map(k => `${k.item_id} (${fmt(k.value)})`).join(", ")}`
        : "never evicted (not in working memory yet, or declined)";
      const w = row(needs, ["", "why", "", why]); w.className = "why"; w.dataset.item = n.item_id;
    }
  }
  box.appendChild(el("h4", "in context (working memory) at the request"));
  const ctx = el("table"); ctx.id = "influence-context"; box.appendChild(ctx);
  for (const it of d.context) row(ctx, itemCells(it));
  mark("influence", "ready");
}

async function intervene(body) {
  const out = document.getElementById("iv-result");
  try {
    const r = await post("feedback", { run: RUN, ...body });
    out.textContent = `added: ${r.action} after event ${r.event_index}`;
    await drawFeedback();
  } catch (e) { out.textContent = `refused: ${e.message}`; }
}

async function drawFeedback() {
  const d = await get("feedback", { run: RUN });
  const tb = clear("#feedback-rows tbody");
  for (const r of d.rows) row(tb, [r.event_index, r.item_id, r.action, fmt(r.value), r.note ?? ""]);
  mark("feedback", String(d.rows.length));
}

async function whatIf() {
  mark("whatif", "loading");
  const tb = clear("#whatif-result tbody");
  try {
    const d = await post("whatif", { run: RUN });
    for (const [k, m] of Object.entries(d.metrics)) {
      row(tb, [k, fmt(m.before), fmt(m.after), fmt(m.delta)]).dataset.metric = k;
    }
    mark("whatif", "ready");
  } catch (e) { row(tb, ["error", e.message, "", ""]); mark("whatif", "error"); }
}

async function drawDiff() {
  mark("diff", "loading");
  const b = document.getElementById("run-b").value;
  const tb = clear("#diff tbody");
  const p = document.getElementById("diff-first");
  try {
    const d = await get("diff", { a: RUN, b });
    const f = d.first_divergence;
    p.textContent = f ? `first divergence at move ${f.move}: A ${f.a.kind ?? "–"} ${f.a.item_id ?? ""} @${f.a.event ?? "–"} vs B ${f.b.kind ?? "–"} ${f.b.item_id ?? ""} @${f.b.event ?? "–"}; ${d.total} request(s) differ`
      : `identical moves; ${d.total} request(s) differ`;
    for (const r of d.rows) row(tb, [r.request_id, r.event, r.a_hits, r.b_hits]);
    mark("diff", "ready");
  } catch (e) { p.textContent = `diff refused: ${e.message}`; mark("diff", "error"); }
}

async function openRun(name) {
  RUN = name;
  for (const v of Object.keys(offsets)) offsets[v] = 0;
  status(`run ${name}`);
  const views = redraw();  // the views' queries run while the summary's does
  const s = await get("summary", { run: name });
  const sel = document.getElementById("stream");
  sel.replaceChildren(el("option", "all")); sel.firstChild.value = "";
  for (const st of s.streams) { const o = el("option", st); o.value = st; sel.appendChild(o); }
  const id = s.identity;
  document.getElementById("run-info").textContent = `${id.policy} @ ${id.budget} tokens · ${s.rows} log rows · ${s.items} items · ${s.requests} requests · hit rate ${fmt(id.hit_rate)}`;
  await views;
}

async function redraw() {
  await Promise.all([drawTimeline(), drawHeatmap(), drawGraph(), drawRequests(), drawFeedback()]);
  mark("page", "ready");
}

async function init() {
  const want = new URLSearchParams(location.search).get("run");
  const opening = want ? openRun(want) : null;  // a run named in the URL opens at once
  const d = await get("runs", {});
  const sel = document.getElementById("run"), selB = document.getElementById("run-b");
  for (const r of d.local) {
    const label = `${r.run} — ${r.policy} @ ${r.budget}`;
    const o = el("option", label); o.value = r.run; sel.appendChild(o);
    const o2 = el("option", label); o2.value = r.run; selB.appendChild(o2);
  }
  const tb = clear("#mlflow-runs tbody");
  for (const r of d.mlflow) row(tb, [r.name, r.policy, r.budget, fmt(r.hit_rate), r.run ?? "(artifacts outside root)"],
    r.run ? () => { sel.value = r.run; openRun(r.run); } : undefined);
  if (want) sel.value = want;
  if (d.local.length && selB.options.length > 1) selB.selectedIndex = 1;
  sel.addEventListener("change", () => openRun(sel.value));
  document.getElementById("stream").addEventListener("change", () => { for (const v in offsets) offsets[v] = 0; mark("page", "loading"); redraw(); });
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
  document.getElementById("whatif").addEventListener("click", whatIf);
  document.getElementById("diff-go").addEventListener("click", drawDiff);
  if (opening) await opening;
  else if (sel.value) await openRun(sel.value);
  else { status("no runs with events.parquet under the root"); mark("page", "empty"); }
}

window.addEventListener("DOMContentLoaded", () => init().catch(e => { status(`error: ${e.message}`); mark("page", "error"); }));
