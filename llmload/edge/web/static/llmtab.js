/* llmload in Locust's web UI (served by llmload.edge.web.charts; no external request).
 * - LLM tab: charts of the per-interval time series under the tab's table, from
 *   {base}/llmload/timeseries.json, polled every 2 s while the tab is shown.
 * - Start form: llmload's fields get their labels, full help and defaults.
 * - EDIT dialog: llmload's fields are hidden and not posted (they apply when a run starts).
 */
(function () {
  "use strict";
  var configElement = document.getElementById("llmload-config");
  if (!configElement || typeof Chart === "undefined") {
    return;
  }
  var cfg = JSON.parse(configElement.textContent);
  var TAB = "llmload";
  var POLL_MS = 2000;
  var DOM_MS = 300;
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  var live = { runId: null, ended: false, rows: [], panel: null, charts: [], lastPoll: 0, busy: false };

  function chartSpecs() {
    var failures = cfg.failure_columns.map(function (c) { return [c, c.replace(/_/g, " "), 1]; });
    return [
      { title: "Output tok/s", series: [["output_tokens_per_s", "client", 1],
        ["server_generation_tokens_per_s", "server (its /metrics)", 1, [6, 4]]] },
      { title: "TTFT (ms)", series: [["ttft_p50_s", "p50", 1000], ["ttft_p99_s", "p99", 1000]] },
      { title: "ITL p99 (ms)", series: [["itl_p99_s", "p99", 1000]] },
      { title: "In-flight requests and users",
        series: [["in_flight_requests", "in flight", 1], ["users", "users", 1, [6, 4]]] },
      { title: "Failures per interval, by outcome", bar: true, series: failures },
      { title: "Server: running and waiting requests", optional: true,
        series: [["server_running_requests", "running", 1], ["server_waiting_requests", "waiting", 1, [6, 4]]] },
      { title: "Server: KV-cache usage (%)", optional: true, series: [["server_kv_cache_usage", "KV cache", 100]] },
    ];
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text) { node.textContent = text; }
    return node;
  }

  function metricsHref() {
    if (!cfg.metrics_url) { return null; }
    var url = new URL(cfg.metrics_url);
    if (url.hostname === "0.0.0.0") { url.hostname = window.location.hostname; }
    return url.toString();
  }

  function buildPanel() {
    var panel = el("div", { id: "llmload-charts", style: "margin:16px 0" });
    var head = el("p", { style: "font:14px sans-serif;margin:8px 0" });
    head.appendChild(document.createTextNode(
      "Per interval of the run (complete intervals while it runs; the last, partial one once it ended). "));
    var json = el("a", { href: cfg.base + "/llmload/timeseries.json", target: "_blank" }, "rows as JSON");
    head.appendChild(json);
    var href = metricsHref();
    if (href) {
      head.appendChild(document.createTextNode(" · Prometheus: "));
      head.appendChild(el("a", { href: href, target: "_blank", id: "llmload-metrics-link" }, href));
    }
    panel.appendChild(head);
    panel.appendChild(el("p", { id: "llmload-charts-status", style: "font:13px sans-serif;opacity:.7" }, ""));
    var grid = el("div", { style: "display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:16px" });
    panel.appendChild(grid);
    live.charts = chartSpecs().map(function (spec) {
      // a server chart shows once the server's metrics were read (--server-metrics)
      var box = el("div", { style: "position:relative;height:220px" + (spec.optional ? ";display:none" : "") });
      var canvas = el("canvas", { "data-llmload-chart": spec.title });
      box.appendChild(canvas);
      grid.appendChild(box);
      var datasets = spec.series.map(function (s, i) {
        var color = COLORS[i % COLORS.length];
        return { label: s[1], data: [], borderColor: color, backgroundColor: color, pointRadius: 0,
          borderWidth: 1.5, borderDash: s[3] || [], spanGaps: false };
      });
      var chart = new Chart(canvas, {
        type: spec.bar ? "bar" : "line",
        data: { datasets: datasets },
        options: {
          animation: false, responsive: true, maintainAspectRatio: false, parsing: false,
          plugins: {
            title: { display: true, text: spec.title },
            legend: { display: spec.series.length > 1, labels: { filter: spec.bar ? hasData : hasValues } },
          },
          scales: {
            x: { type: "linear", stacked: !!spec.bar, title: { display: true, text: "s since start" } },
            y: { beginAtZero: true, stacked: !!spec.bar },
          },
        },
      });
      return { spec: spec, chart: chart, box: box };
    });
    return panel;
  }

  function hasValues(item, data) {  // a line chart's legend leaves out series never read (e.g. no server metrics)
    return data.datasets[item.datasetIndex].data.some(function (p) { return p.y !== null; });
  }

  function hasData(item, data) {  // the failures legend names the categories that occurred only
    return data.datasets[item.datasetIndex].data.some(function (p) { return p.y; });
  }

  function draw() {
    live.charts.forEach(function (c) {
      c.spec.series.forEach(function (s, i) {
        c.chart.data.datasets[i].data = live.rows.map(function (r) {
          var v = r[s[0]];
          return { x: r.t, y: v === null || v === undefined ? null : v * s[2] };
        });
      });
      if (c.spec.optional && c.box.style.display === "none" && c.chart.data.datasets.some(function (d) {
        return d.data.some(function (p) { return p.y !== null; });
      })) { c.box.style.display = ""; }
      c.chart.update("none");
    });
    var status = document.getElementById("llmload-charts-status");
    if (status) {
      status.textContent = live.rows.length + " interval(s)" + (live.ended ? "; the run ended" : "");
    }
  }

  function poll() {
    if (live.busy) { return; }
    live.busy = true;
    var since = live.rows.length ? "?since_t=" + live.rows[live.rows.length - 1].t : "";
    fetch(cfg.base + "/llmload/timeseries.json" + since, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        if (!body) { return; }
        if (body.run_id !== live.runId || body.ended !== live.ended) {
          live.runId = body.run_id;
          live.ended = body.ended;
          live.rows = [];
          if (since) { live.lastPoll = 0; return; }  // a new run or the final rows: fetch them all
        }
        live.rows = live.rows.concat(body.rows);
        draw();
      })
      .catch(function () { /* the next poll tries again */ })
      .then(function () { live.busy = false; });
  }

  function syncCharts() {
    var onTab = new URLSearchParams(window.location.search).get("tab") === TAB;
    var table = onTab ? document.querySelector(".MuiTableContainer-root") : null;
    if (!table) {
      if (live.panel) {
        live.charts.forEach(function (c) { c.chart.destroy(); });
        live.panel.remove();
        live.panel = null;
        live.charts = [];
      }
      return;
    }
    if (!live.panel || !document.body.contains(live.panel)) {
      live.panel = buildPanel();
      table.parentNode.insertBefore(live.panel, table.nextSibling);
      draw();
      live.lastPoll = 0;
    }
    if (Date.now() - live.lastPoll >= POLL_MS) {
      live.lastPoll = Date.now();
      poll();
    }
  }

  function camel(dest) {
    return dest.replace(/_([a-z0-9])/g, function (_m, c) { return c.toUpperCase(); });
  }

  function relabelForm() {
    Object.keys(cfg.fields).forEach(function (dest) {
      var field = cfg.fields[dest];
      document.querySelectorAll('[name="' + camel(dest) + '"]:not([data-llmload-labelled])').forEach(function (input) {
        input.setAttribute("data-llmload-labelled", "1");
        var root = input.closest(".MuiFormControlLabel-root") || input.closest(".MuiFormControl-root");
        if (!root) { return; }
        var label = root.querySelector(".MuiFormControlLabel-label") || root.querySelector("label");
        if (label) { label.textContent = field.label; }
        var legend = root.querySelector("legend > span");
        if (legend) { legend.textContent = field.label; }
        var help = el("p", { "class": "llmload-help", style: "font:12px sans-serif;opacity:.75;margin:-26px 0 0 14px" },
          field.default ? field.help + " Default: " + field.default : field.help);
        root.parentNode.insertBefore(help, root.nextSibling);
      });
    });
  }

  function hideInEdit() {
    document.querySelectorAll(".MuiModal-root").forEach(function (modal) {
      if (modal.textContent.indexOf("Edit running load test") < 0) { return; }
      modal.querySelectorAll(".MuiAccordion-root").forEach(function (accordion) {
        if (accordion.textContent.indexOf("Custom parameters") < 0) { return; }
        // Unnamed inputs are not posted: EDIT then sends users and spawn rate only.
        accordion.querySelectorAll("input[name], select[name], textarea[name]").forEach(function (input) {
          input.removeAttribute("name");
        });
        if (accordion.style.display === "none") { return; }
        accordion.style.display = "none";
        accordion.parentNode.insertBefore(el("p", { "class": "llmload-edit-note", style: "font:13px sans-serif" },
          "llmload's options apply when a run starts: to change them, STOP and start a NEW run. " +
          "EDIT changes users and spawn rate."), accordion);
      });
    });
  }

  function tick() {
    try {
      syncCharts();
      relabelForm();
      hideInEdit();
    } finally {
      window.setTimeout(tick, DOM_MS);
    }
  }

  Chart.defaults.color = "#888";
  tick();
})();
