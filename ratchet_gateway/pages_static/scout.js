// Scout's team in the browser: planner -> one researcher per subject (at once) -> writer -> the report. The same
// loop as ratchet_agents/scout/team.py (its messages, its fallbacks, its report), as an outside client of this
// gateway with the user's key. What each agent sends (system prompt, answer schema, tool, corpus) comes from
// /ratchet/scout/team, the objects the Python team sends too.
"use strict";

let team = null;
let key = null;
let running = false;

// Python's repr() of a str, for the "not found" note (team.search_sources writes {query!r}).
function pyRepr(s) {
  const q = s.includes("'") && !s.includes('"') ? '"' : "'";
  const body = s.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/\r/g, "\\r").replace(/\t/g, "\\t")
    .replace(/[\x00-\x1f\x7f]/g, (c) => "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0"));
  return q + (q === "'" ? body.replace(/'/g, "\\'") : body) + q;
}

function searchSources(query) {
  const hit = team.corpus[query.trim().toLowerCase()];
  return hit || `No source in the corpus mentions ${pyRepr(query)}.`;
}

// team._json_object: a JSON object, or the first {...} inside prose, else {}.
function jsonObject(text) {
  if (!text) return {};
  let value;
  try { value = JSON.parse(text); } catch {
    const m = /\{[\s\S]*\}/.exec(text);
    try { value = m ? JSON.parse(m[0]) : {}; } catch { value = {}; }
  }
  return value && typeof value === "object" && !Array.isArray(value) ? value : {};
}

// Python's truth: an empty list, object or string is false (team.py's `x or default`).
const nonEmpty = (v) => (Array.isArray(v) ? v.length > 0 : v && typeof v === "object" ? Object.keys(v).length > 0 : Boolean(v));

// One step on the page: what the agent is doing, then who served it and what it answered.
function step(agent, title) {
  const meta = el("div", { class: "meta" }, el("span", {}, "task " + agent.task), el("span", { class: "served" }, "working…"));
  const node = el("li", { class: "step", "data-agent": title.split(":")[0], "data-state": "working" }, el("h3", {}, title), meta);
  document.getElementById("steps").append(node);
  return {
    done(call, answer) {
      meta.replaceChildren(el("span", {}, "task " + call.task),
        el("span", { class: "served" }, "served by " + call.served_by + (call.served_by === "student" ? " " + call.version : "")),
        el("span", { class: "rid" }, "request " + call.request_id));
      node.append(el("pre", {}, answer));
      node.dataset.state = "done";
    },
    failed(message) {
      meta.append(el("span", {}, message));
      node.dataset.state = "failed";
    },
  };
}

const calls = [];

async function chat(agent, messages, fields) {
  const r = await fetch("/v1/chat/completions", {
    method: "POST",
    headers: { Authorization: "Bearer " + key, "Content-Type": "application/json", "X-Ratchet-Task": agent.task },
    body: JSON.stringify({ model: team.model, messages, ...fields }),
  });
  if (!r.ok) throw new Error(await errorOf(r));
  const call = {
    task: agent.task,
    served_by: r.headers.get("x-ratchet-served-by") || "",
    version: r.headers.get("x-ratchet-version") || "",
    request_id: r.headers.get("x-ratchet-request-id") || "",
  };
  calls.push(call);
  return { message: (await r.json()).choices[0].message, call };
}

async function run(agent, title, messages, fields, read) {
  const s = step(agent, title);
  try {
    const { message, call } = await chat(agent, messages, fields);
    const [value, shown] = read(message);
    s.done(call, shown);
    return value;
  } catch (err) {
    s.failed(err.message);
    throw err;
  }
}

function plan(question) {
  const p = team.planner;
  return run(p, "planner", [
    { role: "system", content: p.system },
    { role: "user", content: `Research question: ${question}` },
  ], { response_format: p.response_format }, (message) => {
    const answer = jsonObject(message.content);
    const subjects = (Array.isArray(answer.subjects) ? answer.subjects : []).filter((s) => typeof s === "string" && s.trim());
    const value = { kind: answer.kind || "comparison", subjects: subjects.length ? subjects : [question] };
    return [value, `${value.kind}: ${value.subjects.join(", ")}`];
  });
}

function research(subject) {
  const r = team.researcher;
  return run(r, "researcher: " + subject, [
    { role: "system", content: r.system },
    { role: "user", content: `Find sources about ${subject}.` },
  ], { tools: r.tools, tool_choice: r.tool_choice }, (message) => {
    for (const call of message.tool_calls || []) {
      if (call.function?.name !== "search_sources") continue;
      const query = jsonObject(call.function.arguments).query;
      if (typeof query === "string" && query) return [searchSources(query), `search_sources(${JSON.stringify(query)})\n→ ${searchSources(query)}`];
    }
    return [searchSources(subject), `no search call; searched ${JSON.stringify(subject)}\n→ ${searchSources(subject)}`];
  });
}

function write(question, thePlan, notes) {
  const w = team.writer;
  const subjects = thePlan.subjects;
  const pair = subjects.length > 1 ? subjects.slice(0, 2).join(" and ") : subjects[0];
  const lines = [...notes].map(([s, n]) => `- ${s}: ${n}`).join("\n");
  return run(w, "writer", [
    { role: "system", content: w.system },
    { role: "user", content: "Notes:\n" + lines },
    { role: "user", content: `Write the ${thePlan.kind} report on ${pair} from the notes.` },
  ], { response_format: w.response_format }, (message) => {
    const answer = jsonObject(message.content);
    const value = {
      title: nonEmpty(answer.title) ? answer.title : `Report: ${question}`,
      kind: nonEmpty(answer.kind) ? answer.kind : thePlan.kind,
      covered: nonEmpty(answer.covered) ? answer.covered : [...notes.keys()],
    };
    return [value, JSON.stringify(value, null, 2)];
  });
}

// team.render: the report as Markdown.
function render(question, report, notes) {
  const lines = [`# ${report.title}`, "", `Question: ${question}`, `Kind: ${report.kind}`, "", "## Findings"];
  for (const [subject, note] of notes) lines.push(`- **${subject}**: ${note}`);
  return lines.join("\n") + "\n";
}

async function scout(question) {
  const thePlan = await plan(question);
  const found = await Promise.all(thePlan.subjects.map(research)); // the researchers work at once
  const notes = new Map(thePlan.subjects.map((s, i) => [s, found[i]]));
  const report = await write(question, thePlan, notes);
  return render(question, report, notes);
}

async function ask(question) {
  const status = document.getElementById("status");
  if (!key) { status.textContent = "Enter your API key first: every agent calls the gateway with it."; return; }
  if (running || !question.trim()) return;
  running = true;
  document.body.dataset.state = "running";
  document.getElementById("steps").replaceChildren();
  document.getElementById("report").hidden = true;
  calls.length = 0;
  status.textContent = "Scout is working…";
  try {
    if (!team) team = await getJson("/ratchet/scout/team");
    const markdown = await scout(question.trim());
    document.getElementById("report-text").textContent = markdown;
    const save = document.getElementById("save");
    if (save.href.startsWith("blob:")) URL.revokeObjectURL(save.href);
    save.href = URL.createObjectURL(new Blob([markdown], { type: "text/markdown" }));
    const served = {};
    for (const c of calls) served[c.served_by] = (served[c.served_by] || 0) + 1;
    document.getElementById("calls").textContent = `${calls.length} model calls through the gateway: `
      + Object.entries(served).map(([who, n]) => `${n} by the ${who}`).join(", ");
    document.getElementById("report").hidden = false;
    status.textContent = "";
    document.body.dataset.state = "filed";
  } catch (err) {
    status.textContent = "Scout stopped: " + err.message;
    document.body.dataset.state = "failed";
  } finally {
    running = false;
  }
}

document.getElementById("ask").addEventListener("submit", (e) => {
  e.preventDefault();
  ask(document.getElementById("question").value);
});
for (const b of document.querySelectorAll(".example")) {
  b.addEventListener("click", () => { document.getElementById("question").value = b.textContent; });
}
function showKey(k) {
  key = k;
  document.getElementById("who").textContent = k ? "key entered (kept in this tab)" : "not signed in";
}
signIn(showKey);
showKey(keyFromPage());
