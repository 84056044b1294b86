// What the gateway's pages share: the client key (kept in this tab's sessionStorage, sent only to this origin as
// Authorization: Bearer), the sign-in form, calls to the gateway and building elements. Every text is written as
// a text node, never as markup: task names, versions and model answers cannot become HTML.
"use strict";

const KEY_ITEM = "ratchet-key"; // the dashboard's item too: one sign-in serves every page of this gateway

// A key in the link (#key=...) signs this tab in. When the tab is already signed in with another key, the reader
// is asked first: a link someone sent must not switch a signed-in person to the sender's key unseen.
const REPLACE_KEY = "This link carries a different API key than the one this tab is signed in with. " +
  "Sign in with the link's key instead? (Cancel keeps your key.)";

function keyFromPage() {
  const m = /(?:^#|&)key=([^&]+)/.exec(location.hash);
  if (m) {
    history.replaceState(null, "", location.pathname); // the key leaves the address bar and the history
    let linked = null;
    try { linked = decodeURIComponent(m[1]); } catch { linked = null; } // a malformed link signs nobody in
    const current = sessionStorage.getItem(KEY_ITEM);
    if (linked && (!current || current === linked || window.confirm(REPLACE_KEY))) {
      sessionStorage.setItem(KEY_ITEM, linked);
    }
  }
  return sessionStorage.getItem(KEY_ITEM);
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

// The error message of a failed answer (OpenAI's shape), else its status line.
async function errorOf(r) {
  try { return (await r.json()).error?.message || `${r.status} ${r.statusText}`; } catch { return `${r.status} ${r.statusText}`; }
}

// GET a keyed route of this gateway; throws with the gateway's own message.
async function getJson(path, key) {
  const r = await fetch(path, { headers: key ? { Authorization: "Bearer " + key } : {} });
  if (!r.ok) throw new Error(await errorOf(r));
  return r.json();
}

// Wire the sign-in form: a key typed in is kept for this tab and `onKey` runs with it.
function signIn(onKey) {
  document.getElementById("login").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = document.getElementById("key");
    sessionStorage.setItem(KEY_ITEM, input.value.trim());
    input.value = "";
    onKey(sessionStorage.getItem(KEY_ITEM));
  });
  document.getElementById("logout").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_ITEM);
    location.reload();
  });
}
