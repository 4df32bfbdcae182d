// sandgate audit view: the chained audit log, for admin tokens. Plain
// script, no build step, like app.js and standing.js.
//
// It shares the page (and the token app.js moved to sessionStorage) with
// the approval queue: `v` or the Audit button switches between the two,
// and #audit opens it directly. The view appears only once GET /v1/audit
// answers this token (admins); the server refuses everyone else anyway.
//
// While the view is open it owns the keyboard: its keys are taken in the
// capture phase and kept from app.js, so a stray `a` or `d` here never
// decides a request in the hidden queue.
//
// Everything from the server is rendered with textContent, never as HTML.
(function () {
  "use strict";
  const TOKEN_KEY = "sandgate.approver.token";
  const PAGE = 100;
  const KINDS = ["run_code", "execute", "egress", "egress_request", "browser.action", "browser.request", "file.write",
    "file.edit", "file.get", "file.read", "file.delete", "session.fork", "session.delete", "session.expire",
    "session.pause", "session.resume", "snapshot.create", "kernel.restart", "approval.callback", "grant.revoked", "evaluate"];
  const OUTCOMES = ["ok", "failed", "timed_out", "denied", "invalid", "error", "unavailable", "cancelled", "limited",
    "interrupted", "started"];
  const FILTERS = [
    ["tenant", "Tenant", "any tenant"],
    ["session_id", "Session", "any session"],
    ["kind", "Kind", "any kind"],
    ["outcome", "Outcome", "any outcome"],
    ["since", "Since", "e.g. 2h, 2026-11-27 09:00"],
    ["until", "Until", "e.g. 2026-11-27T18:00:00Z"],
  ];
  const KEYS = [
    ["v", "switch between the approvals and the audit log (admins)"],
    ["/", "audit: edit the filters (Enter applies)"],
    ["j / k", "audit: next / previous record"],
    ["Enter / o", "audit: open the selected record"],
    ["c", "audit: verify the hash chain"],
    ["b", "audit: go to the broken record"],
    ["e", "audit: export the filtered records as NDJSON"],
    ["m", "audit: load more"],
    ["x", "audit: clear the filters"],
  ];

  const $ = (id) => document.getElementById(id);
  const st = { admin: false, open: false, records: [], next: 0, sel: -1, query: "", broken: null, busy: false, els: {} };

  function el(tag, cls, text) {
    const n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  }

  function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

  function get(path) {
    return fetch(path, { headers: { Authorization: "Bearer " + token() }, cache: "no-store" });
  }

  // json reads an answer: its body, or an Error carrying the API's stable
  // code and the field it names.
  function json(r) {
    return r.json().catch(() => ({})).then((b) => {
      if (r.ok) return b;
      const e = (b && b.error) || {};
      const f = (e.fields && e.fields[0]) || null;
      const err = new Error(f ? f.field + ": " + f.message : e.message || "HTTP " + r.status);
      err.code = e.code || "http_" + r.status;
      err.field = f && f.field;
      throw err;
    });
  }

  // ---- filters --------------------------------------------------------

  // when turns what an admin types into RFC 3339: "15m", "2h", "7d" (that
  // long ago), "YYYY-MM-DD[ HH:MM[:SS]]" (UTC), or RFC 3339 itself.
  // Anything else goes to the server as typed, which names the field.
  function when(s) {
    s = s.trim();
    const rel = /^(\d+)\s*([mhd])$/.exec(s);
    if (rel) {
      const ms = { m: 60e3, h: 3600e3, d: 86400e3 }[rel[2]] * Number(rel[1]);
      return new Date(Date.now() - ms).toISOString();
    }
    const d = /^(\d{4}-\d{2}-\d{2})(?:[ T](\d{2}:\d{2})(:\d{2})?)?$/.exec(s);
    if (d) return d[1] + "T" + (d[2] || "00:00") + (d[3] || ":00") + "Z";
    return s;
  }

  function filterQuery() {
    const q = new URLSearchParams();
    for (const [name] of FILTERS) {
      let v = st.els.inputs[name].value.trim();
      if (!v) continue;
      if (name === "since" || name === "until") v = when(v);
      q.set(name, v);
    }
    return q;
  }

  function markInvalid(field) {
    for (const [name, input] of Object.entries(st.els.inputs)) input.classList.toggle("invalid", name === field);
  }

  // ---- the list -------------------------------------------------------

  // load reads the first page the filters select (more: the next one),
  // then calls then.
  function load(more, then) {
    if (st.busy) { st.again = [more, then]; return; } // the latest ask runs next
    const q = more ? new URLSearchParams(st.query) : filterQuery();
    if (more) {
      if (!st.next) return;
      q.set("cursor", String(st.next));
    } else {
      st.query = q.toString();
    }
    q.set("limit", String(PAGE));
    st.prevSel = st.sel >= 0 && st.records[st.sel] ? st.records[st.sel].id : null;
    st.busy = true;
    status(more ? "Loading more…" : "Loading…");
    get("/v1/audit?" + q).then(json).then((page) => {
      markInvalid(null);
      const recs = page.records || [];
      st.records = more ? st.records.concat(recs) : recs;
      st.next = page.next_cursor || 0;
      if (!more) keepSelection(recs);
      render();
      status(st.records.length + " record" + (st.records.length === 1 ? "" : "s") + (st.next ? " shown · more with m" : ""));
      if (then) then();
    }).catch((e) => {
      markInvalid(e.field);
      status("Filter refused: " + e.message + " (" + e.code + ")", "error");
    }).finally(() => {
      st.busy = false;
      const again = st.again;
      st.again = null;
      if (again) load(again[0], again[1]);
    });
  }

  // keepSelection stays on the record selected before a reload when the
  // new rows hold it, and shows the open record as it reads now.
  function keepSelection(recs) {
    const was = st.prevSel;
    const i = was == null ? -1 : recs.findIndex((r) => r.id === was);
    st.sel = i >= 0 ? i : recs.length ? 0 : -1;
    const open = st.els.detail.hidden ? null : recs.find((r) => String(r.id) === st.els.detail.dataset.id);
    if (open) openRecord(open);
  }

  function render() {
    const rows = st.records.map((r, i) => {
      const tr = el("tr");
      tr.dataset.id = r.id;
      tr.dataset.outcome = r.outcome;
      if (i === st.sel) tr.classList.add("selected");
      if (isBroken(r.id)) tr.classList.add("broken");
      const outcome = el("td", "a-outcome");
      outcome.append(el("span", "status", r.outcome));
      outcome.firstChild.dataset.status = r.outcome;
      tr.append(el("td", "a-id", r.id), el("td", "a-time", fmtTime(r.time)), el("td", null, r.tenant || ""),
        el("td", "a-session", r.session_id || ""), el("td", "a-kind", r.kind), outcome,
        el("td", null, r.action || ""), el("td", null, r.risk_level || ""), el("td", "a-who", r.principal || ""));
      tr.addEventListener("click", () => { select(i); openRecord(r); });
      return tr;
    });
    st.els.rows.replaceChildren(...rows);
    st.els.empty.hidden = st.records.length > 0;
    st.els.more.hidden = !st.next;
  }

  function select(i) {
    if (!st.records.length) return;
    st.sel = Math.max(0, Math.min(st.records.length - 1, i));
    for (const tr of st.els.rows.children) tr.classList.remove("selected");
    const tr = st.els.rows.children[st.sel];
    if (tr) {
      tr.classList.add("selected");
      tr.scrollIntoView({ block: "nearest" });
    }
    if (!st.els.detail.hidden) openRecord(st.records[st.sel]);
  }

  function fmtTime(t) {
    return t ? t.replace("T", " ").replace(/\.\d+Z$/, "Z") : "";
  }

  // ---- one record -----------------------------------------------------

  function openRecord(r) {
    if (!r) return;
    const d = st.els.detail;
    d.dataset.id = r.id;
    const head = el("div", "a-detail-head");
    head.append(el("h3", null, "Record " + r.id), el("span", "status", r.outcome));
    head.lastChild.dataset.status = r.outcome;
    const close = el("button", "link", "Close (Esc)");
    close.type = "button";
    close.addEventListener("click", closeRecord);
    head.append(close);
    const parts = [head];
    if (isBroken(r.id)) {
      const b = st.broken.find((x) => x.id === r.id);
      parts.push(el("p", "a-broken-note", "The chain breaks here (replica " + b.replica + "): " + b.reason +
        ". What this record says now is not what was written."));
    }
    const dl = el("dl");
    const fields = [["request", r.request_id], ["time", fmtTime(r.time)], ["kind", r.kind], ["tenant", r.tenant],
      ["session", r.session_id], ["principal", r.principal], ["language", r.language], ["risk", r.risk_level],
      ["patterns", (r.risk_patterns || []).join(", ")], ["action", r.action], ["would be", r.would_be],
      ["executor", r.executor], ["outcome", r.outcome], ["error", r.error_code],
      ["exit code", r.exit_code == null ? "" : r.exit_code], ["duration", r.duration_ms != null ? r.duration_ms + " ms" : ""],
      ["HTTP", r.http_status], ["path", r.path], ["bytes", r.bytes], ["code", r.code_sha256 ? r.code_sha256 + " (" + r.code_bytes + " bytes)" : ""],
      ["policy", r.policy_revision], ["decision", r.decision_id]];
    if (r.approval) {
      const a = r.approval;
      fields.push(["approval", a.id + " · " + a.status + (a.decided_by ? " by " + a.decided_by : "") + (a.reason ? " — “" + a.reason + "”" : "")]);
    }
    for (const x of r.reasons || []) fields.push(["reason", x.code + ": " + x.message + (x.enforcement ? " (" + x.enforcement + ")" : "")]);
    for (const [k, v] of Object.entries(r.detail || {})) fields.push([k, v]);
    for (const [k, v] of fields) {
      if (v === undefined || v === null || v === "" || v === 0 && k === "bytes") continue;
      dl.append(el("dt", null, k), el("dd", null, v));
    }
    parts.push(dl, el("pre", "a-json", JSON.stringify(r, null, 2)));
    d.replaceChildren(...parts);
    d.hidden = false;
  }

  function closeRecord() { st.els.detail.hidden = true; }

  // ---- the chain ------------------------------------------------------

  function isBroken(id) { return !!(st.broken && st.broken.some((b) => b.id === id)); }

  function verify() {
    const box = st.els.chain;
    box.hidden = false;
    box.dataset.state = "checking";
    box.replaceChildren(el("span", null, "Verifying the hash chain…"));
    get("/v1/audit/verify").then(json).then((v) => {
      st.broken = v.broken || [];
      const per = Object.entries(v.records || {}).map(([rep, n]) => n + " in " + rep).join(", ");
      if (v.verified) {
        box.dataset.state = "ok";
        box.replaceChildren(el("strong", null, "✓ Chain verified"),
          el("span", null, " · " + v.total + " records (" + (per || "none") + ") · checked " + fmtTime(v.checked_at)));
      } else {
        box.dataset.state = "broken";
        const parts = [el("strong", null, "✗ Chain broken")];
        for (const b of st.broken) {
          const r = b.record || {};
          const line = el("div", "a-link");
          line.append(el("span", null, "at record "), el("strong", "a-broken-id", "#" + b.id),
            el("span", null, " (replica " + b.replica + "): " + b.reason + "."),
            el("span", "a-broken-what", r.kind ? " It now reads: " + r.kind + " · " + (r.session_id || "-") + " · " +
              r.outcome + " · " + fmtTime(r.time) + " · " + r.request_id + "." : ""));
          const open = el("button", "link", "Open it (b)");
          open.type = "button";
          open.addEventListener("click", () => goBroken(b));
          line.append(open);
          parts.push(line);
        }
        box.replaceChildren(...parts);
      }
      // The rows again, as stored now: an edited record shows what it
      // says after the edit, marked where its chain breaks.
      load(false, () => goBroken(st.broken[0]));
    }).catch((e) => {
      box.dataset.state = "broken";
      box.replaceChildren(el("span", null, "Could not verify: " + e.message + " (" + e.code + ")"));
    });
  }

  // goBroken selects the broken record when it is listed, and opens it
  // either way (a filter may hide it).
  function goBroken(b) {
    b = b || (st.broken && st.broken[0]);
    if (!b) return;
    const i = st.records.findIndex((r) => r.id === b.id);
    if (i >= 0) select(i);
    if (b.record) openRecord(b.record);
    else get("/v1/audit/records/" + b.id).then(json).then(openRecord).catch(() => {});
  }

  // ---- export ---------------------------------------------------------

  function exportNDJSON() {
    const q = st.query ? "?" + st.query : "";
    status("Exporting…");
    let name = "sandgate-audit.ndjson";
    get("/v1/audit/export" + q).then((r) => {
      if (!r.ok) return json(r);
      const cd = /filename="([^"]+)"/.exec(r.headers.get("Content-Disposition") || "");
      if (cd) name = cd[1];
      return r.blob();
    }).then((blob) => blob.text().then((text) => {
      const n = text ? text.split("\n").filter(Boolean).length : 0;
      const a = el("a");
      a.href = URL.createObjectURL(blob);
      a.download = name;
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(a.href), 10000);
      status("Exported " + n + " record" + (n === 1 ? "" : "s") + " to " + name, "done");
    })).catch((e) => status("Export refused: " + e.message + " (" + e.code + ")", "error"));
  }

  function status(text, kind) {
    st.els.status.textContent = text;
    st.els.status.dataset.kind = kind || "";
  }

  // ---- view switching and keys ---------------------------------------

  function show(open) {
    if (open && !st.admin) return;
    st.open = open;
    st.els.view.hidden = !open;
    document.body.classList.toggle("audit-open", open);
    st.els.btn.textContent = open ? "Approvals" : "Audit";
    st.els.btn.setAttribute("aria-pressed", String(open));
    if (open && location.hash !== "#audit") history.replaceState(null, "", "#audit");
    if (!open && location.hash === "#audit") history.replaceState(null, "", location.pathname + location.search);
    if (open && !st.query && !st.records.length) load(false);
  }

  function typing(e) {
    const t = e.target;
    return t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT");
  }

  function onKey(e) {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    const help = $("help");
    if (!st.open) {
      if (e.key === "v" && st.admin && !typing(e) && help.hidden) { e.preventDefault(); e.stopImmediatePropagation(); show(true); }
      return;
    }
    if (typing(e)) {
      if (e.key === "Escape") { e.target.blur(); e.preventDefault(); e.stopImmediatePropagation(); }
      return; // Enter submits the filter form
    }
    if (e.key === "?" || !help.hidden) return; // app.js's help
    const keys = {
      v: () => show(false), j: () => select(st.sel + 1), ArrowDown: () => select(st.sel + 1),
      k: () => select(st.sel - 1), ArrowUp: () => select(st.sel - 1),
      Enter: () => openRecord(st.records[st.sel]), o: () => openRecord(st.records[st.sel]),
      Escape: closeRecord, "/": focusFilters, c: verify, b: () => goBroken(),
      e: exportNDJSON, m: () => load(true), x: clear,
    };
    e.stopImmediatePropagation(); // the queue is hidden: none of its keys apply
    const f = keys[e.key];
    if (!f) return;
    e.preventDefault();
    f();
  }

  // focusFilters moves to the first filter. The "/" that asked for it
  // must not land there: a browser drops it with the keydown's default,
  // but a key sent as separate keydown and char events (automation, some
  // input methods) would still type it, so its keypress is swallowed too.
  function focusFilters() {
    st.swallow = "/";
    st.els.inputs.tenant.focus();
  }

  function clear() {
    for (const input of Object.values(st.els.inputs)) input.value = "";
    load(false);
  }

  // ---- building the view ----------------------------------------------

  function build() {
    const view = $("audit-view");
    const form = el("form", "a-filters");
    form.setAttribute("aria-label", "Filters");
    const inputs = {};
    for (const [name, label, hint] of FILTERS) {
      const lab = el("label", null);
      const input = el("input");
      input.type = "text";
      input.name = name;
      input.id = "audit-" + name;
      input.placeholder = hint;
      input.autocomplete = "off";
      input.spellcheck = false;
      if (name === "kind" || name === "outcome") input.setAttribute("list", "audit-" + name + "s");
      lab.append(el("span", null, label), input);
      form.append(lab);
      inputs[name] = input;
    }
    for (const [id, list] of [["audit-kinds", KINDS], ["audit-outcomes", OUTCOMES]]) {
      const dl = el("datalist");
      dl.id = id;
      for (const v of list) { const o = el("option"); o.value = v; dl.append(o); }
      form.append(dl);
    }
    const apply = el("button", "a-apply", "Filter");
    apply.type = "submit";
    const clr = el("button", "a-clear", "Clear");
    clr.type = "button";
    clr.addEventListener("click", clear);
    form.append(apply, clr);
    form.addEventListener("submit", (e) => { e.preventDefault(); document.activeElement.blur(); load(false); });

    const tools = el("div", "a-tools");
    const vbtn = el("button", "a-verify", "Verify chain");
    vbtn.type = "button";
    vbtn.append(el("kbd", null, "c"));
    vbtn.addEventListener("click", verify);
    const xbtn = el("button", "a-export", "Export NDJSON");
    xbtn.type = "button";
    xbtn.append(el("kbd", null, "e"));
    xbtn.addEventListener("click", exportNDJSON);
    const stat = el("span", "a-status");
    stat.setAttribute("role", "status");
    tools.append(vbtn, xbtn, stat);

    const chain = el("div", "a-chain");
    chain.setAttribute("role", "status");
    chain.hidden = true;

    const table = el("table", "a-table");
    const head = el("tr");
    for (const h of ["#", "time (UTC)", "tenant", "session", "kind", "outcome", "action", "risk", "principal"]) head.append(el("th", null, h));
    const thead = el("thead");
    thead.append(head);
    const rows = el("tbody");
    table.append(thead, rows);
    const empty = el("p", "empty", "No record matches these filters.");
    empty.hidden = true;
    const more = el("button", "a-more", "Load more");
    more.type = "button";
    more.append(el("kbd", null, "m"));
    more.hidden = true;
    more.addEventListener("click", () => load(true));
    const list = el("div", "a-list");
    list.append(table, empty, more);
    const detail = el("aside", "a-detail");
    detail.setAttribute("aria-label", "Record");
    detail.hidden = true;
    const body = el("div", "a-body");
    body.append(list, detail);

    const title = el("h2", null, "Audit log");
    view.append(title, form, tools, chain, body);
    st.els = Object.assign(st.els, { view, inputs, rows, empty, more, detail, chain, status: stat });
  }

  // helpRows adds the view's keys to the page's shortcut list.
  function helpRows() {
    const dl = document.querySelector("#help dl");
    if (!dl) return;
    for (const [k, what] of KEYS) {
      const dt = el("dt", "a-help");
      for (const part of k.split(" / ")) dt.append(el("kbd", null, part));
      dl.append(dt, el("dd", "a-help", what));
    }
  }

  // refused says why #audit shows no log, in a note of its own (app.js
  // hides its notice when the socket connects).
  function refused() {
    const n = el("p", "notice", "The audit log is for admin tokens; this one may not read it.");
    n.id = "audit-refused";
    const main = document.querySelector("main");
    main.parentNode.insertBefore(n, main);
  }

  // probe shows the view's button to a token the audit API answers.
  function probe() {
    if (!token()) return;
    get("/v1/audit?limit=1").then((r) => {
      st.admin = r.ok;
      st.els.btn.hidden = !r.ok;
      if (r.ok) helpRows();
      if (location.hash === "#audit") {
        if (r.ok) show(true);
        else refused();
      }
    }).catch(() => {});
  }

  document.addEventListener("DOMContentLoaded", () => {
    const btn = $("audit-btn");
    if (!btn || !$("audit-view")) return;
    st.els.btn = btn;
    build();
    btn.addEventListener("click", () => show(!st.open));
    window.addEventListener("keydown", onKey, true);
    window.addEventListener("keypress", (e) => { if (st.swallow && e.key === st.swallow) e.preventDefault(); st.swallow = null; }, true);
    window.addEventListener("keyup", () => { st.swallow = null; }, true);
    window.addEventListener("hashchange", () => { if (location.hash === "#audit" && !st.open) show(true); });
    probe();
  });
})();
