// cairn ui: the live feed. Served as a file (the Content-Security-Policy forbids inline
// script); memory text only ever goes into the page through textContent.
"use strict";
(function () {
  const feed = document.getElementById("feed");
  if (!feed || !window.EventSource) return;
  const live = document.getElementById("live");
  const params = new URLSearchParams({
    project: feed.dataset.project || "",
    o: feed.dataset.o, s: feed.dataset.s, p: feed.dataset.p,
  });
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function time(ms) {
    return new Date(ms).toISOString().slice(0, 16).replace("T", " ");
  }
  const source = new EventSource("/events?" + params.toString());
  source.addEventListener("open", function () { live.textContent = "Live: new memories appear here."; });
  source.addEventListener("error", function () { live.textContent = "Reconnecting…"; });
  source.addEventListener("memory", function (ev) {
    const m = JSON.parse(ev.data);
    const li = el("li", "item fresh " + m.kind);
    const meta = el("div", "meta");
    const a = el("a", null, m.ref);
    a.href = "/memory/" + encodeURIComponent(m.ref);
    meta.append(a, el("span", "label", m.label), el("span", "project", m.project), el("time", null, time(m.created_at)));
    li.append(meta, el("div", "title", m.title), el("div", "detail", m.detail));
    feed.prepend(li);
    const empty = document.querySelector(".empty");
    if (empty) empty.remove();
  });
})();
