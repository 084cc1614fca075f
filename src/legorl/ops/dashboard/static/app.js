// legorl dashboard: polls the JSON endpoints and renders panels. Plain DOM, no framework.
(function () {
  "use strict";
  const POLL_MS = Number(new URLSearchParams(location.search).get("poll") || 5000);
  const CURVES = ["critic/score/mean", "rollout/pass_rate", "actor/entropy", "actor/ppo_kl", "actor/pg_clipfrac",
    "actor/grad_norm", "actor/pg_loss", "actor/lr", "response_length/mean", "critic/advantages/mean",
    "critic/vf_loss"];
  const GRID_STEPS = 40;  // the grid shows the latest steps only
  const state = { runs: [], run: null, compare: "", data: {}, step: null, task: null, trial: null };
  const $ = (sel) => document.querySelector(sel);

  function h(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "onclick") node.onclick = v; else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    for (const kid of kids) node.append(kid instanceof Node ? kid : String(kid));
    return node;
  }

  async function getJSON(url) {
    const r = await fetch(url);
    if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
    return r.json();
  }

  const fmt = (v) => (typeof v === "number" ? (Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)))) : v ?? "-");
  function dur(s) {
    if (s === null || s === undefined) return "?";
    s = Math.round(s);
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
    return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  }

  async function loadRun(id) {
    const [info, metrics, trials] = await Promise.all([getJSON(`/api/runs/${id}`), getJSON(`/api/runs/${id}/metrics`),
      getJSON(`/api/runs/${id}/trials`)]);
    state.data[id] = { info, metrics, trials };
  }

  const keysOf = (records) => [...new Set(records.flatMap((r) => Object.keys(r)))].sort();
  const seriesOf = (records, key) => records.filter((r) => r[key] !== undefined && r[key] !== null)
    .map((r) => [r.step, r[key]]);

  // one series per (run, key): the compared run is dashed
  function lines(keys, label) {
    const out = [];
    const runs = [state.run, state.compare].filter(Boolean);
    runs.forEach((id, ri) => {
      const recs = (state.data[id]?.metrics || []).filter((r) => !label || r.step > 0 || label === "val");
      keys.forEach((k) => out.push({ name: (runs.length > 1 ? `${id}: ` : "") + k.split("/").slice(-2).join("/"),
        points: seriesOf(recs, k), dash: ri === 1 }));
    });
    return out;
  }

  function chart(parent, title, keys, label) {
    const box = h("div", { class: "chart", "data-title": title });
    parent.append(box);
    LegoChart.line(box, { title, series: lines(keys, label) });
  }

  function allKeys() {
    const ids = [state.run, state.compare].filter(Boolean);
    return [...new Set(ids.flatMap((id) => keysOf(state.data[id]?.metrics || [])))].sort();
  }

  function renderOverview() {
    const { info } = state.data[state.run];
    const body = $("#overview .body");
    body.innerHTML = "";
    const badge = h("span", { class: `badge ${info.alive ? "alive" : "dead"}`, id: "alive-badge" },
      info.alive ? "alive" : "not running");
    const kv = h("div", { class: "kv" });
    const rows = [["run", info.name], ["state", badge], ["step", `${fmt(info.step)} / ${fmt(info.total_steps)}`],
      ["ETA", info.eta_s === null ? "-" : dur(info.eta_s)], ["last write", `${dur(info.last_write_age_s)} ago`],
      ["trials", `${info.num_trials} (${Object.entries(info.outcomes).map(([k, v]) => `${k} ${v}`).join(", ")})`],
      ["dir", info.root]];
    for (const [k, v] of rows) kv.append(h("span", { class: "muted" }, k), h("span", {}, v));
    body.append(kv);
    for (const [k, v] of Object.entries(info.last_metrics)) kv.append(h("span", { class: "muted" }, k), h("span", {}, fmt(v)));
    const det = h("details", {}, h("summary", { text: "resolved config" }),
      h("pre", { id: "config-json", text: JSON.stringify(info.config, null, 2) }));
    body.append(det);
  }

  function renderCharts() {
    const keys = allKeys();
    const has = (k) => keys.includes(k);
    const curves = $("#curves .charts");
    curves.innerHTML = "";
    CURVES.filter(has).forEach((k) => chart(curves, k, [k], "train"));
    const out = $("#outcomes .charts");
    out.innerHTML = "";
    const pick = (re) => keys.filter((k) => re.test(k));
    chart(out, "rollout/outcome/*", pick(/^rollout\/outcome\//), "train");
    chart(out, "trajectory_filter/*", pick(/^trajectory_filter\//), "train");
    chart(out, "grpo groups", pick(/^grpo\//), "train");
    // how trials use their turns (steps.turn_metrics): counts per trial, then shares (0..1)
    const turns = $("#agent-turns .charts");
    turns.innerHTML = "";
    const TURN_SHARES = /(parse_failure_rate|solved_multi_turn_share|response_mask_share)$/;
    for (const p of ["rollout", "val"]) {
      const keys = pick(new RegExp(`^${p}/turns/`));
      if (!keys.length) continue;
      chart(turns, `${p}/turns/* per trial`, keys.filter((k) => !TURN_SHARES.test(k)), p === "val" ? "val" : "train");
      chart(turns, `${p}/turns/* shares`, keys.filter((k) => TURN_SHARES.test(k)), p === "val" ? "val" : "train");
    }
    // a mixed-harness run (agent.mix, steps.harness_metrics): pass rate and policy tokens by harness
    for (const p of ["rollout", "val"]) {
      const series = (what) => pick(new RegExp(`^${p}/harness/[^/]+/${what}$`));
      if (!series("pass_rate").length) continue;
      chart(out, `${p}/harness/*/pass_rate`, series("pass_rate"), p === "val" ? "val" : "train");
      chart(out, `${p}/harness/*/policy_tokens_mean`, series("policy_tokens_mean"), p === "val" ? "val" : "train");
    }
    const fid = $("#fidelity .charts");
    fid.innerHTML = "";
    pick(/^rollout_corr\//).forEach((k) => chart(fid, k, [k], "train"));
    if (has("rollout_is/ess")) chart(fid, "rollout_is/ess", ["rollout_is/ess"], "train");
    const tim = $("#timing .charts");
    tim.innerHTML = "";
    chart(tim, "timing/* (s)", pick(/^timing\//), "train");
    // the step's time budget (train/budget.py): trial phases, engine rates and busy share, loop lag
    const budget = [["budget/trial/* median (s)", /^budget\/trial\/.*_p50_s$/],
      ["budget/engine/* tok/s", /^budget\/engine\/.*_tok_s$/], ["budget/engine/busy_share", /^budget\/engine\/busy_share$/],
      ["budget/engine/preemptions (calls evicted from a full KV pool)", /^budget\/engine\/preemptions$/],
      ["budget/loop_lag/* (s)", /^budget\/loop_lag\//]];
    for (const [title, re] of budget) if (pick(re).length) chart(tim, title, pick(re), "train");
    renderValidation(pick(/^val\//));
  }

  function renderValidation(keys) {
    const body = $("#validation .body");
    body.innerHTML = "";
    if (!keys.length) { body.append(h("span", { class: "muted" }, "no validation yet (trainer.test_freq)")); return; }
    const recs = state.data[state.run].metrics.filter((r) => keys.some((k) => r[k] !== undefined));
    const table = h("table", { id: "val-table" }, h("tr", {}, h("th", { text: "step" }),
      ...keys.map((k) => h("th", { text: k.slice(4) }))));
    for (const r of recs) table.append(h("tr", {}, h("td", { text: r.step }), ...keys.map((k) => h("td", { text: fmt(r[k]) }))));
    const charts = h("div", { class: "charts" });
    body.append(table, charts);
    chart(charts, "val/pass_rate, val/score/mean", keys.filter((k) => /pass_rate|score\/mean/.test(k)), "val");
  }

  const solved = (t) => t.outcome === "solved" || (t.reward ?? 0) >= 1;

  function renderTaskGrid() {
    const trials = state.data[state.run].trials.filter((t) => t.kind === "train");
    const steps = [...new Set(trials.map((t) => t.step))].sort((a, b) => a - b).slice(-GRID_STEPS);
    const tasks = [...new Set(trials.map((t) => t.task_id))].sort();
    const body = $("#taskgrid .body");
    body.innerHTML = "";
    if (!trials.length) { body.append(h("span", { class: "muted" }, "no trials yet")); return; }
    const table = h("table", { class: "grid", id: "task-grid" },
      h("tr", {}, h("th", { text: "task \\ step" }), ...steps.map((s) => h("th", { text: s }))));
    for (const task of tasks) {
      const row = h("tr", {}, h("td", { text: task }));
      for (const s of steps) {
        const ts = trials.filter((t) => t.task_id === task && t.step === s);
        const n = ts.filter(solved).length;
        const cell = h("td", { class: "cell", "data-task": task, "data-step": s, title: ts.map((t) => t.outcome).join(", "),
          onclick: () => { state.step = s; state.task = task; renderTrials(); } }, ts.length ? `${n}/${ts.length}` : "");
        if (ts.length) cell.style.background = `hsl(${Math.round(120 * (n / ts.length))}, 70%, ${ts.length ? 85 : 100}%)`;
        row.append(cell);
      }
      table.append(row);
    }
    body.append(table);
  }

  function renderTrials() {
    const trials = state.data[state.run].trials;
    const steps = [...new Set(trials.map((t) => t.step))].sort((a, b) => a - b);
    const sel = $("#step-select");
    if (state.step === null || !steps.includes(state.step)) state.step = steps.length ? steps[steps.length - 1] : null;
    sel.innerHTML = "";
    for (const s of steps) sel.append(h("option", { value: s, text: s }));
    sel.value = state.step ?? "";
    $("#task-filter").textContent = state.task ? `task ${state.task} (click the step menu to clear)` : "";
    const rows = trials.filter((t) => t.step === state.step && (!state.task || t.task_id === state.task));
    const table = h("table", { id: "trial-table" }, h("tr", {}, ...["trial", "task", "outcome", "reward", "turns",
      "tokens", "policy", "sandbox start", "reason"].map((c) => h("th", { text: c }))));
    for (const t of rows) {
      const tr = h("tr", { class: `clickable${state.trial === t.path ? " selected" : ""}`, "data-path": t.path,
        onclick: () => showTrajectory(t.path) },
      ...[t.trial_id, t.task_id, t.outcome, fmt(t.reward), t.turns, t.tokens, t.policy_tokens,
        fmt(t.sandbox_start), t.reason || ""].map((v) => h("td", { text: v ?? "" })));
      table.append(tr);
    }
    const body = $("#trials .body");
    body.innerHTML = "";
    body.append(table);
  }

  function tokenColor(lp) {
    if (lp === null || lp === undefined) return "";
    const p = Math.exp(lp);  // sampled-token probability: red (unlikely) -> green (likely)
    return `hsla(${Math.round(120 * p)}, 80%, 60%, 0.45)`;
  }

  async function showTrajectory(path) {
    state.trial = path;
    renderTrials();
    const body = $("#trajectory .body");
    body.className = "body";
    body.textContent = "loading...";
    let d;
    try {
      d = await getJSON(`/api/runs/${state.run}/trajectory?trial=${encodeURIComponent(path)}`);
    } catch (e) {
      body.textContent = `no trajectory: ${e.message}`;  // e.g. the trial is still running
      return;
    }
    body.innerHTML = "";
    const r = d.result || {};
    body.append(h("div", { class: "kv" }, h("span", { class: "muted", text: "trial" }), h("span", { text: d.trial }),
      h("span", { class: "muted", text: "outcome" }), h("span", { text: `${r.outcome ?? "?"} (reward ${fmt(r.reward)})` }),
      h("span", { class: "muted", text: "tokens" }),
      h("span", { text: `${d.tokens.length} (${d.tokens.filter((t) => t.mask).length} policy), ${d.num_branches} branch(es)` })));
    const turns = h("div", { id: "turns" });
    for (const m of d.messages) {
      let text = typeof m.content === "string" ? m.content : JSON.stringify(m.content, null, 1);
      if (m.tool_calls) text += "\n" + m.tool_calls.map((c) => `→ ${c.function?.name}(${c.function?.arguments})`).join("\n");
      turns.append(h("div", { class: `turn ${m.role}` }, h("div", { class: "role", text: m.role }),
        h("div", { class: "content", text: text || "" })));
    }
    body.append(h("h3", { text: "Turns" }), turns);
    body.append(h("h3", { text: "Tokens" }), h("div", { class: "muted" },
      `outlined = policy token (mask 1), color = its logprob (red unlikely → green likely); hover for id/logprob` +
      (d.decoded ? "" : " — tokenizer unavailable, showing ids")));
    const toks = h("div", { class: "tokens", id: "tokens" });
    for (const t of d.tokens) {
      const span = h("span", { class: `tok ${t.mask ? "pol" : "ctx"}`, "data-mask": t.mask,
        "data-logprob": t.logprob ?? "", title: `id ${t.id}  mask ${t.mask}  logprob ${t.logprob === null ? "-" : t.logprob.toFixed(4)}` },
      d.decoded ? t.text : `[${t.id}]`);
      if (t.mask) span.style.background = tokenColor(t.logprob);
      toks.append(span);
    }
    body.append(toks);
  }

  function fillSelect(sel, ids, value, blank) {
    const want = [blank ? "" : null, ...ids].filter((v) => v !== null);
    const have = [...sel.options].map((o) => o.value);
    if (JSON.stringify(want) !== JSON.stringify(have)) {
      sel.innerHTML = "";
      for (const id of want) sel.append(h("option", { value: id, text: id || "(none)" }));
    }
    sel.value = value;
  }

  async function refresh() {
    try {
      state.runs = await getJSON("/api/runs");
      const ids = state.runs.map((r) => r.id);
      const wanted = new URLSearchParams(location.search).get("run");
      if (!state.run || !ids.includes(state.run)) state.run = ids.includes(wanted) ? wanted : ids[0] || null;
      fillSelect($("#run-select"), ids, state.run || "", false);
      fillSelect($("#compare-select"), ids.filter((i) => i !== state.run), state.compare, true);
      if (!state.run) { $("#overview .body").textContent = "no runs found"; return; }
      await Promise.all([state.run, state.compare].filter(Boolean).map(loadRun));
      renderOverview(); renderCharts(); renderTaskGrid(); renderTrials();
      $("#poll-state").textContent = `updated ${new Date().toLocaleTimeString()}`;
      document.body.dataset.loaded = "1";
    } catch (e) {
      $("#poll-state").textContent = `error: ${e.message}`;
    }
  }

  $("#run-select").onchange = (e) => { state.run = e.target.value; state.step = null; state.task = null; refresh(); };
  $("#compare-select").onchange = (e) => { state.compare = e.target.value; refresh(); };
  $("#step-select").onchange = (e) => { state.step = Number(e.target.value); state.task = null; renderTrials(); };
  refresh();
  setInterval(refresh, POLL_MS);
  window.legorlDashboard = { state, refresh, showTrajectory };
})();
