// Clearance ops console: vanilla JavaScript, no build step, nothing fetched but this
// console's own /api. Live numbers arrive as Server-Sent Events (/api/stream); the
// playground posts JSON to /api/play/<action>. Every value from the server is escaped.
"use strict";

const $ = (sel) => document.querySelector(sel);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => (
  { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const fmt = (v, digits = 1) => (v === null || v === undefined ? "–" :
  typeof v === "number" ? (Number.isInteger(v) ? v.toLocaleString("en") : v.toFixed(digits)) : esc(v));
const pct = (v) => (v === null || v === undefined ? "–" : (v * 100).toFixed(1) + " %");
const pill = (cls, text) => `<span class="pill ${esc(cls)}">${esc(text ?? cls)}</span>`;
const json = (v) => `<pre>${esc(JSON.stringify(v, null, 1))}</pre>`;

function spark(values) {
  // A polyline over the last values, scaled to the largest (0 .. 30 px high).
  if (!values || !values.length) return "";
  const top = Math.max(1, ...values);
  const step = 120 / Math.max(1, values.length - 1);
  const pts = values.map((v, i) => `${(i * step).toFixed(1)},${(29 - (v / top) * 27).toFixed(1)}`);
  return `<polyline points="${pts.join(" ")}"/>`;
}

// ---- views ------------------------------------------------------------------------
function show() {
  const view = (location.hash || "#live").slice(1);
  document.querySelectorAll(".view").forEach((el) =>
    el.classList.toggle("active", el.id === "view-" + view));
  document.querySelectorAll("nav a").forEach((a) =>
    a.classList.toggle("active", a.dataset.view === view));
}
window.addEventListener("hashchange", show);

// ---- live -------------------------------------------------------------------------
function renderServices(rows) {
  $("#services tbody").innerHTML = rows.map((s) => `<tr data-service="${esc(s.name)}">
    <td>${esc(s.name)}</td>
    <td class="health">${s.healthy === true ? pill("ok", "healthy") : s.healthy === false ? pill("bad", "unhealthy") : pill("bad", "unknown")}</td>
    <td class="num revision">${fmt(s.revision)}</td>
    <td class="num lag">${fmt(s.lag)} <span class="note">${s.lag === null ? "" : esc(s.lag_source)}</span></td>
    <td class="num">${s.heartbeat_age === null ? "–" : fmt(s.heartbeat_age) + " s ago"}</td>
    <td>${Object.keys(s.extra || {}).length ? json(s.extra) : ""}</td></tr>`).join("")
    || `<tr><td colspan="6" class="note">no status yet</td></tr>`;
}

function renderFlows(flows) {
  const names = Object.keys(flows);
  $("#flows tbody").innerHTML = names.map((n) => `<tr data-flow="${esc(n)}">
    <td><code>${esc(n)}</code></td><td class="num rate">${fmt(flows[n].rate)}</td>
    <td class="num total">${fmt(flows[n].total)}</td>
    <td><svg class="spark row" viewBox="0 0 120 30" preserveAspectRatio="none">${spark(flows[n].history)}</svg></td></tr>`).join("")
    || `<tr><td colspan="4" class="note">nothing heard yet</td></tr>`;
}

function renderBus(bus, age) {
  // The stream being open says the console is up; whether Clearance is is the bus's say.
  const conn = $("#conn");
  if (!bus.connected) { conn.textContent = "bus down"; conn.className = "conn down"; }
  else if (bus.stale) {
    conn.textContent = age === null ? "no status yet" : `no status for ${Math.round(age)} s`;
    conn.className = "conn down";
  } else { conn.textContent = "live"; conn.className = "conn ok"; }
}

function renderLive(s) {
  renderBus(s.bus, s.status_age);
  $("#revision").textContent = fmt(s.revision);
  const banner = $("#status-error");
  banner.classList.toggle("hidden", !s.status_error);
  banner.textContent = s.status_error ? "clearance.v1.status: " + s.status_error : "";
  renderServices(s.services);
  renderFlows(s.flows);
  const denied = $("#events-denied");
  denied.classList.toggle("hidden", !s.events_denied);
  denied.textContent = s.events_denied || "";
  const c = s.cache;
  $("#cache-hit-rate").textContent = pct(c.hit_rate_window);
  $("#cache-hit-rate-start").textContent = pct(c.hit_rate_since_start);
  $("#cache-lookups").textContent = fmt(c.lookups_per_second);
  $("#cache-entries").textContent = fmt(c.entries);
  $("#cache-counts").textContent = `${fmt(c.hits)} / ${fmt(c.misses)}`;
  $("#cache-spark").innerHTML = spark(c.history.map((h, i) => h + c.miss_history[i]));
  const inv = s.invalidations;
  $("#inval-rate").textContent = fmt(inv.rate);
  $("#inval-total").textContent = fmt(inv.total);
  $("#inval-last").innerHTML = inv.last ? `revision ${fmt(inv.last.revision)}` +
    (inv.last.all ? " · all" : ` · users ${esc((inv.last.principals?.users || []).join(", ") || "–")}` +
     ` · groups ${esc((inv.last.principals?.groups || []).join(", ") || "–")}`) : "–";
  $("#inval-spark").innerHTML = spark(inv.history);
  const p = s.latency.check_probe_ms;
  $("#latency-p50").textContent = fmt(p.p50, 2);
  $("#latency-p95").textContent = `${fmt(p.p95, 2)} / ${fmt(p.p99, 2)}`;
  $("#latency-max").textContent = fmt(p.max, 2);
  $("#latency-status").textContent = fmt(s.latency.status_ms.p50, 2);
  $("#latency-spark").innerHTML = spark(s.latency.probe_history);
  $("#requests tbody").innerHTML = Object.entries(s.latency.requests_ms).map(([subj, r]) =>
    `<tr><td><code>${esc(subj)}</code></td><td class="num">${fmt(r.count)}</td>
     <td class="num">${fmt(r.p50, 2)}</td><td class="num">${fmt(r.p95, 2)}</td>
     <td class="num">${fmt(r.max, 2)}</td></tr>`).join("");
  renderPolicies(s);
}

function renderPolicies(s) {
  const counts = s.policies.counts;
  $("#state-counts").innerHTML = Object.keys(counts).map((state) =>
    `<div class="card" id="state-${esc(state)}"><b>${fmt(counts[state])}</b>${pill(state)}</div>`).join("");
  const reported = s.policies_reported;
  $("#policies-reported").innerHTML =
    (s.policies_total !== null && s.policies_total !== undefined
      ? `clearance.v1.status: ${fmt(s.policies_total)} MonitorAccessPolicies held. ` : "") +
    (reported ? "Reported by state: " + esc(Object.entries(reported).map(([k, v]) =>
      `${k} ${Array.isArray(v) ? v.length : typeof v === "object" ? JSON.stringify(v) : v}`).join(" · ")) : "");
  $("#policies tbody").innerHTML = s.policies.policies.map((p) => `<tr
    data-policy="${esc(p.kind)}/${esc(p.namespace)}/${esc(p.name)}" data-state="${esc(p.state)}">
    <td>${pill(p.state)}</td><td>${esc(p.kind)}</td><td>${esc(p.namespace)}/${esc(p.name)}</td>
    <td>${esc(p.reason)}</td><td>${esc(p.message)}</td>
    <td>${p.warnings.map((w) => `<div class="error">${esc(w)}</div>`).join("")}</td>
    <td class="num">${fmt(p.revision)}</td></tr>`).join("")
    || `<tr><td colspan="7" class="note">no policy heard of yet</td></tr>`;
}

function connect() {
  const conn = $("#conn");
  const source = new EventSource("/api/stream");
  source.onopen = () => { conn.textContent = "waiting for status…"; conn.className = "conn"; };
  source.onmessage = (e) => renderLive(JSON.parse(e.data));
  source.onerror = () => { conn.textContent = "reconnecting…"; conn.className = "conn down"; };
}

// ---- playground -------------------------------------------------------------------
function formBody(form) {
  const body = {};
  new FormData(form).forEach((v, k) => { body[k] = String(v); });
  return body;
}

async function play(action, form, target, render) {
  target.innerHTML = `<p class="note">asking…</p>`;
  target.dataset.state = "pending";
  try {
    const response = await fetch("/api/play/" + action, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(formBody(form)) });
    if (response.status === 401) { location.assign("/login"); return; }
    const data = await response.json();
    target.innerHTML = data.error ? errorOf(data.error) : render(data);
  } catch (err) {
    target.innerHTML = `<p class="error">${esc(err)}</p>`;
  }
  target.dataset.state = "done";
}

const errorOf = (e) => `<p class="error">${esc(e.code)}: ${esc(e.message)}</p>`;

function renderWho(d) {
  const c = d.counts, o = d.others || {};
  const row = (kind, name, decision, policy) => `<tr data-principal="${esc(kind)}:${esc(name)}"
    data-decision="${esc(decision)}"><td>${esc(kind)}</td><td>${esc(name)}</td>
    <td>${pill(decision)}</td><td>${esc(policy ?? "–")}</td></tr>`;
  const rows = d.subjects.map((r) => row(r.kind, r.name, r.decision, r.policy));
  return `<p class="summary" id="who-summary"><b>${c.allow + c.partial}</b> of
    ${d.subjects.length} subjects named for <b>${esc(d.what)}</b> can see it
    (${c.allow} all of it, ${c.partial} part of it, ${c.deny} denied).</p>
    <p id="who-others">Everyone else (named nowhere): ${pill(o.decision)}
      ${o.policy ? esc(o.policy) : ""}</p>
    <table id="who-table"><thead><tr><th>kind</th><th>subject</th><th>decision</th>
    <th>deciding policy</th></tr></thead><tbody>${rows.join("")}
    ${row("others", "*", o.decision, o.policy)}</tbody></table>
    <p class="note">Every user, group and service account a MonitorAccessPolicy, an
    AccessPolicy rule on its targets or an RBAC binding names, allowed and denied
    (<code>clearance.v1.who-can-see</code>, revision ${fmt(d.revision)}): a group as a member
    of it alone, a user with the Groups that list it.</p>`;
}

function renderTypes(types) {
  // Every type the cluster shows: a pill per decision, the filter of a partial one.
  return Object.entries(types || {}).map(([t, r]) => `<div data-type="${esc(t)}">
    <code>${esc(t)}</code> ${pill(r.decision)}${r.filter ?
    `<pre>${esc(JSON.stringify(r.filter.filters ?? r.filter))}</pre>` : ""}</div>`).join("");
}

function renderNamespaces(namespaces) {
  // The namespaces with their own AccessPolicy rules where something is visible.
  return Object.entries(namespaces || {}).map(([ns, types]) => `<div data-namespace="${esc(ns)}">
    <b>${esc(ns)}</b>${renderTypes(types)}</div>`).join("") || `<span class="note">–</span>`;
}

function renderUser(d) {
  const rows = d.clusters.map((c) => `<tr data-cluster="${esc(c.name)}" data-sees="${esc(c.sees)}">
    <td>${esc(c.name)}</td><td class="sees">${pill(c.sees)}</td><td class="whole">${pill(c.decision)}</td>
    <td>${esc((c.permissions || []).join(", "))}</td><td>${esc(c.policy ?? "")}</td>
    <td class="types">${c.sees === "deny" ? `<span class="note">nothing</span>` : renderTypes(c.types)}</td>
    <td class="namespaces">${renderNamespaces(c.namespaces)}</td></tr>`);
  const some = d.clusters.filter((c) => c.sees !== "deny").length;
  const whole = d.clusters.filter((c) => c.decision !== "deny").length;
  return `<p class="summary" id="user-summary"><b>${esc(d.principal.username)}</b> sees something in
    <b>${some}</b> of ${d.clusters.length} clusters (${whole} as a whole).</p>
    <h3>Clusters</h3><table id="user-clusters"><thead><tr><th>cluster</th><th>sees</th>
    <th>cluster itself</th><th>permissions</th><th>policy</th><th>types and filters</th>
    <th>namespaces with their own rules</th></tr></thead><tbody>${rows.join("")}</tbody></table>
    <h3>Custom types</h3><p id="user-types">${d.types_error ? errorOf(d.types_error) :
      (d.types || []).map((t) => `<code>${esc(t)}</code>`).join(" ") || "none"}</p>`;
}

function renderExplain(d) {
  const r = d.reply;
  if (r.error) return errorOf(r.error);
  const steps = (r.trace || []).map((t, i) => `<tr><td>${i + 1}</td><td>${pill(t.outcome)}</td>
    <td>${esc(t.policy)}</td><td class="num">${fmt(t.priority)}</td><td>${esc(t.effect)}</td>
    <td>${t.rule === null || t.rule === undefined ? "" : esc(t.rule)} ${esc(t.selector ?? "")}</td>
    <td>${esc(t.reason)}${t.hidden_by ? ` <b>hidden by ${esc(t.hidden_by)}</b>` : ""}</td></tr>`);
  return `<p class="summary" id="explain-decision">${pill(r.decision)} ${esc(r.reason)}</p>
    <dl><dt>policy</dt><dd>${esc(r.policy ?? "–")}</dd><dt>permissions</dt>
    <dd>${esc((r.permissions || []).join(", ") || "–")}</dd><dt>cached</dt><dd>${esc(r.cached)}</dd>
    <dt>revision</dt><dd>${fmt(r.revision)}</dd></dl>
    ${r.filters ? `<h3>Filters</h3>${json(r.filters)}` : ""}
    <h3>Trace</h3><table id="explain-trace"><thead><tr><th>#</th><th>outcome</th><th>policy</th>
    <th>priority</th><th>effect</th><th>rule</th><th>reason</th></tr></thead><tbody>${steps.join("")}</tbody></table>`;
}

function renderRule(name, e) {
  return `<tr data-rule="${esc(name)}"><td>${esc(name)}</td><td>${esc(e.block)}</td>
    <td>${esc(e.source)}</td><td>${esc(e.rule?.effect || "Allow")}</td>
    <td>${json(e.rule?.subjects)}</td><td>${json({ permissions: e.rule?.permissions, resources: e.rule?.resources })}</td></tr>`;
}
const RULE_HEAD = `<thead><tr><th>rule</th><th>block</th><th>source</th><th>effect</th>
  <th>subjects</th><th>grants</th></tr></thead>`;

function renderEffective(d) {
  const r = d.reply;
  if (r.error) return errorOf(r.error);
  const t = r.target;
  return `<p class="summary">${esc(t.kind)} <b>${esc(t.cluster ? t.cluster + "/" : "")}${esc(t.name)}</b>
    at revision ${fmt(r.revision)}</p>
    <table id="effective-rules">${RULE_HEAD}<tbody>${Object.entries(r.rules || {}).map(([n, e]) =>
      renderRule(n, e)).join("")}</tbody></table>
    <dl><dt>policies on its path</dt><dd>${esc((r.policies || []).join(", ") || "none")}</dd>
    <dt>rules from</dt><dd>${esc((r.affected_by || []).join(", ") || "none")}</dd></dl>
    ${(r.excluded || []).length ? `<h3>Policies on its path that take no part</h3>
    <table id="effective-excluded"><thead><tr><th>policy</th><th>reason</th><th>why</th></tr></thead>
    <tbody>${r.excluded.map((x) => `<tr data-policy="${esc(x.policy)}"><td>${esc(x.policy)}</td>
      <td>${pill(x.reason)}</td><td>${esc(x.message)}</td></tr>`).join("")}</tbody></table>` : ""}`;
}

function conditions(list) {
  return (list || []).map((c) => `<div>${esc(c.type)} ${esc(c.status)} <b>${esc(c.reason)}</b>
    <span class="note">${esc(c.message)}</span></div>`).join("") || `<span class="note">none</span>`;
}

function renderSimulate(d) {
  const r = d.reply;
  if (r.error) return errorOf(r.error);
  const targets = (r.targets || []).map((t) => {
    const where = `${t.target.kind} ${t.target.cluster ? t.target.cluster + "/" : ""}${t.target.name}`;
    const lines = [
      ...Object.entries(t.added || {}).map(([n, e]) => `<div>+ <b>${esc(n)}</b> from ${esc(e.source)} (${esc(e.block)}):
        <code>${esc(JSON.stringify(e.rule))}</code></div>`),
      ...(t.removed || []).map((n) => `<div>− <b>${esc(n)}</b></div>`),
      ...Object.entries(t.changed || {}).map(([n, e]) => `<div>~ <b>${esc(n)}</b> now from ${esc(e.source)} (${esc(e.block)}):
        <code>${esc(JSON.stringify(e.rule))}</code></div>`)];
    return `<tr><td>${esc(where)}</td><td>${lines.join("")}</td></tr>`;
  });
  const status = Object.entries(r.status || {}).map(([p, s]) =>
    `<tr data-policy="${esc(p)}"><td>${esc(p)}</td><td>${conditions(s.before)}</td><td>${conditions(s.after)}</td></tr>`);
  return `<p class="summary" id="simulate-summary">${esc(d.operation)} would change
    <b>${(r.targets || []).length}</b> targets and the status of <b>${status.length}</b> policies
    (nothing applied; revision ${fmt(r.revision)}).</p>
    ${renderAccess(r)}
    <h3>Targets</h3><table id="simulate-targets"><thead><tr><th>target</th><th>rules</th></tr></thead>
    <tbody>${targets.join("")}</tbody></table>
    <h3>Status</h3><table id="simulate-status"><thead><tr><th>policy</th><th>before</th><th>after</th></tr></thead>
    <tbody>${status.join("")}</tbody></table>`;
}

// Who gains or loses access: each subject a changed rule names, on the target itself and
// on each type those rules filter, as check answers it before and after.
function targetText(t) {
  return t.kind === "Namespace" ? `namespace/${t.cluster}/${t.name}` : `${t.kind.toLowerCase()}/${t.name}`;
}

function resourceText(x) {
  if (x.type === "cluster") return "cluster";
  if (x.name && x.name !== "*") return `namespace ${x.name}`;
  return x.namespace ? `${x.type} in ${x.namespace}` : x.type;
}

function accessAnswer(a) {
  return `${pill(a.decision)} <span class="note">${esc(a.policy ?? "no policy")}</span>
    ${a.filters ? `<details><summary class="note">filters</summary>${json(a.filters)}</details>` : ""}`;
}

const MOVES = { gains: "allow", loses: "deny", changes: "partial", none: "no_match" };

function renderAccess(r) {
  if (!(r.targets || []).length) return "";
  const rows = (r.access || []).map((c) => `<tr data-target="${esc(targetText(c.target))}"
      data-subject="${esc(c.subject.kind + ":" + c.subject.name)}" data-resource="${esc(resourceText(c.resource))}"
      data-move="${esc(c.move)}"><td>${esc(targetText(c.target))}</td>
    <td>${esc(c.subject.kind)} <b>${esc(c.subject.name)}</b></td><td>${esc(resourceText(c.resource))}</td>
    <td>${accessAnswer(c.before)}</td><td>${accessAnswer(c.after)}</td>
    <td class="move">${pill(MOVES[c.move] || "no_match", c.move === "none" ? "no change" : c.move)}
      <span class="detail">${esc(c.move === "none" ? (c.detail === "no change" ? "" : c.detail) : c.detail)}</span></td></tr>`);
  const moved = (r.access || []).filter((c) => c.move !== "none").length;
  const cut = r.truncated ? `<p class="note" id="simulate-truncated">${fmt(r.truncated.total - r.truncated.listed)}
    more rows not listed (${fmt(r.truncated.listed)} of ${fmt(r.truncated.total)}): ${esc(r.truncated.reason)}</p>` : "";
  return `<h3>Who gains or loses access</h3>
    <p class="note" id="simulate-access-summary">${moved} of ${(r.access || []).length} answers would move
      (check, view: each subject a changed rule names, before and after).</p>
    <table id="simulate-access"><thead><tr><th>target</th><th>subject</th><th>resource</th>
    <th>before</th><th>after</th><th>change</th></tr></thead>
    <tbody>${rows.join("") || `<tr><td colspan="6" class="note">nobody: no changed rule names a subject</td></tr>`}</tbody></table>${cut}`;
}

const ACTIONS = { who: ["who-can-see", renderWho], user: ["user-view", renderUser],
  explain: ["explain", renderExplain], effective: ["effective", renderEffective],
  simulate: ["simulate", renderSimulate] };

for (const [view, [action, render]] of Object.entries(ACTIONS)) {
  const form = $(`#${view}-form`);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    play(action, form, $(`#${view}-result`), render);
  });
}

show();
connect();
