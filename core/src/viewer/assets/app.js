// cairn ui's script. Served as a file (the Content-Security-Policy forbids inline script);
// memory text only ever goes into the page through textContent.
"use strict";
(function () {
  // Bidirectional controls would reorder what is shown around them (the same list as
  // pages::is_bidi_control).
  const BIDI = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/g;
  function clean(s) { return String(s === undefined || s === null ? "" : s).replace(BIDI, "\uFFFD"); }

  // Times: the markup says UTC; shown in the reader's time zone, and the page says which.
  const zone = (Intl.DateTimeFormat().resolvedOptions().timeZone) || "local time";
  function local(ms) {
    const d = new Date(ms);
    const p = function (n) { return String(n).padStart(2, "0"); };
    return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " + p(d.getHours()) + ":" + p(d.getMinutes());
  }
  function localise(root) {
    root.querySelectorAll("time[data-ms]").forEach(function (t) {
      t.textContent = local(Number(t.dataset.ms));
      t.title = t.getAttribute("datetime");
    });
  }
  localise(document);
  const tz = document.getElementById("tz");
  if (tz) tz.textContent = "Times in " + zone + " (this browser's time zone).";

  // Changing the project shows it at once.
  document.querySelectorAll("form.bar select[name=project]").forEach(function (sel) {
    const show = sel.form.querySelector("button.show");
    if (show) show.hidden = true;
    sel.addEventListener("change", function () { sel.form.submit(); });
  });

  // Buttons that ask before they act (Discard).
  document.querySelectorAll("button[data-confirm]").forEach(function (b) {
    b.addEventListener("click", function (ev) {
      if (!window.confirm(b.dataset.confirm)) ev.preventDefault();
    });
  });

  const feed = document.getElementById("feed");
  if (!feed || !window.EventSource) return;
  const live = document.getElementById("live");
  const seen = { o: Number(feed.dataset.o), s: Number(feed.dataset.s), p: Number(feed.dataset.p) };
  const key = { observation: "o", summary: "s", prompt: "p" };
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = clean(text);
    return e;
  }
  // One live stream per visible tab: a hidden tab closes its stream (a browser allows six
  // connections per host, so open tabs must not hold one each) and, shown again, goes on
  // from the last ids it has.
  let source = null;
  function open() {
    if (source) return;
    const params = new URLSearchParams({ project: feed.dataset.project || "", o: seen.o, s: seen.s, p: seen.p });
    source = new EventSource("/events?" + params.toString());
    source.addEventListener("open", function () { live.textContent = "Live: new memories appear here."; });
    source.addEventListener("error", function () { live.textContent = "Reconnecting…"; });
    source.addEventListener("seen", function (ev) {
      const s = JSON.parse(ev.data);
      seen.o = Math.max(seen.o, s.observation); seen.s = Math.max(seen.s, s.summary); seen.p = Math.max(seen.p, s.prompt);
    });
    source.addEventListener("memory", function (ev) {
      const m = JSON.parse(ev.data);
      const k = key[m.kind];
      if (k && m.id <= seen[k]) return;
      if (k) seen[k] = m.id;
      const li = el("li", "item fresh " + m.kind);
      li.dataset.ref = m.ref;
      const meta = el("div", "meta");
      const a = el("a", null, m.ref);
      a.href = "/memory/" + encodeURIComponent(m.ref);
      const t = el("time", null, local(m.created_at));
      t.dataset.ms = m.created_at;
      meta.append(a, el("span", "label", m.label), el("span", "project", m.project), t);
      li.append(meta, el("div", "title", m.title));
      if (m.detail && m.detail !== m.title) li.append(el("div", "detail", m.detail));
      feed.prepend(li);
      const empty = document.querySelector(".empty");
      if (empty) empty.remove();
    });
  }
  function close() {
    if (!source) return;
    source.close();
    source = null;
    live.textContent = "Paused while the tab is hidden.";
  }
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) close(); else open();
  });
  if (!document.hidden) open();
})();

// The context page follows new memories: the block is asked for again every few seconds
// while the tab is visible.
(function () {
  const pre = document.getElementById("context");
  if (!pre || !window.fetch) return;
  const tokens = document.getElementById("context-tokens");
  const url = "/context.json?" + new URLSearchParams({ project: pre.dataset.project || "" }).toString();
  const BIDI = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/g;
  function refresh() {
    if (document.hidden) return;
    fetch(url, { credentials: "same-origin" }).then(function (r) { return r.ok ? r.json() : null; }).then(function (c) {
      if (!c) return;
      const text = String(c.text).replace(BIDI, "\uFFFD");
      if (pre.textContent !== text) pre.textContent = text;
      tokens.textContent = String(c.tokens);
      const empty = document.getElementById("context-empty");
      if (empty && c.text) empty.remove();
    }).catch(function () {});
  }
  setInterval(refresh, 3000);
})();
