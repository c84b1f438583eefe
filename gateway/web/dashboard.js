// Strait gateway dashboard: polls api/state every second, keeps the time series it returns, and
// redraws the page. No framework: small helpers build DOM nodes (text via textContent only, so
// nothing from the server is ever parsed as HTML) and draw line charts on <canvas>.
"use strict";

const POLL_MS = 1000;           // The page updates at least this often (the issue asks for <= 2 s).
const STALE_AFTER_MS = 5000;    // No answer for this long: the live indicator turns red.
const SITE_COLORS = ["#5b9cff", "#2fc774", "#f5a524", "#e879f9", "#22d3ee", "#f0515b"];
const PHASES = [
  ["compute", "compute_s", "#5b9cff"],
  ["wait", "wait_s", "#3a4766"],
  ["encode", "encode_s", "#a78bfa"],
  ["decode", "decode_s", "#e879f9"],
  ["seal", "seal_s", "#f5a524"],
  ["open", "open_s", "#fb923c"],
];

const model = {
  state: null,            // Latest FederationState (proto3 JSON).
  history: {sites: {}, links: {}, capacity: 3600},
  sampled: 0,             // sampled_unix_ms of the latest answer: the next poll's `since`.
  lastOk: 0,              // Date.now() of the latest successful poll.
  status: "connecting",
};

// ---- Small helpers ----

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key === "style") Object.assign(node.style, value);
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function setText(id, text) {
  const node = document.getElementById(id);
  if (node.textContent !== text) node.textContent = text;
}

const num = (v) => (v === undefined || v === null ? 0 : Number(v));
const stateName = (s) => String(s || "SITE_STATE_UNSPECIFIED").replace(/^SITE_/, "").toLowerCase();

function fmtCount(v) {
  return Math.round(num(v)).toLocaleString("en-US");
}

function fmtNumber(v, digits = 3) {
  v = num(v);
  if (!isFinite(v)) return "—";
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(2) + "M";
  if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(1) + "k";
  return v.toLocaleString("en-US", {maximumSignificantDigits: digits});
}

function fmtBytes(v, suffix = "") {
  v = num(v);
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)) + " " + units[i] + suffix;
}

function fmtMiB(v) {
  v = num(v) / 1048576;
  return (v >= 1024 ? (v / 1024).toFixed(2) + " GiB" : v.toFixed(v >= 100 ? 0 : 1) + " MiB");
}

function fmtDuration(seconds) {
  seconds = Math.max(0, Math.round(num(seconds)));
  const d = Math.floor(seconds / 86400), h = Math.floor(seconds % 86400 / 3600);
  const m = Math.floor(seconds % 3600 / 60), s = seconds % 60;
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${String(m).padStart(2, "0")}m`;
  if (m > 0) return `${m}m ${String(s).padStart(2, "0")}s`;
  return `${s}s`;
}

function fmtClock(ms) {
  const d = new Date(ms);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((x) => String(x).padStart(2, "0")).join(":");
}

function fmtAgo(ms, now) {
  const s = Math.max(0, (now - ms) / 1000);
  return s < 60 ? `${Math.round(s)} s ago` : `${fmtDuration(s)} ago`;
}

// ---- Data: polling and merging the history ----

// Appends the points of `fresh` (columnar series, same keys) to `kept`, keeping `capacity`.
function mergeSeries(kept, fresh, capacity) {
  if (!kept) return fresh;
  for (const [key, value] of Object.entries(fresh)) {
    if (!Array.isArray(value)) { kept[key] = value; continue; }
    const merged = (kept[key] || []).concat(value);
    kept[key] = merged.length > capacity ? merged.slice(merged.length - capacity) : merged;
  }
  return kept;
}

function mergeHistory(fresh) {
  const h = model.history;
  h.capacity = fresh.capacity;
  for (const kind of ["sites", "links"]) {
    const next = {};
    for (const [key, series] of Object.entries(fresh[kind] || {})) {
      next[key] = mergeSeries(h[kind][key], series, fresh.capacity);
    }
    h[kind] = next;  // Series the server dropped disappear here too.
  }
}

async function poll() {
  try {
    const since = model.sampled ? `?since=${model.sampled}` : "";
    const response = await fetch(`api/state${since}`, {cache: "no-store"});
    if (response.status === 401) {
      model.status = "unauthorized";
    } else if (!response.ok) {
      throw new Error(`HTTP ${response.status}`);
    } else {
      const body = await response.json();
      const sampled = num(body.sampled_unix_ms);
      if (sampled < model.sampled) {
        // The gateway restarted (its clock went back): start over with its full history.
        model.sampled = 0;
        model.history = {sites: {}, links: {}, capacity: 3600};
        return;
      }
      if (!model.sampled) model.history = {sites: {}, links: {}, capacity: 3600};
      mergeHistory(body.history);
      model.state = body.state;
      model.sampled = sampled;
      model.lastOk = Date.now();
      model.status = "live";
      render();
    }
  } catch (error) {
    if (Date.now() - model.lastOk > STALE_AFTER_MS) model.status = "stale";
  } finally {
    renderLive();
    setTimeout(poll, POLL_MS);
  }
}

// ---- Charts ----

function niceTicks(min, max, count) {
  if (!(max > min)) {
    const pad = Math.abs(min) * 0.1 || 1;
    min -= pad;
    max += pad;
  }
  const raw = (max - min) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const norm = raw / mag;
  const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  const lo = Math.floor(min / step) * step;
  const hi = Math.ceil(max / step) * step;
  const ticks = [];
  for (let v = lo; v <= hi + step / 2; v += step) ticks.push(v);
  return {lo, hi, ticks};
}

// Time axis ticks on round seconds, minutes or hours (local time), at most `maxTicks` of them.
function timeTicks(tMin, tMax, maxTicks) {
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400];
  const step = 1000 * (steps.find((s) => (tMax - tMin) / (s * 1000) <= maxTicks) || 86400);
  const offset = new Date(tMin).getTimezoneOffset() * 60000;  // Round in local time.
  const ticks = [];
  for (let t = Math.ceil((tMin - offset) / step) * step + offset; t <= tMax; t += step) ticks.push(t);
  return {step, ticks};
}

// A line chart on `canvas`: series = [{label, color, t: [ms], v: [number|null], dashed, fill}].
// Hovering shows a crosshair with each series' value at the nearest sample.
class LineChart {
  constructor(canvas, format) {
    this.canvas = canvas;
    this.format = format;
    this.series = [];
    this.hoverX = null;
    this.tooltip = el("div", {class: "tooltip", hidden: true});
    document.body.append(this.tooltip);
    canvas.addEventListener("mousemove", (e) => { this.hoverX = e.offsetX; this.draw(e); });
    canvas.addEventListener("mouseleave", () => { this.hoverX = null; this.tooltip.hidden = true; this.draw(); });
  }

  update(series, zeroBased) {
    this.series = series;
    this.zeroBased = zeroBased;
    this.canvas.dataset.points = String(series.reduce((n, s) => n + s.t.length, 0));
    this.draw();
  }

  draw(mouse) {
    const canvas = this.canvas, dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    ctx.font = "11px system-ui, sans-serif";

    let tMin = Infinity, tMax = -Infinity, vMin = Infinity, vMax = -Infinity;
    for (const s of this.series) {
      for (let i = 0; i < s.t.length; i++) {
        if (s.v[i] === null || !isFinite(s.v[i])) continue;
        tMin = Math.min(tMin, s.t[i]); tMax = Math.max(tMax, s.t[i]);
        vMin = Math.min(vMin, s.v[i]); vMax = Math.max(vMax, s.v[i]);
      }
    }
    if (!isFinite(tMin)) {
      ctx.fillStyle = "#5b6885";
      ctx.textAlign = "center";
      ctx.fillText("waiting for data…", w / 2, h / 2);
      return;
    }
    if (this.zeroBased) vMin = Math.min(0, vMin);
    if (tMax - tMin < 2000) tMin = tMax - 2000;  // A single point still gets a time axis.
    const y = niceTicks(vMin, vMax, 4);
    const left = 8 + Math.max(...y.ticks.map((v) => ctx.measureText(this.format(v)).width));
    const pad = {l: left + 8, r: 12, t: 8, b: 24};
    const X = (t) => pad.l + (t - tMin) / (tMax - tMin) * (w - pad.l - pad.r);
    const Y = (v) => h - pad.b - (v - y.lo) / (y.hi - y.lo) * (h - pad.t - pad.b);

    // Grid and axes.
    ctx.strokeStyle = "rgba(130, 150, 190, .14)";
    ctx.lineWidth = 1;
    ctx.fillStyle = "#8391ad";
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const v of y.ticks) {
      const py = Math.round(Y(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(pad.l, py); ctx.lineTo(w - pad.r, py); ctx.stroke();
      ctx.fillText(this.format(v), pad.l - 8, py);
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const x = timeTicks(tMin, tMax, Math.max(2, Math.floor((w - pad.l - pad.r) / 90)));
    for (const t of x.ticks) {
      const label = x.step >= 60000 ? fmtClock(t).slice(0, 5) : fmtClock(t);
      ctx.fillText(label, Math.min(Math.max(X(t), pad.l + 24), w - pad.r - 24), h - pad.b + 7);
    }

    // Lines (filled ones first so the lines stay on top).
    for (const s of [...this.series].sort((a, b) => (b.fill ? 1 : 0) - (a.fill ? 1 : 0))) {
      const pts = [];
      for (let i = 0; i < s.t.length; i++) {
        if (s.v[i] !== null && isFinite(s.v[i]) && s.t[i] >= tMin) pts.push([X(s.t[i]), Y(s.v[i])]);
      }
      if (pts.length === 0) continue;
      if (s.fill && pts.length > 1) {
        const gradient = ctx.createLinearGradient(0, pad.t, 0, h - pad.b);
        gradient.addColorStop(0, s.color + "55");
        gradient.addColorStop(1, s.color + "00");
        ctx.fillStyle = gradient;
        ctx.beginPath();
        ctx.moveTo(pts[0][0], h - pad.b);
        for (const [px, py] of pts) ctx.lineTo(px, py);
        ctx.lineTo(pts[pts.length - 1][0], h - pad.b);
        ctx.fill();
      }
      ctx.strokeStyle = s.color;
      ctx.lineWidth = 2;
      ctx.lineJoin = "round";
      ctx.setLineDash(s.dashed ? [6, 4] : []);
      ctx.beginPath();
      pts.forEach(([px, py], i) => (i ? ctx.lineTo(px, py) : ctx.moveTo(px, py)));
      ctx.stroke();
      ctx.setLineDash([]);
      if (pts.length === 1) {
        ctx.fillStyle = s.color;
        ctx.beginPath(); ctx.arc(pts[0][0], pts[0][1], 3, 0, 2 * Math.PI); ctx.fill();
      }
    }

    this.drawHover(ctx, X, Y, tMin, tMax, pad, w, h, mouse);
  }

  drawHover(ctx, X, Y, tMin, tMax, pad, w, h, mouse) {
    if (this.hoverX === null || this.hoverX < pad.l || this.hoverX > w - pad.r) {
      this.tooltip.hidden = true;
      return;
    }
    const t = tMin + (this.hoverX - pad.l) / (w - pad.l - pad.r) * (tMax - tMin);
    const rows = [];
    let nearestT = null;
    for (const s of this.series) {
      let best = -1;
      for (let i = 0; i < s.t.length; i++) {
        if (s.v[i] === null) continue;
        if (best < 0 || Math.abs(s.t[i] - t) < Math.abs(s.t[best] - t)) best = i;
      }
      if (best < 0) continue;
      nearestT = s.t[best];
      rows.push([s, s.v[best]]);
      ctx.fillStyle = s.color;
      ctx.beginPath(); ctx.arc(X(s.t[best]), Y(s.v[best]), 3.5, 0, 2 * Math.PI); ctx.fill();
    }
    if (nearestT === null) return;
    ctx.strokeStyle = "rgba(200, 210, 235, .35)";
    ctx.beginPath(); ctx.moveTo(X(nearestT) + 0.5, pad.t); ctx.lineTo(X(nearestT) + 0.5, h - pad.b); ctx.stroke();
    const tip = this.tooltip;
    tip.replaceChildren(el("div", {class: "t"}, fmtClock(nearestT)),
        ...rows.map(([s, v]) => el("div", {},
            el("span", {class: "swatch", style: {display: "inline-block", width: "8px", height: "8px",
                borderRadius: "2px", marginRight: "6px", background: s.color}}),
            `${s.label}: ${this.format(v)}`)));
    tip.hidden = false;
    if (mouse) {
      tip.style.left = `${Math.min(mouse.clientX + 14, window.innerWidth - tip.offsetWidth - 8)}px`;
      tip.style.top = `${mouse.clientY + 14}px`;
    }
  }
}

function renderLegend(id, series) {
  document.getElementById(id).replaceChildren(...series.map((s) =>
      el("span", {}, el("span", {class: "swatch" + (s.dashed ? " dashed" : ""),
          style: s.dashed ? {borderColor: s.color} : {background: s.color}}), s.label)));
}

// ---- Rendering ----

let charts = null;

function siteColor(index) {
  return SITE_COLORS[index % SITE_COLORS.length];
}

// The student's sites (the pipeline's), in stage order; a teacher's sites are apart.
function sitesInOrder(state) {
  return ((state.view || {}).sites || []).filter((s) => !s.teacher);
}

// Knowledge sharing: the teacher's sites in its stage order.
function teacherSites(state) {
  return ((state.view || {}).sites || []).filter((s) => s.teacher)
      .sort((a, b) => num(a.stage) - num(b.stage));
}

function metricsOf(state, id) {
  return (state.sites || []).find((m) => m.site_id === id) || {};
}

function reportOf(state, id) {
  return metricsOf(state, id).last_report || {};
}

// The site whose reports carry the loss (the last stage).
function lossSite(state) {
  const sites = sitesInOrder(state);
  const withLoss = sites.filter((s) => reportOf(state, s.id).has_loss);
  return withLoss.length ? withLoss[withLoss.length - 1] : sites[sites.length - 1];
}

// A boundary's link in pipeline `replica` (0 without replicas).
function linkOf(state, boundary, direction, replica, teacher = false) {
  return (state.links || []).find((l) => num(l.boundary) === boundary && l.direction === direction &&
      num(l.replica) === replica && Boolean(l.teacher) === teacher);
}

// The history's name of a link (gateway/http/history.cc LinkKey).
function linkKey(boundary, direction, replica) {
  return `${boundary}/${direction.toLowerCase()}${replica > 0 ? `@${replica}` : ""}`;
}

// Latest rate of a link from the history, in bytes/s: [raw, wire].
function linkRates(boundary, direction, replica) {
  const series = model.history.links[linkKey(boundary, direction, replica)];
  if (!series || series.t.length === 0) return [null, null];
  const last = series.t.length - 1;
  return [series.raw_bytes_per_s[last], series.wire_bytes_per_s[last]];
}

function render() {
  const state = model.state;
  if (!state) return;
  const now = num(state.unix_ms) || Date.now();
  const view = state.view || {};
  const sites = sitesInOrder(state);

  setText("federation", view.federation || "—");
  const meta = document.getElementById("meta");
  meta.replaceChildren(
      el("span", {}, "uptime ", el("b", {}, fmtDuration(state.uptime_s))),
      el("span", {}, "layers ", el("b", {}, String(num(view.num_layers)))),
      el("span", {}, "generation ", el("b", {}, String(num(view.generation)))),
      el("span", {}, "checkpoint ", el("b", {}, view.has_common_checkpoint ? `step ${fmtCount(view.common_checkpoint_step)}` : "none")));

  renderKpis(state, sites);
  renderPipeline(state, sites);
  renderTeacher(state, sites);
  renderServing(state);
  renderCharts(state, sites);
  renderTimeSplit(state, sites);
  renderRejections(state);
  renderSitesTable(state, [...sites, ...teacherSites(state)], now);
  renderAlerts(state, now);
  renderPlan(state);
}

function renderKpis(state, sites) {
  const last = lossSite(state);
  const report = last ? reportOf(state, last.id) : {};
  const steps = sites.map((s) => num(s.step));
  setText("kpi-step", steps.length ? fmtCount(Math.max(...steps)) : "—");
  const lagging = steps.length ? Math.max(...steps) - Math.min(...steps) : 0;
  setText("kpi-step-sub", lagging ? `slowest site ${fmtCount(lagging)} behind` : "all sites in step");

  setText("kpi-loss", report.has_loss ? num(report.loss).toFixed(4) : "—");
  const sub = document.getElementById("kpi-loss-sub");
  const series = last && model.history.sites[last.id];
  const losses = series ? series.loss.filter((v) => v !== null) : [];
  if (losses.length > 1) {
    const first = losses[0], now = losses[losses.length - 1];
    const change = (now - first) / Math.abs(first || 1) * 100;
    sub.replaceChildren(el("span", {class: change <= 0 ? "down" : "up"}, `${change <= 0 ? "▼" : "▲"} ${Math.abs(change).toFixed(1)}%`),
        ` over ${fmtDuration((series.t[series.t.length - 1] - series.t[0]) / 1000)}`);
  } else {
    sub.textContent = last ? `reported by ${last.id}` : "";
  }

  // The model on the held-out split: the last stage reports the newest evaluation (every
  // training.eval_every steps and after the last step).
  const evaluation = report.evaluation;
  if (!evaluation) {
    setText("kpi-eval", "—");
    setText("kpi-eval-sub", "not evaluated yet");
  } else if (evaluation.language_model) {
    setText("kpi-eval", num(evaluation.loss).toFixed(3));
    setText("kpi-eval-sub", `nats/token · ${num(evaluation.bits_per_byte).toFixed(3)} bits/byte`);
  } else {
    setText("kpi-eval", `${(100 * num(evaluation.accuracy)).toFixed(2)}%`);
    setText("kpi-eval-sub", "test accuracy");
  }

  // With replicas, the job's rate: every pipeline's last stage together.
  const lasts = sites.filter((s) => reportOf(state, s.id).has_loss);
  const rate = lasts.reduce((sum, s) => sum + num(reportOf(state, s.id).samples_per_second), 0);
  setText("kpi-throughput", lasts.length ? fmtNumber(rate) : "—");
  setText("kpi-throughput-sub", lasts.length > 1 ? `samples / s, ${lasts.length} pipelines' last stages` : "samples / s, last stage");
  setText("kpi-eta", num(report.eta_s) > 0 ? fmtDuration(report.eta_s) : "—");
  setText("kpi-eta-sub", num(report.eta_s) > 0 ? `done around ${fmtClock(Date.now() + num(report.eta_s) * 1000)}` : "");

  const stored = num(state.stored_bytes), budget = num(state.memory_budget_bytes);
  const share = budget > 0 ? stored / budget : 0;
  setText("kpi-memory", fmtMiB(stored));
  const bar = document.getElementById("kpi-memory-bar");
  bar.style.width = `${Math.min(100, share * 100).toFixed(1)}%`;
  bar.classList.toggle("high", share > 0.85);
  setText("kpi-memory-sub", budget > 0 ? `${(share * 100).toFixed(0)}% of ${fmtMiB(budget)} budget · ${fmtCount(state.waiting_pulls)} pulls waiting` : "no budget reported");

  setText("kpi-rejected", fmtCount(state.rejected_frames));
  document.getElementById("kpi-rejected").classList.toggle("alarm", num(state.rejected_frames) > 0);
  const reasons = Object.keys(state.rejected_by_reason || {}).length;
  setText("kpi-rejected-sub", reasons ? `${reasons} reason${reasons > 1 ? "s" : ""} · see below` : "none");
}

function siteCard(state, site, stage, label = `STAGE ${stage}`) {
  const metrics = metricsOf(state, site.id);
  const report = metrics.last_report || {};
  const layers = site.layers || {};
  const name = stateName(site.state);
  const devices = site.device_names || [];
  const deviceName = devices.length ? [...new Set(devices)].join(", ") : "";
  const stats = [["step", fmtCount(site.step)], ["samples/s", fmtNumber(report.samples_per_second)],
                 report.has_loss ? ["loss", num(report.loss).toFixed(3)] : ["restarts", fmtCount(metrics.restarts)]];
  return el("div", {class: `site state-${name}`, "data-site-id": site.id, title: deviceName},
      el("div", {class: "site-head"}, el("span", {class: "stage"}, label), el("span", {class: "pill"}, name)),
      el("div", {class: "site-id"}, site.id),
      el("div", {class: "site-layers"}, `layers [${num(layers.start)}, ${num(layers.end)})`),
      el("div", {class: "site-device"}, `${site.device || "?"} × ${num(site.workers)}` +
          (num(site.machines) > 1 ? ` × ${num(site.machines)} machines` : ""), el("span", {class: "muted"}, deviceName || " ")),
      rankPills(report.ranks || []),
      el("div", {class: "site-stats"}, ...stats.map(([k, v]) => el("div", {}, el("span", {}, k), el("b", {}, v)))));
}

// A site of several machines: one pill per rank with its state; the peer address on hover.
function rankPills(ranks) {
  if (ranks.length === 0) return el("div", {class: "site-ranks"});
  return el("div", {class: "site-ranks"}, ...ranks.map((r) =>
      el("span", {class: `rank rank-${r.state}`, title: `rank ${num(r.rank)}: ${r.state} (${r.peer || "?"})`},
         `r${num(r.rank)} ${r.state}`)));
}

function linkRow(state, boundary, direction, replica) {
  const link = linkOf(state, boundary, direction, replica) || {};
  const [raw, wire] = linkRates(boundary, direction, replica);
  const ratio = num(link.wire_bytes) > 0 ? num(link.raw_bytes) / num(link.wire_bytes) : null;
  const fwd = direction === "FORWARD";
  return el("div", {class: `link-row ${fwd ? "fwd" : "bwd"}`, "data-link": linkKey(boundary, direction, replica)},
      el("div", {class: "link-label"}, el("span", {class: "dir"}, fwd ? "forward" : "backward"),
          el("span", {class: "ratio", title: "compression ratio raw / wire"}, ratio ? `${ratio.toFixed(2)}×` : "—")),
      el("div", {class: "link-arrow"}),
      el("div", {class: "link-figures"},
          el("span", {}, el("span", {class: "muted"}, "raw "), raw === null ? "—" : fmtBytes(raw, "/s")),
          el("span", {}, el("span", {class: "muted"}, "wire "), wire === null ? "—" : fmtBytes(wire, "/s"))),
      el("div", {class: "link-extra", title: "frames relayed · frames queued now · mean push-to-pull latency"},
          `${fmtCount(link.frames)} frames · queue ${fmtCount(link.queue_depth)} · ${num(link.mean_push_to_pull_ms).toFixed(1)} ms`));
}

// Pipeline `replica`'s sites with the links between them.
function pipelineNodes(state, sites, replica) {
  const nodes = [];
  sites.forEach((site, stage) => {
    if (stage > 0) {
      nodes.push(el("div", {class: "link", "data-boundary": String(stage - 1)},
          linkRow(state, stage - 1, "FORWARD", replica), linkRow(state, stage - 1, "BACKWARD", replica)));
    }
    nodes.push(siteCard(state, site, stage));
  });
  return nodes;
}

// Replicas run as parallel pipelines, one row each; their stages meet in the gateway's secure sums.
function renderPipeline(state, sites) {
  const replicas = num((state.view || {}).replicas) || 1;
  const pipeline = document.getElementById("pipeline");
  pipeline.classList.toggle("replicas", replicas > 1);
  if (replicas <= 1) {
    pipeline.replaceChildren(...pipelineNodes(state, sites, 0));
  } else {
    const rows = [];
    for (let r = 0; r < replicas; r++) {
      rows.push(el("div", {class: "replica-row", "data-replica": String(r)},
          el("div", {class: "replica-label"}, `REPLICA ${r}`),
          ...pipelineNodes(state, sites.filter((s) => num(s.replica) === r), r)));
    }
    pipeline.replaceChildren(...rows);
  }
  renderSums(state, replicas);
}

// A teacher's link: what crossed it in all (its figures are totals, not rates).
function teacherLinkRow(link) {
  return el("div", {class: "link-row fwd", "data-link": `t${num(link.boundary)}/forward`},
      el("div", {class: "link-label"}, el("span", {class: "dir"}, "teach")),
      el("div", {class: "link-arrow"}),
      el("div", {class: "link-figures"}, el("span", {}, el("span", {class: "muted"}, "wire "), fmtBytes(num(link.wire_bytes)))),
      el("div", {class: "link-extra"}, `${fmtCount(link.frames)} frames · ${num(link.mean_push_to_pull_ms).toFixed(1)} ms`));
}

// Knowledge sharing: the teacher's sites, forward only, its links, and what its targets cost the
// student: bytes per token on the wire and the share of the last stage's time spent waiting.
function renderTeacher(state, sites) {
  const box = document.getElementById("teacher");
  const teachers = teacherSites(state);
  box.hidden = teachers.length === 0;
  if (teachers.length === 0) return;
  const nodes = [el("div", {class: "replica-label"}, "TEACHER")];
  teachers.forEach((site, t) => {
    if (t > 0) nodes.push(el("div", {class: "link"}, teacherLinkRow(linkOf(state, t - 1, "FORWARD", 0, true) || {})));
    nodes.push(siteCard(state, site, t, `TEACHER ${t}`));
  });
  const targets = linkOf(state, teachers.length - 1, "FORWARD", 0, true) || {};
  nodes.push(el("div", {class: "link"}, teacherLinkRow(targets)));
  const student = sites[sites.length - 1];
  const report = student ? reportOf(state, student.id) : {};
  const busy = num(report.compute_s) + num(report.wait_s);
  const perToken = num(targets.targets) > 0 ? num(targets.wire_bytes) / num(targets.targets) : null;
  box.replaceChildren(el("div", {class: "pipeline replica-row"}, ...nodes),
      el("div", {class: "sums"},
          el("span", {}, "targets to ", el("b", {}, student ? student.id : "—"), ": ",
             el("b", {"data-teacher": "bytes-per-token"}, perToken === null ? "—" : fmtBytes(perToken)), " per token"),
          el("span", {}, "the student waits ",
             el("b", {"data-teacher": "wait"}, busy > 0 ? `${(100 * num(report.teacher_wait_s) / busy).toFixed(1)}%` : "—"),
             el("span", {class: "muted"}, " of its last stage's time for them"))));
}

// A serving federation: the clients' requests answered, tokens per second while decoding, and
// the mean time of a request from its prompt to its last token.
function renderServing(state) {
  const box = document.getElementById("serving");
  const served = state.serving;
  box.hidden = !served;
  if (!served) return;
  const requests = num(served.requests), tokens = num(served.tokens), seconds = num(served.seconds);
  box.replaceChildren(
      el("span", {}, "served ", el("b", {"data-serving": "requests"}, fmtCount(requests)), " requests, ",
         el("b", {}, fmtCount(tokens)), " tokens"),
      el("span", {}, el("b", {"data-serving": "tokens-per-second"}, seconds > 0 ? fmtNumber(tokens / seconds) : "—"),
         " tokens/s while decoding"),
      el("span", {}, "mean request ", el("b", {"data-serving": "latency"},
         requests > 0 ? `${(1000 * seconds / requests).toFixed(0)} ms` : "—"),
         el("span", {class: "muted"}, " from the prompt to the last token")),
      el("span", {}, el("b", {}, fmtCount(served.failed)), " failed"));
}

function renderSums(state, replicas) {
  const box = document.getElementById("sums");
  const sums = state.sums;
  box.hidden = replicas <= 1;
  if (replicas <= 1) return;
  const rounds = num(sums && sums.rounds);
  const perRound = rounds > 0 ? (num(sums.bytes_in) + num(sums.bytes_out)) / rounds : null;
  box.replaceChildren(
      el("span", {}, "secure sums of stage replicas: ", el("b", {"data-sums": "rounds"}, fmtCount(rounds)), " rounds"),
      el("span", {}, el("b", {"data-sums": "bytes-per-round"}, perRound === null ? "—" : fmtBytes(perRound)),
         " per round (masked vectors in, sums out)"),
      el("span", {}, "mean round ", el("b", {}, rounds > 0 ? `${(1000 * num(sums.round_seconds) / rounds).toFixed(1)} ms` : "—"),
         el("span", {class: "muted"}, " from the first vector to the sum")),
      el("span", {class: "muted"}, "the gateway adds masked fixed-point vectors; it holds no mask key"));
}

function renderCharts(state, sites) {
  if (!charts) {
    charts = {
      loss: new LineChart(document.getElementById("chart-loss"), (v) => fmtNumber(v, 3)),
      throughput: new LineChart(document.getElementById("chart-throughput"), (v) => fmtNumber(v, 3)),
      bandwidth: new LineChart(document.getElementById("chart-bandwidth"), (v) => fmtBytes(v, "/s")),
    };
    window.addEventListener("resize", () => Object.values(charts).forEach((c) => c.draw()));
  }
  const h = model.history;
  const last = lossSite(state);
  const lossSeries = last && h.sites[last.id] ?
      [{label: `loss (${last.id})`, color: "#2fc774", t: h.sites[last.id].t, v: h.sites[last.id].loss, fill: true}] : [];
  charts.loss.update(lossSeries, false);
  renderLegend("legend-loss", lossSeries);

  const throughput = sites.filter((s) => h.sites[s.id]).map((s, i) =>
      ({label: s.id, color: siteColor(i), t: h.sites[s.id].t, v: h.sites[s.id].samples_per_second}));
  charts.throughput.update(throughput, true);
  renderLegend("legend-throughput", throughput);

  // Sum of every link's rates, per sample time.
  const totals = new Map();
  for (const series of Object.values(h.links)) {
    series.t.forEach((t, i) => {
      const entry = totals.get(t) || [0, 0];
      entry[0] += series.raw_bytes_per_s[i];
      entry[1] += series.wire_bytes_per_s[i];
      totals.set(t, entry);
    });
  }
  const times = [...totals.keys()].sort((a, b) => a - b);
  const bandwidth = [
    {label: "raw (uncompressed)", color: "#8391ad", t: times, v: times.map((t) => totals.get(t)[0]), dashed: true},
    {label: "wire (compressed, sealed)", color: "#5b9cff", t: times, v: times.map((t) => totals.get(t)[1]), fill: true},
  ];
  charts.bandwidth.update(bandwidth, true);
  renderLegend("legend-bandwidth", bandwidth);
}

function renderTimeSplit(state, sites) {
  renderLegend("legend-timesplit", PHASES.map(([label, , color]) => ({label, color})));
  const rows = sites.map((site) => {
    const report = reportOf(state, site.id);
    const total = PHASES.reduce((sum, [, key]) => sum + Math.max(0, num(report[key])), 0);
    const segments = PHASES.map(([label, key, color]) => {
      const seconds = Math.max(0, num(report[key]));
      const share = total > 0 ? seconds / total : 0;
      return el("div", {class: "ts-seg", title: `${label}: ${(share * 100).toFixed(1)}% (${seconds.toFixed(3)} s)`,
          style: {width: `${share * 100}%`, background: color, color: label === "wait" ? "#c3cde2" : ""}},
          share >= 0.09 ? `${label} ${(share * 100).toFixed(0)}%` : "");
    });
    return el("div", {class: "ts-row", "data-site-id": site.id},
        el("div", {class: "ts-name"}, site.id),
        el("div", {class: "ts-bar"}, ...(total > 0 ? segments : [])),
        el("div", {class: "ts-total"}, total > 0 ? `${total.toFixed(2)} s` : "no report"));
  });
  document.getElementById("timesplit").replaceChildren(...rows);
}

function renderRejections(state) {
  const reasons = Object.entries(state.rejected_by_reason || {}).map(([r, n]) => [r, num(n)])
      .sort((a, b) => b[1] - a[1]);
  const container = document.getElementById("rejected");
  if (reasons.length === 0) {
    container.replaceChildren(el("div", {class: "empty"}, "No frame has been rejected."));
    return;
  }
  const max = Math.max(...reasons.map(([, n]) => n), 1);
  container.replaceChildren(...reasons.map(([reason, count]) =>
      el("div", {class: "bar-row"}, el("span", {}, reason.replace(/_/g, " ")),
          el("div", {class: "bar-track"}, el("div", {class: "bar-fill", style: {width: `${count / max * 100}%`}})),
          el("span", {class: "num"}, fmtCount(count)))));
}

function renderSitesTable(state, sites, now) {
  const rows = sites.map((site) => {
    const metrics = metricsOf(state, site.id);
    const name = stateName(site.state);
    const restarts = num(metrics.restarts);
    return el("tr", {},
        el("td", {}, el("b", {}, site.id)),
        el("td", {}, el("span", {class: `pill state-${name}`}, name)),
        el("td", {class: "num"}, String(num(site.epoch))),
        el("td", {class: "num", style: restarts ? {color: "var(--warn)", fontWeight: "600"} : {}}, String(restarts)),
        el("td", {class: "num"}, fmtCount(site.checkpoint_step)),
        el("td", {class: "num"}, metrics.last_seen_s_ago !== undefined ? `${num(metrics.last_seen_s_ago).toFixed(1)} s` : "—"));
  });
  document.querySelector("#sites-table tbody").replaceChildren(...rows);
}

function renderAlerts(state, now) {
  const alerts = [...(state.alerts || [])].reverse();  // Newest first.
  const list = document.getElementById("alerts");
  if (alerts.length === 0) {
    list.replaceChildren(el("li", {class: "empty"}, "No alerts."));
    return;
  }
  list.replaceChildren(...alerts.map((alert) => {
    const severity = String(alert.severity || "INFO").toLowerCase();
    return el("li", {class: `alert ${severity}`},
        el("div", {}, el("div", {class: "sev"}, severity), el("div", {class: "when"}, fmtAgo(num(alert.unix_ms), now))),
        el("div", {}, alert.message || ""));
  }));
}

// layers: auto: the gateway's plan (or which profiles it waits for), one line each.
function renderPlan(state) {
  const lines = state.plan || [];
  document.getElementById("plan-panel").hidden = lines.length === 0;
  setText("plan", lines.join("\n"));
}

function renderLive() {
  const live = document.getElementById("live");
  live.dataset.status = model.status;
  const ago = model.lastOk ? ((Date.now() - model.lastOk) / 1000).toFixed(1) : null;
  const text = {
    connecting: "connecting…",
    live: `live · updated ${ago} s ago`,
    stale: ago ? `no answer for ${Math.round(ago)} s` : "gateway unreachable",
    unauthorized: "unauthorized: open the page with ?token=…",
  }[model.status];
  setText("live-text", text);
}

poll();
