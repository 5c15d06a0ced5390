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
  var live = { runId: null, ended: false, rows: [], panel: null, charts: [], lastPoll: 0, busy: false,
    startedAt: null, thresholds: [], warnings: [], warningBox: null };

  // series: [row column, legend label (the field's terms and unit), display scale, dash]; rate: a per-second
  // chart, which leaves out the run's last interval when the stop cut it short (row.rate_left_out).
  function chartSpecs() {
    var failures = cfg.failure_columns.map(function (c) { return [c, c.replace(/_/g, " "), 1]; });
    return [
      { title: "Output tok/s", rate: true, series: [["output_tokens_per_s", "client output tok/s", 1],
        ["server_generation_tokens_per_s", "server output tok/s (its /metrics)", 1, [6, 4]]] },
      { title: "Requests/s (succeeded)", rate: true, series: [["requests_per_s", "req/s", 1]] },
      { title: "TTFT (ms)", series: [["ttft_p50_s", "TTFT p50 (ms)", 1000], ["ttft_p99_s", "TTFT p99 (ms)", 1000]] },
      { title: "ITL (ms)", series: [["itl_p50_s", "ITL p50 (ms)", 1000], ["itl_p99_s", "ITL p99 (ms)", 1000]] },
      { title: "TPOT (ms)", series: [["tpot_p50_s", "TPOT p50 (ms)", 1000], ["tpot_p99_s", "TPOT p99 (ms)", 1000]] },
      { title: "E2E (ms)", series: [["e2e_p50_s", "E2E p50 (ms)", 1000], ["e2e_p99_s", "E2E p99 (ms)", 1000]] },
      { title: "In-flight requests and users",
        series: [["in_flight_requests", "in-flight requests", 1], ["users", "users", 1, [6, 4]]] },
      { title: "Failures per interval, by outcome", bar: true, series: failures },
      { title: "Server: running and waiting requests", optional: true,
        series: [["server_running_requests", "running requests", 1],
          ["server_waiting_requests", "waiting requests", 1, [6, 4]]] },
      { title: "Server: KV-cache usage (%)", optional: true,
        series: [["server_kv_cache_usage", "KV-cache usage (%)", 100]] },
      { title: "Schedule lag p99 (ms): sent - due", optional: true,
        series: [["schedule_lag_p99_s", "schedule lag p99 (ms)", 1000]] },
      { title: "Mean TTFT by turn (ms)", optional: true,
        series: [1, 2, 3, 4, 5, 6, 7, 8].map(function (n) { return ["ttft_turn" + n + "_mean_s", "turn " + n, 1000]; }) },
    ];
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function clock(unix) {  // wall-clock time of the page's machine, HH:MM:SS
    var d = new Date(unix * 1000);
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  function xOf(row) { return live.startedAt === null ? row.t : live.startedAt + row.t; }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text) { node.textContent = text; }
    return node;
  }

  function metricsHref() {
    if (!cfg.metrics_url) { return null; }
    var url = new URL(cfg.metrics_url);
    if (url.hostname === "0.0.0.0" || url.hostname === "[::]") { url.hostname = window.location.hostname; }
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
            legend: { display: true, labels: { filter: spec.bar ? hasData : hasValues } },
          },
          scales: {
            x: { type: "linear", stacked: !!spec.bar, title: { display: true, text: "time" },
              ticks: { maxTicksLimit: 6, maxRotation: 0,
                callback: function (v) { return live.startedAt === null || v < 1e9 ? v + " s" : clock(v); } } },
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

  // An --abort-on limit on one of the chart's columns, drawn as a flat dashed line over the rows' span. A limit
  // far above the figures would flatten them: the axis then stops above the figures and the legend gives the limit.
  function thresholdSets(spec, rows, top) {
    var sets = [];
    if (spec.bar || !rows.length) { return sets; }
    live.thresholds.forEach(function (th) {
      spec.series.forEach(function (s) {
        if (s[0] !== th.column) { return; }
        var y = th.value * s[2];
        var above = top > 0 && y > 3 * top;
        sets.push({ label: "--abort-on " + th.text + (above ? " (above the chart)" : ""),
          data: [{ x: xOf(rows[0]), y: y },
          { x: xOf(rows[rows.length - 1]), y: y }], borderColor: "#b00020", backgroundColor: "#b00020",
          borderDash: [2, 3], borderWidth: 1.5, pointRadius: 0, llmloadThreshold: true });
      });
    });
    return sets;
  }

  function draw() {
    var partial = live.rows.filter(function (r) { return r.rate_left_out; });
    live.charts.forEach(function (c) {
      var rows = c.spec.rate ? live.rows.filter(function (r) { return !r.rate_left_out; }) : live.rows;
      c.spec.series.forEach(function (s, i) {
        c.chart.data.datasets[i].data = rows.map(function (r) {
          var v = r[s[0]];
          return { x: xOf(r), y: v === null || v === undefined ? null : v * s[2] };
        });
      });
      var top = 0;
      c.chart.data.datasets.slice(0, c.spec.series.length).forEach(function (d) {
        d.data.forEach(function (p) { if (p.y !== null && p.y > top) { top = p.y; } });
      });
      var limits = thresholdSets(c.spec, rows, top);
      c.chart.data.datasets = c.chart.data.datasets.slice(0, c.spec.series.length).concat(limits);
      c.chart.options.scales.y.max = limits.some(function (d) { return d.data[0].y > 3 * top; }) && top > 0 ?
        top * 1.2 : undefined;
      c.chart.canvas.setAttribute("data-threshold-lines", String(c.chart.data.datasets.length - c.spec.series.length));
      c.chart.options.plugins.title.text = c.spec.title + (c.spec.rate && partial.length ?
        " (last interval, " + partial[0].interval_s.toFixed(2) + " s, cut at the stop: left out)" : "");
      c.chart.options.scales.x.title.text = live.startedAt === null ? "s since start" : "time (this browser's clock)";
      if (c.spec.optional && c.box.style.display === "none" && c.chart.data.datasets.some(function (d) {
        return d.data.some(function (p) { return p.y !== null; });
      })) { c.box.style.display = ""; }
      c.chart.update("none");
    });
    var status = document.getElementById("llmload-charts-status");
    if (status) {
      status.textContent = live.rows.length + " interval(s)" + (live.ended ? "; the run ended" : "");
    }
    drawWarnings();
  }

  // The client-saturation warnings, above the LLM tab's table (the figures are not to be trusted then).
  function drawWarnings() {
    var box = live.warningBox;
    if (!box) { return; }
    box.textContent = "";
    live.warnings.forEach(function (text) { box.appendChild(el("p", { "class": "llmload-warning" }, "WARNING: " + text)); });
    box.style.display = live.warnings.length ? "" : "none";
  }

  function poll() {
    if (live.busy) { return; }
    live.busy = true;
    var since = live.rows.length ? "?since_t=" + live.rows[live.rows.length - 1].t : "";
    fetch(cfg.base + "/llmload/timeseries.json" + since, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        if (!body) { return; }
        live.warnings = body.warnings || [];
        live.thresholds = body.thresholds || [];
        live.startedAt = body.started_at_unix === undefined ? null : body.started_at_unix;
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
        live.warningBox.remove();
        live.panel = null;
        live.warningBox = null;
        live.charts = [];
      }
      return;
    }
    if (!live.panel || !document.body.contains(live.panel)) {
      if (live.warningBox) { live.warningBox.remove(); }
      live.panel = buildPanel();
      live.warningBox = el("div", { id: "llmload-warnings", role: "alert",
        style: "display:none;font:14px sans-serif;color:#8a4b00;background:#fff3cd;padding:4px 12px;margin:8px 0" });
      table.parentNode.insertBefore(live.warningBox, table);
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

  function fieldRoot(input) {
    return input.closest(".MuiFormControlLabel-root") || input.closest(".MuiFormControl-root");
  }

  // Labels, help and defaults of llmload's fields, and a heading before each option group's first field
  // (the groups of `llmload options` and the README's option tables, in the option table's order).
  function relabelForm() {
    Object.keys(cfg.fields).forEach(function (dest) {
      var field = cfg.fields[dest];
      document.querySelectorAll('[name="' + camel(dest) + '"]:not([data-llmload-labelled])').forEach(function (input) {
        input.setAttribute("data-llmload-labelled", "1");
        var root = fieldRoot(input);
        if (!root) { return; }
        var label = root.querySelector(".MuiFormControlLabel-label") || root.querySelector("label");
        if (label) { label.textContent = field.label; }
        var legend = root.querySelector("legend > span");
        if (legend) { legend.textContent = field.label; }
        var help = el("p", { "class": "llmload-help", style: "font:12px sans-serif;opacity:.75;margin:-26px 0 0 14px" },
          field.default ? field.help + " Default: " + field.default : field.help);
        root.parentNode.insertBefore(help, root.nextSibling);
        var form = input.closest("form") || document;
        if (field.group && !form.querySelector('[data-llmload-group="' + field.group + '"]')) {
          root.parentNode.insertBefore(el("h3", { "class": "llmload-group", "data-llmload-group": field.group,
            style: "font:600 15px sans-serif;margin:18px 0 4px" }, field.group), root);
        }
      });
    });
  }

  // Every refused llmload value of a start-form post, each shown under its own field (the answer's
  // llmload_fields: {dest: message}); Locust still shows the whole message under the form.
  function markInvalid(fields) {
    document.querySelectorAll(".llmload-field-error").forEach(function (node) { node.remove(); });
    document.querySelectorAll('[aria-invalid="true"][data-llmload-labelled]').forEach(function (input) {
      input.removeAttribute("aria-invalid");
    });
    Object.keys(fields || {}).forEach(function (dest) {
      var input = document.querySelector('[name="' + camel(dest) + '"]');
      var root = input ? fieldRoot(input) : null;
      if (!root) { return; }
      input.setAttribute("aria-invalid", "true");
      var help = root.nextElementSibling;
      var after = help && help.classList.contains("llmload-help") ? help : root;  // under the field and its help
      root.parentNode.insertBefore(el("p", { "class": "llmload-field-error", "data-llmload-field": dest, role: "alert",
        style: "font:13px sans-serif;color:#b00020;margin:4px 0 8px 14px" }, fields[dest]), after.nextSibling);
    });
  }

  function watchSwarmPosts() {
    var original = window.fetch;
    if (typeof original !== "function") { return; }
    window.fetch = function (resource, init) {
      var url = typeof resource === "string" ? resource : (resource && resource.url) || "";
      var method = (init && init.method) || (resource && resource.method) || "GET";
      var answer = original.apply(this, arguments);
      if (method.toUpperCase() === "POST" && /(^|\/)swarm$/.test(url.split("?")[0])) {
        answer.then(function (response) {
          return response.clone().json().then(function (body) {
            markInvalid(body && body.success === false ? body.llmload_fields : null);
          });
        }).catch(function () { /* not JSON: nothing to mark */ });
      }
      return answer;
    };
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
  watchSwarmPosts();
  tick();
})();
