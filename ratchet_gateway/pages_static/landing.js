// The landing page: the APIs from /openapi.json for anyone; the tasks, models and evidence from /ratchet/serving
// once the client key is entered.
"use strict";

const KEYS = { clientKey: "client key", adminKey: "admin key", anthropicKey: "client key" };

async function showApis() {
  const status = document.getElementById("apis-status");
  try {
    const doc = await getJson("/openapi.json");
    const rows = [];
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        const keys = [...new Set((op.security || []).flatMap((s) => Object.keys(s)).map((k) => KEYS[k] || k))];
        rows.push(el("tr", { "data-path": path },
          el("td", {}, method.toUpperCase()), el("td", {}, el("code", {}, path)),
          el("td", {}, op.summary || ""), el("td", {}, keys.join(" or ") || "none")));
      }
    }
    document.querySelector("#api-table tbody").replaceChildren(...rows);
    document.getElementById("api-table").hidden = false;
    status.textContent = `${rows.length} routes; the model APIs are under /v1, Ratchet's own under /ratchet.`;
  } catch (err) {
    status.textContent = "Could not read /openapi.json: " + err.message;
  }
}

function taskRow(t) {
  const canary = t.stage === "canary" ? t.canary_percent + "%" : "—";
  const serving = t.serving_stage === t.stage ? t.serving_stage : t.serving_stage + (t.pinned ? " (pinned)" : " (switched off)");
  return el("tr", { "data-task": t.task },
    el("td", {}, t.task),
    el("td", {}, el("span", { class: "stage " + t.stage }, t.stage)),
    el("td", {}, serving),
    el("td", {}, t.version || "—"),
    el("td", {}, t.live_version && t.live_version !== t.version ? t.live_version : "—"),
    el("td", {}, canary),
    el("td", {}, t.threshold == null ? "—" : Number(t.threshold).toFixed(3)));
}

// A keyed document opened in the page (a plain link would reach the gateway without the key).
function keyedLink(label, path, key) {
  const a = el("a", { href: path, class: "keyed" }, label);
  a.addEventListener("click", async (e) => {
    e.preventDefault();
    document.getElementById("viewer").hidden = false;
    document.getElementById("viewer-title").textContent = path;
    const body = document.getElementById("viewer-body");
    body.textContent = "loading…";
    try { body.textContent = JSON.stringify(await getJson(path, key), null, 2); } catch (err) { body.textContent = err.message; }
    document.body.dataset.viewed = path;
  });
  return a;
}

async function showServing(key) {
  const status = document.getElementById("tasks-status");
  if (!key) return;
  status.textContent = "loading…";
  let data;
  try { data = await getJson("/ratchet/serving", key); } catch (err) { status.textContent = err.message; return; }
  document.getElementById("who").textContent = `client ${data.client} · manifest #${data.manifest_sequence}`;
  document.querySelector("#tasks tbody").replaceChildren(...data.tasks.map(taskRow));
  document.getElementById("tasks").hidden = data.tasks.length === 0;
  status.textContent = (data.tasks.length ? "" : "No task has a release yet: the teacher answers every task. ")
    + (data.student_disabled ? "The student is switched off: the teacher answers everything." : "");
  document.getElementById("model-names").replaceChildren(
    ...data.models.flatMap((m, i) => (i ? [", ", el("code", {}, m)] : [el("code", {}, m)])));
  document.getElementById("models").hidden = false;
  const links = [
    ...data.receipt_days.map((d) => keyedLink(`receipt ${d}`, `/ratchet/receipts/${d}`, key)),
    ...data.bom_versions.map((v) => keyedLink(`BOM ${v}`, `/ratchet/boms/${encodeURIComponent(v)}`, key)),
    el("a", { href: "/ratchet/public-key" }, "public key"),
  ];
  document.getElementById("evidence-links").replaceChildren(...links);
  document.getElementById("evidence").hidden = false;
  document.body.dataset.loaded = "true";
}

signIn(showServing);
showApis();
showServing(keyFromPage());
