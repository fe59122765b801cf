// The History page's charts, drawn with the vendored uPlot (app/ui/static/vendor/uplot).
// The data is the page's own JSON (app/reports/history.py): column arrays over time.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("history-data").textContent);
  var COLOURS = ["#3b82f6", "#d33", "#e0a100", "#16a34a", "#9333ea", "#0891b2", "#db2777",
                 "#65a30d", "#ea580c", "#475569"];

  function round(v) {
    if (v == null) return "-";
    var a = Math.abs(v);
    return a >= 100 ? Math.round(v).toLocaleString("en") : a >= 10 ? v.toFixed(1) : v.toFixed(2);
  }
  function secs(v) {
    if (v == null) return "-";
    var s = Math.round(v);
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d" + String(Math.floor(s % 86400 / 3600)).padStart(2, "0") + "h";
  }

  function draw(el, lines, fmt) {
    var width = Math.max(400, Math.min(1100, el.parentElement.clientWidth - 20));
    var series = [{}];
    var cols = [data.t];
    lines.forEach(function (l, i) {
      series.push({
        label: l.label, stroke: l.colour || COLOURS[i % COLOURS.length], width: 2,
        dash: l.dash, spanGaps: false, points: {show: l.points || false},
        value: function (u, v) { return fmt(v); }
      });
      cols.push(l.values);
    });
    var opts = {
      width: width, height: 220, series: series,
      scales: {x: {time: true}},
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
      axes: [{}, {values: function (u, vals) { return vals.map(fmt); }, size: 60}]
    };
    el.chart = new uPlot(opts, cols, el);
  }

  var q = document.getElementById("chart-queue");
  if (q) draw(q, [{label: "jobs waiting", values: data.queue}], round);
  var a = document.getElementById("chart-allocated");
  if (a) {
    var types = Object.keys(data.allocated);
    draw(a, types.length ? types.map(function (t) { return {label: t, values: data.allocated[t]}; })
                         : [{label: "no GPU allocated", values: data.t.map(function () { return 0; })}], round);
  }
  var w = document.getElementById("chart-wait");
  if (w) {
    var lines = [];
    Object.keys(data.wait_p50).forEach(function (team, k) {
      var c = COLOURS[k % COLOURS.length];
      lines.push({label: team + " P50", values: data.wait_p50[team], points: true, colour: c});
      lines.push({label: team + " P99", values: data.wait_p99[team], dash: [6, 4], points: true,
                  colour: c});
    });
    draw(w, lines, secs);
  }
})();
