// Live log tail of the job page: polls /dashboard/jobs/<job>/log (session cookie) every
// second from the last offset and appends; reloads the page when the job's state changes.
(function () {
  "use strict";
  var box = document.getElementById("log-tail");
  if (!box) return;
  var job = box.dataset.job, state = box.dataset.state;
  var pre = document.getElementById("log"), select = document.getElementById("log-task");
  var status = document.getElementById("log-status");
  var terminal = { succeeded: 1, failed: 1, stopped: 1 };
  var offset = -1, timer = null;

  function url() {
    var q = "offset=" + offset;
    if (box.dataset.uid) q += "&uid=" + encodeURIComponent(box.dataset.uid);
    if (select && select.value) {
      var parts = select.value.split("/");
      q += "&role=" + encodeURIComponent(parts[0]) + "&index=" + encodeURIComponent(parts[1]);
    }
    return "/dashboard/jobs/" + encodeURIComponent(job) + "/log?" + q;
  }

  function poll() {
    fetch(url(), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(function (d) {
        if (d.text) {
          var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          pre.textContent += d.text;
          if (atEnd) pre.scrollTop = pre.scrollHeight;
        }
        offset = d.offset;
        status.textContent = terminal[d.state] ? "job " + d.state : "following";
        if (d.state !== state) {
          window.location.reload();
          return;
        }
        if (!terminal[d.state]) timer = setTimeout(poll, 1000);
      })
      .catch(function (e) {
        status.textContent = "log unavailable (" + e.message + "), retrying";
        timer = setTimeout(poll, 3000);
      });
  }

  if (select) {
    select.addEventListener("change", function () {
      clearTimeout(timer);
      pre.textContent = "";
      offset = -1;
      poll();
    });
  }
  poll();
})();
