// pasture dashboard, every page: confirmation before state-changing forms, and lists that
// refresh themselves. No framework; served from the package (CSP script-src 'self').
(function () {
  "use strict";

  // ---- confirmation: a form with data-confirm="question" opens the <dialog>; only
  // "Confirm" submits it, with confirmed=yes (the server asks again without it).
  var dialog = document.getElementById("confirm-dialog");
  var pending = null;
  function hook(form) {
    form.setAttribute("data-hooked", "1");
    form.addEventListener("submit", function (ev) {
      var flag = form.querySelector("input[name=confirmed]");
      if (flag && flag.value === "yes") return;  // already confirmed
      if (!dialog || typeof dialog.showModal !== "function") return;  // server-side confirm
      ev.preventDefault();
      pending = form;
      document.getElementById("confirm-text").textContent = form.dataset.confirm;
      dialog.returnValue = "";
      dialog.showModal();
    });
  }
  document.querySelectorAll("form[data-confirm]").forEach(hook);
  if (dialog) {
    dialog.addEventListener("close", function () {
      var form = pending;
      pending = null;
      if (form && dialog.returnValue === "ok") {
        form.querySelector("input[name=confirmed]").value = "yes";
        form.submit();
      }
    });
  }

  // ---- refresh: every element with data-refresh (and an id) is replaced by the same
  // element of a fresh copy of the page every REFRESH_MS, while the tab is visible and no
  // dialog is open. data-refresh-stamp shows when that last happened.
  var REFRESH_MS = 10000;
  var parts = document.querySelectorAll("[data-refresh][id]");
  if (!parts.length) return;
  function stamp(text) {
    document.querySelectorAll("[data-refresh-stamp]").forEach(function (el) {
      el.textContent = text;
    });
  }
  function refresh() {
    if (document.hidden || (dialog && dialog.open)) return;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (r.redirected || !r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        parts.forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          if (fresh) el.innerHTML = fresh.innerHTML;
        });
        // forms that came with the fresh rows need their confirmation hook again
        document.querySelectorAll("form[data-confirm]:not([data-hooked])").forEach(hook);
        stamp("updated " + new Date().toLocaleTimeString());
      })
      .catch(function (e) {
        stamp("refresh failed (" + e.message + "), retrying");
      });
  }
  stamp("refreshes every " + REFRESH_MS / 1000 + " s");
  window.pastureRefresh = refresh;  // lets a test (or a console) refresh at once
  setInterval(refresh, REFRESH_MS);
})();
