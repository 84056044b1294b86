// Ratchet dashboard: fetch /ratchet/dashboard/data with the client's key and draw one card per task.
// No libraries: the charts are plain SVG built here.
"use strict";

const fmt = (x) => "$" + Number(x).toFixed(x >= 1 ? 2 : 6);
const pct = (x) => (100 * x).toFixed(1) + "%";

// A key in the link (#key=...) signs this tab in; one that would replace another signed-in key asks first (as the
// gateway's other pages do, pages_static/common.js).
function keyFromPage() {
  const m = /(?:^#|&)key=([^&]+)/.exec(location.hash);
  if (m) {
    history.replaceState(null, "", location.pathname);
    let linked = null;
    try { linked = decodeURIComponent(m[1]); } catch { linked = null; }
    const current = sessionStorage.getItem("ratchet-key");
    if (linked && (!current || current === linked || window.confirm(
      "This link carries a different API key than the one this tab is signed in with. " +
      "Sign in with the link's key instead? (Cancel keeps your key.)"))) {
      sessionStorage.setItem("ratchet-key", linked);
    }
  }
  return sessionStorage.getItem("ratchet-key");
}

function el(tag, attrs, ...children) {
  const ns = ["svg", "rect", "line", "text", "g", "polyline", "circle"].includes(tag) ? "http://www.w3.org/2000/svg" : null;
  const node = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

// Bars per day: teacher-equivalent (grey) behind actual spend (blue); the gap is the saving.
function chart(days) {
  const W = 760, H = 180, pad = 34, n = Math.max(days.length, 1);
  const max = Math.max(1e-9, ...days.map((d) => Math.max(d.teacher_equivalent_usd, d.actual_usd)));
  const bw = Math.min(60, (W - 2 * pad) / n - 8);
  const svg = el("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "spend per day" });
  svg.append(el("line", { x1: pad, y1: H - pad, x2: W - 8, y2: H - pad, stroke: "#8a94a8" }));
  svg.append(el("text", { x: 2, y: 14, "font-size": 11, fill: "#5a6478" }, fmt(max)));
  days.forEach((d, i) => {
    const x = pad + 8 + i * ((W - 2 * pad) / n);
    const h = (v) => ((H - 2 * pad) * v) / max;
    svg.append(el("rect", { class: "bar te", x, y: H - pad - h(d.teacher_equivalent_usd), width: bw,
      height: Math.max(1, h(d.teacher_equivalent_usd)), fill: "#c9cfdb" }));
    svg.append(el("rect", { class: "bar actual", x: x + bw / 4, y: H - pad - h(d.actual_usd), width: bw / 2,
      height: Math.max(1, h(d.actual_usd)), fill: "#2a6ad8" }));
    svg.append(el("text", { x, y: H - pad + 14, "font-size": 11, fill: "#5a6478" }, d.day));
  });
  return svg;
}

function feedbackTable(rows) {
  if (!rows.length) return el("p", { class: "feedback none" }, "No feedback sent for this task yet.");
  const bad = (n, of) => (of ? `${n} of ${of} (${pct(n / of)})` : "—");
  return el("table", { class: "feedback" },
    el("tr", {}, ...["day", "items", "demonstrations", "student answers rated bad", "teacher answers rated bad"]
      .map((h) => el("th", {}, h))),
    ...rows.map((r) => el("tr", {},
      el("td", {}, r.day), el("td", {}, r.items + (r.pending ? ` (${r.pending} pending)` : "")),
      el("td", {}, r.demonstrations), el("td", {}, bad(r.student_bad, r.student_rated)),
      el("td", {}, bad(r.teacher_bad, r.teacher_rated)))));
}

function card(t) {
  const bound = t.certified_bound == null ? (t.version ? "unverified" : "—")
    : t.certified_bound.toFixed(3) + (t.bound_verified ? " ✓" : "");
  const stat = (label, value) => el("div", { class: "stat" }, label, el("b", {}, value));
  return el("section", { class: "task", "data-task": t.task },
    el("h2", {}, t.task, " ", el("span", { class: "stage " + t.stage }, t.stage)),
    el("div", { class: "stats" },
      stat("version", t.version || "teacher"),
      stat("canary", t.stage === "canary" ? t.canary_percent + "%" : "—"),
      stat("certified bound", bound),
      stat("student share", pct(t.student_share)),
      stat("requests", t.requests),
      stat("spent", fmt(t.actual_usd)),
      stat("teacher-equivalent", fmt(t.teacher_equivalent_usd)),
      stat("saved", fmt(t.saved_usd))),
    el("div", { class: "legend" }, el("span", { class: "te" }, "■ teacher-equivalent"), el("span", { class: "actual" }, "■ spent")),
    chart(t.days),
    el("h3", {}, "Feedback"),
    feedbackTable(t.feedback || []),
    el("div", { class: "evidence" }, "Evidence: ", ...t.evidence.map((e) => el("a", { href: e.href }, e.label))));
}

// The client's own limits: requests and tokens per minute, its budget and what it has spent of it.
function limits(l) {
  const stat = (label, value) => el("div", { class: "stat" }, label, el("b", {}, value));
  const stats = [
    stat("requests / min", l.rpm ?? "no limit"),
    stat("tokens / min", l.tpm ?? "no limit"),
    stat("budget", l.budget_usd == null ? "none" : `${fmt(l.budget_usd)} per ${l.budget_period}`),
  ];
  if (l.budget_usd != null) stats.push(stat("spent this " + l.budget_period, fmt(l.spent_usd)), stat("left", fmt(l.remaining_usd)));
  stats.push(stat("refused (429)", `${l.refused.rpm} rpm · ${l.refused.tpm} tpm · ${l.refused.budget} budget`));
  return el("section", { class: "limits" }, el("h2", {}, "Your limits"), el("div", { class: "stats" }, ...stats));
}

async function load() {
  const key = keyFromPage();
  const status = document.getElementById("status");
  if (!key) { status.textContent = "Enter your API key to see your tasks."; return; }
  const r = await fetch("/ratchet/dashboard/data", { headers: { Authorization: "Bearer " + key } });
  if (!r.ok) { status.textContent = (await r.json()).error?.message || r.statusText; return; }
  const data = await r.json();
  document.getElementById("who").textContent = `client ${data.client} · manifest #${data.manifest_sequence}`;
  const main = document.getElementById("tasks");
  main.replaceChildren(limits(data.limits), ...data.tasks.map(card));
  status.textContent = data.tasks.length ? "" : "No sealed traffic of yours yet.";
  document.body.dataset.loaded = "true";
}

document.getElementById("login").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem("ratchet-key", document.getElementById("key").value);
  load();
});
load();
