// tq serve's dashboard: reads /api/overview every few seconds and /api/jobs
// for the job list. Every value from the store goes into the page as text
// (textContent, attribute values set through the DOM), never as HTML.
"use strict";

const STATES = ["ready", "running", "waiting", "done", "dead", "cancelled"];
const TABS = ["dead", "cancelled", "running", "ready", "waiting", "done"];
const PAGE = 50;
const REFRESH_MS = 3000;

const ui = {
  token: sessionStorage.getItem("tq-token") || "",
  tab: "dead",
  jobQueue: "",
  pages: [], // the "before" id of each page shown so far; [] on the first
  overview: null,
  jobsSeq: 0, // the latest job-list request: older answers are dropped
  refreshing: false,
  showStopped: false, // the workers not alive are folded until asked for
};

const $ = (id) => document.getElementById(id);

// el("td", {class: "num"}, "text", child...): text arguments become text nodes.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "onclick") e.addEventListener("click", v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

const fmt = (n) => Number(n).toLocaleString("en-US");

function fmtUs(us) {
  if (!us) return "–";
  const s = us / 1e6;
  if (s < 1) return (us / 1000).toFixed(us < 10000 ? 1 : 0) + " ms";
  if (s < 90) return s.toFixed(s < 10 ? 1 : 0) + " s";
  if (s < 5400) return Math.round(s / 60) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return Math.round(s / 86400) + " d";
}

function ago(iso) {
  if (!iso) return "–";
  const us = (Date.now() - Date.parse(iso)) * 1000;
  return us < 0 ? "just now" : fmtUs(us) + " ago";
}

async function api(path, opts) {
  const r = await fetch(path, opts);
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) throw new Error((body && body.error) || r.status + " " + r.statusText);
  return body;
}

function showError(e) {
  const box = $("error");
  if (e) { box.textContent = String(e.message || e); box.hidden = false; }
  else box.hidden = true;
}

async function act(path, what) {
  if (!ui.token) { showError("enter the token first"); return; }
  try {
    await api(path, { method: "POST", headers: { Authorization: "Bearer " + ui.token } });
    showError(null);
    $("updated").textContent = what + ": done";
    await refresh();
    await loadJobs();
    const m = location.hash.match(/^#job=(\d+)$/);
    if (m) openJob(m[1]);
  } catch (e) {
    showError(what + ": " + e.message);
  }
}

// ---- the overview ----------------------------------------------------------

function renderCards(o) {
  const sum = (s) => o.queues.reduce((a, q) => a + q.counts[s], 0);
  const lastMin = o.queues.reduce((a, q) => a + (q.done_per_minute[58] || 0), 0);
  const alive = o.workers.filter((w) => w.status === "alive").length;
  const oldest = Math.max(0, ...o.queues.map((q) => q.oldest_ready_age_us));
  const cards = [
    ["ready", "Ready", fmt(sum("ready")), ""],
    ["running", "Running", fmt(sum("running")), ""],
    ["waiting", "Waiting", fmt(sum("waiting")), ""],
    ["dead", "Dead", fmt(sum("dead")), sum("dead") ? "bad" : ""],
    ["rate", "Done last minute", fmt(lastMin), ""],
    ["oldest", "Oldest ready", fmtUs(oldest), oldest > 60e6 ? "warn" : ""],
    ["workers", "Workers alive", fmt(alive), alive ? "" : "warn"],
  ];
  $("cards").replaceChildren(...cards.map(([id, label, value, cls]) =>
    el("div", { class: "card " + cls, id: "card-" + id },
       el("div", { class: "label" }, label), el("div", { class: "value" }, value))));
}

function bars(target, values, w, h, gap) {
  const max = Math.max(1, ...values);
  const bw = w / values.length;
  target.replaceChildren(...values.map((v, i) => {
    const bh = v ? Math.max(1, (v / max) * h) : 0;
    const r = svg("rect", { x: i * bw + gap / 2, y: h - bh, width: Math.max(bw - gap, 0.5), height: bh });
    const t = svg("title");
    t.textContent = (values.length - 1 - i) + " min ago: " + fmt(v);
    r.append(t);
    return r;
  }));
}

function renderChart(o) {
  const total = new Array(60).fill(0);
  for (const q of o.queues) q.done_per_minute.forEach((v, i) => { total[i] += v; });
  bars($("chart"), total, 600, 120, 2);
  const sum = total.reduce((a, b) => a + b, 0);
  $("chart-note").textContent = fmt(sum) + " done in the last hour, all queues";
}

function queueRow(q) {
  const spark = svg("svg", { class: "spark", width: 120, height: 22, viewBox: "0 0 120 22" });
  bars(spark, q.done_per_minute, 120, 22, 0.4);
  const cell = (state, n) => el("td", { class: "num" + (n ? "" : " zero"), "data-q": q.name, "data-s": state }, fmt(n));
  const buttons = el("div", { class: "row-actions" });
  const actions = el("td", {}, buttons);
  if (ui.overview.actions) {
    buttons.append(q.paused
      ? el("button", { type: "button", onclick: () => act("/api/queues/" + encodeURIComponent(q.name) + "/resume", "resume " + q.name) }, "resume")
      : el("button", { type: "button", onclick: () => act("/api/queues/" + encodeURIComponent(q.name) + "/pause", "pause " + q.name) }, "pause"));
    if (q.counts.dead)
      buttons.append(el("button", { type: "button", onclick: () => act("/api/queues/" + encodeURIComponent(q.name) + "/retry-dead", "retry the dead jobs of " + q.name) }, "retry dead"));
  }
  return el("tr", { "data-queue": q.name },
    el("td", {}, q.name, " ", q.paused ? el("span", { class: "badge paused" }, "paused") : "",
      q.timeout_us ? el("span", { class: "badge", title: "a run's time limit (tq queue --timeout)" }, "timeout " + fmtUs(q.timeout_us)) : "",
      q.retain_done_us || q.retain_dead_us ? el("span", { class: "badge", title: "finished jobs deleted after (tq queue --retain-done, --retain-dead)" },
        "keeps " + [q.retain_done_us ? "done " + fmtUs(q.retain_done_us) : "", q.retain_dead_us ? "dead " + fmtUs(q.retain_dead_us) : ""].filter(Boolean).join(", ")) : ""),
    cell("ready", q.counts.ready - q.delayed), cell("delayed", q.delayed),
    cell("running", q.counts.running), cell("waiting", q.counts.waiting),
    cell("done", q.counts.done), cell("dead", q.counts.dead), cell("cancelled", q.counts.cancelled),
    el("td", { class: "num" }, fmtUs(q.oldest_ready_age_us)),
    el("td", { class: "num" }, q.recent ? fmtUs(q.p50_us) + " / " + fmtUs(q.p95_us) : "–"),
    el("td", {}, spark), actions);
}

function renderQueues(o) {
  const f = $("queue-filter").value.trim().toLowerCase();
  const shown = o.queues.filter((q) => !f || q.name.toLowerCase().includes(f));
  $("queues").tBodies[0].replaceChildren(...shown.map(queueRow));
  $("queues").classList.toggle("no-actions", !o.actions);
  $("queue-count").textContent = shown.length === o.queues.length
    ? "(" + o.queues.length + ")" : "(" + shown.length + " of " + o.queues.length + ")";
  const sel = $("job-queue");
  const want = ["", ...o.queues.map((q) => q.name)];
  const have = [...sel.options].map((x) => x.value);
  if (want.join("\n") !== have.join("\n")) {
    sel.replaceChildren(...want.map((n) => el("option", { value: n }, n || "all queues")));
    if (!want.includes(ui.jobQueue)) ui.jobQueue = ""; // the queue is gone
    sel.value = ui.jobQueue;
  }
}

// Alive workers first, by name; the others (stopped, gone) after them,
// folded behind a button until asked for.
function renderWorkers(o) {
  const rest = (w) => (w.status === "alive" ? 0 : 1);
  const ws = [...o.workers].sort((a, b) => rest(a) - rest(b) || a.name.localeCompare(b.name));
  $("workers").tBodies[0].replaceChildren(...ws.map((w) => el("tr", {
    "data-worker": w.name, hidden: rest(w) === 1 && !ui.showStopped,
  },
    el("td", {}, w.name), el("td", {}, w.host), el("td", { class: "num" }, w.pid),
    el("td", {}, el("span", { class: "badge " + w.status }, w.status)),
    el("td", {}, ago(w.heartbeat_at)), el("td", { class: "num" }, fmt(w.running)))));
  const alive = ws.length - ws.filter(rest).length, folded = ws.length - alive;
  $("worker-count").textContent = "(" + alive + " alive of " + ws.length + ")";
  const b = $("workers-fold");
  b.hidden = folded === 0;
  b.textContent = (ui.showStopped ? "hide the " : "show the ") + folded + " not alive";
}

function toggleStopped() {
  ui.showStopped = !ui.showStopped;
  if (ui.overview) renderWorkers(ui.overview);
}

function inFrom(iso) {
  if (!iso) return "–";
  const us = (Date.parse(iso) - Date.now()) * 1000;
  return us <= 0 ? "due" : "in " + fmtUs(us);
}

function renderSchedules(list) {
  $("schedules-panel").hidden = !list.length;
  $("schedule-count").textContent = "(" + list.length + ")";
  $("schedules").tBodies[0].replaceChildren(...list.map((c) => el("tr", { "data-schedule": c.name },
    el("td", {}, c.name), el("td", {}, c.queue), el("td", {}, c.schedule), el("td", {}, c.tz),
    el("td", {}, c.overlap), el("td", {}, inFrom(c.next_slot)),
    el("td", { class: "num" }, c.last_job === null ? "–"
      : el("a", { href: "#job=" + Number(c.last_job) }, String(c.last_job))))));
}

async function refresh() {
  if (ui.refreshing) return; // the last one has not come back yet
  ui.refreshing = true;
  try {
    const o = await api("/api/overview");
    ui.overview = o;
    $("store").textContent = o.store + " · " + o.engine + " · tq " + o.version;
    $("token-form").hidden = !o.actions;
    renderCards(o);
    renderChart(o);
    renderQueues(o);
    renderWorkers(o);
    renderSchedules(await api("/api/schedules"));
    if (!ui.pages.length) await loadJobs();
    showError(null);
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.ready = "1";
  } catch (e) {
    showError(e);
  } finally {
    ui.refreshing = false;
  }
}

// ---- jobs ---------------------------------------------------------------------

function preview(j) {
  if (j.state === "running" && j.progress !== null)
    return j.progress + "%" + (j.progress_text ? " " + j.progress_text : "");
  if (j.state === "ready" && j.attempts > 0 && j.last_error)
    return "retrying after attempt " + j.attempts + ": " + j.last_error;
  if (j.last_error) return j.last_error;
  if (j.payload !== undefined) return j.payload + (j.payload_cut ? " …" : "");
  return "(" + j.payload_bytes + " bytes of binary payload)";
}

async function loadJobs() {
  const seq = ++ui.jobsSeq;
  const tab = ui.tab, page = ui.pages.length;
  const before = page ? ui.pages[page - 1] : 0;
  const q = new URLSearchParams({ state: tab, limit: PAGE });
  if (ui.jobQueue) q.set("queue", ui.jobQueue);
  if (before) q.set("before", before);
  const jobs = await api("/api/jobs?" + q);
  if (seq !== ui.jobsSeq) return; // a newer request (another tab or page) owns the table
  $("jobs").tBodies[0].replaceChildren(...jobs.map((j) => el("tr", { "data-job": j.id, onclick: () => { location.hash = "job=" + j.id; } },
    el("td", { class: "num" }, j.id), el("td", {}, j.queue),
    el("td", {}, el("span", { class: "badge " + j.state }, j.state)),
    el("td", { class: "num" }, j.attempts + " / " + j.max_attempts),
    el("td", {}, ago(j.finished_at || j.started_at || j.created_at)),
    el("td", { class: "text" }, preview(j)))));
  $("older").disabled = jobs.length < PAGE;
  $("older").dataset.next = jobs.length ? jobs[jobs.length - 1].id : "";
  $("newer").disabled = !page;
  $("page-note").textContent = jobs.length
    ? "page " + (page + 1) + ": " + jobs.length + " " + tab + " job" + (jobs.length === 1 ? "" : "s")
    : (page ? "no more " : "no ") + tab + " jobs";
}

function renderTabs() {
  $("job-tabs").replaceChildren(...TABS.map((t) => el("button", {
    type: "button", class: t === ui.tab ? "on" : "", "data-tab": t,
    onclick: () => { ui.tab = t; ui.pages = []; renderTabs(); loadJobs().catch(showError); },
  }, t)));
}

function hexView(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const row = bytes.slice(i, i + 16);
    const hex = [...row].map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const asc = [...row].map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(i.toString(16).padStart(8, "0") + "  " + hex.padEnd(48) + "  " + asc);
  }
  return lines.join("\n");
}

function showBytes(pre, note, j, key) {
  if (j[key] !== undefined && j[key] !== null) {
    pre.textContent = j[key];
    if (note) note.textContent = "(" + fmt(j[key + "_bytes"] ?? j[key].length) + " bytes, text)";
  } else if (j[key + "_base64"]) {
    const bin = atob(j[key + "_base64"]);
    const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
    pre.textContent = hexView(bytes);
    if (note) note.textContent = "(" + fmt(bytes.length) + " bytes, binary: hex)";
  } else {
    pre.textContent = "";
  }
}

async function openJob(id) {
  try {
    const j = await api("/api/jobs/" + encodeURIComponent(id));
    $("detail-title").textContent = "Job " + j.id;
    const f = [["queue", j.queue], ["state", j.state], ["attempts", j.attempts + " of " + j.max_attempts],
      ["priority", j.priority], ["created", j.created_at], ["run at", j.run_at],
      ["started", j.started_at], ["finished", j.finished_at], ["worker", j.worker],
      ["key", j.key], ["group", j.group], ["traceparent", j.traceparent],
      ["timeout", j.timeout_us ? fmtUs(j.timeout_us) : null],
      ["progress", j.progress === null ? null : j.progress + "% " + (j.progress_text || "")],
      ["parents", j.parents ? (j.parent_ids || []).join(", ") + (j.waiting_for ? " (waiting for " + j.waiting_for + ")" : "") : null],
      ["batch", j.parents_when === "ended" ? (j.parents - j.waiting_for) + " of " + j.parents + " ended: " +
        (j.parents_done || []).length + " done, " + (j.parents_failed || []).length + " failed" : null],
      ["duration", j.duration_us ? fmtUs(j.duration_us) : null]];
    $("detail-fields").replaceChildren(...f.filter(([, v]) => v !== null && v !== undefined && v !== "")
      .flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-field": k }, v)]));
    showBytes($("detail-payload"), $("payload-note"), j, "payload");
    $("detail-error").textContent = j.last_error || "–";
    const hasResult = j.result !== undefined || j.result_base64 !== undefined;
    $("result-head").hidden = $("detail-result").hidden = !hasResult;
    if (hasResult) showBytes($("detail-result"), null, j, "result");
    const acts = [];
    if (ui.overview && ui.overview.actions) {
      if (j.state === "dead" || j.state === "cancelled")
        acts.push(el("button", { type: "button", onclick: () => act("/api/jobs/" + j.id + "/retry", "retry job " + j.id) }, "retry"));
      if (j.state === "ready" || j.state === "running" || j.state === "waiting")
        acts.push(el("button", { type: "button", class: "danger", onclick: () => act("/api/jobs/" + j.id + "/cancel", "cancel job " + j.id) }, "cancel"));
    }
    $("detail-actions").replaceChildren(...acts);
    $("detail").hidden = false;
    $("detail").dataset.job = j.id;
  } catch (e) {
    showError("job " + id + ": " + e.message);
  }
}

function route() {
  const m = location.hash.match(/^#job=(\d+)$/);
  if (m) openJob(m[1]);
  else $("detail").hidden = true;
}

// ---- wiring ---------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  renderTabs();
  $("queue-filter").addEventListener("input", () => ui.overview && renderQueues(ui.overview));
  $("job-queue").addEventListener("change", (e) => { ui.jobQueue = e.target.value; ui.pages = []; loadJobs().catch(showError); });
  $("older").addEventListener("click", () => {
    const next = Number($("older").dataset.next);
    if (next) { ui.pages.push(next); loadJobs().catch(showError); }
  });
  $("newer").addEventListener("click", () => { ui.pages = []; loadJobs().catch(showError); });
  $("workers-fold").addEventListener("click", toggleStopped);
  $("detail-close").addEventListener("click", () => { history.replaceState(null, "", location.pathname); route(); });
  $("token").value = ui.token;
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    ui.token = $("token").value.trim();
    sessionStorage.setItem("tq-token", ui.token);
    $("updated").textContent = "token set";
  });
  window.addEventListener("hashchange", route);
  refresh().then(route);
  setInterval(refresh, REFRESH_MS);
});
