// Usage charts: uPlot (vendored, see README.md here) draws each <figure class="uchart"
// data-src=URL> from the JSON columns {t: [Unix s], cpu, mem, gpu: [percent | null]}
// that /dashboard/usage serves, with a time axis (local time labels) and a 0-100 % axis.
// The data is fetched again every REFRESH_MS. A job's task chart also has a column
// where: [node (attempt n)] per sample, shown beside the time of the point under the cursor.
(function () {
  "use strict";
  var REFRESH_MS = 15000;
  var SERIES = [
    { key: "cpu", label: "CPU", stroke: "#1f77b4" },
    { key: "mem", label: "memory", stroke: "#9467bd" },
    { key: "gpu", label: "GPU (mean)", stroke: "#2ca02c" },
  ];
  var charts = (window.pastureCharts = []);

  function pct(u, v) {
    return v == null ? "-" : v.toFixed(1) + " %";
  }

  function columns(d) {
    return [d.t].concat(SERIES.map(function (s) { return d[s.key]; }));
  }

  function make(fig, d) {
    var width = Math.max(260, fig.clientWidth - 10);
    var opts = {
      title: fig.dataset.title,
      width: width,
      height: 200,
      scales: {
        x: { time: true, range: function () { return [d.now - d.window_s, d.now]; } },
        y: { range: [0, 100] },
      },
      axes: [
        { label: "time (your clock)", labelSize: 20, stroke: "#444", grid: { stroke: "#eee" } },
        {
          label: "utilisation (%)",
          labelSize: 20,
          stroke: "#444",
          grid: { stroke: "#eee" },
          values: function (u, ticks) { return ticks.map(function (v) { return v + "%"; }); },
        },
      ],
      series: [{
        label: "time",
        value: function (u, v, si, idx) {
          if (v == null) return "-";
          var when = new Date(v * 1000).toLocaleTimeString();
          var where = chart && chart.pasture.where ? chart.pasture.where[idx] : null;
          return where ? when + " on " + where : when;
        },
      }].concat(
        SERIES.map(function (s) {
          return { label: s.label, stroke: s.stroke, width: 2, spanGaps: false, value: pct };
        })
      ),
    };
    var chart = null;
    chart = new uPlot(opts, columns(d), fig);
    chart.pasture = { src: fig.dataset.src, where: d.where || null };
    charts.push(chart);
    window.addEventListener("resize", function () {
      chart.setSize({ width: Math.max(260, fig.clientWidth - 10), height: 200 });
    });
    return chart;
  }

  function load(fig, chart) {
    return fetch(fig.dataset.src, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(function (d) {
        var empty = fig.nextElementSibling;
        if (empty && empty.classList.contains("chart-empty")) empty.hidden = d.t.length > 0;
        if (!chart) return make(fig, d);
        chart.pasture.where = d.where || null;
        chart.setScale("x", { min: d.now - d.window_s, max: d.now });
        chart.setData(columns(d), false);
        return chart;
      });
  }

  document.querySelectorAll("figure.uchart[data-src]").forEach(function (fig) {
    var chart = null;
    function tick() {
      load(fig, chart)
        .then(function (c) { chart = c; })
        .catch(function (e) { fig.setAttribute("data-error", e.message); });
    }
    tick();
    setInterval(function () { if (!document.hidden) tick(); }, REFRESH_MS);
  });
})();
