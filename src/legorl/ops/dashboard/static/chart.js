// Minimal SVG line charts for the legorl dashboard: no dependencies, works offline.
// LegoChart.line(container, {title, series: [{name, points: [[x, y], ...], color, dash}], height})
(function () {
  "use strict";
  const NS = "http://www.w3.org/2000/svg";
  const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777",
    "#4b5563", "#65a30d"];

  function el(name, attrs, parent) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (parent) parent.appendChild(node);
    return node;
  }

  function fmt(v) {
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e4 || a < 1e-3) return v.toExponential(1);
    return String(Number(v.toPrecision(3)));
  }

  function ticks(lo, hi, n) {
    const out = [];
    for (let i = 0; i <= n; i++) out.push(lo + ((hi - lo) * i) / n);
    return out;
  }

  function line(container, opts) {
    const width = Math.max(container.clientWidth || 0, 260);
    const height = opts.height || 190;
    const m = { l: 50, r: 12, t: 24, b: 26 };
    const series = (opts.series || []).map((s, i) => ({
      ...s, color: s.color || PALETTE[i % PALETTE.length],
      points: (s.points || []).filter((p) => p[1] !== null && Number.isFinite(p[1])),
    }));
    container.innerHTML = "";
    const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "lego-chart" }, container);
    el("text", { x: m.l, y: 14, class: "chart-title" }, svg).textContent = opts.title || "";
    const all = series.flatMap((s) => s.points);
    if (!all.length) {
      el("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "chart-empty" }, svg)
        .textContent = "no data";
      return svg;
    }
    let [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
    let [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
    const pad = (y1 - y0) * 0.05;
    y0 -= pad; y1 += pad;
    const sx = (x) => m.l + ((x - x0) / (x1 - x0)) * (width - m.l - m.r);
    const sy = (y) => height - m.b - ((y - y0) / (y1 - y0)) * (height - m.t - m.b);
    const axes = el("g", { class: "chart-axes" }, svg);
    for (const t of ticks(y0, y1, 4)) {
      el("line", { x1: m.l, x2: width - m.r, y1: sy(t), y2: sy(t), class: "chart-grid" }, axes);
      el("text", { x: m.l - 4, y: sy(t) + 3, "text-anchor": "end", class: "chart-tick" }, axes).textContent = fmt(t);
    }
    const xt = x1 - x0 <= 6 ? ticks(x0, x1, Math.round(x1 - x0)) : ticks(x0, x1, 4);
    for (const t of xt) {
      el("text", { x: sx(t), y: height - m.b + 14, "text-anchor": "middle", class: "chart-tick" }, axes)
        .textContent = fmt(Math.round(t * 100) / 100);
    }
    el("line", { x1: m.l, x2: m.l, y1: m.t, y2: height - m.b, class: "chart-axis" }, axes);
    el("line", { x1: m.l, x2: width - m.r, y1: height - m.b, y2: height - m.b, class: "chart-axis" }, axes);
    series.forEach((s, i) => {
      const g = el("g", { class: "chart-series", "data-name": s.name }, svg);
      const pts = s.points.map((p) => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
      el("polyline", { points: pts, fill: "none", stroke: s.color, "stroke-width": 1.8,
        "stroke-dasharray": s.dash ? "5 3" : "" }, g);
      if (s.points.length <= 200) for (const p of s.points) {  // dots (with hover text) on short series
        const c = el("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 2.6, fill: s.color }, g);
        el("title", {}, c).textContent = `${s.name}  step ${p[0]}: ${fmt(p[1])}`;
      }
    });
    if (series.length > 1) {  // legend below the plot, as HTML so long names wrap
      const legend = document.createElement("div");
      legend.className = "chart-legend";
      for (const s of series) {
        const item = document.createElement("span");
        item.innerHTML = `<i style="background:${s.color}"></i>`;
        item.append(s.name + (s.dash ? " (dashed)" : ""));
        legend.append(item);
      }
      container.append(legend);
    }
    return svg;
  }

  window.LegoChart = { line, PALETTE };
})();
