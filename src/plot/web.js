// mctrace's charts (src/plot/web.rs): each figure.chart is drawn from the
// JSON inside it, with no library and nothing fetched. Hover shows the
// exact values; drag zooms the x axis, double-click resets it; a legend
// entry hides or shows its series in every chart; a click on a column's
// header sorts a table.sortable. Open the page with #selftest to have it
// try all of that and write the outcome into the title.
(function () {
  "use strict";

  // Numbers as src/plot/fmt.rs writes them: a line-for-line port of
  // round_sig, plain, human and tick_digits (tests/report.rs runs these
  // against fmt::CASES when node is installed).
  function rnd(x) { return x < 0 ? -Math.round(-x) : Math.round(x); }
  function roundSig(v, d) {
    if (v === 0 || !isFinite(v)) return v;
    var k = d - 1 - Math.floor(Math.log10(Math.abs(v)));
    if (k >= 0) { var s = Math.pow(10, k); return rnd(v * s) / s; }
    var q = Math.pow(10, -k);
    return rnd(v / q) * q;
  }
  function plain(x, d) {
    if (x === 0) return "0";
    var e = Math.floor(Math.log10(Math.abs(x)));
    var s = x.toFixed(Math.min(12, Math.max(0, d - 1 - e)));
    if (s.indexOf(".") >= 0) s = s.replace(/0+$/, "").replace(/\.$/, "");
    return s === "-0" ? "0" : s;
  }
  function human(v, unit, d) {
    if (v === null || !isFinite(v)) return "-";
    if (v === 0) return "0";
    d = Math.max(1, d);
    if (unit === "share") return plain(roundSig(v * 100, d), d) + "%";
    if (unit === "s") return human(v * 1000, "ms", d);
    var r = roundSig(v, d);
    if (unit === "ms") {
      if (Math.abs(r) >= 1000) return plain(roundSig(v / 1000, d), d) + " s";
      if (r !== 0 && Math.abs(r) < 1) return plain(roundSig(v * 1000, d), d) + " \u00b5s";
      return plain(r, d) + " ms";
    }
    var a = Math.abs(r), sc = 1, suf = "";
    if (a >= 1e9) { sc = 1e9; suf = "G"; } else if (a >= 1e6) { sc = 1e6; suf = "M"; } else if (a >= 1e3) { sc = 1e3; suf = "k"; }
    var x = roundSig(v / sc, d);
    if (Math.abs(x) >= 1000 && sc < 1e9) return human(x * sc, "plain", d);
    return plain(x, d) + suf;
  }
  function tickDigits(maxAbs, step) {
    if (!(isFinite(maxAbs) && isFinite(step)) || step <= 0 || maxAbs <= 0) return 3;
    var d = Math.floor(Math.log10(maxAbs)) - Math.floor(Math.log10(step)) + 1;
    return Math.min(15, Math.max(3, d));
  }
  if (typeof module !== "undefined") { module.exports = { human: human, tickDigits: tickDigits }; return; }

  // About n ticks at 1, 2 or 5 times a power of ten.
  function ticks(lo, hi, n) {
    if (!(hi > lo)) return { step: 1, values: [lo] };
    var raw = (hi - lo) / n, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    var st = (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p, out = [];
    for (var k = Math.ceil(lo / st - 1e-9); k * st <= hi + st * 1e-9; k++) out.push(k * st);
    return { step: st, values: out };
  }
  function esc(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }
  // The axis name without its notes: "time since the run's start".
  function short(label) { return label.split(/[,;(]/)[0].trim(); }

  var W = 600, H = 340, M = { l: 64, r: 14, t: 10, b: 46 };
  var PW = W - M.l - M.r, PH = H - M.t - M.b;
  var hidden = {}, charts = [], tip;

  function Chart(fig, spec, id) {
    this.spec = spec; this.id = id; this.zoom = null; this.drag = null;
    var cap = document.createElement("figcaption");
    cap.textContent = spec.title;
    this.box = document.createElement("div");
    this.legend = document.createElement("div");
    this.legend.className = "legend";
    fig.appendChild(cap); fig.appendChild(this.box); fig.appendChild(this.legend);
    var self = this;
    if (spec.kind === "lines" && spec.series.length > 1) {
      spec.series.forEach(function (s) {
        var e = document.createElement("span");
        e.innerHTML = "<i style=\"" + (s.dashed ? "border-top:3px dashed " + s.color + ";height:0" : "background:" + s.color + (s.dots ? ";opacity:0.5" : "")) + "\"></i>" + esc(s.name);
        e.title = "click to hide or show " + s.name;
        e.setAttribute("data-series", s.name);
        e.addEventListener("click", function () {
          hidden[s.name] = !hidden[s.name];
          charts.forEach(function (c) { c.draw(); });
        });
        self.legend.appendChild(e);
      });
    }
    this.box.addEventListener("mousemove", function (e) { self.move(e); });
    this.box.addEventListener("mousedown", function (e) {
      var p = self.pos(e);
      if (e.button === 0 && p.x >= M.l && p.x <= M.l + PW) { self.drag = { x0: p.x }; e.preventDefault(); }
    });
    this.box.addEventListener("mouseup", function (e) { self.up(e); });
    this.box.addEventListener("mouseleave", function () { self.drag = null; self.hover(null); self.draw(); });
    this.box.addEventListener("dblclick", function () { self.zoom = null; self.draw(); });
    this.draw();
  }

  Chart.prototype.pos = function (e) {
    var r = this.box.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  };
  Chart.prototype.visible = function () {
    return (this.spec.series || []).filter(function (s) { return !hidden[s.name]; });
  };

  // The data ranges shown: x zoomed or whole, y fitted to what is shown.
  Chart.prototype.domain = function () {
    var s = this.spec, xs = [Infinity, -Infinity], ys = [0, -Infinity], z = this.zoom;
    function addX(x) { if (x !== null && isFinite(x)) { xs[0] = Math.min(xs[0], x); xs[1] = Math.max(xs[1], x); } }
    function inX(x) { return !z || (x >= z[0] && x <= z[1]); }
    function addY(y) { if (y !== null && isFinite(y)) { ys[0] = Math.min(ys[0], y); ys[1] = Math.max(ys[1], y); } }
    if (s.kind === "lines") {
      this.visible().forEach(function (se) {
        se.points.forEach(function (p) { addX(p[0]); if (inX(p[0])) addY(p[1]); });
      });
    } else if (s.kind === "histogram") {
      s.edges.forEach(addX);
      s.counts.forEach(function (c, i) { if (inX(s.edges[i]) || inX(s.edges[i + 1])) addY(c); });
    } else {
      s.lanes.forEach(function (l) { l.marks.forEach(addX); });
      ys = [-0.5, Math.max(1, s.lanes.length) - 0.5];
    }
    if (!isFinite(xs[0])) xs = [0, 1];
    if (z) xs = [z[0], z[1]];
    if (!(xs[1] > xs[0])) xs = [xs[0], xs[0] + 1];
    if (s.kind !== "timeline") {
      if (!isFinite(ys[1])) ys = [0, 1];
      if (!(ys[1] > ys[0])) ys[1] = ys[0] + 1;
      ys[1] += (ys[1] - ys[0]) * 0.05;
    }
    return { x: xs, y: ys };
  };

  Chart.prototype.draw = function () {
    var s = this.spec, d = this.domain(), self = this;
    this.d = d;
    var X = function (x) { return M.l + (x - d.x[0]) / (d.x[1] - d.x[0]) * PW; };
    var Y = function (y) { return M.t + PH - (y - d.y[0]) / (d.y[1] - d.y[0]) * PH; };
    this.X = X; this.Y = Y;
    var o = ["<svg width=\"" + W + "\" height=\"" + H + "\" viewBox=\"0 0 " + W + " " + H + "\" font-family=\"sans-serif\" font-size=\"11\">",
      "<defs><clipPath id=\"clip" + this.id + "\"><rect x=\"" + M.l + "\" y=\"" + M.t + "\" width=\"" + PW + "\" height=\"" + PH + "\"/></clipPath></defs>",
      "<rect width=\"" + W + "\" height=\"" + H + "\" fill=\"#fff\"/>"];
    var tx = ticks(d.x[0], d.x[1], 6), xd = tickDigits(Math.max(Math.abs(d.x[0]), Math.abs(d.x[1])), tx.step);
    tx.values.forEach(function (v) {
      var x = X(v).toFixed(1);
      o.push("<line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + M.t + "\" y2=\"" + (M.t + PH) + "\" stroke=\"#eee\"/>");
      o.push("<text x=\"" + x + "\" y=\"" + (M.t + PH + 15) + "\" text-anchor=\"middle\">" + esc(human(v, s.x.unit, xd)) + "</text>");
    });
    if (s.kind !== "timeline") {
      var ty = ticks(d.y[0], d.y[1], 6), yd = tickDigits(Math.max(Math.abs(d.y[0]), Math.abs(d.y[1])), ty.step);
      ty.values.forEach(function (v) {
        var y = Y(v).toFixed(1);
        o.push("<line x1=\"" + M.l + "\" x2=\"" + (M.l + PW) + "\" y1=\"" + y + "\" y2=\"" + y + "\" stroke=\"#eee\"/>");
        o.push("<text x=\"" + (M.l - 5) + "\" y=\"" + y + "\" dy=\"0.35em\" text-anchor=\"end\">" + esc(human(v, s.y.unit, yd)) + "</text>");
      });
    }
    o.push("<rect x=\"" + M.l + "\" y=\"" + M.t + "\" width=\"" + PW + "\" height=\"" + PH + "\" fill=\"none\" stroke=\"#999\"/>");
    o.push("<g clip-path=\"url(#clip" + this.id + ")\">");
    var marks = [];
    if (s.kind === "lines") {
      this.visible().forEach(function (se) {
        var path = [], pen = "M";
        se.points.forEach(function (p) {
          if (p[1] === null || p[0] === null) { pen = "M"; return; }
          path.push(se.dots ? "M" + X(p[0]).toFixed(1) + " " + Y(p[1]).toFixed(1) + "h0"
            : pen + X(p[0]).toFixed(1) + " " + Y(p[1]).toFixed(1));
          pen = "L";
        });
        o.push(se.dots
          ? "<path d=\"" + path.join("") + "\" stroke=\"" + se.color + "\" stroke-opacity=\"0.45\" stroke-width=\"4\" stroke-linecap=\"round\" fill=\"none\"/>"
          : "<path d=\"" + path.join("") + "\" stroke=\"" + se.color + "\" stroke-width=\"2\" fill=\"none\"" + (se.dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>");
        // A line of few points (a sweep's values) marks each one shown,
        // unclipped: a mark on the frame stays whole.
        if (!se.dots && se.points.length <= 15) {
          marks.push("<path d=\"" + se.points.filter(function (p) {
            return p[1] !== null && p[0] >= d.x[0] && p[0] <= d.x[1] && p[1] >= d.y[0] && p[1] <= d.y[1];
          }).map(function (p) {
            return "M" + X(p[0]).toFixed(1) + " " + Y(p[1]).toFixed(1) + "h0";
          }).join("") + "\" stroke=\"" + se.color + "\" stroke-width=\"6\" stroke-linecap=\"round\"/>");
        }
      });
    } else if (s.kind === "histogram") {
      s.counts.forEach(function (c, i) {
        if (!c) return;
        var a = X(s.edges[i]), b = X(s.edges[i + 1]);
        o.push("<rect x=\"" + a.toFixed(1) + "\" y=\"" + Y(c).toFixed(1) + "\" width=\"" + Math.max(0.5, b - a - 0.5).toFixed(1) + "\" height=\"" + (Y(0) - Y(c)).toFixed(1) + "\" fill=\"" + s.color + "\"/>");
      });
    } else {
      s.lanes.forEach(function (l, k) {
        if (!l.marks.length) return;
        var y = Y(k).toFixed(1), m = l.marks;
        o.push("<line x1=\"" + X(m[0]).toFixed(1) + "\" x2=\"" + X(m[m.length - 1]).toFixed(1) + "\" y1=\"" + y + "\" y2=\"" + y + "\" stroke=\"" + l.color + "\"/>");
        o.push("<path d=\"" + m.map(function (t) { return "M" + X(t).toFixed(1) + " " + y + "h0"; }).join("") + "\" stroke=\"" + l.color + "\" stroke-width=\"4\" stroke-linecap=\"round\"/>");
      });
    }
    o.push("</g>");
    o.push(marks.join(""));
    o.push("<text x=\"" + (M.l + PW / 2) + "\" y=\"" + (H - 8) + "\" text-anchor=\"middle\" font-size=\"12\">" + esc(s.x.label) + (this.zoom ? " (zoomed: double-click to reset)" : "") + "</text>");
    o.push("<text transform=\"translate(13," + (M.t + PH / 2) + ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" + esc(s.y.label) + "</text>");
    o.push("<g class=\"hl\"></g><rect class=\"sel\" y=\"" + M.t + "\" height=\"" + PH + "\" width=\"0\" fill=\"#39f\" fill-opacity=\"0.15\" visibility=\"hidden\"/>");
    o.push("</svg>");
    this.box.innerHTML = o.join("");
    Array.prototype.forEach.call(this.legend.children, function (e) {
      e.className = hidden[e.getAttribute("data-series")] ? "off" : "";
    });
    self.hl = this.box.querySelector("g.hl");
  };

  // The data under the pointer: the nearest point (lines, marks) within
  // 40 px, or the bar under it.
  Chart.prototype.nearest = function (p) {
    var s = this.spec, X = this.X, Y = this.Y, best = null, bd = 1600;
    if (p.x < M.l || p.x > M.l + PW || p.y < M.t || p.y > M.t + PH) return null;
    function consider(dist, hit) { if (dist < bd) { bd = dist; best = hit; } }
    if (s.kind === "lines") {
      this.visible().forEach(function (se) {
        se.points.forEach(function (q) {
          if (q[1] === null) return;
          var dx = X(q[0]) - p.x, dy = Y(q[1]) - p.y;
          consider(dx * dx + dy * dy, { px: X(q[0]), py: Y(q[1]), color: se.color,
            text: (se.name ? se.name + "\n" : "") + short(s.x.label) + ": " + human(q[0], s.x.unit, 7) + "\n" + short(s.y.label) + ": " + human(q[1], s.y.unit, 7) });
        });
      });
    } else if (s.kind === "histogram") {
      for (var i = 0; i < s.counts.length; i++) {
        if (p.x >= X(s.edges[i]) && p.x < X(s.edges[i + 1])) {
          return { px: (X(s.edges[i]) + X(s.edges[i + 1])) / 2, py: Y(s.counts[i]), color: s.color,
            text: short(s.x.label) + ": " + human(s.edges[i], s.x.unit, 7) + " to " + human(s.edges[i + 1], s.x.unit, 7) + "\n" + short(s.y.label) + ": " + s.counts[i] };
        }
      }
    } else {
      s.lanes.forEach(function (l, k) {
        l.marks.forEach(function (t) {
          var dx = X(t) - p.x, dy = Y(k) - p.y;
          consider(dx * dx + dy * dy, { px: X(t), py: Y(k), color: l.color,
            text: "session " + (k + 1) + "\n" + short(s.x.label) + ": " + human(t, s.x.unit, 7) });
        });
      });
    }
    return best;
  };

  Chart.prototype.hover = function (hit, e) {
    if (!hit) { tip.style.display = "none"; if (this.hl) this.hl.innerHTML = ""; return; }
    tip.textContent = hit.text;
    tip.style.display = "block";
    tip.style.left = (e.pageX + 14) + "px";
    tip.style.top = (e.pageY + 14) + "px";
    this.hl.innerHTML = "<circle cx=\"" + hit.px.toFixed(1) + "\" cy=\"" + hit.py.toFixed(1) + "\" r=\"5\" fill=\"none\" stroke=\"" + hit.color + "\" stroke-width=\"2\"/>";
  };

  Chart.prototype.move = function (e) {
    var p = this.pos(e);
    if (this.drag) {
      var sel = this.box.querySelector("rect.sel"), a = Math.max(M.l, Math.min(this.drag.x0, p.x)), b = Math.min(M.l + PW, Math.max(this.drag.x0, p.x));
      sel.setAttribute("x", a); sel.setAttribute("width", b - a); sel.setAttribute("visibility", "visible");
      this.hover(null);
      return;
    }
    this.hover(this.nearest(p), e);
  };

  Chart.prototype.up = function (e) {
    if (!this.drag) return;
    var p = this.pos(e), x0 = this.drag.x0;
    this.drag = null;
    if (Math.abs(p.x - x0) > 5) {
      var d = this.d, f = function (px) { return d.x[0] + (Math.max(M.l, Math.min(M.l + PW, px)) - M.l) / PW * (d.x[1] - d.x[0]); };
      this.zoom = [f(Math.min(x0, p.x)), f(Math.max(x0, p.x))];
    }
    this.draw();
  };

  function sortable(t) {
    var ths = t.tHead ? t.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(ths, function (th, col) {
      th.title = "click to sort";
      th.addEventListener("click", function () {
        var asc = !th.classList.contains("asc");
        Array.prototype.forEach.call(ths, function (h) { h.classList.remove("asc", "desc"); });
        th.classList.add(asc ? "asc" : "desc");
        var body = t.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var key = function (r) {
          var c = r.cells[col], v = c ? c.getAttribute("data-v") : null;
          if (v !== null && v !== "" && isFinite(Number(v))) return Number(v);
          return c ? c.textContent : "";
        };
        rows.sort(function (a, b) {
          var x = key(a), y = key(b), n = typeof x === "number", m = typeof y === "number";
          // Numbers before text ("-"), both ways.
          var r = n && m ? x - y : n ? -1 : m ? 1 : (x === y ? 0 : x < y ? -1 : 1);
          return (n && m) || (!n && !m) ? (asc ? r : -r) : r;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }

  function selftest() {
    var done = [];
    function fail(m) { throw new Error(m); }
    var c = charts.filter(function (c) { return c.spec.kind === "lines" && c.visible().some(function (s) { return s.points.length; }); })[0];
    if (!c) fail("no chart with points");
    var se = c.visible().filter(function (s) { return s.points.length; })[0], pt = se.points[0];
    var r = c.box.getBoundingClientRect();
    c.box.dispatchEvent(new MouseEvent("mousemove", { bubbles: true, clientX: r.left + c.X(pt[0]), clientY: r.top + c.Y(pt[1]) }));
    var want = human(pt[1], c.spec.y.unit, 7);
    if (tip.style.display !== "block" || tip.textContent.indexOf(want) < 0) fail("hovering the first point of " + se.name + " did not show " + want + " (tip: " + tip.textContent + ")");
    done.push("tooltip [" + tip.textContent.replace(/\n/g, " | ") + "]");
    var ev = function (type, x) { c.box.dispatchEvent(new MouseEvent(type, { bubbles: true, button: 0, clientX: r.left + x, clientY: r.top + M.t + PH / 2 })); };
    var before = c.d.x.slice();
    ev("mousedown", M.l + PW * 0.25); ev("mousemove", M.l + PW * 0.5); ev("mouseup", M.l + PW * 0.75);
    if (!c.zoom || !(c.d.x[1] - c.d.x[0] < (before[1] - before[0]) * 0.6)) fail("dragging did not zoom");
    c.box.dispatchEvent(new MouseEvent("dblclick", { bubbles: true }));
    if (c.zoom) fail("double-click did not reset the zoom");
    done.push("zoom " + human(before[0], c.spec.x.unit, 4) + ".." + human(before[1], c.spec.x.unit, 4) + " and back");
    var entry = document.querySelector(".legend span");
    if (entry) {
      var name = entry.getAttribute("data-series");
      entry.click();
      if (entry.className !== "off" || !hidden[name]) fail("the legend did not hide " + name);
      entry.click();
      if (hidden[name]) fail("the legend did not show " + name + " again");
      done.push("legend " + name);
    }
    var t = Array.prototype.filter.call(document.querySelectorAll("table.sortable"), function (t) { return t.tBodies[0].rows.length > 1; })[0];
    if (t) {
      var th = t.tHead.rows[0].cells[0];
      th.click(); var a = t.tBodies[0].rows[0].cells[0].textContent;
      th.click(); var b = t.tBodies[0].rows[0].cells[0].textContent;
      if (a === b) fail("sorting did not reverse the table");
      th.click();
      done.push("sort");
    }
    return done.join("; ");
  }

  function init() {
    tip = document.createElement("div");
    tip.id = "tip";
    document.body.appendChild(tip);
    var figs = document.querySelectorAll("figure.chart");
    Array.prototype.forEach.call(figs, function (fig, i) {
      var data = fig.querySelector("script");
      try {
        charts.push(new Chart(fig, JSON.parse(data.textContent), i));
      } catch (e) {
        fig.appendChild(document.createTextNode("this chart could not be drawn: " + e.message));
      }
    });
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), sortable);
    // Since the page began to load: what a reader waits for the charts.
    var drawn = Math.round(performance.now());
    if (location.hash === "#selftest") {
      try {
        document.title = "selftest ok, " + charts.length + " charts drawn " + drawn + " ms after the page began loading: " + selftest();
      } catch (e) { document.title = "selftest FAILED: " + e.message; }
    }
  }
  init();
})();
