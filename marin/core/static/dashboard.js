// marin dashboard: the runs table, a run's curves (live while it trains) and a comparison's overlaid curves.
// Pages are written by marin/core/dashboard.py (nbs/06a_dashboard.ipynb); this draws what needs the JSON endpoints.
// State lives in the URL's query string, so a filtered table or a comparison is a link that can be shared.
"use strict";

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const fmt = (v) => (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : esc(v));
const getJSON = async (url) => {
  const r = await fetch(url, { credentials: "same-origin" });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
};

// ---- the runs table -------------------------------------------------------------------------------------------
const FILTERS = [
  ["text", "search", "run id, experiment or step"],
  ["experiment", "select"], ["family", "select"], ["status", "select"], ["issue", "select"],
  ["since", "date"], ["until", "date"],
  ["config", "text", "field=value, e.g. model.n_layers=2"],
  ["metric", "text", "e.g. train/final_loss<3"],
];

async function runsPage() {
  const params = new URLSearchParams(location.search);
  const facets = await getJSON("/api/facets").catch(() => ({}));
  const form = document.createElement("form");
  form.id = "filter-form";
  for (const [name, type, hint] of FILTERS) {
    const cur = params.get(name) || "";
    let input;
    if (type === "select") {
      const opts = Object.entries(facets[name] || {}).map(([v, n]) => `<option value="${esc(v)}"${v === cur ? " selected" : ""}>${esc(v)} (${n})</option>`);
      input = `<select name="${name}"><option value="">any</option>${opts.join("")}</select>`;
    } else input = `<input name="${name}" type="${type}" value="${esc(cur)}" placeholder="${esc(hint || "")}">`;
    form.insertAdjacentHTML("beforeend", `<label>${name} ${input}</label> `);
  }
  form.insertAdjacentHTML("beforeend", `<button type="submit">filter</button> <button type="button" id="compare-btn">compare ticked</button>`);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const next = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) next.append(k, v);
    for (const k of ["sort", "desc"]) if (params.get(k)) next.set(k, params.get(k));
    location.search = next.toString();
  });
  document.getElementById("filters").replaceChildren(form);
  document.getElementById("compare-btn").onclick = () => {
    const ids = [...document.querySelectorAll("input.pick:checked")].map((x) => x.value);
    if (ids.length < 2 || ids.length > 8) return alert("tick 2 to 8 runs to compare");
    location.href = "/compare?runs=" + ids.map(encodeURIComponent).join(",");
  };
  const box = document.getElementById("table");
  let data;
  try {
    data = await getJSON("/api/runs" + location.search);
  } catch (e) {
    box.innerHTML = `<p class="err" id="runs-error">${esc(e.message)}</p>`;
    return;
  }
  const sortKey = params.get("sort") || "started_at";
  const desc = params.get("desc") !== "0";
  const sortLink = (key, label) => {
    const p = new URLSearchParams(location.search);
    p.set("sort", key);
    p.set("desc", key === sortKey && desc ? "0" : "1");
    return `<a href="?${esc(p.toString())}">${esc(label)}${key === sortKey ? (desc ? " ▼" : " ▲") : ""}</a>`;
  };
  const names = [...new Set(data.rows.flatMap((r) => Object.keys(r.headline)))];
  const head = ["", sortLink("status", "status"), sortLink("started_at", "started (UTC)"), sortLink("family", "kind"),
    sortLink("experiment", "experiment / step"), sortLink("issue", "issue"), sortLink("duration_s", "duration"),
    ...names.map((n) => sortLink("metric:" + n, n)), "run"];
  const rows = data.rows.map((r) => {
    const err = r.status === "FAILED" && r.error
      ? `<details class="err"><summary>error</summary><pre>${esc(r.error)}</pre><a href="/run/${encodeURIComponent(r.run_id)}#error">traceback</a></details>` : "";
    return `<tr class="run" data-status="${esc(r.status)}" data-run="${esc(r.run_id)}">` +
      `<td><input type="checkbox" class="pick" value="${esc(r.run_id)}"></td>` +
      `<td class="${esc(r.status)}">${esc(r.status)}${err}</td><td>${esc((r.started_at || "").slice(0, 19).replace("T", " "))}</td>` +
      `<td>${esc(r.family)}</td><td>${esc(r.experiment || r.step)}</td><td>${esc(r.issue)}</td>` +
      `<td>${r.duration_s == null ? "" : fmt(r.duration_s) + " s"}</td>` +
      names.map((n) => `<td>${n in r.headline ? fmt(r.headline[n]) : ""}</td>`).join("") +
      `<td><a href="/run/${encodeURIComponent(r.run_id)}">${esc(r.run_id)}</a></td></tr>`;
  });
  box.innerHTML = `<p id="count">${data.total} run(s)${data.total > data.rows.length ? `, the first ${data.rows.length} shown` : ""}</p>` +
    `<table id="runs"><thead><tr>${head.map((h) => `<th>${h}</th>`).join("")}</tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

// ---- charts ---------------------------------------------------------------------------------------------------
// One chart: `series` is [[label, [steps], [values]], ...]; steps are merged into one x axis (uPlot wants aligned data).
function chartData(series) {
  const xs = [...new Set(series.flatMap((s) => s[1]))].sort((a, b) => a - b);
  const idx = new Map(xs.map((x, i) => [x, i]));
  const ys = series.map((s) => {
    const y = new Array(xs.length).fill(null);
    s[1].forEach((x, i) => (y[idx.get(x)] = s[2][i]));
    return y;
  });
  return [xs, ...ys];
}

function countPoints(series) {
  return series.reduce((n, s) => n + s[2].filter((v) => v != null).length, 0);
}

function drawChart(box, title, series, old) {
  const data = chartData(series);
  let el = old && old.el;
  if (!el) {
    el = document.createElement("div");
    el.className = "chart";
    box.appendChild(el);
  }
  el.dataset.chart = title;
  el.dataset.series = series.length;
  el.dataset.points = countPoints(series);
  if (old && old.plot && old.labels === series.map((s) => s[0]).join("|")) {
    old.plot.setData(data);
    return old;
  }
  if (old && old.plot) old.plot.destroy();
  el.innerHTML = "";
  const opts = {
    title, width: Math.min(900, box.clientWidth || 900), height: 260,
    scales: { x: { time: false } },
    series: [{ label: "step" }, ...series.map((s, i) => ({ label: s[0], stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true, points: { show: s[1].length < 40 } }))],
  };
  const plot = new uPlot(opts, data, el);
  return { el, plot, labels: series.map((s) => s[0]).join("|") };
}

// ---- one run ---------------------------------------------------------------------------------------------------
async function runPage(runId, status) {
  const box = document.getElementById("charts");
  const drawn = {};
  const update = async () => {
    const c = await getJSON(`/api/runs/${encodeURIComponent(runId)}/curves`);
    if (Object.keys(c.charts).length) box.querySelector(".none")?.remove();  // the placeholder, once there are curves
    for (const [chart, metrics] of Object.entries(c.charts)) {
      const series = Object.entries(metrics).map(([name, [xs, ys]]) => [name, xs, ys]);
      drawn[chart] = drawChart(box, chart, series, drawn[chart]);
    }
    box.dataset.status = c.status;
    box.dataset.polls = String(Number(box.dataset.polls || 0) + 1);
    return c.status;
  };
  let st = await update().catch(() => status);
  if (st !== "RUNNING") return;
  box.insertAdjacentHTML("beforebegin", `<p id="live">live: the curves follow the run every 2 s</p>`);
  const timer = setInterval(async () => {
    st = await update().catch(() => "RUNNING");
    if (st !== "RUNNING") {
      clearInterval(timer);
      document.getElementById("live").textContent = `the run ended: ${st} (reload for its final record)`;
    }
  }, 2000);
}

// ---- a comparison ------------------------------------------------------------------------------------------------
async function comparePage(ids) {
  const box = document.getElementById("charts");
  const all = await Promise.all(ids.map((id) => getJSON(`/api/runs/${encodeURIComponent(id)}/curves`).catch(() => ({ charts: {} }))));
  const byMetric = {};
  all.forEach((c, i) => {
    for (const metrics of Object.values(c.charts))
      for (const [name, [xs, ys]] of Object.entries(metrics)) (byMetric[name] ||= []).push([ids[i], xs, ys]);
  });
  const names = Object.keys(byMetric);
  if (!names.length) return;
  box.innerHTML = "";
  const first = (n) => ["train/loss", "throughput/tokens_per_s", "throughput/mfu"].indexOf(n);
  names.sort((a, b) => ((first(a) + 100) % 100) - ((first(b) + 100) % 100) || a.localeCompare(b));
  for (const name of names) drawChart(box, name, byMetric[name]);
}
