// The ctxpolicy dashboard: renders the views of ctxpolicy/observe/views.py.
// Live in the gateway (polls dashboard/api), or once from the data `ctxpolicy report`
// embedded in the page. No dependency; every text goes in through textContent.
"use strict";
(function () {
  var SVG = "http://www.w3.org/2000/svg";
  var POLL_MS = 2000;
  var selected = null;
  var last = null;
  var token = null;
  try { token = window.sessionStorage.getItem("ctxpolicy-token"); } catch (e) { token = null; }

  function $(id) { return document.getElementById(id); }
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    if (attrs) { for (var k in attrs) { node.setAttribute(k, attrs[k]); } }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }
  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    for (var k in attrs) { node.setAttribute(k, attrs[k]); }
    if (text !== undefined) { node.textContent = String(text); }
    return node;
  }
  function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }
  function tokens(n) {
    n = Number(n) || 0;
    var a = Math.abs(n);
    if (a >= 1e6) { return (n / 1e6).toFixed(a >= 1e7 ? 1 : 2) + "M"; }
    if (a >= 1e4) { return Math.round(n / 1e3) + "k"; }
    if (a >= 1e3) { return (n / 1e3).toFixed(1) + "k"; }
    return String(Math.round(n));
  }
  function usd(n) {
    n = Number(n) || 0;
    var a = Math.abs(n);
    return (n < 0 ? "−$" : "$") + (a >= 100 ? a.toFixed(0) : a >= 1 ? a.toFixed(2) : a >= 0.01 ? a.toFixed(3) : a.toFixed(5));
  }
  function pct(part, whole) { return whole ? Math.round((100 * part) / whole) + "%" : "–"; }
  function layers(map) {
    var out = [];
    for (var k in map) { out.push(k + " ×" + map[k]); }
    return out.join(", ");
  }
  function ago(ts) {
    var s = Math.max(0, Date.now() / 1000 - ts);
    if (s < 90) { return Math.round(s) + " s ago"; }
    if (s < 5400) { return Math.round(s / 60) + " min ago"; }
    if (s < 172800) { return Math.round(s / 3600) + " h ago"; }
    return new Date(ts * 1000).toISOString().slice(0, 16).replace("T", " ");
  }

  function card(parent, key, value, detail, cls) {
    var c = el("div", { class: "card" + (cls ? " " + cls : "") });
    c.appendChild(el("div", { class: "k" }, key));
    c.appendChild(el("div", { class: "v" }, value));
    if (detail) { c.appendChild(el("div", { class: "d" }, detail)); }
    parent.appendChild(c);
  }

  function cacheBar(read, write) {
    var bar = el("div", { class: "bar", title: "cache reads " + tokens(read) + " / writes " + tokens(write) });
    var total = read + write;
    if (total > 0) {  // widths through the CSSOM: no inline style attribute (CSP)
      var r = el("div", { class: "r" }), w = el("div", { class: "w" });
      r.style.width = (100 * read / total).toFixed(1) + "%";
      w.style.width = (100 * write / total).toFixed(1) + "%";
      bar.appendChild(r);
      bar.appendChild(w);
    }
    return bar;
  }

  function renderCards(data) {
    var t = data.totals, root = $("cards");
    clear(root);
    var comp = t.compactions;
    card(root, "Conversations", t.conversations, t.calls + " calls");
    card(root, "Compactions", comp, t.freed ? tokens(t.freed) + " tokens freed" : "none yet");
    card(root, "Tokens saved", tokens(t.saved), pct(t.saved, t.tokens_in) + " of the whole history", t.saved > 0 ? "good" : "");
    card(root, "Est. cost saved", usd(t.usd_saved), usd(t.usd_sent) + " instead of " + usd(t.usd_none), t.usd_saved > 0 ? "good" : "");
    card(root, "Prompt cache (est.)", pct(t.cache_read, t.cache_read + t.cache_write) + " read",
      tokens(t.cache_read) + " read / " + tokens(t.cache_write) + " written");
    card(root, "Overflows", t.overflows, t.retries + " provider overflow retries");
    card(root, "Failures", t.failures, t.deferred + " deferred, " + t.lost + " lost");
    var g = data.gateway;
    if (g) {
      var fw = 0;
      (g.forwarded || []).forEach(function (r) { fw += r.count; });
      card(root, "Unprepared forwards", fw, g.requests + " requests prepared");
      if (g.upstream && g.upstream.count) {
        card(root, "Upstream latency", Math.round(g.upstream.p50_ms) + " ms", "p95 " + Math.round(g.upstream.p95_ms) + " ms, " + g.upstream.count + " calls");
      }
    }
  }

  function table(node, head, rows, onRow, selectedKey) {
    clear(node);
    var thead = el("thead"), tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", null, h)); });
    thead.appendChild(tr);
    node.appendChild(thead);
    var tbody = el("tbody");
    rows.forEach(function (r) {
      var row = el("tr");
      if (selectedKey !== undefined && r.key === selectedKey) { row.className = "sel"; }
      r.cells.forEach(function (c, i) {
        var td = el("td", i === 0 && r.idCell ? { class: "id", title: String(c) } : null);
        if (c instanceof Node) { td.appendChild(c); } else { td.textContent = String(c); }
        row.appendChild(td);
      });
      if (onRow) { row.addEventListener("click", function () { onRow(r.key); }); }
      tbody.appendChild(row);
    });
    node.appendChild(tbody);
    if (!rows.length) {
      var empty = el("tr"), td = el("td", { class: "empty", colspan: String(head.length) }, "nothing yet");
      empty.appendChild(td);
      tbody.appendChild(empty);
    }
  }

  function renderTables(data) {
    var convs = data.conversations;
    table($("conversations"),
      ["conversation", "agent", "calls", "compactions", "saved", "cost saved"],
      convs.map(function (c) {
        var n = 0;
        for (var k in c.compactions) { n += c.compactions[k]; }
        return {
          key: c.id, idCell: true,
          cells: [c.id, c.agent || "–", c.calls, n + (c.overflows ? " · " + c.overflows + " over" : ""),
            tokens(c.saved), usd(c.usd_saved)]
        };
      }),
      function (key) { selected = key; render(last); }, selected);
    table($("agents"),
      ["agent", "model", "conv.", "calls", "compactions", "saved", "cost saved"],
      data.agents.map(function (a) {
        var model = (a.model || "–") + (a.price !== a.model ? " (" + a.price + " prices)" : "");
        return {
          key: a.agent,
          cells: [a.agent || "–", model, a.conversations, a.calls, a.compactions, tokens(a.saved), usd(a.usd_saved)]
        };
      }));
  }

  function renderChart(conv) {
    var box = $("chart");
    clear(box);
    var title = $("detail-title");
    var facts = $("detail");
    clear(facts);
    if (!conv || !conv.series.length) {
      title.textContent = "Context over time";
      box.appendChild(el("div", { class: "empty" },
        conv ? "Loading the calls of " + conv.id + "…" : "No conversation yet: point a client at the gateway."));
      return;
    }
    title.textContent = "Context over time · " + conv.id;
    var W = Math.max(280, box.clientWidth || 600), H = Math.max(160, box.clientHeight || 300);
    var L = 46, R = 8, T = 34, B = 22;
    var pts = conv.series;
    var x0 = pts[0][0], x1 = pts[pts.length - 1][0];
    var ymax = 1;
    pts.forEach(function (p) { ymax = Math.max(ymax, p[2], p[3], p[4], p[5]); });
    ymax *= 1.05;
    function X(i) { return L + (x1 > x0 ? (i - x0) / (x1 - x0) : 0.5) * (W - L - R); }
    function Y(v) { return T + (1 - v / ymax) * (H - T - B); }
    var s = svg("svg", { viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none" });
    [0, 0.5, 1].forEach(function (f) {
      var v = ymax * f / 1.05;
      s.appendChild(svg("line", { class: "axis", x1: L, x2: W - R, y1: Y(v), y2: Y(v) }));
      s.appendChild(svg("text", { x: L - 4, y: Y(v) + 4, "text-anchor": "end" }, tokens(v)));
    });
    s.appendChild(svg("text", { x: L, y: H - 6 }, "call " + (x0 + 1)));
    s.appendChild(svg("text", { x: W - R, y: H - 6, "text-anchor": "end" }, "call " + (x1 + 1)));
    function line(idx, color, width, dash) {
      var d = pts.map(function (p) { return X(p[0]).toFixed(1) + "," + Y(p[idx]).toFixed(1); }).join(" ");
      var attrs = { points: d, fill: "none", stroke: color, "stroke-width": width };
      if (dash) { attrs["stroke-dasharray"] = dash; }
      s.appendChild(svg("polyline", attrs));
    }
    var css = window.getComputedStyle(document.documentElement);
    function v(name) { return css.getPropertyValue(name).trim() || "#888"; }
    line(5, v("--none"), 1.5, "2 3");
    line(4, v("--window"), 1.5, "6 4");
    line(3, v("--budget"), 1.5, "4 3");
    line(2, v("--used"), 2.2);
    // one mark per call that compacted: its layers in order, the tokens before the
    // first and after the last; labels on two rows, left out where they would overlap
    var calls = [], byCall = {};
    conv.marks.forEach(function (m) {
      if (m[0] < x0) { return; }
      var c = byCall[m[0]];
      if (!c) { c = byCall[m[0]] = { i: m[0], layers: [], before: m[2], after: m[3] }; calls.push(c); }
      if (c.layers.indexOf(m[1]) < 0) { c.layers.push(m[1]); }
      c.after = m[3];
    });
    var free = [L, L];
    calls.forEach(function (c) {
      var x = X(c.i);
      var mark = svg("line", { x1: x, x2: x, y1: T, y2: H - B, stroke: v("--mark"), "stroke-width": 1.2 });
      var tip = c.layers.join(" + ") + (c.before ? ": " + tokens(c.before) + " → " + tokens(c.after) : "");
      mark.appendChild(svg("title", {}, "call " + (c.i + 1) + " · " + tip));
      s.appendChild(mark);
      var label = c.layers.join("+");
      var width = label.length * 6.2;
      var left = Math.min(x + 3, W - R - width);
      for (var row = 0; row < 2; row++) {
        if (left >= free[row]) {
          s.appendChild(svg("text", { class: "mark", x: left, y: T - 18 + row * 12 }, label));
          free[row] = left + width + 8;
          break;
        }
      }
    });
    box.appendChild(s);
    function fact(k, val) {
      var d = el("div");
      d.appendChild(el("span", null, k + " "));
      d.appendChild(document.createTextNode(String(val)));
      facts.appendChild(d);
    }
    fact("agent", conv.agent || "–");
    fact("model", (conv.model || "–") + (conv.price !== conv.model ? " (" + conv.price + " prices)" : ""));
    fact("now", conv.state + " · " + tokens(conv.used) + " sent, trigger " + tokens(conv.budget) + ", window " + tokens(conv.window));
    fact("compactions", layers(conv.compactions) || "none");
    fact("saved", tokens(conv.saved) + " tokens · " + usd(conv.usd_saved));
    var cache = el("div");
    cache.appendChild(el("span", null, "cache (est.) "));
    cache.appendChild(document.createTextNode(tokens(conv.cache_read) + " read / " + tokens(conv.cache_write) + " written"));
    cache.appendChild(cacheBar(conv.cache_read, conv.cache_write));
    facts.appendChild(cache);
    fact("overflows", conv.overflows + ", " + conv.retries + " retried");
    fact("prepare", conv.prepare_ms.toFixed(2) + " ms a call");
    if (conv.provider_tokens !== null) { fact("provider prompt", tokens(conv.provider_tokens) + " tokens"); }
    fact("last call", ago(conv.last));
  }

  function renderGateway(g) {
    var panel = $("gateway");
    if (!g) { panel.hidden = true; return; }
    panel.hidden = false;
    var facts = $("gateway-facts");
    clear(facts);
    function fact(k, val) {
      var d = el("div");
      d.appendChild(el("span", null, k + " "));
      d.appendChild(document.createTextNode(String(val)));
      facts.appendChild(d);
    }
    var u = g.upstream || {};
    fact("upstream calls", u.count || 0);
    if (u.count) {
      fact("latency p50", Math.round(u.p50_ms) + " ms");
      fact("latency p95", Math.round(u.p95_ms) + " ms");
      fact("latency mean", Math.round(u.mean_ms) + " ms");
    }
    fact("overflow retries", g.retries || 0);
    fact("recall rounds", g.recall || 0);
    table($("forwarded"), ["path", "reason", "requests"],
      (g.forwarded || []).map(function (r) { return { key: r.path + r.reason, cells: [r.path, r.reason, r.count] }; }));
  }

  function render(data) {
    if (!data) { return; }
    last = data;
    renderCards(data);
    var convs = data.conversations;
    var conv = null;
    convs.forEach(function (c) { if (c.id === selected) { conv = c; } });
    if (!conv) {
      convs.forEach(function (c) { if (!conv && Object.keys(c.compactions).length) { conv = c; } });
      conv = conv || convs[0] || null;
      selected = conv ? conv.id : null;
    }
    renderTables(data);
    renderChart(conv);
    renderGateway(data.gateway);
  }

  function setStatus(text, error) {
    var s = $("status");
    s.textContent = text;
    s.className = "status" + (error ? " error" : "");
  }

  function poll() {
    if (document.hidden) { window.setTimeout(poll, POLL_MS); return; }
    var headers = { "Accept": "application/json" };
    if (token) { headers["X-Ctxpolicy-Token"] = token; }
    var url = "dashboard/api" + (selected ? "?conv=" + encodeURIComponent(selected) : "");
    window.fetch(url, { headers: headers, cache: "no-store", credentials: "omit" })
      .then(function (resp) {
        if (resp.status === 401) {
          $("login").hidden = false;
          setStatus("a gateway token is needed", true);
          return null;
        }
        if (!resp.ok) { throw new Error("HTTP " + resp.status); }
        return resp.json();
      })
      .then(function (data) {
        if (!data) { return; }  // a token is needed: the form restarts polling
        $("login").hidden = true;
        render(data);
        setStatus("live · " + new Date().toLocaleTimeString() + " · " + data.events + " events", false);
        window.setTimeout(poll, POLL_MS);
      })
      .catch(function (err) {
        setStatus("gateway unreachable (" + err.message + "), retrying", true);
        window.setTimeout(poll, POLL_MS * 2);
      });
  }

  $("login").addEventListener("submit", function (ev) {
    ev.preventDefault();
    token = $("token").value;
    try { window.sessionStorage.setItem("ctxpolicy-token", token); } catch (e) { /* private mode */ }
    poll();
  });
  var resizeTimer = null;
  window.addEventListener("resize", function () {
    window.clearTimeout(resizeTimer);
    resizeTimer = window.setTimeout(function () { render(last); }, 150);
  });

  var embedded = JSON.parse($("embedded").textContent || "null");
  if (embedded) {
    render(embedded);
    setStatus("report of " + embedded.source + " · " + embedded.events + " events", false);
  } else {
    poll();
  }
})();
