// The page's standing answers: the grants in force (revocable) and the
// agents' proposals with their replayed effect (accept or reject). Plain
// REST with the approver's token, refreshed every few seconds; no build
// step, like app.js.
(function () {
  "use strict";
  const TOKEN_KEY = "sandgate.approver.token";
  const REFRESH_MS = 3000;
  const PROPOSAL_FOR_S = 24 * 3600;
  const $ = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined) n.textContent = text;
    return n;
  }

  function api(method, path, body) {
    const token = sessionStorage.getItem(TOKEN_KEY) || "";
    const init = { method, headers: { Authorization: "Bearer " + token }, cache: "no-store" };
    if (body) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init).then((r) => r.json().then((j) => ({ ok: r.ok, status: r.status, body: j })));
  }

  function left(t) {
    const ms = new Date(t).getTime() - Date.now();
    if (ms <= 0) return "expired";
    const m = Math.round(ms / 60000);
    return m >= 120 ? Math.round(m / 60) + " h left" : m + " min left";
  }

  // ---- grants -------------------------------------------------------------

  function grantItem(g) {
    const li = el("li", "grant");
    li.dataset.id = g.id;
    const top = el("div", "h-top");
    top.append(el("span", "risk", g.kind === "egress" ? "network" : g.risk_level),
      el("strong", null, g.scope === "tenant" ? "tenant " + g.tenant : "session " + g.session_id),
      el("span", "h-time", left(g.expires_at)));
    // An egress grant covers requests: method, host:port and path prefix.
    const what = g.kind === "egress" ? g.method + " " + g.host + ":" + g.port + " under " + g.path_prefix :
      (g.patterns.length ? g.patterns.join(", ") : "no risk patterns") + " · " + g.language;
    const sub = el("div", "h-sub", what + " · by " + g.created_by + " · used " + g.uses + "×");
    const revoke = el("button", "revoke", "Revoke");
    revoke.type = "button";
    revoke.addEventListener("click", () => {
      revoke.disabled = true;
      api("DELETE", "/v1/grants/" + encodeURIComponent(g.id), { reason: "revoked on the page" }).then(refresh, refresh);
    });
    li.append(top, sub, revoke);
    return li;
  }

  // ---- proposals ------------------------------------------------------------

  function proposalItem(p) {
    const li = el("li", "proposal");
    li.dataset.id = p.id;
    const top = el("div", "h-top");
    top.append(el("span", "kind", p.kind), el("code", "value", p.value), el("span", "h-time", new Date(p.created_at).toLocaleTimeString()));
    const who = el("div", "h-sub", "session " + p.session_id + (p.tenant ? " · tenant " + p.tenant : "") + " · " + p.principal);
    const why = el("div", "h-reason", "“" + p.justification + "”");
    const eff = p.effect || {};
    const effect = el("div", "effect");
    effect.append(el("div", "effect-sum", "Replayed " + (eff.replayed || 0) + " recent decisions: " + (eff.changed_count || 0) +
      " would change" + (eff.drifted ? " (" + eff.drifted + " already differ under the policy now)" : "") + "." +
      (eff.truncated ? " Partial: the replay stopped at its time budget, newest records first." : "")));
    const ol = el("ol", "changes");
    for (const c of (eff.changed || []).slice(0, 20)) {
      const ci = el("li");
      ci.append(el("code", null, c.what), document.createTextNode(" " + c.now + " → " + c.candidate + " "),
        el("span", "h-sub", c.session_id + " · " + new Date(c.time).toLocaleTimeString()));
      ol.append(ci);
    }
    effect.append(ol);
    const form = el("form", "actions");
    const reason = el("input", "reason-input");
    reason.type = "text";
    reason.maxLength = 1000;
    reason.placeholder = "Reason (the agent reads it)";
    reason.setAttribute("aria-label", "Reason");
    const reject = el("button", "deny", "Reject");
    reject.type = "button";
    const accept = el("button", "approve", "Accept for 24 h");
    accept.type = "submit";
    const decide = (decision) => {
      accept.disabled = reject.disabled = true;
      // The list is not redrawn while focus is in it (typing); a decision
      // ends the typing, so the next refresh drops the decided item.
      if (li.contains(document.activeElement)) document.activeElement.blur();
      const body = { decision, reason: reason.value.trim() };
      if (decision === "accept") body.for_s = PROPOSAL_FOR_S;
      api("POST", "/v1/proposals/" + encodeURIComponent(p.id) + "/decision", body).then(refresh, refresh);
    };
    form.addEventListener("submit", (e) => { e.preventDefault(); decide("accept"); });
    reject.addEventListener("click", () => decide("reject"));
    form.append(reason, reject, accept);
    li.append(top, who, why, effect, form);
    return li;
  }

  // A channel's link (a webhook's decision_url, Slack's "open in the
  // approval page") names a proposal in the fragment, which never reaches
  // a server: #proposal=prp_<hex>. The page marks it and brings it into
  // view once, with its reason field focused; the approver decides there.
  let linkedShown = "";
  function linkedProposal() {
    return (/^#proposal=(prp_[0-9a-f]{1,64})$/.exec(location.hash) || [])[1] || "";
  }
  function showLinked(list) {
    const id = linkedProposal();
    for (const li of list.querySelectorAll("li.proposal.linked")) li.classList.remove("linked");
    if (!id) return;
    const li = [...list.querySelectorAll("li.proposal")].find((x) => x.dataset.id === id);
    if (!li) return;
    li.classList.add("linked");
    if (linkedShown !== id) {
      linkedShown = id;
      li.scrollIntoView({ block: "nearest" });
      li.querySelector(".reason-input").focus();
    }
  }
  window.addEventListener("hashchange", () => { linkedShown = ""; refresh(); });

  function refresh() {
    if (!sessionStorage.getItem(TOKEN_KEY)) return;
    api("GET", "/v1/grants?live=true&limit=50").then((r) => {
      if (!r.ok) { $("grants-box").hidden = true; return; }
      $("grants-box").hidden = false;
      const gs = r.body.grants || [];
      $("grants").replaceChildren(...gs.map(grantItem));
      $("grants-empty").hidden = gs.length > 0;
    }).catch(() => {});
    api("GET", "/v1/proposals?status=pending&limit=50").then((r) => {
      const ps = (r.ok && r.body.proposals) || [];
      $("proposals-box").hidden = ps.length === 0;
      $("prop-count").textContent = String(ps.length);
      const list = $("proposals");
      // Keep an item being typed into.
      const typing = document.activeElement && list.contains(document.activeElement);
      if (!typing) list.replaceChildren(...ps.map(proposalItem));
      showLinked(list);
    }).catch(() => {});
  }

  document.addEventListener("DOMContentLoaded", () => {
    refresh();
    setInterval(refresh, REFRESH_MS);
  });
})();
