// lowbit keyboard shortcuts and small enhancements. Everything here is optional:
// every page works without JavaScript.
(function () {
  "use strict";
  function typing(el) {
    if (!el) return false;
    var tag = el.tagName;
    return el.isContentEditable || tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT";
  }
  function dialog() { return document.getElementById("shortcuts"); }
  function openShortcuts() { var d = dialog(); if (d && !d.open) d.showModal(); }
  function navItems() {
    var list = document.querySelector("[data-nav-list]");
    return list ? Array.prototype.slice.call(list.querySelectorAll("a.nav-item")) : [];
  }
  function move(step) {
    var items = navItems();
    if (items.length) {
      var i = items.indexOf(document.activeElement);
      var next = items[Math.max(0, Math.min(items.length - 1, i < 0 ? (step > 0 ? 0 : items.length - 1) : i + step))];
      items.forEach(function (a) { a.classList.remove("current"); });
      next.classList.add("current");
      next.focus();
      return;
    }
    var link = document.querySelector(step > 0 ? "[data-key-next]" : "[data-key-prev]");
    if (link) link.click();
  }
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) {
      if (e.key === "Escape" && combo(e.target)) closeList(e.target);
      return;
    }
    var d = dialog();
    if (d && d.open) return;
    var k = e.key;
    if (k === "/") { e.preventDefault(); var s = document.getElementById("q") || document.getElementById("site-search"); if (s) { s.focus(); s.select(); } }
    else if (k === "g") { e.preventDefault(); var g = document.getElementById("goto-input"); if (g) g.focus(); }
    else if (k === "?") { e.preventDefault(); openShortcuts(); }
    else if (k === "j") { e.preventDefault(); move(1); }
    else if (k === "k") { e.preventDefault(); move(-1); }
    else if (/^[1-4]$/.test(k) && document.querySelector("[data-rating-key]")) {
      e.preventDefault(); document.querySelector('[data-rating-key="' + k + '"]').click();
    }
    else if (/^[1-5]$/.test(k)) {
      var tab = document.querySelector('[data-depth-key="' + k + '"]');
      if (tab) { e.preventDefault(); tab.click(); }
    }
  });
  document.addEventListener("click", function (e) {
    var t = e.target.closest && e.target.closest("[data-open-shortcuts]");
    if (t) openShortcuts();
  });
  // Tabs: arrow keys move between depths (WAI-ARIA tabs pattern).
  document.addEventListener("keydown", function (e) {
    var tab = e.target.closest && e.target.closest('[role="tab"]');
    if (!tab || (e.key !== "ArrowRight" && e.key !== "ArrowLeft")) return;
    var tabs = Array.prototype.slice.call(tab.parentNode.querySelectorAll('[role="tab"]'));
    var i = tabs.indexOf(tab) + (e.key === "ArrowRight" ? 1 : -1);
    if (tabs[i]) { e.preventDefault(); tabs[i].click(); }
  });
  // On a phone the depth tabs are one row that scrolls sideways: bring the chosen one
  // into that row's view (without scrolling the page).
  function showSelectedTab() {
    var sel = document.querySelector('[role="tab"][aria-selected="true"]');
    var list = sel && sel.parentNode;
    if (list && list.scrollWidth > list.clientWidth) list.scrollLeft = sel.offsetLeft - list.offsetLeft - 16;
    return sel;
  }
  document.addEventListener("DOMContentLoaded", showSelectedTab);
  // After htmx swaps the depth panels, keep focus on the selected tab.
  document.addEventListener("htmx:afterSwap", function (e) {
    if (e.detail.target && e.detail.target.id === "depths") {
      var sel = showSelectedTab();
      if (sel) sel.focus();
    }
    var t = e.detail.target;
    var input = t && t.id && document.querySelector('[role="combobox"][aria-controls="' + t.id + '"]');
    if (input) syncList(input);
  });
  // Type-ahead lists (the header search box and "Go to", both fed by /goto): arrows
  // choose, Enter follows the chosen entry. In "Go to" Enter takes the first match
  // (data-enter-picks-first); in search, Enter without a choice searches the full text.
  function combo(el) { return el && el.getAttribute && el.getAttribute("role") === "combobox"; }
  function listOf(input) { return document.getElementById(input.getAttribute("aria-controls")); }
  function closeList(input) {
    var l = listOf(input);
    if (l) l.classList.remove("open");
    input.setAttribute("aria-expanded", "false");
  }
  function syncList(input) {
    var l = listOf(input);
    if (!l) return;
    var open = l.children.length > 0 && document.activeElement === input;
    l.classList.toggle("open", open);
    input.setAttribute("aria-expanded", open ? "true" : "false");
  }
  document.addEventListener("keydown", function (e) {
    if (!combo(e.target)) return;
    var l = listOf(e.target);
    if (!l || !l.classList.contains("open")) return;
    var opts = Array.prototype.slice.call(l.querySelectorAll('[role="option"]'));
    var cur = opts.findIndex(function (o) { return o.getAttribute("aria-selected") === "true"; });
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      e.preventDefault();
      var n = e.key === "ArrowDown" ? Math.min(opts.length - 1, cur + 1) : Math.max(0, cur - 1);
      opts.forEach(function (o, i) { o.setAttribute("aria-selected", i === n ? "true" : "false"); });
    } else if (e.key === "Enter" && opts.length) {
      if (cur < 0 && !e.target.hasAttribute("data-enter-picks-first")) return;
      e.preventDefault();
      var chosen = opts[cur >= 0 ? cur : 0];
      var pick = chosen.matches("a") ? chosen : chosen.querySelector("a");
      if (pick) window.location.assign(pick.getAttribute("href"));
    }
  });
  document.addEventListener("focusout", function (e) {
    var input = e.target;
    if (combo(input)) setTimeout(function () { closeList(input); }, 200);
  });
  // A region that scrolls (a wide table, a long code block or formula, the run log) must
  // be reachable by keyboard to be scrolled: give the ones that actually overflow a tab
  // stop (and only those, so short blocks add none). Again after each swap and resize.
  var SCROLLERS = "main pre, main table, main .math-block, main .math-inline, main .log, main .run-table";
  function focusableScrollers(root) {
    var scope = root && root.querySelectorAll ? root : document;
    Array.prototype.forEach.call(scope.querySelectorAll(SCROLLERS), function (el) {
      var scrolls = el.scrollWidth > el.clientWidth + 1 || el.scrollHeight > el.clientHeight + 1;
      if (scrolls && !el.hasAttribute("tabindex")) el.setAttribute("tabindex", "0");
    });
  }
  document.addEventListener("DOMContentLoaded", function () { focusableScrollers(document); });
  document.addEventListener("htmx:afterSettle", function () { focusableScrollers(document); });
  var resizing;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(function () { focusableScrollers(document); }, 200);
  });
  // A run's event stream ends with an "end" event, then the server closes it. Close it
  // ourselves on "end": otherwise the close reaches the SSE extension as an error
  // (logged as "[object Event]") and it tries to reconnect to a finished run.
  document.addEventListener("htmx:sseOpen", function (e) {
    var source = e.detail && e.detail.source;
    if (source) source.addEventListener("end", function () { source.close(); });
  });
})();
