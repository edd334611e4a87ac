// Squall UI: poll the JSON API every 2 s and fill in the figures; the action buttons POST to it.
// Served as a file: the pages' Content-Security-Policy runs no inline script. Whatever comes from
// the API goes into the page as text (textContent), never as markup.
"use strict";
(function () {
  const body = document.body;
  const page = body.dataset.page;
  const POLL_MS = 2000;
  let win = new URLSearchParams(location.search).get("window") || ":all-time";

  const count = (v) => (typeof v === "number" ? v.toLocaleString("en-US") : String(v ?? ""));
  // the same text as the pages' `latency` filter (ui/data.py, latency_text): three significant
  // digits below 100 ms, whole ms with thousands separators from 100 ms, "0" for none
  function latency(v) {
    if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) return "0";
    const shown = Number(v.toPrecision(3));
    if (shown >= 100) return Math.round(v).toLocaleString("en-US");
    return shown.toFixed(Math.min(6, 2 - Math.floor(Math.log10(shown))));
  }
  window.squallFormat = {count, latency};
  const text = (key, v) => (/Latency$/.test(key) ? latency(v) : count(v));
  function set(key, value) {
    document.querySelectorAll('[data-k="' + CSS.escape(key) + '"]').forEach((el) => {
      const t = text(key, value);
      if (el.textContent !== t) el.textContent = t;
    });
  }
  // a table row of text cells: [text, class] or text
  function row(cells, attrs) {
    const tr = document.createElement("tr");
    for (const [k, v] of Object.entries(attrs || {})) tr.setAttribute(k, v);
    for (const c of cells) {
      const td = document.createElement("td");
      const [t, cls, extra] = Array.isArray(c) ? c : [c];
      if (cls) td.className = cls;
      if (extra) for (const [k, v] of Object.entries(extra)) td.setAttribute(k, v);
      if (t instanceof Node) td.appendChild(t); else td.textContent = String(t ?? "");
      tr.appendChild(td);
    }
    return tr;
  }
  // Storm UI's jstack and profile: every thread's stack of the worker, or a 5 s sampled
  // profile, as text in a new tab
  function debugLink(topology, slot, what) {
    const a = document.createElement("a");
    a.href = "/topology/" + encodeURIComponent(topology) + "/" + what + "/" + encodeURIComponent(slot);
    a.target = "_blank";
    a.rel = "noopener";
    a.textContent = what;
    return a;
  }
  function debugLinks(topology, slot) {
    const span = document.createElement("span");
    span.append(debugLink(topology, slot, "stacks"), " ", debugLink(topology, slot, "profile"));
    return span;
  }
  function empty(span, message) {
    const tr = row([[message, "", {colspan: String(span)}]]);
    tr.className = "empty";
    return tr;
  }
  function say(text, ok) {
    const m = document.getElementById("message");
    m.hidden = false;
    m.textContent = text;
    m.className = "message " + (ok ? "ok" : "bad");
  }
  function live(ok) {
    const el = document.getElementById("live");
    el.className = "live " + (ok ? "" : "stale");
    el.textContent = ok ? "live" : "stale";
  }

  async function getJSON(url) {
    const r = await fetch(url, {headers: {Accept: "application/json"}});
    if (!r.ok) throw new Error(r.status + " " + (await r.text()));
    return r.json();
  }

  function renderTopology(t) {
    for (const k of ["status", "uptime", "workersTotal", "executorsTotal", "tasksTotal"]) set(k, t[k]);
    const st = document.getElementById("status");
    if (st) st.className = "status s-" + t.status;
    for (const w of t.topologyStats) {
      for (const f of ["emitted", "transferred", "completeLatency", "acked", "failed"]) set("topo:" + w.window + ":" + f, w[f]);
    }
    for (const s of t.spouts) {
      for (const f of ["executors", "emitted", "transferred", "completeLatency", "acked", "failed", "pending", "lastError"]) set("spout:" + s.spoutId + ":" + f, s[f]);
    }
    for (const b of t.bolts) {
      for (const f of ["executors", "emitted", "transferred", "executed", "executeLatency", "acked", "failed", "lastError"]) set("bolt:" + b.boltId + ":" + f, b[f]);
    }
    const label = (t.topologyStats.find((w) => w.window === t.window) || {}).windowPretty || "";
    set("window-label", "(" + label + ")");
    const wb = document.querySelector("#workers tbody");
    if (wb) wb.replaceChildren(...t.workers.map((w) => row([w.node + "-" + w.port, w.host, w.port, w.uptime,
      w.heartbeatAgeSecs, w.components.join(", "), w.executors.join(" "), debugLinks(t.id, w.node + "-" + w.port)])));
    const eb = document.querySelector("#errors tbody");
    if (eb) eb.replaceChildren(...(t.errors.length ? t.errors.map((e) => row([e.timePretty, e.component, e.executor || "",
      e.task, e.host + ":" + e.port, [e.error, "err", {title: String(e.errorFull ?? "")}]])) : [empty(6, "No errors.")]));
    const act = document.getElementById("btn-activate"), deact = document.getElementById("btn-deactivate");
    if (act) act.disabled = t.status !== "INACTIVE";
    if (deact) deact.disabled = t.status !== "ACTIVE";
    for (const id of ["btn-rebalance", "btn-kill"]) {
      const b = document.getElementById(id);
      if (b) b.disabled = t.status === "KILLED" || (id === "btn-rebalance" && t.status === "REBALANCING");
    }
    body.dataset.updated = String(Date.now());
  }

  function renderIndex(c, s) {
    for (const k of Object.keys(c)) set("cluster:" + k, c[k]);
    const tb = document.querySelector("#topologies tbody");
    tb.replaceChildren(...(s.topologies.length ? s.topologies.map((t) => {
      const a = document.createElement("a");
      a.href = "/topology/" + encodeURIComponent(t.id);
      a.textContent = t.name;
      const status = document.createElement("span");
      status.className = "status s-" + t.status;
      status.textContent = t.status;
      return row([a, status, t.uptime, [count(t.workersTotal), "num"], [count(t.executorsTotal), "num"],
        [count(t.tasksTotal), "num"], [count(t.acked), "num"], [count(t.failed), "num"],
        [latency(t.completeLatency), "num"]], {"data-topology": t.name});
    }) : [empty(9, "No topologies running.")]));
    body.dataset.updated = String(Date.now());
  }

  // the event inspector's samples (squall debug): text cells only, newest last
  function renderEvents(got) {
    const tb = document.querySelector("#events tbody");
    if (!tb) return;
    const rows = (got.events || []).map((e) => row([
      new Date(e.time_secs * 1000).toISOString().slice(11, 23), e.component, [e.task, "num"], e.stream,
      e.msg_id ?? "", "[" + (e.values || []).join(", ") + "]", e.worker]));
    tb.replaceChildren(...(rows.length ? rows : [empty(7, "No sampled tuples.")]));
  }

  async function poll() {
    try {
      if (page === "topology") {
        const id = encodeURIComponent(body.dataset.topology);
        renderTopology(await getJSON("/api/v1/topology/" + id + "?window=" + encodeURIComponent(win)));
        renderEvents(await getJSON("/api/v1/topology/" + id + "/events?n=50"));
      } else {
        const [c, s] = await Promise.all([getJSON("/api/v1/cluster/summary"), getJSON("/api/v1/topology/summary")]);
        renderIndex(c, s);
      }
      live(true);
    } catch (e) {
      live(false);
    }
  }

  async function act(op, path, payload) {
    const name = body.dataset.topology;
    const r = await fetch("/api/v1/topology/" + encodeURIComponent(name) + "/" + path, {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(payload || {}),
    });
    const got = await r.json().catch(() => ({}));
    if (r.ok) say(got.message || op + ": done", true);
    else say(op + " refused (" + r.status + "): " + (got.errorMessage || got.error || ""), false);
    poll();
  }

  function wireActions() {
    const bar = document.getElementById("actions");
    if (!bar) return;
    bar.addEventListener("click", (ev) => {
      const b = ev.target.closest("button[data-op]");
      if (!b) return;
      const op = b.dataset.op;
      if (op === "activate" || op === "deactivate") return act(op, op);
      if (op === "rebalance") {
        const workers = document.getElementById("rb-workers").value.trim();
        const executors = {};
        for (const part of document.getElementById("rb-executors").value.split(",")) {
          if (!part.trim()) continue;
          const [c, n] = part.split("=");
          executors[(c || "").trim()] = Number((n || "").trim());
        }
        const opts = {};
        if (workers) opts.numWorkers = Number(workers);
        if (Object.keys(executors).length) opts.executors = executors;
        const wait = document.getElementById("rb-wait").value.trim();
        return act(op, "rebalance" + (wait ? "/" + encodeURIComponent(wait) : ""), {rebalanceOptions: opts});
      }
      if (op === "kill") {
        const wait = document.getElementById("kill-wait").value.trim();
        if (!window.confirm("Kill topology " + body.dataset.topology + "?")) return;
        return act(op, "kill" + (wait ? "/" + encodeURIComponent(wait) : ""));
      }
    });
  }

  // Storm UI's debug switch: POST .../debug/enable|disable/PCT, per component or for all
  function wireDebug() {
    const bar = document.getElementById("debug");
    if (!bar) return;
    bar.addEventListener("click", (ev) => {
      const b = ev.target.closest("button[data-debug]");
      if (!b) return;
      const comp = document.getElementById("dbg-component").value;
      const pct = document.getElementById("dbg-pct").value.trim() || "10";
      const secs = document.getElementById("dbg-secs").value.trim();
      const path = (comp ? "component/" + encodeURIComponent(comp) + "/" : "") + "debug/" + b.dataset.debug + "/" +
        encodeURIComponent(b.dataset.debug === "enable" ? pct : "0") + (secs ? "?secs=" + encodeURIComponent(secs) : "");
      return act("debug", path);
    });
  }

  function wireWindows() {
    document.querySelectorAll("#windows button[data-window]").forEach((b) => b.addEventListener("click", () => {
      win = b.dataset.window;
      document.querySelectorAll("#windows button").forEach((x) => x.classList.toggle("on", x === b));
      const u = new URL(location.href);
      u.searchParams.set("window", win);
      history.replaceState(null, "", u);
      poll();
    }));
  }

  wireActions();
  wireDebug();
  wireWindows();
  if (page === "topology" || page === "index") {
    poll();
    setInterval(poll, POLL_MS);
  } else {
    // a page whose figures were asked for once, when it was served (the component page's
    // metrics come from its workers): say so instead of "live"
    const el = document.getElementById("live");
    if (el) {
      el.className = "live snapshot";
      el.textContent = "snapshot";
      el.title = "figures as of this page's load: reload to refresh";
    }
  }
})();
