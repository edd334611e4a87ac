// Squall UI: poll the JSON API every 2 s and fill in the figures; the action buttons POST to it.
"use strict";
(function () {
  const body = document.body;
  const page = body.dataset.page;
  const POLL_MS = 2000;
  let win = new URLSearchParams(location.search).get("window") || ":all-time";

  const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const num = (v) => (typeof v === "number" ? (Number.isInteger(v) ? v.toLocaleString("en-US") : v.toFixed(2)) : String(v ?? ""));
  function set(key, value) {
    document.querySelectorAll('[data-k="' + CSS.escape(key) + '"]').forEach((el) => {
      const text = num(value);
      if (el.textContent !== text) el.textContent = text;
    });
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
    if (wb) wb.innerHTML = t.workers.map((w) => "<tr><td>" + esc(w.node + "-" + w.port) + "</td><td>" + esc(w.host) + "</td><td>" + esc(w.port) +
      "</td><td>" + esc(w.uptime) + "</td><td>" + esc(w.heartbeatAgeSecs) + "</td><td>" + esc(w.components.join(", ")) + "</td><td>" + esc(w.executors.join(" ")) + "</td></tr>").join("");
    const eb = document.querySelector("#errors tbody");
    if (eb) eb.innerHTML = t.errors.length ? t.errors.map((e) => "<tr><td>" + esc(e.timePretty) + "</td><td>" + esc(e.component) + "</td><td>" + esc(e.executor || "") + "</td><td>" + esc(e.task) +
      "</td><td>" + esc(e.host + ":" + e.port) + "</td><td class=\"err\" title=\"" + esc(e.errorFull) + "\">" + esc(e.error) + "</td></tr>").join("")
      : "<tr class=\"empty\"><td colspan=\"6\">No errors.</td></tr>";
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
    tb.innerHTML = s.topologies.length ? s.topologies.map((t) => "<tr data-topology=\"" + esc(t.name) + "\"><td><a href=\"/topology/" + encodeURIComponent(t.id) + "\">" + esc(t.name) +
      "</a></td><td><span class=\"status s-" + esc(t.status) + "\">" + esc(t.status) + "</span></td><td>" + esc(t.uptime) + "</td><td>" + t.workersTotal + "</td><td>" + t.executorsTotal +
      "</td><td>" + t.tasksTotal + "</td><td class=\"num\">" + num(t.acked) + "</td><td class=\"num\">" + num(t.failed) + "</td><td class=\"num\">" + Number(t.completeLatency).toFixed(2) + "</td></tr>").join("")
      : "<tr class=\"empty\"><td colspan=\"9\">No topologies running.</td></tr>";
    body.dataset.updated = String(Date.now());
  }

  async function poll() {
    try {
      if (page === "topology") {
        renderTopology(await getJSON("/api/v1/topology/" + encodeURIComponent(body.dataset.topology) + "?window=" + encodeURIComponent(win)));
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
  wireWindows();
  poll();
  setInterval(poll, POLL_MS);
})();
