// Draws the report's charts from the JSON data block with Chart.js (inlined before this script).
// Each canvas says what it shows in data-* attributes; after drawing, it records data-rendered and
// data-painted-pixels, and <body> records data-charts-rendered / data-chart-errors (read by tests).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("llmload-data").textContent);
  var colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];
  var rendered = 0;
  var errors = [];

  function color(i) { return colors[i % colors.length]; }

  function dataset(label, points, index, runIndex) {
    return {
      label: label,
      data: points,
      showLine: true,
      borderColor: color(index),
      backgroundColor: color(index),
      borderDash: runIndex === 1 ? [6, 4] : [],
      pointRadius: 3,
      spanGaps: false,
      borderWidth: 2
    };
  }

  function cdfDatasets(metric) {
    return data.runs.map(function (run, r) {
      var points = (run.cdf[metric] || []).map(function (p) { return { x: p[0], y: p[1] * 100 }; });
      var set = dataset(run.label, points, r, r);
      if (points.length > 8) { set.pointRadius = 0; set.stepped = "after"; }  // one step per histogram bucket
      return set;
    });
  }

  function isRate(field) { return data.rate_columns.indexOf(field) >= 0; }

  // The intervals a rate chart leaves out: the last one of a run when the stop cut it short (row.rate_left_out).
  function leftOut(fields) {
    if (!fields.some(isRate)) { return []; }
    var out = [];
    data.runs.forEach(function (run) {
      (run.timeseries || []).forEach(function (row) { if (row.rate_left_out) { out.push(row); } });
    });
    return out;
  }

  function seriesDatasets(fields, scale, labels) {
    var sets = [];
    data.runs.forEach(function (run, r) {
      fields.forEach(function (field, f) {
        var rows = (run.timeseries || []).filter(function (row) { return !(row.rate_left_out && isRate(field)); });
        var points = rows.map(function (row) {
          var v = row[field];
          return { x: row.t, y: (v === null || v === undefined) ? null : v * scale };
        });
        var name = labels ? labels[f] : field;
        var label = data.runs.length > 1 ? run.label + ": " + name : name;
        sets.push(dataset(label, points, data.runs.length > 1 ? r * fields.length + f : f, r));
        (run.thresholds || []).forEach(function (th) {  // an --abort-on limit on this column, as a dashed line
          if (th.column !== field || !rows.length) { return; }
          var y = th.value * scale;
          sets.push({ label: (data.runs.length > 1 ? run.label + ": " : "") + "--abort-on " + th.text,
            data: [{ x: rows[0].t, y: y }, { x: rows[rows.length - 1].t, y: y }], showLine: true,
            borderColor: "#b00020", backgroundColor: "#b00020", borderDash: [2, 3], pointRadius: 0, borderWidth: 1.5,
            llmloadThreshold: true });
        });
      });
    });
    return sets;
  }

  function painted(canvas) {
    var ctx = canvas.getContext("2d");
    var pixels = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    var count = 0;
    for (var i = 3; i < pixels.length; i += 4) { if (pixels[i] > 0) { count++; } }
    return count;
  }

  function draw(canvas) {
    var kind = canvas.dataset.chart;
    var datasets, xTitle, yTitle, title = canvas.dataset.title;
    if (kind === "cdf") {
      datasets = cdfDatasets(canvas.dataset.metric);
      xTitle = canvas.dataset.title;
      yTitle = "requests at or below (%)";
    } else {
      datasets = seriesDatasets(
        canvas.dataset.fields.split(","),
        Number(canvas.dataset.scale),
        canvas.dataset.labels ? canvas.dataset.labels.split(",") : null
      );
      xTitle = "seconds since the run's start";
      yTitle = canvas.dataset.title;
      canvas.dataset.thresholdLines = String(datasets.filter(function (d) { return d.llmloadThreshold; }).length);
      var cut = leftOut(canvas.dataset.fields.split(","));
      if (cut.length) {
        canvas.dataset.leftOut = String(cut.length);
        title += " (last interval, " + cut.map(function (row) { return row.interval_s.toFixed(2); }).join(" / ") +
          " s, cut at the stop: left out)";
      }
    }
    var empty = datasets.every(function (d) { return d.data.length === 0; });
    new Chart(canvas, {
      type: "scatter",
      data: { datasets: datasets },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        plugins: {
          title: { display: true, text: title + (empty ? ": no sample" : "") },
          legend: { display: true, position: "bottom" }
        },
        scales: {
          x: { type: "linear", title: { display: true, text: xTitle }, beginAtZero: true },
          y: {
            type: "linear",
            title: { display: true, text: yTitle },
            beginAtZero: true,
            max: kind === "cdf" ? 100 : undefined
          }
        }
      }
    });
    canvas.dataset.rendered = "1";
    canvas.dataset.paintedPixels = String(painted(canvas));
    rendered++;
  }

  Array.prototype.forEach.call(document.querySelectorAll("canvas[data-chart]"), function (canvas) {
    try {
      draw(canvas);
    } catch (err) {
      errors.push(canvas.id + ": " + err);
      canvas.dataset.error = String(err);
    }
  });
  document.body.dataset.chartsRendered = String(rendered);
  document.body.dataset.chartErrors = errors.join("; ");
}());
