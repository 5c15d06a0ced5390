// Draws the sweep view's charts from the JSON data block with Chart.js (inlined before this script): one line per
// figure against the step's load, the knee as a large triangle, steps the client limited hollow. Each canvas records
// data-rendered, data-points and data-knee; <body> records data-charts-rendered / data-chart-errors (read by tests).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("llmload-sweep").textContent);
  var colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"];
  var rendered = 0;
  var errors = [];

  function draw(canvas) {
    var chart = data.charts[Number(canvas.dataset.index)];
    var usable = data.points.filter(function (p) { return p.x !== null && p.x > 0; });
    var datasets = chart.fields.map(function (field, f) {
      var points = usable.filter(function (p) { return p.values[field] !== null; });
      return {
        label: chart.labels[f],
        data: points.map(function (p) { return { x: p.x, y: p.values[field] * chart.scale }; }),
        showLine: true,
        borderColor: colors[f % colors.length],
        backgroundColor: points.map(function (p) { return p.client_limited ? "#fff" : colors[f % colors.length]; }),
        pointStyle: points.map(function (p) { return p.knee ? "triangle" : "circle"; }),
        pointRadius: points.map(function (p) { return p.knee ? 9 : 4; }),
        borderWidth: 2
      };
    });
    var knee = usable.filter(function (p) { return p.knee; });
    new Chart(canvas, {
      type: "scatter",
      data: { datasets: datasets },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        plugins: {
          title: { display: true, text: chart.title + (knee.length ? " (▲ knee: step " + knee[0].step + ")" : "") },
          legend: { display: true, position: "bottom" }
        },
        scales: {
          x: { type: data.log_x ? "logarithmic" : "linear", title: { display: true, text: data.x_title } },
          y: { type: "linear", beginAtZero: true, title: { display: true, text: chart.title } }
        }
      }
    });
    canvas.dataset.rendered = "1";
    canvas.dataset.points = String(datasets[0].data.length);
    canvas.dataset.knee = knee.length ? String(knee[0].step) : "";
    rendered++;
  }

  Array.prototype.forEach.call(document.querySelectorAll("canvas[data-chart=sweep]"), function (canvas) {
    try {
      draw(canvas);
    } catch (err) {
      errors.push(canvas.id + ": " + err);
    }
  });
  document.body.dataset.chartsRendered = String(rendered);
  document.body.dataset.chartErrors = errors.join("; ");
}());
