// ebb's web UI: the few things a server-rendered page cannot do by itself.
// - times (<time data-t>) are shown in the browser's own zone;
// - deadlines (<time data-deadline>) read "in 2h 14m" and keep counting;
// - date/time pickers send the browser's zone offset with them, and a new schedule's
//   time zone starts as the browser's;
// - the namespace picker goes to the same page in the namespace picked.
// Everything here also runs on parts htmx swaps in.
(function () {
  "use strict";

  function span(secs) {
    var d = Math.floor(secs / 86400), h = Math.floor(secs / 3600) % 24,
        m = Math.floor(secs / 60) % 60, s = secs % 60;
    if (d > 0) return d + "d " + h + "h";
    if (h > 0) return h + "h " + m + "m";
    if (m > 0) return m + "m " + s + "s";
    return s + "s";
  }

  function localTimes(root) {
    root.querySelectorAll("time[data-t]").forEach(function (el) {
      var t = new Date(Number(el.dataset.t) * 1000);
      el.textContent = t.toLocaleString(undefined, {
        year: "numeric", month: "short", day: "numeric",
        hour: "2-digit", minute: "2-digit", second: "2-digit"
      });
      el.title = t.toString();
    });
  }

  function deadlines(root) {
    var now = Math.floor(Date.now() / 1000);
    root.querySelectorAll("time[data-deadline]").forEach(function (el) {
      var at = Number(el.dataset.deadline);
      el.textContent = at > now ? "in " + span(at - now) : span(now - at) + " ago";
      el.title = new Date(at * 1000).toLocaleString();
    });
  }

  function zones(root) {
    root.querySelectorAll("input[name=tzOffset]").forEach(function (el) {
      el.value = String(new Date().getTimezoneOffset());
    });
    // A new schedule's time zone starts as the browser's own.
    root.querySelectorAll("input[data-zone=browser]").forEach(function (el) {
      if (el.dataset.bound) return;
      el.dataset.bound = "1";
      try {
        var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
        if (zone) el.value = zone;
      } catch (e) { /* keep UTC */ }
    });
  }

  function pickers(root) {
    root.querySelectorAll("select[data-navigate=namespace]").forEach(function (el) {
      if (el.dataset.bound) return;
      el.dataset.bound = "1";
      el.addEventListener("change", function () {
        var ns = encodeURIComponent(el.value);
        var path = location.pathname;
        var m = path.match(/^\/ui\/ns\/[^/]+\/(apps|securekeys)/);
        if (m) {
          location.assign("/ui/ns/" + ns + "/" + m[1]);
        } else if (/^\/ui\/(runs|profiles|templates)$/.test(path)) {
          location.assign(path + "?namespace=" + ns);
        } else {
          location.assign("/ui/runs?namespace=" + ns);
        }
      });
    });
  }

  function all(root) {
    localTimes(root);
    deadlines(root);
    zones(root);
    pickers(root);
  }

  document.addEventListener("DOMContentLoaded", function () { all(document); });
  document.addEventListener("htmx:load", function (e) { all(e.target); });
  // An SSE swap adds rows without htmx:load on each: look again after every swap.
  document.addEventListener("htmx:afterSwap", function (e) { all(e.target); });
  setInterval(function () { deadlines(document); }, 15000);
})();
