// Pacer's live page: long-polls /api/v1/status for the per-second samples
// and draws them (no library, no build step). History is kept here, per
// vCPU, for the sparklines: the last SPAN samples.
"use strict";

const SPAN = 60;
const history = new Map(); // "vm/vcpu" -> {run: [], wait: [], p99: []}
let after = 0;
let received = 0;
let firstT = null;
// `?polls=N`: stop after N answers (a page that stops lets a headless
// browser take its picture; by default it follows the run to its end).
const polls = Number(new URLSearchParams(location.search).get("polls")) || Infinity;

const el = (tag, attrs = {}, text) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
};

const pct = (f) => (f === null || f === undefined ? "-" : Math.round(f * 100) + "%");

function ms(ns) {
  if (ns === null || ns === undefined) return "-";
  if (ns >= 1e9) return (ns / 1e9).toFixed(2) + " s";
  if (ns >= 1e6) return (ns / 1e6).toFixed(2) + " ms";
  return Math.round(ns / 1e3) + " us";
}

// An SVG polyline of `values` (nulls skipped), scaled to `max`.
function sparkline(values, max, color) {
  const w = 120, h = 24;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  const pts = [];
  const top = max > 0 ? max : 1;
  values.forEach((v, i) => {
    if (v === null || v === undefined) return;
    const x = (i / (SPAN - 1)) * (w - 2) + 1;
    const y = h - 2 - Math.min(v / top, 1) * (h - 4);
    pts.push(x.toFixed(1) + "," + y.toFixed(1));
  });
  const base = document.createElementNS("http://www.w3.org/2000/svg", "line");
  base.setAttribute("x1", 0); base.setAttribute("x2", w);
  base.setAttribute("y1", h - 1); base.setAttribute("y2", h - 1);
  base.setAttribute("stroke", "#ddd");
  svg.appendChild(base);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", pts.join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", color);
  line.setAttribute("stroke-width", "1.5");
  svg.appendChild(line);
  return svg;
}

function push(list, v) {
  list.push(v);
  while (list.length > SPAN) list.shift();
}

function ingest(s) {
  for (const vm of s.vms) {
    for (const c of vm.vcpus) {
      const key = vm.name + "/" + c.vcpu;
      if (!history.has(key)) history.set(key, { run: [], wait: [], p99: [] });
      const h = history.get(key);
      push(h.run, c.run_fraction);
      push(h.wait, c.ready_wait_fraction);
      push(h.p99, c.wake_latency ? c.wake_latency.p99_ns : null);
    }
  }
}

function render(s) {
  if (firstT === null) firstT = (s.t_run_ns / 1e9).toFixed(1) + " s";
  const head = document.getElementById("head");
  head.replaceChildren();
  const b = (t) => el("b", {}, t);
  const count = el("b", { id: "vcpu-count", "data-vcpus": String(s.vcpu_count) }, s.vcpu_count + " vCPUs");
  head.append("policy ", b(s.policy), ", mode ", b(s.mode || "-"), ", ",
    b(s.vms.length + " VMs"), ", ", count, ", t = ",
    el("b", { id: "t", "data-first": firstT }, (s.t_run_ns / 1e9).toFixed(1) + " s"), ", ",
    el("span", { id: "seq", "data-seq": String(s.seq), "data-received": String(received) },
      "sample " + s.seq));

  const cpus = document.getElementById("cpus");
  cpus.replaceChildren();
  // Who runs where, from the vCPU rows (one picture of one moment).
  const on = new Map();
  for (const vm of s.vms)
    for (const c of vm.vcpus)
      if (c.state === "running" && c.host_cpu !== null) on.set(c.host_cpu, { vm: vm.name, vcpu: c.vcpu, e: c.effective_priority });
  for (const c of s.cpus) {
    const who = on.get(c.cpu);
    const idle = who === undefined;
    const card = el("div", { class: "cpu" + (idle ? " idle" : "") + (c.in_service ? "" : " off") });
    card.append(el("div", {}, "CPU " + c.cpu + (c.in_service ? "" : " (out of service)")));
    card.append(el("div", { class: "who" }, idle ? "idle" : who.vm + "/" + who.vcpu));
    card.append(el("div", {}, idle ? "\u00a0" : "effective priority " + who.e));
    const bar = el("div", { class: "bar", title: "busy " + pct(c.busy_fraction) });
    bar.append(el("div", { style: "width:" + Math.round((c.busy_fraction || 0) * 100) + "%" }));
    card.append(bar);
    cpus.append(card);
  }

  const vms = document.querySelector("#vms tbody");
  vms.replaceChildren();
  for (const vm of s.vms) {
    const tr = el("tr");
    tr.append(el("td", {}, vm.name), el("td", { class: vm.state }, vm.state),
      el("td", { class: "num" }, pct(vm.host_share)));
    const td = el("td", { class: "vmshare" });
    const bar = el("div", { class: "bar" });
    bar.append(el("div", { style: "width:" + Math.round((vm.host_share || 0) * 100) + "%" }));
    td.append(bar);
    tr.append(td);
    vms.append(tr);
  }

  const vcpus = document.querySelector("#vcpus tbody");
  vcpus.replaceChildren();
  let p99max = 0;
  for (const h of history.values()) for (const v of h.p99) if (v) p99max = Math.max(p99max, v);
  for (const vm of s.vms) {
    for (const c of vm.vcpus) {
      const h = history.get(vm.name + "/" + c.vcpu);
      const state = c.engine_state === "paused" ? "paused" : c.state;
      const tr = el("tr");
      tr.append(el("td", {}, vm.name + "/" + c.vcpu), el("td", { class: state }, state),
        el("td", { class: "num" }, c.host_cpu === null ? "-" : String(c.host_cpu)),
        el("td", { class: "num" }, String(c.effective_priority)),
        el("td", { class: "num" }, pct(c.run_fraction)));
      let td = el("td"); td.append(sparkline(h.run, 1, "#1b7f3b")); tr.append(td);
      tr.append(el("td", { class: "num" }, pct(c.ready_wait_fraction)));
      td = el("td"); td.append(sparkline(h.wait, 1, "#b26a00")); tr.append(td);
      tr.append(el("td", { class: "num" }, ms(c.wake_latency ? c.wake_latency.p99_ns : null)));
      td = el("td"); td.append(sparkline(h.p99, p99max, "#8e44ad")); tr.append(td);
      vcpus.append(tr);
    }
  }
}

async function poll() {
  const error = document.getElementById("error");
  let failures = 0;
  for (let n = 0; n < polls; n++) {
    try {
      const r = await fetch("/api/v1/status?after=" + after, { cache: "no-store" });
      const d = await r.json();
      if (!r.ok) throw new Error(d.error || r.status);
      let last = null;
      for (const s of d.samples) {
        ingest(s);
        after = s.seq;
        received += 1;
        last = s;
      }
      if (last) render(last);
      error.textContent = "";
      failures = 0;
    } catch (e) {
      // Once is a dropped connection (retried at once); twice, the run is gone.
      failures += 1;
      if (failures > 1) {
        error.textContent = "no answer from Pacer (" + e.message + "); the run may have ended";
        await new Promise((ok) => setTimeout(ok, 2000));
      }
    }
  }
}

poll();
