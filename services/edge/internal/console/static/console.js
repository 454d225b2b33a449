// aiforge console: the confirmations of destructive forms and the usage
// charts, drawn as SVG from the JSON the page carries. No framework.
"use strict";

(function () {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#3b6ea8", "#d08c2c", "#4f9a5b", "#a64d79", "#6c6c6c"];

  function el(name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function fmt(v, unit) {
    if (unit === "usd") {
      return "$" + (v !== 0 && Math.abs(v) < 0.01 ? v.toFixed(6) : v.toFixed(2));
    }
    if (v >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e4) return (v / 1e3).toFixed(1) + "k";
    return String(Math.round(v));
  }

  // columns: one group of vertical bars per label (days).
  function columns(box, c, unit) {
    const W = 560, H = 220, left = 56, bottom = 28, top = 10;
    const svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img" });
    const n = c.labels.length, k = c.series.length;
    let maxV = 0;
    c.series.forEach(s => s.values.forEach(v => { maxV = Math.max(maxV, v); }));
    const plotH = H - bottom - top, plotW = W - left - 8;
    const groupW = plotW / Math.max(n, 1), barW = Math.max(2, (groupW * 0.8) / k);
    svg.appendChild(el("line", { x1: left, y1: top + plotH, x2: W - 8, y2: top + plotH, class: "axis" }));
    svg.appendChild(el("text", { x: left - 4, y: top + 8, "text-anchor": "end", class: "tick" }, fmt(maxV, unit)));
    svg.appendChild(el("text", { x: left - 4, y: top + plotH, "text-anchor": "end", class: "tick" }, fmt(0, unit)));
    c.labels.forEach((label, i) => {
      const x0 = left + i * groupW + groupW * 0.1;
      c.series.forEach((s, j) => {
        const v = s.values[i] || 0, h = maxV > 0 ? (v / maxV) * plotH : 0;
        const r = el("rect", { x: x0 + j * barW, y: top + plotH - h, width: barW - 1, height: h, fill: COLORS[j % COLORS.length] });
        r.appendChild(el("title", {}, label + " · " + s.name + ": " + fmt(v, unit)));
        svg.appendChild(r);
      });
      if (n <= 16 || i % Math.ceil(n / 16) === 0) {
        svg.appendChild(el("text", { x: x0 + (groupW * 0.8) / 2, y: H - 10, "text-anchor": "middle", class: "tick" }, label));
      }
    });
    box.appendChild(svg);
    legend(box, c);
  }

  // bars: one horizontal bar per label (models, keys).
  function bars(box, c, unit) {
    const n = c.labels.length, rowH = 22, W = 560, left = 180;
    const H = Math.max(rowH * n + 8, 30);
    const svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img" });
    const vals = c.series[0] ? c.series[0].values : [];
    const maxV = Math.max(0, ...vals);
    c.labels.forEach((label, i) => {
      const v = vals[i] || 0, w = maxV > 0 ? (v / maxV) * (W - left - 80) : 0, y = 4 + i * rowH;
      const short = label.length > 26 ? label.slice(0, 25) + "…" : label;
      svg.appendChild(el("text", { x: left - 6, y: y + 14, "text-anchor": "end", class: "tick" }, short));
      const r = el("rect", { x: left, y: y + 2, width: w, height: rowH - 6, fill: COLORS[0] });
      r.appendChild(el("title", {}, label + ": " + fmt(v, unit)));
      svg.appendChild(r);
      svg.appendChild(el("text", { x: left + w + 4, y: y + 14, class: "tick" }, fmt(v, unit)));
    });
    if (n === 0) svg.appendChild(el("text", { x: 8, y: 20, class: "tick" }, "No data in this window."));
    box.appendChild(svg);
  }

  function legend(box, c) {
    if (c.series.length < 2) return;
    const p = document.createElement("p");
    p.className = "legend";
    c.series.forEach((s, j) => {
      const sw = document.createElement("span");
      sw.className = "swatch swatch-" + j;
      p.appendChild(sw);
      p.appendChild(document.createTextNode(s.name + " "));
    });
    box.appendChild(p);
  }

  function drawCharts() {
    const data = document.getElementById("chart-data");
    if (!data) return;
    let charts;
    try { charts = JSON.parse(data.textContent); } catch (e) { return; }
    document.querySelectorAll(".chart[data-chart]").forEach(box => {
      const c = charts[box.dataset.chart];
      if (!c) return;
      c.labels = c.labels || [];
      c.series = (c.series || []).map(s => ({ name: s.name, values: s.values || [] }));
      (box.dataset.kind === "columns" ? columns : bars)(box, c, box.dataset.unit);
      box.dataset.drawn = "true";
    });
  }

  function confirmations() {
    document.querySelectorAll("form[data-confirm]").forEach(f => {
      f.addEventListener("submit", ev => {
        if (!window.confirm(f.dataset.confirm)) ev.preventDefault();
      });
    });
  }

  document.addEventListener("DOMContentLoaded", () => { confirmations(); drawCharts(); });
})();
