// The turns web UI: the turn list, "waiting for you", and one turn live.
//
// Everything shown is built with DOM nodes and textContent, never HTML
// strings, so tool inputs and model text that contain markup or script are
// shown as text. State changes are POSTs with a JSON body to the API
// (docs/api.md); the page follows a turn with Server-Sent Events and asks
// for the turn's state again whenever a durable event lands.
//
// Keyboard and focus: Enter in a card's "Reason for denying" denies with it.
// When a decided card leaves, the focus goes to the next card still waiting
// (the card, not a button in it, so a second Enter decides nothing unread),
// or to the Outcome heading when none is left. "Cancel turn" asks first, in a
// modal dialog whose focus starts on "Keep the turn", and a click that is
// part of a double click never answers it.
"use strict";

function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "text") el.textContent = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function json(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

async function api(path, body) {
  const init = { headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    return { ok: false, status: 0, body: { error: "the server cannot be reached: " + err } };
  }
  reachable();
  let doc = null;
  try {
    doc = await response.json();
  } catch (err) {
    doc = { error: "the server sent no JSON (" + response.status + ")" };
  }
  return { ok: response.ok, status: response.status, body: doc };
}

// What the alert shows: "connection" (the server cannot be reached) goes by itself
// once the server answers again; anything else (a rejected decision) stays until
// the person acts again.
let alertKind = null;

function alertBox(message, kind) {
  const box = document.getElementById("alert");
  box.textContent = message || "";
  box.classList.toggle("shown", Boolean(message));
  alertKind = message ? kind || "problem" : null;
}

function failed(r, prefix) {
  alertBox((prefix || "") + r.body.error, r.status === 0 ? "connection" : "problem");
}

function reachable() {
  if (alertKind === "connection") alertBox("");
}

function badge(status) {
  return h("span", { class: "badge badge-" + (status || "unknown") }, status || "unknown");
}

const MEDIA = new Set(["image", "audio", "file"]);

// A media part as every human view shows it (turncore.messages.describe_part): type,
// source kind, media type, filename and size, never the bytes, the URL or the file id.
function describeMedia(part) {
  const source = part.url != null ? "url" : part.data != null ? "data" : "file_id";
  const bits = [part.type, source, part.mediaType];
  if (part.filename) bits.push(part.filename);
  if (part.data != null) {
    const b64 = part.data.replace(/[^A-Za-z0-9+/=]/g, "");
    const padding = b64.length - b64.replace(/=+$/, "").length;
    if (b64.length % 4 === 0 && padding <= 2) bits.push((b64.length / 4) * 3 - padding + " bytes");
  }
  return "[" + bits.join(" · ") + "]";
}

// A message's text, with each media part in it described where it stands.
function messageText(content) {
  if (typeof content === "string") return content;
  return (content || []).map((p) => p.type === "text" ? p.text : MEDIA.has(p.type) ? " " + describeMedia(p) + " " : "").join("").trim();
}

// ------------------------------------------------------------------ times, ids, money

// "3 min ago" with the exact local time on hover; every such <time> is refreshed
// by one timer, so a page left open keeps telling the truth.
function ago(iso) {
  const seconds = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (!isFinite(seconds)) return "";
  if (seconds < 45) return "just now";
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return minutes + " min ago";
  const hours = Math.round(minutes / 60);
  if (hours < 24) return hours + " h ago";
  const days = Math.round(hours / 24);
  return days + (days === 1 ? " day ago" : " days ago");
}

function exact(iso) {
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" }) + " (" + iso + ")";
}

function when(iso) {
  if (!iso) return null;
  return h("time", { datetime: iso, title: exact(iso), "data-rel": "" }, ago(iso));
}

setInterval(() => {
  for (const t of document.querySelectorAll("time[data-rel]")) t.textContent = ago(t.getAttribute("datetime"));
  for (const t of document.querySelectorAll("[data-since]")) t.textContent = span(Date.now() - Date.parse(t.dataset.since));
}, 15000);

// A duration as people say it: 850 ms, 12 s, 3 min 4 s, 2 h 5 min.
function span(ms) {
  if (ms == null || !isFinite(ms)) return "";
  if (ms < 1000) return Math.max(0, Math.round(ms)) + " ms";
  const s = Math.round(ms / 1000);
  if (s < 60) return s + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " min" + (s % 60 ? " " + (s % 60) + " s" : "");
  const hours = Math.floor(m / 60);
  return hours + " h" + (m % 60 ? " " + (m % 60) + " min" : "");
}

// How long a turn ran, or has been running (ticking, from its creation).
function duration(v) {
  if (v.durationMs != null) return h("span", {}, span(v.durationMs));
  if (!v.createdAt) return h("span", {}, "");
  return h("span", { "data-since": v.createdAt, title: "running since " + exact(v.createdAt) }, span(Date.now() - Date.parse(v.createdAt)));
}

function money(cost) {
  if (!cost) return h("span", { class: "muted", title: "no price known for this model" }, "unknown");
  const amount = cost.amount;
  const shown = amount === 0 ? "$0" : amount < 0.0001 ? "<$0.0001" : amount < 0.01 ? "$" + amount.toPrecision(2) : "$" + amount.toFixed(amount < 1 ? 3 : 2);
  return h("span", { title: "estimated: " + amount + " " + cost.currency + " (" + cost.source + ")" }, "~" + shown);
}

// A turn id is 32 characters: shown as its tail, the whole on hover, and in full
// after a click on the ⋯ beside it. The link's accessible name is always the full id.
function turnLink(id) {
  const short = "…" + id.slice(-11);
  const link = h("a", { href: "/turns/" + encodeURIComponent(id), "aria-label": id, title: id, class: "tid" }, short);
  const more = h("button", { type: "button", class: "expand", "aria-expanded": "false", "aria-label": "Show the full turn id", title: "Show the full turn id" }, "⋯");
  more.addEventListener("click", () => {
    const open = more.getAttribute("aria-expanded") !== "true";
    more.setAttribute("aria-expanded", String(open));
    link.textContent = open ? id : short;
  });
  return h("span", { class: "tid-wrap" }, link, more);
}

// Who decided, from the decision's metadata (via, by, at), as "ada via web, 2 min ago".
function decider(metadata) {
  if (!metadata || typeof metadata !== "object") return null;
  const bits = [];
  if (typeof metadata.by === "string") bits.push(metadata.by);
  if (typeof metadata.via === "string") bits.push("via " + metadata.via);
  if (!bits.length && typeof metadata.at !== "string") return null;
  return h("span", { class: "decider" }, bits.join(" "), typeof metadata.at === "string" ? [", ", when(metadata.at)] : null);
}

// ------------------------------------------------------------------ the pending count

// "N waiting" in the header and "(N) " before the document's title, on every page.
const counter = {
  base: document.title,
  set(n) {
    const el = document.getElementById("pending-count");
    if (el) {
      el.textContent = n === 1 ? "1 waiting" : n + " waiting";
      el.hidden = n === 0;
      el.title = n + " decision" + (n === 1 ? "" : "s") + " waiting for you";
    }
    document.title = (n ? "(" + n + ") " : "") + counter.base;
  },
  async poll() {
    const r = await api("/api/pending");
    if (r.ok) counter.set(r.body.count);
  },
};

// ------------------------------------------------------------------ decision cards

// Touch only what changed: a card still pending stays the very same node, never even
// re-inserted, so text being typed into it and its focus survive every update. A card
// that leaves while it holds the focus (or after its decision, when the browser may
// have let go of a button it disabled) hands it on: to the next card that stays, else
// the first card shown, else ``fallback``.
function reconcile(box, cards, fallback) {
  const before = [...box.children].filter((c) => c.dataset.key);
  const existing = new Map(before.map((c) => [c.dataset.key, c]));
  const wanted = new Set(cards.map((c) => c.dataset.key));
  const active = document.activeElement;
  const leaving = before.filter((c) => !wanted.has(c.dataset.key));
  const lost = leaving.find((c) => c.contains(active) || (c.decided && (!active || active === document.body)));
  const next = lost ? before.slice(before.indexOf(lost) + 1).find((c) => wanted.has(c.dataset.key)) : null;
  for (const node of leaving) node.remove();
  for (const node of [...box.children]) if (!node.dataset.key) node.remove();
  let anchor = box.firstChild;
  for (const card of cards) {
    const kept = existing.get(card.dataset.key);
    if (kept) {
      if (kept.update) kept.update(card); // new progress, say, shown in place
      anchor = kept.nextSibling;
    } else box.insertBefore(card, anchor);
  }
  if (lost) {
    const to = next || box.querySelector("[data-key]");
    if (to) to.focus(); else if (fallback) fallback();
  }
}

// A card for one approval: Approve, or Deny with a reason (Enter in the reason denies).
// ``where``: {turnId, heading, extra, after(r)} — after() runs once the answer is back.
function approvalCard(p, where) {
  const id = "call-" + where.turnId + "-" + p.toolCallId;
  const reason = h("input", { id: id + "-reason", name: "reason", autocomplete: "off" });
  const status = h("p", { class: "muted", "aria-live": "polite" });
  const deny = (e) => {
    e.preventDefault(); // Deny submits the form, and so does Enter in the reason field
    decide(card, status, where, p.toolCallId, "deny", reason.value.trim() ? { reason: reason.value.trim() } : {});
  };
  const card = h("article", { class: "card pending", tabindex: "-1", "data-key": where.turnId + ":permission:" + p.toolCallId, "aria-labelledby": id + "-h" },
    h("h3", { id: id + "-h" }, where.heading),
    where.extra,
    p.reason ? h("p", {}, "Why it asks: ", p.reason) : null,
    h("p", { class: "label" }, "Input"), h("pre", { class: "input" }, json(p.input)),
    h("form", { class: "row actions", onsubmit: deny },
      h("button", { type: "button", class: "primary", onclick: () => decide(card, status, where, p.toolCallId, "approve", {}) }, "Approve"),
      h("label", { for: id + "-reason" }, "Reason for denying"), reason,
      h("button", { type: "submit", class: "danger" }, "Deny")),
    status);
  return card;
}

// A card for one async tool awaiting its result (an ask_human question among them).
function completeCard(p, where) {
  const id = "call-" + where.turnId + "-" + p.toolCallId;
  const answer = h("textarea", { id: id + "-answer", rows: 3 });
  const asJson = h("input", { id: id + "-json", type: "checkbox" });
  const status = h("p", { class: "muted", "aria-live": "polite" });
  const progress = h("ul", { class: "progress" }, (p.progress || []).map((x) => h("li", {}, json(x))));
  const card = h("article", { class: "card pending", tabindex: "-1", "data-key": where.turnId + ":async:" + p.toolCallId, "aria-labelledby": id + "-h" },
    h("h3", { id: id + "-h" }, where.heading),
    where.extra,
    p.question ? h("p", { class: "question" }, p.question) : h("pre", { class: "input" }, json(p.input)),
    progress,
    h("div", { class: "stack" },
      h("label", { for: id + "-answer" }, "Your answer"), answer,
      h("label", { class: "inline" }, asJson, " Send as JSON"),
      h("div", { class: "row actions" },
        h("button", { type: "button", class: "primary", onclick: () => {
          let body;
          if (asJson.checked) {
            try { body = { output: JSON.parse(answer.value) }; } catch (err) { status.textContent = "That is not JSON: " + err.message; return; }
          } else body = { text: answer.value };
          decide(card, status, where, p.toolCallId, "complete", body);
        } }, "Complete"))),
    status);
  card.progress = progress;
  card.update = (fresh) => progress.replaceChildren(...fresh.progress.children);
  return card;
}

// Send one decision; a refusal (409: decided meanwhile, from another tab or the CLI)
// is shown in the alert, and the caller's after() refreshes what is shown either way.
async function decide(card, status, where, callId, action, body) {
  if (card.decided) return; // one decision at a time per card (Enter pressed twice)
  card.decided = true;
  alertBox("");
  const from = document.activeElement;
  for (const b of card.querySelectorAll("button")) b.disabled = true;
  status.textContent = "Sending…";
  const r = await api("/api/turns/" + encodeURIComponent(where.turnId) + "/calls/" + encodeURIComponent(callId) + "/" + action, body);
  if (r.ok) status.textContent = r.status === 202 ? "Accepted; the turn is working on it." : "Done.";
  else {
    status.textContent = "";
    failed(r, r.status === 409 ? "Rejected: " : "Failed: ");
    card.decided = false;
    for (const b of card.querySelectorAll("button")) b.disabled = false;
    // Still pending (it failed): give back the focus disabling the button took.
    if (card.isConnected && (document.activeElement === document.body || !document.activeElement)) from.focus();
  }
  where.after(r);
}

// ------------------------------------------------------------------ index page

const index = {
  before: null,
  filters: {},

  async start() {
    document.getElementById("filters").addEventListener("submit", (e) => {
      e.preventDefault();
      const data = new FormData(e.target);
      index.filters = Object.fromEntries([...data.entries()].filter(([, v]) => v));
      index.loadTurns(false);
    });
    document.getElementById("older").addEventListener("click", () => index.loadTurns(true));
    document.getElementById("create").addEventListener("submit", index.create);
    const agents = await api("/api/agents");
    if (agents.ok) {
      const select = document.getElementById("agent-select");
      for (const a of agents.body.agents) {
        select.append(h("option", { value: a.name, selected: a.name === agents.body.defaultAgent }, a.name));
      }
    }
    await Promise.all([index.loadWaiting(), index.loadTurns(false)]);
    // Visibility has no push: look again every few seconds (the turn page streams instead).
    setInterval(() => { index.loadWaiting(); if (!index.before) index.loadTurns(false); }, 3000);
  },

  loading: null,
  again: false,

  // Coalesced like the turn page's refresh: one request at a time, one more if asked meanwhile.
  async loadWaiting() {
    if (index.loading) { index.again = true; return index.loading; }
    index.loading = (async () => {
      do { index.again = false; await index.showWaiting(); } while (index.again);
      index.loading = null;
    })();
    return index.loading;
  },

  async showWaiting() {
    const r = await api("/api/pending");
    const box = document.getElementById("waiting");
    const note = document.getElementById("waiting-note");
    if (!r.ok) {
      note.textContent = r.body.error;
      note.hidden = false;
      // The list polls even when the turn list does not (a page of older turns is
      // open), so an unreachable server is announced from here too.
      if (r.status === 0) failed(r);
      return;
    }
    counter.set(r.body.count);
    const cards = [];
    for (const t of r.body.turns) {
      if (t.error) { note.textContent = "Turn " + t.turnId + " cannot be read: " + t.error; continue; }
      const extra = () => h("p", { class: "about" }, turnLink(t.turnId), " · ", t.agent || "", " · waiting ", when(t.since || t.createdAt),
        t.prompt ? h("span", { class: "prompt muted" }, " · " + t.prompt) : null);
      const after = () => { index.loadWaiting(); index.loadTurns(false); };
      for (const p of t.permissions) {
        cards.push(approvalCard(p, { turnId: t.turnId, heading: p.action || "approve " + p.toolName, extra: extra(), after }));
      }
      for (const p of t.asyncTools) {
        cards.push(completeCard(p, { turnId: t.turnId, heading: p.action || "answer " + p.toolName, extra: extra(), after }));
      }
    }
    reconcile(box, cards, () => document.getElementById("waiting-heading").focus());
    note.hidden = cards.length > 0;
    if (!cards.length) note.textContent = r.body.partial ? "Nothing shown: too many suspended turns to scan; filter the list below." : "Nothing is waiting for you.";
  },

  async loadTurns(older) {
    const params = new URLSearchParams(index.filters);
    if (older && index.before) params.set("before", index.before);
    const r = await api("/api/turns?" + params);
    if (!r.ok) { failed(r); return; }
    const body = document.getElementById("turns");
    const rows = r.body.turns.map((t) => h("tr", {},
      h("td", { class: "turn", "data-label": "Turn" }, turnLink(t.turnId)),
      h("td", { class: "status", "data-label": "Status" }, badge(t.status), t.stuck ? [" ", h("span", { class: "badge badge-stuck", title: t.stuck }, "stuck")] : []),
      h("td", { class: "prompt", "data-label": "Prompt", title: t.input || "" }, t.input || ""),
      h("td", { class: "agent", "data-label": "Agent" }, (t.agent || "?") + " · " + (t.model || "?"), t.session ? h("span", { class: "muted session" }, " · session " + t.session) : null),
      h("td", { class: "started", "data-label": "Started" }, when(t.createdAt || t.startTime)),
      h("td", { class: "duration", "data-label": "Duration" }, t.createdAt ? duration(t) : ""),
      h("td", { class: "cost", "data-label": "Cost" }, t.createdAt ? money(t.cost) : ""),
      h("td", { class: "waiting-for", "data-label": "Waiting for" }, waitingFor(t))));
    if (older) body.append(...rows); else body.replaceChildren(...rows);
    index.before = r.body.nextBefore;
    document.getElementById("older").hidden = !r.body.nextBefore;
    document.getElementById("turns-empty").hidden = body.children.length > 0;
  },

  async create(e) {
    e.preventDefault();
    const data = Object.fromEntries([...new FormData(e.target).entries()].filter(([, v]) => v));
    const r = await api("/api/turns", data);
    if (!r.ok) { failed(r); return; }
    window.location.assign(r.body.url);
  },
};

// What a listed turn waits for, in words; the raw codes only for a turn whose file
// this server cannot read (another work dir on the same Temporal namespace).
function waitingFor(t) {
  if (t.waitingFor) return t.waitingFor.map((w, i) => [i ? ", " : "", h("span", { title: w.toolCallId + " · waiting since " + exact(w.since) }, w.label)]);
  return (t.pendingInputs || []).join(", ");
}

// ------------------------------------------------------------------ turn page

const turn = {
  id: null,
  view: null,
  streaming: {}, // model call index -> { text, reasoning, seq }
  refreshing: null,
  again: false,
  source: null,
  cancelling: false, // a confirmed cancel is on its way

  async start() {
    turn.id = decodeURIComponent(window.location.pathname.split("/").pop());
    document.getElementById("title").textContent = "Turn " + turn.id;
    document.title = counter.base = "…" + turn.id.slice(-11) + " · turns";
    const dialog = document.getElementById("cancel-dialog");
    document.getElementById("cancel").addEventListener("click", () => {
      dialog.showModal();
      document.getElementById("cancel-keep").focus();
    });
    document.getElementById("cancel-keep").addEventListener("click", () => dialog.close());
    const confirm = document.getElementById("cancel-confirm");
    // The second click of a double click on "Cancel turn" (detail 2) lands wherever the
    // question opened: it is no answer, and does not even take the focus from "Keep the
    // turn" (or the next Enter would answer). Enter and Space click with detail 0.
    confirm.addEventListener("mousedown", (e) => { if (e.detail > 1) e.preventDefault(); });
    confirm.addEventListener("click", (e) => { if (e.detail <= 1) turn.cancel(); });
    dialog.addEventListener("close", () => {
      const button = document.getElementById("cancel");
      if (button.hidden) turn.focusOutcome(); else button.focus();
    });
    await turn.refresh();
    turn.follow();
    counter.poll();
    setInterval(counter.poll, 5000);
  },

  follow() {
    const after = turn.view ? turn.view.offset : 0;
    const source = new EventSource("/api/turns/" + encodeURIComponent(turn.id) + "/events?follow=1&after=" + after);
    turn.source = source;
    source.addEventListener("turn-event", () => turn.refresh());
    source.addEventListener("settled", () => turn.refresh());
    source.addEventListener("delta", (e) => turn.delta(JSON.parse(e.data)));
    source.addEventListener("end", () => { source.close(); turn.refresh(); });
    source.addEventListener("error", (e) => {
      if (e instanceof MessageEvent) { // the server's own `error` event: the file is unreadable
        alertBox("The turn cannot be read: " + JSON.parse(e.data).error);
      } else if (source.readyState === EventSource.CLOSED) {
        alertBox("The live view stopped (the server refused the stream): reload the page.");
      } else { // the browser reconnects by itself, resuming after the last event it got
        source.lost = true;
        alertBox("The server cannot be reached; reconnecting…", "connection");
      }
    });
    source.addEventListener("open", () => {
      if (source.lost) { source.lost = false; reachable(); turn.refresh(); }
    });
  },

  delta(d) {
    const s = (turn.streaming[d.modelCallIndex] ||= { text: "", reasoning: "", seq: 0 });
    if (d.seq <= s.seq) return; // a resumed stream repeats nothing
    s.seq = d.seq;
    if (d.type === "text_delta") s.text += d.delta;
    else if (d.type === "reasoning_delta") s.reasoning += d.delta;
    const live = document.getElementById("live-" + d.modelCallIndex);
    if (live) live.textContent = s.text || (s.reasoning ? "(thinking) " + s.reasoning : "");
  },

  async refresh() {
    // Coalesce: one request at a time, one more if events landed meanwhile.
    if (turn.refreshing) { turn.again = true; return turn.refreshing; }
    turn.refreshing = (async () => {
      do {
        turn.again = false;
        const r = await api("/api/turns/" + encodeURIComponent(turn.id));
        if (r.ok) { turn.view = r.body; turn.render(); } else failed(r);
      } while (turn.again);
      turn.refreshing = null;
    })();
    return turn.refreshing;
  },

  render() {
    const v = turn.view;
    const status = document.getElementById("status");
    status.textContent = v.status;
    status.className = "badge badge-" + v.status;
    document.getElementById("meta").replaceChildren(
      "agent " + v.agent + " · model " + v.model + (v.session ? " · session " + v.session : ""),
      " · started ", when(v.createdAt), " · ", v.endedAt ? "took " : "running for ", duration(v),
      " · cost ", money(v.cost && v.cost.turn));
    const stuck = document.getElementById("stuck");
    stuck.hidden = !v.stuck;
    stuck.textContent = v.stuck
      ? "Stuck: " + v.stuck.cause + ". Inputs sent now are not applied. Fix: " + v.stuck.fix + " (rebuilds the run from the turn's file), or roll the workers back."
      : "";
    turn.renderPending(v);
    turn.renderTimeline(v.state, v.pending);
    turn.renderOutcome(v.state, v.output);
    turn.renderUsage(v);
    const cancel = document.getElementById("cancel");
    const ended = Boolean(v.state.terminal);
    const dialog = document.getElementById("cancel-dialog");
    if (ended && !cancel.hidden) {
      const active = document.activeElement;
      const had = active === cancel || (turn.cancelling && (!active || active === document.body));
      cancel.hidden = true;
      if (dialog.open) dialog.close(); // its close handler moves the focus on
      else if (had) turn.focusOutcome();
    }
    cancel.hidden = ended;
  },

  renderUsage(v) {
    const u = v.state.usage || {};
    const names = [["inputTokens", "input tokens"], ["cachedInputTokens", "of which cached"], ["outputTokens", "output tokens"],
      ["reasoningTokens", "reasoning tokens"], ["totalTokens", "total tokens"]];
    const rows = names.filter(([k]) => u[k] != null).flatMap(([k, label]) => [h("dt", {}, label), h("dd", {}, Number(u[k]).toLocaleString("en-US"))]);
    if (!rows.length) rows.push(h("dt", {}, "tokens"), h("dd", {}, "none reported"));
    rows.push(h("dt", {}, "estimated cost"), h("dd", {}, money(v.cost && v.cost.turn), v.cost && v.cost.turn ? h("span", { class: "muted" }, " (" + v.cost.turn.source + ")") : null));
    rows.push(h("dt", {}, v.endedAt ? "duration" : "running for"), h("dd", {}, duration(v)));
    document.getElementById("usage").replaceChildren(...rows);
  },

  focusOutcome() {
    document.getElementById("outcome-heading").focus();
  },

  renderPending(v) {
    const where = (heading) => ({ turnId: turn.id, heading, after: () => turn.refresh() });
    const cards = [
      ...v.pending.permissions.map((p) => approvalCard(p, where(["Approve ", p.label || p.toolName, "? ", h("code", {}, p.toolCallId)]))),
      ...v.pending.asyncTools.map((p) => completeCard(p, where([p.question ? "Question from " + p.toolName + " " : "Result needed for " + p.toolName + " ", h("code", {}, p.toolCallId)]))),
    ];
    reconcile(document.getElementById("pending"), cards, turn.focusOutcome);
    document.getElementById("pending-section").hidden = cards.length === 0;
  },

  async cancel() {
    const button = document.getElementById("cancel");
    turn.cancelling = true;
    document.getElementById("cancel-dialog").close();
    button.disabled = true;
    const r = await api("/api/turns/" + encodeURIComponent(turn.id) + "/cancel", { reason: "cancelled from the web UI" });
    if (!r.ok) failed(r, r.status === 409 ? "Rejected: " : "Failed: ");
    button.disabled = false;
    await turn.refresh();
    turn.cancelling = false;
  },

  renderTimeline(state, pending) {
    // A call waiting for a person shows its input once: in its card above.
    const above = new Set([...pending.permissions, ...pending.asyncTools].map((p) => p.toolCallId));
    const items = [h("li", { class: "msg user" }, h("span", { class: "who" }, "user"), h("div", { class: "text" }, messageText(state.definition.input.content)))];
    const calls = new Map((state.toolCalls || []).map((t) => [t.toolCallId, t]));
    for (const mc of state.modelCalls || []) {
      if (mc.response) {
        const parts = typeof mc.response.content === "string" ? [{ type: "text", text: mc.response.content }] : mc.response.content;
        for (const part of parts) {
          if (part.type === "text" && part.text) items.push(h("li", { class: "msg assistant" }, h("span", { class: "who" }, "assistant"), h("div", { class: "text" }, part.text)));
          else if (part.type === "reasoning") items.push(h("li", { class: "msg reasoning" }, h("details", {}, h("summary", {}, "reasoning"), h("div", { class: "text" }, part.text))));
          else if (part.type === "tool-call") items.push(turn.toolCard(calls.get(part.toolCallId) || { toolName: part.toolName, toolCallId: part.toolCallId, input: part.input, progress: [] }, above.has(part.toolCallId)));
          else if (MEDIA.has(part.type)) items.push(h("li", { class: "msg assistant" }, h("span", { class: "who" }, "assistant"), h("div", { class: "text" }, describeMedia(part))));
          else if (part.type !== "text") items.push(h("li", { class: "msg" }, "[" + part.type + "]"));
        }
        delete turn.streaming[mc.index];
      } else if (mc.error) {
        items.push(h("li", { class: "msg error" }, "Model call " + mc.index + " failed: " + mc.error));
      } else {
        const s = turn.streaming[mc.index];
        items.push(h("li", { class: "msg assistant streaming" }, h("span", { class: "who" }, "assistant (streaming)"),
          h("div", { class: "text", id: "live-" + mc.index, "aria-live": "polite" }, s ? (s.text || (s.reasoning ? "(thinking) " + s.reasoning : "")) : "")));
      }
    }
    document.getElementById("timeline").replaceChildren(...items);
  },

  toolCard(t, waiting) {
    const rows = [h("h3", {}, "Tool ", t.toolName, " ", h("code", {}, t.toolCallId))];
    if (waiting) rows.push(h("p", { class: "muted" }, h("a", { href: "#pending-heading" }, "Waiting for you"), ": its input is in the card above."));
    else rows.push(h("p", { class: "label" }, "Input"), h("pre", { class: "input" }, json(t.input)));
    const p = t.permission;
    if (p) {
      const record = ["Permission required" + (p.required.checkerError ? " (checker: " + p.required.checkerError + ")" : "")];
      if (p.classification) record.push("classifier: " + p.classification.decision + " — " + p.classification.reason);
      if (p.classificationFailed) record.push("classifier failed: " + p.classificationFailed.error);
      if (p.resolved) record.push((p.resolved.decision === "allow" ? "allowed" : "denied") + " by " + p.resolved.source + (p.resolved.reason ? ": " + p.resolved.reason : ""));
      else record.push("awaiting a decision");
      const who = p.resolved ? decider(p.resolved.metadata) : null;
      rows.push(h("p", { class: "permission" }, record.join(" · "), who ? [" · ", who] : null));
    }
    if ((t.progress || []).length) rows.push(h("p", {}, "Progress"), h("ul", { class: "progress" }, t.progress.map((x) => h("li", {}, json(x.progress)))));
    if (t.result) {
      const r = t.result.result;
      const who = t.result.source === "async" ? decider(r.metadata) : null;
      rows.push(h("p", { class: "label" }, r.isError ? "Result (error)" : "Result", who ? [" · answered by ", who] : null), h("pre", { class: "result" + (r.isError ? " error" : "") }, json(r.output)));
    } else if (t.invocation) rows.push(h("p", { class: "muted" }, t.invocation.execution === "async" ? "waiting for its result" : "running…"));
    return h("li", { class: "tool card" }, rows);
  },

  renderOutcome(state, output) {
    const box = document.getElementById("outcome");
    const t = state.terminal;
    if (t && t.type === "turn_completed") box.replaceChildren(h("p", {}, badge("completed")), h("div", { class: "text" }, messageText(t.output.content)));
    else if (t && t.type === "turn_failed") box.replaceChildren(h("p", {}, badge("failed"), " ", t.error));
    else if (t && t.type === "turn_cancelled") box.replaceChildren(h("p", {}, badge("cancelled"), " ", t.reason || ""));
    else if (state.suspension) box.replaceChildren(h("p", {}, badge("suspended"), " waiting for you (see above)"));
    else box.replaceChildren(h("p", { class: "muted" }, "Not settled yet: the turn is working."));
    if (output) box.append(turn.structuredOutput(output));
  },

  // The answer of an agent with an output schema (GET /api/turns/{id} "output").
  structuredOutput(o) {
    const tries = o.answers > 1 ? " after " + o.answers + " answers" : "";
    const head = h("p", { class: "label" }, "Structured output (" + o.schema + ")");
    if (o.valid === null) return h("div", { id: "structured-output" }, head, h("p", { class: "muted" }, "no answer yet"));
    if (o.valid) return h("div", { id: "structured-output" }, head, h("p", {}, "valid" + tries), h("pre", { class: "result" }, json(o.value)));
    return h("div", { id: "structured-output" }, head, h("p", {}, "invalid" + tries),
      h("ul", { class: "progress" }, o.errors.map((e) => h("li", {}, e))));
  },
};

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "index") index.start();
  else if (page === "turn") turn.start();
});
