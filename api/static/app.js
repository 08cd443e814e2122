// elrwatch status page: polls the JSON API and renders summary, at-risk partitions and brokers.
// No external assets; the bearer token (if the API requires one) lives in sessionStorage only.
"use strict";

const TOKEN_KEY = "elrwatch.token";
const STATUSES = [
  "MANUAL_ELECTION_REQUIRED", "RECOVERING", "LEADERLESS_WAITING", "LEADERLESS_ELECTING",
  "UNDER_MIN_ISR", "AT_MIN_ISR", "UNDER_REPLICATED", "HEALTHY",
];
const STATUS_COLORS = {
  MANUAL_ELECTION_REQUIRED: "#b3261e", RECOVERING: "#e0564c", LEADERLESS_WAITING: "#c2410c",
  LEADERLESS_ELECTING: "#f08a3c", UNDER_MIN_ISR: "#d4a106", AT_MIN_ISR: "#2f6fed",
  UNDER_REPLICATED: "#8fb0f5", HEALTHY: "#2f9e5b",
};
const params = new URLSearchParams(window.location.search);
const REFRESH_MS = Math.max(1, Number(params.get("refresh")) || 5) * 1000;
const RISK_LIMIT = 200;
const RISK_LABELS = {
  none: "none",
  uncommitted_data: "uncommitted data (acks=0/1 writes since the high watermark froze)",
  committed_data: "committed data may be lost",
  unknown: "unknown (depends on whether the stopped brokers restart cleanly)",
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

class HttpError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

async function api(path) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = "Bearer " + token();
  const response = await fetch(path, { headers, cache: "no-store" });
  if (!response.ok) {
    let detail = response.statusText;
    try { const body = await response.json(); detail = body.detail || body.title || detail; } catch (e) { /* keep */ }
    throw new HttpError(response.status, detail);
  }
  return response.json();
}

function fmtInt(n) { return (n === null || n === undefined) ? "–" : Number(n).toLocaleString("en-US"); }

function ago(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "unknown";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
}

function sinceMs(ms) {
  if (!ms) return "–";
  return ago(Date.now() / 1000 - ms / 1000);
}

function statusBadge(status) {
  return el("span", { class: "badge s-" + status, text: status.replaceAll("_", " ") });
}

function list(ids) { return "[" + (ids || []).join(",") + "]"; }

/** "1 partition", "2 partitions". */
function plural(n, word) { return `${fmtInt(n)} ${word}${n === 1 ? "" : "s"}`; }

function card(label, value, cls, sub) {
  return el("div", { class: "card " + (cls || "") },
    el("div", { class: "label", text: label }),
    el("div", { class: "value", text: value }),
    sub ? el("div", { class: "sub", text: sub }) : null);
}

/** The Brokers card: active of all brokers, and the others by state ("2 / 3 active · 1 down (unregistered)"). */
function brokersCard(brokers) {
  const count = (state) => Number(brokers[state] || 0);
  const total = Object.values(brokers).reduce((a, b) => a + Number(b || 0), 0);
  const others = [
    ["fenced", "fenced"], ["controlled_shutdown", "shutting down"], ["unregistered", "down (unregistered)"],
  ].filter(([state]) => count(state) > 0).map(([state, words]) => `${fmtInt(count(state))} ${words}`);
  const cls = count("fenced") || count("unregistered") ? "warn" : "ok";
  return card("Brokers", `${fmtInt(count("active"))} / ${fmtInt(total)}`, cls, ["active", ...others].join(" · "));
}

function renderSummary(s) {
  const by = s.partitionsByStatus || {};
  const severe = (by.MANUAL_ELECTION_REQUIRED || 0) + (by.RECOVERING || 0);
  const leaderless = (by.LEADERLESS_WAITING || 0) + (by.LEADERLESS_ELECTING || 0);
  const brokers = s.brokersByState || {};
  const overall = $("overall");
  if (severe + leaderless > 0) {
    overall.className = "overall overall-crit";
    overall.textContent = `CRITICAL · ${plural(severe + leaderless, "partition")} without a safe leader`;
  } else if (s.underMinIsr > 0) {
    overall.className = "overall overall-warn";
    overall.textContent = `DEGRADED · ${fmtInt(s.underMinIsr)} under min ISR`;
  } else {
    overall.className = "overall overall-ok";
    overall.textContent = "OK · all partitions writable";
  }
  const cards = [
    card("Partitions", fmtInt(s.partitions), "info", plural(s.topics, "topic")),
    card("Need an operator", fmtInt(s.needingAction), s.needingAction ? "crit" : "ok"),
    card("Manual election", fmtInt(by.MANUAL_ELECTION_REQUIRED), by.MANUAL_ELECTION_REQUIRED ? "crit" : "ok"),
    card("Recovering", fmtInt(by.RECOVERING), by.RECOVERING ? "crit" : "ok", "after unclean election"),
    card("Offline (leaderless)", fmtInt(s.offline), s.offline ? "high" : "ok"),
    card("Under min ISR", fmtInt(s.underMinIsr), s.underMinIsr ? "warn" : "ok", "acks=all writes fail"),
    card("At min ISR", fmtInt(s.atMinIsr), s.atMinIsr ? "info" : "ok", "one failure from under"),
    brokersCard(brokers),
    card("ELR (KIP-966)", s.elrEnabled === null || s.elrEnabled === undefined ? "?" : (s.elrEnabled ? "on" : "off"),
      s.elrEnabled ? "ok" : "warn"),
    ...(s.defaultMinIsr ? [card("Default min ISR", fmtInt(s.defaultMinIsr), "info",
      s.defaultMinIsrSource || "")] : []),
    card("Quarantined records", fmtInt((s.quarantined || {}).count || 0), (s.quarantined || {}).count ? "warn" : "ok"),
    ...(s.derivedFrom ? [card("Data source", s.derivedFrom, "warn",
      `not known in this mode: ${(s.unknownFacts || []).join(", ")}`)] : []),
  ];
  $("cards").replaceChildren(...cards);

  const total = STATUSES.reduce((a, k) => a + (by[k] || 0), 0) || 1;
  $("status-bar").replaceChildren(...STATUSES.filter((k) => by[k]).map((k) =>
    el("span", { style: `width:${(100 * by[k]) / total}%;background:${STATUS_COLORS[k]}`, title: `${k}: ${by[k]}` })));
  $("status-legend").replaceChildren(...STATUSES.map((k) =>
    el("span", {}, el("i", { style: `background:${STATUS_COLORS[k]}` }), `${k.replaceAll("_", " ").toLowerCase()} ${fmtInt(by[k] || 0)}`)));

  const f = s.freshness || {};
  $("freshness").textContent = `last event ${ago(f.dataAgeSeconds)} ago`;
  $("updated").textContent = `Store updated ${ago(f.updatedAgeSeconds)} ago` +
    (f.lastBatchId !== null && f.lastBatchId !== undefined ? ` (batch ${f.lastBatchId})` : "") +
    ` · page refreshed ${new Date().toLocaleTimeString()}`;
}

function text(value, ...keys) {
  if (value === null || value === undefined) return "";
  if (typeof value === "string") return value;
  for (const key of keys) if (typeof value[key] === "string" && value[key]) return value[key];
  return "";
}

function copyItem(command) {
  const copy = el("button", { type: "button", title: "Copy command", text: "copy" });
  copy.addEventListener("click", () => navigator.clipboard && navigator.clipboard.writeText(command));
  return el("li", {}, el("code", { text: command }), copy);
}

// An unclean recovery's plan (candidate, its log end offset) and the `elrwatch recover` command that carries it out;
// what an operator's recovery did, once one ran.
function recoverItems(rec, done) {
  const out = [];
  if (done && done.summary) out.push(el("div", { class: "recovered", text: done.summary }));
  if (rec && rec.action === "unclean_recovery" && rec.recoverCommand) {
    const log = rec.candidateLog ? `, log end offset ${rec.candidateLog.logEndOffset}` : "";
    out.push(el("div", { class: "plan", text: `Plan: elect ${rec.candidate}${log}; ` +
      "elrwatch recover prints the plan, --execute carries it out (even with a replica's broker down):" }));
    out.push(el("ul", { class: "cmds recover" }, copyItem(rec.recoverCommand)));
  }
  return out;
}

function adviceCell(rec, done) {
  const cell = el("td", { class: "advice" });
  if (!rec) { cell.append(el("span", { class: "muted", text: "no recommendation available" })); return cell; }
  cell.append(el("div", { text: text(rec, "summary", "action", "text", "description") }));
  const risk = text(rec.risk, "level", "summary", "description");
  if (risk) {
    const none = /^(none|no data loss)/i.test(risk);
    cell.append(el("div", { class: "risk" + (none ? " none" : "") }, "Data-loss risk: ",
      el("b", { text: RISK_LABELS[risk] || risk.replaceAll("_", " ") })));
  }
  const commands = (rec.commands || []).map((c) => (typeof c === "string" ? c : c.command || JSON.stringify(c)));
  if (commands.length) {
    const ul = el("ul", { class: "cmds" });
    for (const command of commands) ul.append(copyItem(command));
    cell.append(ul);
  }
  cell.append(...recoverItems(rec, done));
  return cell;
}

/** A name as text nodes with a line-break opportunity after each ".", "-" and "_" (long topic names wrap there). */
function breakable(name) {
  const parts = [];
  for (const piece of name.split(/(?<=[.\-_])/)) parts.push(piece, el("wbr"));
  return parts.slice(0, -1);
}

function outlookText(p) { return text(p.outlook, "summary", "text", "description") || "–"; }

/** The at-risk partitions in groups that share a status and Kafka's outlook, each group where its first partition
 * is in the API's order (most severe first), its partitions in that order. */
function outlookGroups(items) {
  const groups = new Map();
  for (const p of items) {
    const key = `${p.status}\u0000${outlookText(p)}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(p);
  }
  return [...groups.values()];
}

/** Identical recommendations (same text, risk and commands) compare equal by this key. */
function adviceKey(p) { return JSON.stringify([p.recommendation || null, p.operatorRecovery || null]); }

function missingCell(p) {
  const cell = el("td", { class: "missing" });
  const missing = p.missingReplicas || [];
  if (!missing.length) cell.append("–");
  for (const m of missing) cell.append(el("div", { text: `${m.brokerId} (${m.cause.replaceAll("_", " ")})` }));
  return cell;
}

/** One row per partition; the outlook once per group (a cell spanning its rows, with the partition count), the
 * recommendation once per run of partitions of the group that share it. */
function renderRisks(page) {
  const rows = [];
  outlookGroups(page.items).forEach((group, g) => {
    group.forEach((p, i) => {
      const row = el("tr", { "data-group": String(g), class: i === 0 ? "group-start" : "" },
        el("td", {}, statusBadge(p.status)),
        el("td", { class: "partition" }, el("a", {
          href: `/v1/partitions/${encodeURIComponent(p.topic)}/${p.partitionId}` }, ...breakable(`${p.topic}-${p.partitionId}`))),
        el("td", { class: "mono", text: sinceMs(p.statusSinceMs) }),
        el("td", { class: "mono", text: p.leader === -1 ? "none" : String(p.leader) }),
        el("td", { class: "mono", text: list(p.isr) }),
        el("td", { class: "mono", text: list(p.elr) }),
        el("td", { class: "mono", text: list(p.lastKnownElr) }),
        missingCell(p));
      if (i === 0) {
        const outlook = el("td", { class: "outlook", rowspan: String(group.length), "data-group": String(g) });
        if (group.length > 1) outlook.append(el("div", { class: "group-note", text: `${plural(group.length, "partition")}:` }));
        outlook.append(el("div", { text: outlookText(p) }));
        row.append(outlook);
      }
      const key = adviceKey(p);
      if (i === 0 || adviceKey(group[i - 1]) !== key) {
        let run = 1;
        while (i + run < group.length && adviceKey(group[i + run]) === key) run++;
        const advice = adviceCell(p.recommendation, p.operatorRecovery);
        advice.setAttribute("rowspan", String(run));
        row.append(advice);
      }
      rows.push(row);
    });
  });
  $("risk-table").tBodies[0].replaceChildren(...rows);
  $("risk-table").parentElement.hidden = rows.length === 0;
  $("risk-empty").hidden = rows.length !== 0;
  $("risk-count").textContent = page.nextCursor ? `(first ${rows.length})` : `(${rows.length})`;
}

function countCell(n, cls) {
  return el("td", { class: "mono num" + (n ? " " + cls : ""), text: fmtInt(n) });
}

/** A cell with ``value``, or "unknown" where the API has none (values the source does not know, never invented). */
function unknownOr(value, cls, why) {
  if (value === null || value === undefined) return el("td", { class: cls + " unknown", title: why, text: "unknown" });
  return el("td", { class: cls, text: String(value) });
}

// Will the broker's next start be clean (Kafka's .kafka_cleanshutdown rule)? The basis is the cell's title.
function nextStartCell(b) {
  const next = b.nextStart || {};
  const word = next.clean === true ? "clean" : next.clean === false ? "unclean"
    : b.state === "active" ? "running" : "unknown";
  const cls = next.clean === false ? " crit" : next.clean === null && b.state !== "active" ? " warn" : "";
  return el("td", { class: "next-start" + cls, title: next.basis || "", text: word });
}

function renderBrokers(brokers) {
  const rows = brokers.map((b) => el("tr", { "data-broker": String(b.brokerId) },
    el("td", { class: "mono", text: String(b.brokerId) }),
    el("td", {}, el("span", { class: "badge b-" + b.state, text: (b.state || "").replaceAll("_", " ") })),
    countCell(b.leaderPartitions, ""),
    countCell(b.isrMissingPartitions, "warn"),
    el("td", { class: "mono num" + (b.restartBlockingPartitions ? " warn" : ""),
      title: "partitions that stopping this broker now leaves under min ISR",
      text: fmtInt(b.restartBlockingPartitions) }),
    el("td", { class: "mono num" + (b.restartOfflinePartitions ? " crit" : ""),
      title: "partitions that stopping this broker now leaves without an electable leader",
      text: fmtInt(b.restartOfflinePartitions) }),
    unknownOr(b.epoch, "mono", "the source does not show this broker's epoch (admin bridge)"),
    el("td", { text: b.rack || "–" }),
    unknownOr(b.incarnationId, "mono incarnation muted", "the source does not show this broker's incarnation id"),
    nextStartCell(b)));
  $("broker-table").tBodies[0].replaceChildren(...rows);
  $("broker-count").textContent = `(${rows.length})`;
}

const TREND_SERIES = [["underMinIsr", "under min ISR", "#d4a106"], ["offline", "offline", "#c2410c"]];
const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  return node;
}

// A step chart of each series over [fromMs, toMs]: a value holds until the next point, the last one until now.
function renderTrend(t) {
  const width = 720, height = 120, pad = 4;
  const max = Math.max(1, ...TREND_SERIES.flatMap(([k]) => (t[k] || []).map((p) => p[1])));
  const x = (ms) => pad + ((width - 2 * pad) * (ms - t.fromMs)) / Math.max(1, t.toMs - t.fromMs);
  const y = (v) => height - pad - ((height - 2 * pad) * v) / max;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", height, role: "img",
    preserveAspectRatio: "none" });  // the hour spans the page's width
  chart.append(svg("line", { x1: pad, x2: width - pad, y1: y(0), y2: y(0), stroke: "#ccc",
    "vector-effect": "non-scaling-stroke" }));
  for (const [key, , color] of TREND_SERIES) {
    const points = t[key] || [];
    if (!points.length) continue;
    let d = `M${x(points[0][0])},${y(points[0][1])}`;
    for (let i = 1; i < points.length; i++) d += ` H${x(points[i][0])} V${y(points[i][1])}`;
    d += ` H${x(t.toMs)}`;
    chart.append(svg("path", { d, fill: "none", stroke: color, "stroke-width": 2, "data-series": key,
      "vector-effect": "non-scaling-stroke" }));
  }
  $("trend").replaceChildren(chart);
  const first = Math.min(...TREND_SERIES.map(([k]) => ((t[k] || [])[0] || [Infinity])[0]));
  const since = isFinite(first) && first > t.fromMs
    ? el("span", { class: "muted", text: `history from ${new Date(first).toLocaleTimeString()}` }) : null;
  $("trend-legend").replaceChildren(...TREND_SERIES.map(([key, label, color]) => {
    const points = t[key] || [];
    const now = points.length ? points[points.length - 1][1] : null;
    const peak = points.length ? Math.max(...points.map((p) => p[1])) : null;
    return el("span", { "data-series": key }, el("i", { style: `background:${color}` }),
      `${label}: now ${fmtInt(now)}, peak ${fmtInt(peak)}`);
  }), ...(since ? [since] : []));
}

function showError(message) {
  const banner = $("error");
  banner.hidden = !message;
  banner.textContent = message || "";
}

async function refresh() {
  try {
    const [summary, risks, brokers, trend] = await Promise.all([
      api("/v1/summary"), api(`/v1/recommendations?limit=${RISK_LIMIT}`), api("/v1/brokers"),
      api("/v1/trend?minutes=60"),
    ]);
    renderSummary(summary);
    renderRisks(risks);
    renderBrokers(brokers);
    renderTrend(trend);
    showError("");
    document.body.dataset.loaded = "true";
  } catch (error) {
    if (error.status === 401) {  // the Token button shows only where the API asks for one
      $("token-button").hidden = false;
      $("token-form").hidden = false;
      showError("The API requires a bearer token: enter it above.");
    } else {
      showError(`Cannot load data: ${error.message}`);
    }
    $("overall").className = "overall overall-unknown";
    $("overall").textContent = "NO DATA";
  }
}

async function showAccess() {  // /healthz needs no token: it says whether the other endpoints do
  try {
    const response = await fetch("/healthz", { cache: "no-store" });
    const health = await response.json();
    $("access").textContent = health.tokenRequired
      ? "access: a bearer token is required (Token button)"
      : "access: open, no token required (anyone who reaches this port reads it)";
    if (health.tokenRequired) $("token-button").hidden = false;
  } catch (error) {
    $("access").textContent = "access: unknown (/healthz did not answer)";
  }
}

function setup() {
  $("refresh-every").textContent = String(REFRESH_MS / 1000);
  showAccess();
  $("token-button").addEventListener("click", () => { $("token-form").hidden = !$("token-form").hidden; });
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
    $("token-input").value = "";
    $("token-form").hidden = true;
    refresh();
  });
  $("token-clear").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); refresh(); });
  refresh();
  setInterval(refresh, REFRESH_MS);
}

setup();
