// sandgate approval page. Plain script, no build step, no dependencies.
//
// Security notes:
//  - The token arrives once as /?token=...; it is moved to sessionStorage
//    (this tab only, gone when the tab closes) and removed from the address
//    bar before the page renders, so it does not stay in history, bookmarks
//    or screenshots.
//  - The socket carries the token as a subprotocol, never in its URL.
//  - Everything from the server is rendered with textContent, never as HTML.
"use strict";

(function () {
  const TOKEN_KEY = "sandgate.approver.token";
  const url = new URL(window.location.href);
  const fromURL = url.searchParams.get("token");
  if (fromURL !== null) {
    if (fromURL) sessionStorage.setItem(TOKEN_KEY, fromURL);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }

  // A channel's link (a webhook's decision_url, Slack's "open in the
  // approval page") names one request in the fragment, which never reaches
  // a server: #approval=apr_<hex>. The page selects it once it arrives.
  const linkedIn = (hash) => (/^#approval=(apr_[0-9a-f]{1,64})$/.exec(hash) || [])[1] || null;
  const linked = linkedIn(url.hash);

  const HISTORY_MAX = 50;
  const RESOLVED_LINGER_MS = 5000;
  const BACKOFF_MIN_MS = 1000;
  const BACKOFF_MAX_MS = 30000;
  const DECISION_TIMEOUT_MS = 15000;

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY) || "",
    ws: null,
    live: false,
    skew: 0, // server clock minus ours, ms
    timeoutS: 120,
    cards: new Map(), // id -> {view, el, resolved}
    order: [], // ids in arrival order
    selected: null,
    history: [],
    backoff: BACKOFF_MIN_MS,
    retryTimer: null,
    retryAt: 0,
    refs: new Map(), // ref -> {id, timer}
    refSeq: 0,
    stopped: false,
    linked: linked,
  };

  const $ = (id) => document.getElementById(id);
  let els = {};

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  // ---- connection -------------------------------------------------------

  function b64url(s) {
    const bytes = new TextEncoder().encode(s);
    let bin = "";
    for (const b of bytes) bin += String.fromCharCode(b);
    return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function setConn(st, text) {
    els.conn.dataset.state = st;
    els.connText.textContent = text;
    els.retry.hidden = !(st === "reconnecting" || st === "offline");
  }

  function connect() {
    clearTimeout(state.retryTimer);
    state.retryTimer = null;
    if (state.stopped) return;
    if (!state.token) {
      setConn("auth", "No token");
      showNotice(state.linked
        ? "This page needs an approver token to show request " + state.linked + ". Open the link with your token " +
          "before the #: …/?token=…#approval=" + state.linked + " (the token leaves the address bar at once)."
        : "This page needs an approver token. Open the approval link the gateway printed at start " +
          "(…/?token=…), or ask an administrator for an approver token.");
      return;
    }
    setConn("connecting", "Connecting…");
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    let ws;
    try {
      ws = new WebSocket(scheme + "//" + location.host + "/v1/approvals/ws",
        ["sandgate.v1", "sandgate.bearer." + b64url(state.token)]);
    } catch (e) {
      setConn("auth", "Bad token");
      showNotice("The token cannot be used (it contains characters a browser refuses).");
      return;
    }
    state.ws = ws;
    let opened = false;
    ws.onopen = () => { opened = true; };
    ws.onmessage = (ev) => {
      let m;
      try { m = JSON.parse(ev.data); } catch (e) { return; }
      onMessage(m);
    };
    ws.onclose = (ev) => {
      if (state.ws !== ws) return;
      state.ws = null;
      state.live = false;
      updateButtons();
      failPendingRefs("the connection was lost before the gateway answered");
      if (!opened) {
        checkAuth();
      } else {
        scheduleReconnect(ev.code === 1001 ? "The gateway is restarting" : "Connection lost");
      }
    };
  }

  // A failed handshake gives a browser no status code; ask the API once to
  // tell a rejected token from an unreachable gateway.
  function checkAuth() {
    fetch("/v1/approvals?status=pending", { headers: { Authorization: "Bearer " + state.token }, cache: "no-store" })
      .then((r) => {
        if (r.status === 401 || r.status === 403) {
          state.stopped = true;
          setConn("auth", r.status === 401 ? "Token rejected" : "Not an approver token");
          showNotice(r.status === 401
            ? "The gateway rejected this token. Open the approval link printed at start, or ask for a new approver token."
            : "This token may not approve requests (only approver and admin tokens may).");
          return;
        }
        scheduleReconnect("Cannot connect");
      })
      .catch(() => scheduleReconnect("Gateway unreachable"));
  }

  function scheduleReconnect(why) {
    const jitter = 0.8 + Math.random() * 0.4;
    const delay = Math.min(BACKOFF_MAX_MS, state.backoff) * jitter;
    state.backoff = Math.min(BACKOFF_MAX_MS, state.backoff * 2);
    state.retryAt = Date.now() + delay;
    state.retryWhy = why;
    tickRetry();
    state.retryTimer = setTimeout(connect, delay);
  }

  function tickRetry() {
    if (!state.retryTimer && state.retryAt <= Date.now()) return;
    if (state.ws || state.stopped) return;
    const s = Math.max(0, Math.ceil((state.retryAt - Date.now()) / 1000));
    setConn(s > 10 ? "offline" : "reconnecting", state.retryWhy + " · retrying in " + s + " s");
  }

  // ---- messages ---------------------------------------------------------

  function onMessage(m) {
    if (m.server_time) state.skew = Date.parse(m.server_time) - Date.now();
    switch (m.type) {
      case "snapshot":
        state.live = true;
        state.backoff = BACKOFF_MIN_MS;
        hideNotice();
        setConn("live", "Live");
        if (m.approver) els.who.textContent = whoText(m.approver);
        if (m.timeout_s) state.timeoutS = m.timeout_s;
        applySnapshot(m.pending || [], m.history || []);
        break;
      case "approval.requested":
        addCard(m.approval);
        break;
      case "approval.resolved":
        resolveCard(m.approval, false);
        break;
      case "decision.result":
        onResult(m);
        break;
      case "error":
        toast(m.error ? m.error.message : "error");
        break;
    }
    updateButtons();
  }

  function applySnapshot(pending, hist) {
    const keep = new Set(pending.map((v) => v.id));
    // Cards the gateway no longer lists were resolved while we were away;
    // their outcome is in the history.
    for (const id of [...state.order]) {
      const c = state.cards.get(id);
      if (!keep.has(id) && c && !c.resolved) removeCard(id);
    }
    for (const v of pending) if (!state.cards.has(v.id)) addCard(v);
    state.history = hist.slice(0, HISTORY_MAX);
    renderHistory();
    applyLink();
  }

  // applyLink selects the linked request if it is waiting here, or says
  // it is not (once the snapshot is in).
  function applyLink() {
    const id = state.linked;
    if (!id || !state.live) return;
    state.linked = null;
    const c = state.cards.get(id);
    if (c && !c.resolved) { select(id, true); return; }
    const done = state.history.find((v) => v.id === id);
    showNotice("The linked request " + id + " is no longer waiting" +
      (done ? ": " + done.status + (done.decided_by ? " by " + done.decided_by : "") + "." : "."));
  }

  function send(obj) {
    if (!state.ws || state.ws.readyState !== WebSocket.OPEN) return false;
    state.ws.send(JSON.stringify(obj));
    return true;
  }

  // Grants a run approval can give (scope, seconds): "for this session
  // for 30 minutes" and "for this pattern in this tenant for 8 hours".
  const GRANT_FOR_S = { session: 30 * 60, pattern: 8 * 3600 };

  // decide sends a decision; scope "session" allows a network request's
  // host for the rest of its session, and on a run approval gives a grant
  // (with "pattern": for this tenant) that lasts GRANT_FOR_S.
  // grant, on a held network request, is {for_s, path_prefix}: a grant
  // for the session's later requests of the same method and host under
  // the prefix.
  function decide(id, decision, scope, grant) {
    const c = state.cards.get(id);
    if (!c || c.resolved || c.busy) return;
    if (scope === "pattern" && c.view.kind === "egress") return;
    const reason = c.el.querySelector(".reason-input").value.trim();
    const ref = "r" + (++state.refSeq);
    const msg = { type: "decide", ref, id, decision, reason, digest: c.view.digest };
    if (decision === "approve") msg.scope = scope || "once";
    if (decision === "approve" && c.view.kind !== "egress" && GRANT_FOR_S[scope]) msg.for_s = GRANT_FOR_S[scope];
    if (decision === "approve" && c.view.kind === "egress" && grant) Object.assign(msg, grant);
    if (!send(msg)) {
      toast("Not connected: the decision was not sent.");
      return;
    }
    c.busy = true;
    updateButtons();
    const timer = setTimeout(() => {
      state.refs.delete(ref);
      c.busy = false;
      updateButtons();
      toast("No answer from the gateway; check the request's state before deciding again.");
    }, DECISION_TIMEOUT_MS);
    state.refs.set(ref, { id, timer });
  }

  function onResult(m) {
    const r = state.refs.get(m.ref);
    if (r) {
      clearTimeout(r.timer);
      state.refs.delete(m.ref);
    }
    const id = r ? r.id : m.approval && m.approval.id;
    const c = id && state.cards.get(id);
    if (c) c.busy = false;
    if (m.ok) {
      resolveCard(m.approval, true);
      return;
    }
    if (m.approval && m.approval.status !== "pending") {
      // Someone (or something) resolved it first: say who.
      resolveCard(m.approval, false, true);
      return;
    }
    if (c) showBanner(c, "error", (m.error && m.error.message) || "The decision failed.");
  }

  function failPendingRefs(why) {
    for (const [ref, r] of state.refs) {
      clearTimeout(r.timer);
      const c = state.cards.get(r.id);
      if (c) {
        c.busy = false;
        showBanner(c, "error", "Not confirmed: " + why + ". Check the request after reconnecting.");
      }
      state.refs.delete(ref);
    }
  }

  // ---- cards ------------------------------------------------------------

  function addCard(v) {
    if (!v || state.cards.has(v.id)) return;
    const node = els.tpl.content.firstElementChild.cloneNode(true);
    node.dataset.id = v.id;
    const risk = node.querySelector(".risk");
    risk.textContent = v.risk_level || "?";
    risk.dataset.level = v.risk_level || "";
    const tenant = node.querySelector(".tenant");
    tenant.textContent = v.tenant || "";
    tenant.title = "tenant " + (v.tenant || "(none)");
    tenant.hidden = !v.tenant;
    node.querySelector(".session").textContent = v.session_id;
    node.querySelector(".session").title = "session " + v.session_id;
    node.querySelector(".lang").textContent = v.language;
    node.querySelector(".executor").textContent = "→ " + (v.executor || "?");
    node.querySelector(".principal").textContent =
      (v.principal ? "by " + v.principal : "") + (v.via ? " via " + v.via : "");

    if (v.intent) {
      const intent = node.querySelector(".intent");
      intent.append(el("span", "intent-label", "The agent says: "), el("q", null, v.intent));
      intent.hidden = false;
    }
    const reasons = node.querySelector(".reasons");
    for (const r of v.reasons || []) {
      const li = el("li");
      li.append(el("code", null, r.code), document.createTextNode(r.message || ""));
      reasons.append(li);
    }
    renderCode(node.querySelector(".code"), v.code || "", v.patterns || []);
    const pats = node.querySelector(".patterns");
    for (const p of v.patterns || []) {
      pats.append(el("li", null, (p.line > 0 ? "line " + p.line + ": " : "") + p.message + " (" + p.id + ")"));
    }
    node.querySelector(".digest").textContent = "digest " + v.digest + " · policy " + shortRev(v.policy_revision);
    if (v.kind === "egress") egressCard(node, v);
    else runGrantButtons(node, v);
    loadConnections(node, v);
    loadContext(node, v);

    const form = node.querySelector(".actions");
    form.addEventListener("submit", (e) => { e.preventDefault(); decide(v.id, "approve"); });
    node.querySelector(".deny").addEventListener("click", () => decide(v.id, "deny"));
    node.addEventListener("click", () => select(v.id, false));
    const input = node.querySelector(".reason-input");
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); decide(v.id, "approve"); }
      else if (e.key === "Enter" && e.shiftKey) { e.preventDefault(); decide(v.id, "deny"); }
      else if (e.key === "Enter") { e.preventDefault(); } // never approve by a stray Enter
    });

    state.cards.set(v.id, { view: v, el: node, resolved: false, busy: false });
    state.order.push(v.id);
    els.queue.append(node);
    tickCard(state.cards.get(v.id));
    if (!state.selected || !state.cards.has(state.selected) || state.cards.get(state.selected).resolved) select(v.id, false);
    if (v.id === state.linked) applyLink();
    updateCount();
  }

  // egressCard turns a card into a network request: "session X wants
  // host:port", no code, and three answers.
  function egressCard(node, v) {
    node.classList.add("egress");
    const wants = node.querySelector(".wants");
    wants.hidden = false;
    wants.append(document.createTextNode("Session "), el("strong", null, v.session_id),
      document.createTextNode(" wants to connect to "), el("code", "target", v.target));
    node.querySelector(".code").hidden = true;
    node.querySelector(".lang").textContent = "network";
    node.querySelector(".executor").textContent = "";
    node.querySelector(".approve").firstChild.textContent = "Allow once ";
    const s = node.querySelector(".approve-session");
    s.hidden = false;
    s.addEventListener("click", () => decide(v.id, "approve", "session"));
    egressGrant(node, v);
  }

  // egressGrant offers, on a held request ("POST host:port/path"), a grant
  // for the session's requests of that method and host under a path
  // prefix, for 30 minutes; the prefix starts as the request's path and
  // the approver may shorten it (the gateway refuses one that does not
  // cover the held path).
  function egressGrant(node, v) {
    const m = /^([A-Za-z]+) ([^/]+)(\/.*)$/.exec(v.target || "");
    if (!m) return;
    const prefix = node.querySelector(".grant-prefix");
    prefix.hidden = false;
    prefix.value = m[3];
    const b = node.querySelector(".approve-grant");
    b.hidden = false;
    b.firstChild.textContent = m[1] + " under this prefix, this session, 30 min ";
    b.addEventListener("click", () =>
      decide(v.id, "approve", "session", { for_s: GRANT_FOR_S.session, path_prefix: prefix.value.trim() || m[3] }));
  }

  // runGrantButtons offers the two grants on a run approval.
  function runGrantButtons(node, v) {
    const s = node.querySelector(".approve-session");
    s.hidden = false;
    s.firstChild.textContent = "Approve for this session, 30 min ";
    s.addEventListener("click", () => decide(v.id, "approve", "session"));
    const p = node.querySelector(".approve-pattern");
    p.hidden = false;
    p.addEventListener("click", () => decide(v.id, "approve", "pattern"));
  }

  // loadConnections shows the session's recent egress connections next to
  // its pending request (nothing when it has none).
  function loadConnections(node, v) {
    const q = new URLSearchParams({ tenant: v.tenant || "", session_id: v.session_id, limit: "10" });
    fetch("/v1/approvals/connections?" + q, { headers: { Authorization: "Bearer " + state.token }, cache: "no-store" })
      .then((r) => (r.ok ? r.json() : { connections: [] }))
      .then((body) => {
        const list = body.connections || [];
        if (!list.length) return;
        const box = node.querySelector(".conns");
        box.querySelector("ol").replaceChildren(...list.map((c) => {
          const li = el("li", "conn-" + (c.action === "allow" ? "allow" : "deny"));
          li.append(el("span", "c-action", c.action), el("code", null, c.host + ":" + c.port),
            el("span", "c-rule", c.rule),
            el("span", "c-bytes", fmtBytes(c.bytes_up) + " ↑ " + fmtBytes(c.bytes_down) + " ↓"),
            el("span", "h-time", new Date(c.time).toLocaleTimeString()));
          return li;
        }));
        box.hidden = false;
      })
      .catch(() => {});
  }

  // outputExcerpt is a run's output excerpt (the gateway cut and redacted
  // it): stdout, then stderr, each labelled; text only.
  function outputExcerpt(o) {
    const pre = el("pre", "excerpt");
    for (const [name, x] of [["stdout", o.stdout], ["stderr", o.stderr]]) {
      if (!x) continue;
      pre.append(el("span", "x-label", name + (x.cut ? " (" + fmtBytes(x.bytes) + ", cut)" : "") + ":\n"),
        el("span", name === "stderr" ? "x-err" : null, x.text + (x.text.endsWith("\n") ? "" : "\n")));
    }
    if (o.truncated) pre.append(el("span", "x-label", "(the run's output was cut at its limit)"));
    const last = pre.lastChild;
    if (last && last.textContent.endsWith("\n")) last.textContent = last.textContent.slice(0, -1);
    return pre.childNodes.length ? [pre] : [];
  }

  // fileDiff is a file write's or edit's diff, a line per span, or what
  // stands for it (binary, too large, unchanged).
  function fileDiff(d) {
    if (d.binary || d.too_large || !d.text) {
      return el("span", "t-note", d.status + ", " + (d.binary ? "binary" : d.too_large ? "too large to diff" : "no change"));
    }
    const pre = el("pre", "diff");
    const lines = d.text.split("\n");
    if (lines[lines.length - 1] === "") lines.pop();
    for (const line of lines) {
      const c = line.startsWith("@@") ? "d-hunk" : line.startsWith("+++") || line.startsWith("---") ? "x-label" :
        line.startsWith("+") ? "d-add" : line.startsWith("-") ? "d-del" : "d-ctx";
      pre.append(el("span", c + (c === "x-label" ? " d-ctx" : ""), line));
    }
    if (d.cut) pre.append(el("span", "x-label d-ctx", "… (cut; +" + d.added + " −" + d.removed + " in all)"));
    return pre;
  }

  // loadContext shows the session's timeline (runs with an excerpt of
  // their output, file changes with their diff, connections) and the
  // grants that almost matched a run, with why each did not, as the
  // policy says.
  function loadContext(node, v) {
    fetch("/v1/approvals/" + encodeURIComponent(v.id) + "/context", { headers: { Authorization: "Bearer " + state.token }, cache: "no-store" })
      .then((r) => (r.ok ? r.json() : { timeline: [], near_grants: [] }))
      .then((body) => {
        const items = (body.timeline || []).filter((t) => t.kind !== "egress"); // connections have their own list
        if (items.length) {
          const box = node.querySelector(".timeline");
          box.querySelector("ol").replaceChildren(...items.map((t) => {
            const li = el("li", "t-" + (t.outcome === "ok" ? "ok" : "bad"));
            const how = t.kind.startsWith("file.") ? t.outcome : (t.exit_code != null ? "exit " + t.exit_code : t.outcome) +
              (t.error_code ? " (" + t.error_code + ")" : "");
            li.append(el("span", "c-action", t.kind), el("code", null, t.what), el("span", "c-rule", (t.risk_level ? t.risk_level + " · " : "") + how),
              el("span", "h-time", new Date(t.time).toLocaleTimeString()));
            if (t.output) li.append(...outputExcerpt(t.output));
            if (t.diff) li.append(fileDiff(t.diff));
            return li;
          }));
          box.hidden = false;
        }
        const near = body.near_grants || [];
        if (near.length) {
          const box = node.querySelector(".near");
          box.querySelector("ol").replaceChildren(...near.map((n) => {
            const g = n.grant;
            const li = el("li");
            li.append(el("strong", null, (g.scope === "tenant" ? "tenant " + g.tenant : "session " + g.session_id) + " · " + g.risk_level),
              el("span", "c-rule", " by " + g.created_by + ": " + n.why.join("; ")));
            return li;
          }));
          box.hidden = false;
        }
      })
      .catch(() => {});
  }

  function fmtBytes(n) {
    if (n < 1024) return n + " B";
    if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
    return (n / (1 << 20)).toFixed(1) + " MiB";
  }

  function renderCode(box, code, patterns) {
    const hits = new Map();
    for (const p of patterns) {
      if (p.line > 0) hits.set(p.line, (hits.get(p.line) || []).concat(p.id + ": " + p.message));
    }
    const lines = code.split("\n");
    if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
    const frag = document.createDocumentFragment();
    lines.forEach((text, i) => {
      const n = i + 1;
      const row = el("div", "line");
      row.dataset.line = n;
      if (hits.has(n)) {
        row.classList.add("hit");
        row.title = hits.get(n).join("\n");
      }
      row.append(el("span", "no", n), el("span", "src", text === "" ? " " : text));
      frag.append(row);
    });
    box.append(frag);
    const first = box.querySelector(".line.hit");
    if (first && first.offsetTop > box.clientHeight) box.scrollTop = first.offsetTop - 40;
  }

  function shortRev(r) {
    if (!r) return "?";
    return r.replace(/^sha256:/, "").slice(0, 12);
  }

  const BANNERS = {
    approved: (v) => "Approved by " + (v.decided_by || "?"),
    denied: (v) => "Denied by " + (v.decided_by || "?"),
    timeout: () => "Timed out: nobody decided in time, so it was denied",
    withdrawn: () => "Withdrawn: the agent cancelled the request",
    interrupted: () => "Interrupted: the gateway stopped before anyone decided",
  };

  function resolveCard(v, mine, late) {
    if (!v) return;
    addHistory(v);
    const c = state.cards.get(v.id);
    if (!c) return;
    if (!c.resolved) {
      c.resolved = true;
      c.el.classList.add("resolved");
      let text = (BANNERS[v.status] || (() => v.status))(v);
      if (v.reason) text += " — “" + v.reason + "”";
      if (late) text = "Already decided. " + text;
      showBanner(c, v.status, text);
      if (state.selected === v.id) selectNext(v.id);
      setTimeout(() => removeCard(v.id), v.status === "withdrawn" ? RESOLVED_LINGER_MS * 2 : RESOLVED_LINGER_MS);
    }
    updateCount();
    updateButtons();
  }

  function showBanner(c, status, text) {
    const b = c.el.querySelector(".banner");
    b.dataset.status = status;
    b.textContent = text;
    b.hidden = false;
  }

  function removeCard(id) {
    const c = state.cards.get(id);
    if (!c) return;
    c.el.remove();
    state.cards.delete(id);
    state.order = state.order.filter((x) => x !== id);
    if (state.selected === id) selectNext(id);
    updateCount();
  }

  function openIds() {
    return state.order.filter((id) => { const c = state.cards.get(id); return c && !c.resolved; });
  }

  function select(id, scroll) {
    if (state.selected && state.cards.has(state.selected)) state.cards.get(state.selected).el.classList.remove("selected");
    state.selected = id;
    const c = id && state.cards.get(id);
    if (!c) return;
    c.el.classList.add("selected");
    if (scroll) c.el.scrollIntoView({ block: "nearest", behavior: "smooth" });
  }

  function selectNext(fromId) {
    const ids = openIds();
    if (!ids.length) { select(null); return; }
    const i = state.order.indexOf(fromId);
    const after = ids.find((id) => state.order.indexOf(id) > i);
    select(after || ids[ids.length - 1], false);
  }

  function move(delta) {
    const ids = openIds();
    if (!ids.length) return;
    let i = ids.indexOf(state.selected);
    i = i < 0 ? 0 : Math.max(0, Math.min(ids.length - 1, i + delta));
    select(ids[i], true);
  }

  function updateCount() {
    const n = openIds().length;
    els.count.textContent = n;
    els.count.classList.toggle("zero", n === 0);
    els.empty.hidden = state.cards.size > 0;
    document.title = (n ? "(" + n + ") " : "") + "sandgate · approvals";
  }

  function updateButtons() {
    for (const c of state.cards.values()) {
      const off = !state.live || c.resolved || c.busy;
      for (const b of c.el.querySelectorAll(".actions button")) b.disabled = off;
    }
  }

  // ---- countdowns -------------------------------------------------------

  function tickCard(c) {
    if (c.resolved) return;
    const v = c.view;
    const now = Date.now() + state.skew;
    const end = Date.parse(v.deadline);
    const start = Date.parse(v.requested_at);
    const left = Math.max(0, end - now);
    const s = Math.ceil(left / 1000);
    const cd = c.el.querySelector(".countdown");
    c.el.querySelector(".left").textContent = left > 0 ? Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0") : "expiring…";
    const total = Math.max(1, end - start);
    c.el.querySelector(".fill").style.width = (100 * left / total).toFixed(1) + "%";
    cd.classList.toggle("low", s <= 20);
  }

  // ---- history ----------------------------------------------------------

  function addHistory(v) {
    if (v.status === "pending") return;
    state.history = [v].concat(state.history.filter((h) => h.id !== v.id)).slice(0, HISTORY_MAX);
    renderHistory();
  }

  function renderHistory() {
    els.history.replaceChildren(...state.history.map(historyItem));
    els.histEmpty.hidden = state.history.length > 0;
  }

  function historyItem(v) {
    const li = el("li");
    li.dataset.id = v.id;
    const top = el("div", "h-top");
    const st = el("span", "status", v.status);
    st.dataset.status = v.status;
    top.append(st, el("span", null, v.decided_by ? "by " + v.decided_by : ""),
      el("span", "h-time", v.decided_at ? new Date(v.decided_at).toLocaleTimeString() : ""));
    li.append(top);
    const sub = [v.tenant ? v.tenant + " / " + v.session_id : v.session_id, v.language, v.risk_level];
    if (v.kind === "egress") {
      sub.splice(1, 1, v.target);
      if (v.scope) sub.push({ session: "for the session", pattern: "for the pattern" }[v.scope] || "once");
    }
    if (v.time_to_decide_ms) sub.push(fmtDuration(v.time_to_decide_ms) + " to decide");
    li.append(el("div", "h-sub", sub.filter(Boolean).join(" · ")));
    if (v.reason) li.append(el("div", "h-reason", "“" + v.reason + "”"));
    return li;
  }

  // whoText names the signed-in approver, and the tenants it is limited
  // to, if any.
  function whoText(a) {
    let s = a.name + " (" + a.role + ")";
    if (a.tenants && a.tenants.length) s += " · " + a.tenants.join(", ");
    return s;
  }

  function fmtDuration(ms) {
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
  }

  // ---- misc UI ----------------------------------------------------------

  let toastTimer = null;
  function toast(text) {
    showNotice(text);
    clearTimeout(toastTimer);
    toastTimer = setTimeout(hideNotice, 6000);
  }
  function showNotice(text) { els.notice.textContent = text; els.notice.hidden = false; }
  function hideNotice() { els.notice.hidden = true; }

  function onKey(e) {
    if (e.defaultPrevented || e.altKey) return;
    const typing = e.target && (e.target.tagName === "INPUT" || e.target.tagName === "TEXTAREA");
    if (e.key === "Escape") {
      if (!els.help.hidden) { els.help.hidden = true; return; }
      if (typing) e.target.blur();
      return;
    }
    if (typing || e.ctrlKey || e.metaKey) return;
    if (!els.help.hidden && e.key !== "?") return;
    switch (e.key) {
      case "j": case "ArrowDown": move(1); break;
      case "k": case "ArrowUp": move(-1); break;
      case "a": if (state.selected) decide(state.selected, "approve"); break;
      case "d": if (state.selected) decide(state.selected, "deny"); break;
      case "s": if (state.selected) decide(state.selected, "approve", "session"); break;
      case "p": if (state.selected) decide(state.selected, "approve", "pattern"); break;
      case "r": {
        const c = state.selected && state.cards.get(state.selected);
        if (c && !c.resolved) c.el.querySelector(".reason-input").focus();
        break;
      }
      case "?": els.help.hidden = !els.help.hidden; break;
      default: return;
    }
    e.preventDefault();
  }

  function init() {
    els = {
      conn: $("conn"), connText: $("conn-text"), retry: $("retry"), who: $("who"), notice: $("notice"),
      queue: $("queue"), empty: $("empty"), count: $("count"), history: $("history"), histEmpty: $("hist-empty"),
      help: $("help"), tpl: $("card-tpl"),
    };
    $("help-btn").addEventListener("click", () => { els.help.hidden = !els.help.hidden; });
    $("help-close").addEventListener("click", () => { els.help.hidden = true; });
    els.help.addEventListener("click", (e) => { if (e.target === els.help) els.help.hidden = true; });
    els.retry.addEventListener("click", () => { state.backoff = BACKOFF_MIN_MS; connect(); });
    $("forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      state.token = "";
      state.stopped = true;
      if (state.ws) state.ws.close();
      setConn("auth", "Signed out");
      showNotice("The token was removed from this tab. Open the approval link again to sign back in.");
    });
    document.addEventListener("keydown", onKey);
    window.addEventListener("hashchange", () => {
      state.linked = linkedIn(location.hash);
      if (state.live) hideNotice();
      applyLink();
    });
    setInterval(() => {
      for (const c of state.cards.values()) tickCard(c);
      tickRetry();
    }, 1000);
    updateCount();
    renderHistory();
    connect();
  }

  document.addEventListener("DOMContentLoaded", init);
})();
