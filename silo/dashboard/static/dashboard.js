// The silo dashboard: renders the state pushed by /api/stream (server-sent events).
// Plain browser JavaScript, no build step, no library: the page must work without internet.
"use strict";

const STATUS_COLOURS = { ACTIVE: "#2e9e50", JOINING: "#3b73c8", SHUTTING_DOWN: "#d9a400", STOPPING: "#d9a400", DEAD: "#c43c3c" };
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  return node;
}

function age(seconds) {
  if (seconds < 0) return "ahead";
  if (seconds < 60) return seconds.toFixed(1) + "s ago";
  if (seconds < 3600) return Math.floor(seconds / 60) + "m" + String(Math.floor(seconds % 60)).padStart(2, "0") + "s ago";
  return Math.floor(seconds / 3600) + "h" + String(Math.floor((seconds % 3600) / 60)).padStart(2, "0") + "m ago";
}

function clock(iso) {
  return iso ? iso.replace(/^.*T/, "").replace(/(\.\d{3})\d*/, "$1").replace(/\+00:00$/, "Z") : "";
}

function renderHeader(state) {
  document.getElementById("cluster").textContent = state.cluster;
  document.getElementById("version").textContent = state.version ?? "-";
  document.getElementById("updated").textContent = clock(state.now);
  const counts = document.getElementById("counts");
  counts.replaceChildren(...Object.entries(state.counts).map(([status, count]) =>
    el("span", { class: "badge badge-" + status }, count + " " + status.toLowerCase())));
  const error = document.getElementById("error");
  error.hidden = !state.error;
  error.textContent = state.error || "";
}

function renderMalformed(state) {
  const malformed = document.getElementById("malformed");
  malformed.hidden = state.malformed.length === 0;
  malformed.replaceChildren(
    el("div", {}, state.malformed.length + " malformed row(s) in the table, skipped by every silo (repair or delete by hand):"),
    ...state.malformed.map((row) => el("div", { class: "mono" }, row.key + ": " + row.reason)));
}

function renderSilos(state) {
  const body = document.querySelector("#silos tbody");
  body.replaceChildren(...state.silos.map((silo) => {
    const properties = Object.entries(silo.properties).map(([k, v]) => k + "=" + v).join(", ");
    const gateway = silo.proxy_port ? silo.address.replace(/:\d+@.*$/, ":" + silo.proxy_port) : "-";
    return el("tr", { class: "status-" + silo.status, "data-address": silo.address },
      el("td", {}, silo.name || "-"),
      el("td", { class: "address" }, silo.address),
      el("td", {}, el("span", { class: "status" }, silo.status)),
      el("td", { class: "mono" }, clock(silo.i_am_alive_time) + " (" + age(silo.i_am_alive_age_s) + ")"),
      el("td", { class: "mono" }, gateway),
      el("td", {}, properties || "-"));
  }));
}

function renderRing(state) {
  const ring = document.getElementById("ring");
  const radius = 150;
  const place = {};
  const nodes = state.silos;
  for (const silo of nodes) {
    // Dead silos sit inside the ring (they no longer probe nor are probed), so they never hide a live one.
    const angle = (silo.ring_angle - 90) * Math.PI / 180;
    const r = silo.status === "DEAD" ? radius * 0.62 : radius;
    place[silo.address] = [r * Math.cos(angle), r * Math.sin(angle)];
  }
  const children = [svg("circle", { cx: 0, cy: 0, r: radius, fill: "none", stroke: "#d5dae1", "stroke-width": 2 })];
  const defs = svg("defs", {});
  const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 18, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse" });
  marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#5b6472" }));
  defs.append(marker);
  children.push(defs);
  for (const edge of state.probes) {
    const [a, b] = [place[edge.from], place[edge.to]];
    if (!a || !b) continue;
    children.push(svg("line", { x1: a[0], y1: a[1], x2: b[0], y2: b[1], stroke: "#5b6472",
      "stroke-opacity": edge.ring === 0 ? 0.9 : 0.25, "stroke-width": edge.ring === 0 ? 1.6 : 1, "marker-end": "url(#arrow)" }));
  }
  for (const silo of nodes) {
    const [x, y] = place[silo.address];
    const node = svg("circle", { cx: x, cy: y, r: 9, fill: STATUS_COLOURS[silo.status] || "#888", "data-address": silo.address });
    const title = svg("title", {});
    title.textContent = silo.address + " " + silo.status;
    node.append(title);
    const out = silo.status === "DEAD" ? 0.8 : 1.18;
    const label = svg("text", { x: x * out, y: y * out + 4, "text-anchor": "middle", "font-size": 11, fill: "#1d2430" });
    label.textContent = silo.name || silo.address;
    children.push(node, label);
  }
  ring.replaceChildren(...children);
  document.getElementById("rings").textContent = "(" + state.num_probed_silos + " rings)";
}

function renderSuspicions(state) {
  const names = Object.fromEntries(state.silos.map((silo) => [silo.address, silo.name]));
  const body = document.querySelector("#suspicions tbody");
  body.replaceChildren(...state.suspicions.map((vote) => el("tr", {},
    el("td", { class: "address" }, (vote.name ? vote.name + " " : "") + vote.silo),
    el("td", { class: "address" }, (names[vote.by] ? names[vote.by] + " " : "") + vote.by),
    el("td", { class: "mono" }, clock(vote.at)),
    el("td", {}, age(vote.age_s)))));
  document.getElementById("no-suspicions").hidden = state.suspicions.length > 0;
}

function renderLatency(state) {
  const latency = state.table_latency;
  const figures = document.getElementById("latency-figures");
  if (!latency.reads) {
    figures.textContent = "no successful read yet";
    return;
  }
  figures.textContent = "read_all: last " + latency.last_ms + " ms, p50 " + latency.p50_ms + " ms, p95 " +
    latency.p95_ms + " ms, max " + latency.max_ms + " ms over " + latency.reads + " reads";
  const chart = document.getElementById("latency-chart");
  const samples = latency.recent_ms;
  const top = Math.max(...samples, 1);
  const points = samples.map((value, index) =>
    (samples.length === 1 ? 0 : index * 300 / (samples.length - 1)).toFixed(1) + "," + (58 - value * 56 / top).toFixed(1));
  chart.replaceChildren(svg("polyline", { points: points.join(" "), fill: "none", stroke: "#3b73c8", "stroke-width": 1.5 }));
}

function renderTimeline(state) {
  const list = document.getElementById("timeline");
  list.replaceChildren(...state.timeline.map((event) => el("li", { class: "event-" + event.kind },
    el("span", { class: "mono" }, clock(event.observed_at) + "  v" + event.version + "  "),
    el("span", { class: "kind kind-" + event.kind }, event.kind.replace(/_/g, " ")),
    (event.name ? event.name + " " : "") + event.silo +
      (event.by.length ? " by " + event.by.join(", ") : "") +
      (event.kind === "properties_changed" ? " " + JSON.stringify(event.properties) : ""))));
  if (!state.timeline.length) list.replaceChildren(el("li", { class: "muted" }, "no changes seen yet"));
}

function render(state) {
  renderHeader(state);
  renderMalformed(state);
  renderSilos(state);
  renderRing(state);
  renderSuspicions(state);
  renderLatency(state);
  renderTimeline(state);
}

function connect() {
  const connection = document.getElementById("connection");
  const stream = new EventSource("/api/stream");
  stream.onopen = () => { connection.textContent = "live"; connection.className = "connection live"; };
  stream.onmessage = (message) => render(JSON.parse(message.data));
  stream.onerror = () => { connection.textContent = "reconnecting"; connection.className = "connection lost"; };
}

connect();
