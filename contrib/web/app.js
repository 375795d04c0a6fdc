/*
 * app.js: the page of `sinkwatch serve`. Every number shown comes from the
 * server's JSON (serve/serve.c over report/runagg.c); this file only lays
 * them out. Text from run files (ids, models, errors) is only ever set as
 * textContent, never as HTML. Charts: dygraphs, served locally.
 */
"use strict";
(function () {
  var POLL_MS = 1000;
  var STATIC = window.SW_STATIC || null;	/* a --export copy: data.js */
  var main = document.getElementById("main");
  var liveEl = document.getElementById("live");
  var timer = null, gen = 0;
  window.swState = { view: null, lastStep: null, rows: null, win: null, report: null,
    reportShown: null, modelSeries: null, updates: 0 };

  /* ---- helpers ---- */
  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "cls") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    });
    (kids || []).forEach(function (c) { if (c) e.appendChild(c); });
    return e;
  }
  function txt(s) { return document.createTextNode(s); }
  function fmt(v, digits) {
    if (v === null || v === undefined || typeof v !== "number") return "–";
    return v.toFixed(digits === undefined ? 4 : digits);
  }
  /* an axis label: four significant digits, so a narrow range stays readable */
  function tick(v) { return typeof v === "number" ? String(Number(v.toPrecision(4))) : ""; }
  function fmtInt(v) { return v === null || v === undefined ? "–" : String(v); }
  function fmtParams(p) {
    if (!p) return "–";
    var u = [["T", 1e12], ["B", 1e9], ["M", 1e6], ["K", 1e3]];
    for (var i = 0; i < u.length; i++)
      if (p >= u[i][1]) return (p / u[i][1]).toFixed(p % u[i][1] ? 1 : 0) + u[i][0];
    return String(p);
  }
  function fmtTime(t) {
    if (typeof t !== "number") return "–";
    return new Date(t * 1000).toLocaleString();
  }
  /* a number cell: the text shown, and the exact value in data-value */
  function numCell(v, key, digits) {
    var td = el("td", { cls: "num", text: fmt(v, digits) });
    if (key) td.setAttribute("data-key", key);
    td.setAttribute("data-value", v === null || v === undefined ? "" : String(v));
    return td;
  }
  function qs(params) {
    return Object.keys(params).filter(function (k) {
      return params[k] !== undefined && params[k] !== null && params[k] !== "";
    }).map(function (k) {
      return encodeURIComponent(k) + "=" + encodeURIComponent(params[k]);
    }).join("&");
  }
  /* ---- a static copy (sinkwatch serve --export): the server's replies,
   * written by it into scripts; a run's loaded when first shown ---- */
  var loaded = { run: {}, compare: null }, loading = {};
  window.SW_STATIC_ADD = function (key, data) {
    if (key.compare) loaded.compare = data;
    else loaded.run[key.run] = data;
  };
  function need(file) {
    if (!loading[file]) loading[file] = new Promise(function (ok, no) {
      var s = document.createElement("script");
      s.src = file;
      s.onload = ok;
      s.onerror = function () { no(new Error(file + ": not in this static copy")); };
      document.body.appendChild(s);
    });
    return loading[file];
  }
  function replied(d) {
    return d && d.error ? Promise.reject(new Error(d.error)) : Promise.resolve(d);
  }
  function staticApi(path, params) {
    if (path === "runs") return replied(STATIC.runs);
    if (path === "compare") return need("static/compare.js").then(function () {
      var want = (params.ids || "").split(","), c = loaded.compare;
      if (c.error) return replied(c);
      /* the server's table of every exported run, in its order: those asked */
      return { order: c.order, runs: c.runs.filter(function (r) {
        return want.indexOf(r.id) >= 0; }) };
    });
    if (path === "series" || path === "report") {
      var f = STATIC.files.filter(function (x) { return x.id === params.id; })[0];
      if (!f) return Promise.reject(new Error("this static copy does not hold that run"));
      if (path === "report" && (params.from !== undefined || params.to !== undefined))
        return Promise.reject(new Error("the report of a zoomed range needs the server"));
      return need(f.file).then(function () {
        var d = loaded.run[params.id];
        return replied(path === "report" ? d.report : d.series[params.layer || "model"]);
      });
    }
    return Promise.reject(new Error(path + ": needs the server (sinkwatch serve)"));
  }
  // An incarnation is a uint64: above 2^53 a double rounds it. Where the
  // browser gives a number's source text to the reviver, "inc" keeps its
  // digits (a string); elsewhere it is the rounded number.
  function parseJSON(t) {
    return JSON.parse(t, function (k, v, ctx) {
      if (k === "inc" && typeof v === "number" && !Number.isSafeInteger(v) && ctx &&
          typeof ctx.source === "string")
        return ctx.source;
      return v;
    });
  }
  function api(path, params) {
    if (STATIC) return staticApi(path, params || {});
    return fetch("api/" + path + "?" + qs(params || {}), { credentials: "same-origin" })
      .then(function (r) {
        return r.text().then(function (t) {
          var j = parseJSON(t);
          if (!r.ok) throw new Error(j.error || r.statusText);
          return j;
        });
      });
  }
  function stateBadge(run, now) {
    var s = el("span", { cls: "state " + run.state, text: run.state });
    if (run.state === "interrupted" && typeof run.last_time === "number")
      s.title = "no end mark and no step for " + Math.round(now - run.last_time) +
        " s (more than " + run.stale_s + " s)";
    return s;
  }
  function parseHash() {
    var h = location.hash.replace(/^#/, "") || "/";
    var q = h.indexOf("?"), path = q < 0 ? h : h.slice(0, q), params = {};
    if (q >= 0) h.slice(q + 1).split("&").forEach(function (kv) {
      if (!kv) return;
      var i = kv.indexOf("=");
      params[decodeURIComponent(i < 0 ? kv : kv.slice(0, i))] =
        decodeURIComponent(i < 0 ? "" : kv.slice(i + 1));
    });
    return { path: path, params: params };
  }
  function setHashParams(path, params) {
    history.replaceState(null, "", "#" + path + (qs(params) ? "?" + qs(params) : ""));
  }
  function stop() { if (timer) clearInterval(timer); timer = null; gen++; }
  function fail(e) {
    main.textContent = "";
    main.appendChild(el("p", { cls: "err", text: String(e.message || e) }));
  }

  /* ---- runs ---- */
  function viewRuns(params) {
    var my = gen;
    var filter = el("input", { type: "search", placeholder: "filter by run or model",
      id: "filter", value: params.q || "" });
    var cmpBtn = el("button", { id: "compare-btn", text: "compare selected" });
    var tbody = el("tbody", { id: "runs-body" });
    var table = el("table", { id: "runs" }, [el("thead", null, [el("tr", null,
      ["", "run", "model", "params", "layers×heads", "steps", "last step", "state",
        "last update"].map(function (h) { return el("th", { text: h }); }))]), tbody]);
    var selected = {};
    main.textContent = "";
    main.appendChild(el("h1", { text: "Runs" }));
    main.appendChild(el("div", { cls: "toolbar" }, [filter, cmpBtn]));
    main.appendChild(table);
    var last = null;
    function draw() {
      if (!last) return;
      var q = filter.value.toLowerCase();
      tbody.textContent = "";
      last.runs.forEach(function (r) {
        var hay = ((r.run || "") + " " + (r.model || "") + " " + r.file).toLowerCase();
        if (q && hay.indexOf(q) < 0) return;
        var cb = el("input", { type: "checkbox", "data-id": r.id });
        cb.checked = !!selected[r.id];
        cb.onchange = function () { selected[r.id] = cb.checked; };
        var link = el("a", { href: "#/run?" + qs({ id: r.id }), text: r.run || r.file,
          cls: "run-link" });
        r.stale_s = last.stale_s;
        tbody.appendChild(el("tr", { "data-id": r.id }, [el("td", null, [cb]),
          el("td", null, [link, r.error ? el("div", { cls: "err", text: r.error }) : null]),
          el("td", { text: r.model || "–" }), el("td", { cls: "num", text: fmtParams(r.params) }),
          el("td", { cls: "num", text: r.layers + "×" + r.heads }),
          el("td", { cls: "num", text: fmtInt(r.steps) }),
          el("td", { cls: "num", text: fmtInt(r.last_step) }),
          el("td", null, [stateBadge(r, last.now)]),
          el("td", { text: fmtTime(r.last_time) })]));
      });
    }
    filter.oninput = function () {
      setHashParams("/", { q: filter.value });
      draw();
    };
    cmpBtn.onclick = function () {
      var ids = Object.keys(selected).filter(function (k) { return selected[k]; });
      if (ids.length) location.hash = "#/compare?" + qs({ ids: ids.join(",") });
    };
    function load() {
      return api("runs").then(function (j) {
        if (my !== gen) return;
        last = j;
        draw();
        if (!STATIC) liveEl.textContent = "updated " + new Date().toLocaleTimeString();
      });
    }
    load().catch(fail);
    if (!STATIC) timer = setInterval(function () { load().catch(function () {}); }, 2000);
  }

  /* ---- one run ---- */
  function chartBox(id, title) {
    var plot = el("div", { cls: "plot", id: id });
    var legend = el("div", { cls: "legend", id: id + "-legend" });
    var h = el("h3", { text: title, id: id + "-title" });
    return { box: el("div", { cls: "chart" }, [h, plot, legend]),
      plot: plot, legend: legend, title: h };
  }

  /* A layer's or the model's two lines (path, endpoint) and, across both,
   * its mean sink mass at the range's first and last step (x: the object
   * holding sink_mass_first, sink_mass_last). */
  function attribRows(tbody, label, a, keyp, x0) {
    ["path", "endpoint"].forEach(function (form, k) {
      var x = a[form];
      var bar = el("div", { cls: "share-bar" }, [
        el("div", { cls: "s", style: "flex:" + (x.sink_share === null ? 0 : x.sink_share) }),
        el("div", { cls: "c", style: "flex:" + (x.content_share === null ? 0 : x.content_share) })]);
      tbody.appendChild(el("tr", null, [el("td", { text: label }), el("td", { text: form }),
        numCell(x.dH, keyp + "." + form + ".dH"), numCell(x.sink, keyp + "." + form + ".sink"),
        numCell(x.content, keyp + "." + form + ".content"),
        numCell(x.sink_share, keyp + "." + form + ".sink_share", 3),
        numCell(x.content_share, keyp + "." + form + ".content_share", 3),
        el("td", null, [bar])]));
      if (k === 0) ["sink_mass_first", "sink_mass_last"].forEach(function (m) {
        var td = numCell(x0[m], keyp + "." + m);
        td.rowSpan = 2;
        tbody.lastChild.appendChild(td);
      });
    });
  }

  function shareColor(v) {
    if (typeof v !== "number") return "#e9ecef";
    var t = Math.max(0, Math.min(1, v));	/* 0: content (blue) .. 1: sink (orange) */
    return "hsl(" + (210 - 185 * t) + ", 75%, " + (88 - 30 * Math.abs(t - 0.5) * 2 * 0.5) + "%)";
  }

  /* The run's history, from its report: segments (incarnations, resumes),
   * rows superseded, senders with their counts, ranks that never ended. */
  var SENDER_COLS = ["inc", "rank", "senders", "messages", "stored", "lost", "duplicates",
    "missing", "ended"];
  function drawRunPanel(holder, rep) {
    holder.textContent = "";
    var segs = rep.segments || [], snd = rep.senders || [], open = rep.ranks_not_ended || [];
    holder.appendChild(el("p", { id: "panel-rows", text: fmtInt(rep.rows_stored) +
      " rows stored, " + fmtInt(rep.rows_superseded) + " superseded (a later incarnation " +
      "resumed before them), " + segs.length + " segment" + (segs.length === 1 ? "" : "s") }));
    var sb = el("tbody", { id: "segments-body" });
    segs.forEach(function (g, k) {
      sb.appendChild(el("tr", { "data-inc": String(g.inc) }, [el("td", { text: String(k) }),
        el("td", { text: String(g.inc) }), el("td", { cls: "num", text: String(g.first_step) }),
        el("td", { cls: "num", text: String(g.last_step) }),
        el("td", { cls: "num", text: String(g.steps) })]));
    });
    holder.appendChild(el("div", { cls: "panel-part" }, [el("h3", { text: "Segments" }),
      el("table", { id: "segments" }, [el("thead", null, [el("tr", null,
        ["segment", "incarnation", "first step", "last step", "steps"].map(function (h) {
          return el("th", { text: h }); }))]), sb])]));
    var nb = el("tbody", { id: "senders-body" });
    snd.forEach(function (r) {
      nb.appendChild(el("tr", null, SENDER_COLS.map(function (c) {
        return el("td", { cls: "num", "data-key": c, text: fmtInt(r[c]) }); })));
    });
    holder.appendChild(el("div", { cls: "panel-part" }, [el("h3", { text: "Senders" }),
      rep.senders_error ? el("p", { cls: "err", text: rep.senders_error }) :
      el("table", { id: "senders" }, [el("thead", null, [el("tr", null,
        SENDER_COLS.map(function (h) { return el("th", { cls: "num", text: h }); }))]), nb])]));
    var ml = el("ul", { id: "ranks-missing" });
    open.forEach(function (o) {
      ml.appendChild(el("li", { cls: "err", "data-inc": String(o.inc), "data-rank": String(o.rank),
        text: "rank " + o.rank + " of " + o.senders + " (incarnation " + o.inc +
          ") never sent " + (o.sent ? "its end" : "anything") }));
    });
    holder.appendChild(el("div", { cls: "panel-part" }, [el("h3", { text: "Ranks not ended" }),
      open.length ? ml : el("p", { cls: "muted", id: "ranks-missing-none",
        text: "every rank ended" })]));
  }

  var CLASS_MARK = { sink: "S", content: "C", both: "B", rise: "R", stable: "·", none: "" };
  function drawHeads(holder, rep, metric) {
    holder.textContent = "";
    var H = rep.heads, L = rep.layers;
    var head = el("tr", null, [el("th", { text: "layer \\ head" })]);
    for (var h = 0; h < H; h++) head.appendChild(el("th", { text: String(h) }));
    var tb = el("tbody");
    for (var l = 0; l < L; l++) {
      var tr = el("tr", null, [el("th", { text: String(l) })]);
      for (h = 0; h < H; h++) {
        var p = rep.per_head[l * H + h];
        var v = metric === "mass" ? p.sink_mass_last : p.path.sink_share;
        var td = el("td", { text: CLASS_MARK[p["class"]] || "", "data-layer": l,
          "data-head": h, "data-class": p["class"], "data-value": String(v) });
        td.style.background = shareColor(v);
        td.title = "layer " + l + " head " + h + "\nclass " + p["class"] +
          "\nsink share " + fmt(p.path.sink_share, 3) + ", content share " +
          fmt(p.path.content_share, 3) + "\ndH " + fmt(p.path.dH) + " = sink " +
          fmt(p.path.sink) + " + content " + fmt(p.path.content) +
          "\nsink mass " + fmt(p.sink_mass_first) + " → " + fmt(p.sink_mass_last) +
          "\nentropy " + fmt(p.entropy_first) + " → " + fmt(p.entropy_last) +
          "\ncontent entropy " + fmt(p.content_entropy_first) + " → " +
          fmt(p.content_entropy_last) + "\nrank entropy " + fmt(p.rank_entropy, 1) +
          ", rank content " + fmt(p.rank_content, 1);
        tr.appendChild(td);
      }
      tb.appendChild(tr);
    }
    holder.appendChild(el("table", { cls: "grid", id: "heads-grid" }, [el("thead", null, [head]), tb]));
    holder.appendChild(el("p", { cls: "muted", text: "Colour: " + (metric === "mass" ?
      "sink mass at step " + rep.last_step : "path sink share over steps " + rep.first_step +
      "–" + rep.last_step) + " (blue 0 … orange 1, grey none). Letter: the report's class " +
      "(S sink, C content, B both, R rise, · stable); hover for the numbers." }));
  }

  function viewRun(params) {
    var my = gen, id = params.id;
    var layer = params.layer || "model";
    var st = window.swState;
    st.view = "run"; st.win = null; st.report = null; st.lastStep = null; st.rows = null;
    if (params.from !== undefined && params.to !== undefined && params.from !== "" )
      st.win = [Number(params.from), Number(params.to)];
    main.textContent = "";
    var title = el("h1", { id: "run-title" });
    var meta = el("div", { cls: "muted", id: "run-meta" });
    var layerSel = el("select", { id: "layer" });
    var csv = STATIC ? el("span", { id: "csv", cls: "muted",
      text: "CSV: with the server (sinkwatch serve)" }) :
      el("a", { id: "csv", text: "CSV of the charts" });
    var reset = el("button", { text: "whole run", id: "reset" });
    var metricSel = el("select", { id: "heads-metric" }, [
      el("option", { value: "share", text: "path sink share" }),
      el("option", { value: "mass", text: "sink mass (last step)" })]);
    main.appendChild(el("div", null, [el("a", { href: "#/", text: "← runs" })]));
    main.appendChild(title);
    main.appendChild(meta);
    main.appendChild(el("div", { cls: "toolbar" }, [txt("layer "), layerSel, reset, csv]));
    var c1 = chartBox("c-sink", "sink mass"), c2 = chartBox("c-ent", "entropy (whole row, content)"),
      c3 = chartBox("c-cum", "cumulative entropy change: sink part + content part (stacked)"),
      c4 = chartBox("c-drift", "drift from the previous stored step (RMS over rows)"),
      c5 = chartBox("c-flip", "flip rate");
    main.appendChild(el("div", { cls: "charts" }, [c1.box, c2.box, c3.box, c4.box, c5.box]));
    var repTitle = el("h2", { id: "report-range" });
    var staticNote = el("p", { cls: "warn", id: "report-static" });
    staticNote.style.display = "none";
    var repBody = el("tbody", { id: "report-body" });
    main.appendChild(repTitle);
    main.appendChild(staticNote);
    main.appendChild(el("div", { cls: "report" }, [el("table", { id: "report" }, [
      el("thead", null, [el("tr", null, ["", "split", "dH", "sink channel", "content channel",
        "sink share", "content share", "", "sink mass first", "sink mass last"].map(function (h) {
        return el("th", { text: h, cls: "num" }); }))]),
      repBody])]));
    var repNote = el("p", { cls: "muted", id: "report-note" });
    main.appendChild(repNote);
    main.appendChild(el("h2", { text: "Run history: segments, senders" }));
    var runPanel = el("div", { cls: "run-panel", id: "run-panel" });
    main.appendChild(runPanel);
    main.appendChild(el("h2", { text: "Heads" }));
    main.appendChild(el("div", { cls: "toolbar" }, [txt("colour by "), metricSel]));
    var headsBox = el("div", { id: "heads" });
    main.appendChild(headsBox);

    var charts = [], syncing = false, series = null, repSeq = 0, repTimer = null;

    function hashNow() {
      var p = { id: id };
      if (layer !== "model") p.layer = layer;
      if (st.win) { p.from = Math.ceil(st.win[0]); p.to = Math.floor(st.win[1]); }
      setHashParams("/run", p);
      var cp = { id: id, layer: layer };
      if (st.win) { cp.from = Math.ceil(st.win[0]); cp.to = Math.floor(st.win[1]); }
      if (!STATIC) csv.href = "api/csv?" + qs(cp);
    }
    /* the last step the charts show: a live run may have more by now */
    function shownLast() {
      return series && series.step.length ? series.step[series.step.length - 1] : null;
    }
    function loadReport() {
      var seq = ++repSeq, p = { id: id }, last = shownLast();
      /* a static copy holds the whole run's report alone: it says so */
      var whole = STATIC && st.win;
      if (st.win && !STATIC) { p.from = Math.ceil(st.win[0]); p.to = Math.floor(st.win[1]); }
      /* the report of the steps the charts show, not of steps stored since */
      if (!STATIC && last !== null && (p.to === undefined || p.to > last)) p.to = last;
      return api("report", p).then(function (rep) {
        if (my !== gen || seq !== repSeq) return;
        st.report = rep;
        st.reportShown = last;	/* the charts' last step when it was asked for */
        repTitle.textContent = "Report: " + (whole ? "the whole run, " : "") + "steps " +
          rep.first_step + "–" + rep.last_step +
          " (" + rep.steps_used + " stored steps, " + rep.split_form + " split)";
        repTitle.setAttribute("data-from", rep.first_step);
        repTitle.setAttribute("data-to", rep.last_step);
        repTitle.setAttribute("data-scope", whole ? "whole-run" : "range");
        staticNote.textContent = whole ? "The charts show steps " + Math.ceil(st.win[0]) +
          "–" + Math.floor(st.win[1]) + ", but this static copy holds only the whole " +
          "run's report: the numbers below are those of steps " + rep.first_step + "–" +
          rep.last_step + ". The report of a zoomed range needs the server (sinkwatch " +
          "serve)." : "";
        staticNote.style.display = whole ? "" : "none";
        repBody.textContent = "";
        attribRows(repBody, "model", rep.model_attribution, "model", rep);
        if (layer !== "model")
          attribRows(repBody, "layer " + layer, rep.layer_attribution[Number(layer)],
            "layer" + layer, rep.layer_attribution[Number(layer)]);
        repNote.textContent = "sink channel: the part of dH that moves with the sink " +
          "mass alone, of either sign; content channel: the change in how the rest is " +
          "spread (METRICS.md §3). Sink mass: the mean over the heads at steps " +
          rep.first_step + " and " + rep.last_step + "." + (rep.intervals_incomplete ?
          " " + rep.intervals_incomplete + " of " + rep.intervals + " intervals touch an " +
          "incomplete step (" + rep.steps_incomplete + " steps)." : "");
        drawHeads(headsBox, rep, metricSel.value);
        drawRunPanel(runPanel, rep);
      }).catch(function (e) {
        if (my !== gen) return;
        repTitle.textContent = "Report: " + e.message;
      });
    }
    function reportSoon() {
      if (repTimer) clearTimeout(repTimer);
      repTimer = setTimeout(loadReport, 150);
    }
    function setWin(w, from) {
      st.win = w;
      syncing = true;
      charts.forEach(function (g) {
        if (g !== from) g.updateOptions({ dateWindow: w });
      });
      syncing = false;
      hashNow();
      reportSoon();
    }
    function makeCharts() {
      var opts = function (extra) {
        var o = { labelsSeparateLines: false, legend: "always", xlabel: "step",
          /* a value the server has not (null: a missing layer, drift taken
           * against another step than the previous one) is a gap, and the
           * line breaks there; the points at a gap's edges are drawn, so a
           * value between two gaps shows */
          connectSeparatedPoints: false, drawGapEdgePoints: true, drawPoints: false,
          strokeWidth: 1.5, axes: {
            x: { axisLabelWidth: 60 }, y: { axisLabelWidth: 70, axisLabelFormatter: tick,
              valueFormatter: tick } },
          zoomCallback: function (a, b) {
            if (syncing) return;
            var g = this;
            setWin(g.isZoomed("x") ? [a, b] : null, g);
          },
          drawCallback: function (g, initial) {
            if (syncing || initial || !st.win) return;
            var r = g.xAxisRange();
            if (Math.abs(r[0] - st.win[0]) > 1e-9 || Math.abs(r[1] - st.win[1]) > 1e-9)
              setWin([r[0], r[1]], g);
          } };
        Object.keys(extra).forEach(function (k) { o[k] = extra[k]; });
        if (st.win) o.dateWindow = st.win;
        return o;
      };
      charts = [
        new Dygraph(c1.plot, data1(), opts({ labels: labels1(), labelsDiv: c1.legend,
          colors: ["#d9480f", "#868e96"], ylabel: "sink mass" })),
        new Dygraph(c2.plot, data2(), opts({ labels: labels2(), labelsDiv: c2.legend,
          colors: ["#2f9e44", "#1c7ed6", "#868e96"], ylabel: "nats" })),
        new Dygraph(c3.plot, data3(), opts({ labels: ["step", "sink part", "content part"],
          labelsDiv: c3.legend, stackedGraph: true, fillGraph: true, fillAlpha: 0.45,
          /* padded: with zero on the plot's edge, dygraphs 2.2 leaves the lower
           * series' first segment unfilled (the fill seemed to start a step late) */
          includeZero: true, yRangePad: 8,
          colors: ["#d9480f", "#1c7ed6"], ylabel: "nats" })),
        new Dygraph(c4.plot, data4(), opts({ labels: ["step", "drift sink", "drift content"],
          labelsDiv: c4.legend, colors: ["#d9480f", "#1c7ed6"], ylabel: "log-ratio" })),
        new Dygraph(c5.plot, data5(), opts({ labels: ["step", "cosine", "JS", "entropy"],
          labelsDiv: c5.legend, colors: ["#7048e8", "#2f9e44", "#868e96"],
          ylabel: "fraction", valueRange: [0, 1.05] }))];
      window.swCharts = charts;	/* for tests (not in swState: it is returned whole) */
    }
    var modelSeries = null;
    function lname() { return layer === "model" ? "model mean" : "layer " + layer; }
    function labels1() { return layer === "model" ? ["step", "model mean"] : ["step", lname(), "model mean"]; }
    function labels2() {
      return layer === "model" ? ["step", "entropy", "content entropy"] :
        ["step", "entropy (" + lname() + ")", "content entropy (" + lname() + ")", "entropy (model)"];
    }
    function rows(cols) {
      var out = [];
      /* NaN, not null: dygraphs draws NaN as a gap whatever its options */
      for (var k = 0; k < series.step.length; k++)
        out.push([series.step[k]].concat(cols.map(function (c) {
          return c[k] === null ? NaN : c[k]; })));
      return out;
    }
    function data1() {
      return rows(layer === "model" ? [series.sink_mass] : [series.sink_mass, modelSeries.sink_mass]);
    }
    function data2() {
      return rows(layer === "model" ? [series.entropy, series.content_entropy] :
        [series.entropy, series.content_entropy, modelSeries.entropy]);
    }
    function data3() { return rows([series.cum_sink, series.cum_content]); }
    function data4() { return rows([series.drift_sink, series.drift_content]); }
    function data5() { return rows([series.flip_cosine, series.flip_js, series.flip_entropy]); }
    function titles() {
      var f = series.step.length ? series.step[0] : "–";
      c3.title.textContent = "cumulative entropy change of " + lname() + " since step " + f +
        " (the run's start), stacked: sink part + content part";
      c3.title.title = "Summed from the run's first stored step whatever the zoom: the " +
        "shares of the range shown are the report's, below.";
      c4.title.textContent = "drift of " + lname() + " from the previous stored step " +
        "(RMS over rows; fixed probe only)";
      c5.title.textContent = "flip rate of " + lname() + (layer === "model" ?
        " (the layers' mean)" : "");
    }

    function loadSeries() {
      var p1 = api("series", { id: id, layer: layer });
      /* the model line of the same steps as the layer's (a live run grows) */
      var p2 = layer === "model" ? p1 : p1.then(function (s) {
        var q = { id: id, layer: "model" };
        if (!STATIC && s.step.length) q.to = s.step[s.step.length - 1];
        return api("series", q);
      });
      return Promise.all([p1, p2]).then(function (r) {
        if (my !== gen) return;
        series = r[0]; modelSeries = r[1];
        st.series = series;	/* what the charts show, for tests */
        st.modelSeries = modelSeries;
        st.lastStep = series.last_step; st.rows = series.rows;
        title.textContent = series.run;
        meta.textContent = "";
        meta.appendChild(txt((series.model || "") + " · " + fmtParams(series.params) +
          " params · " + series.layers + " layers × " + series.heads + " heads · " +
          series.steps + " stored steps · last step " + series.last_step + " · "));
        series.stale_s = 0;
        meta.appendChild(stateBadge(series, Date.now() / 1000));
        meta.appendChild(txt(" · last update " + fmtTime(series.last_time) + " · file " +
          series.file));
        if (!layerSel.options.length) {
          layerSel.appendChild(el("option", { value: "model", text: "model mean" }));
          for (var l = 0; l < series.layers; l++)
            layerSel.appendChild(el("option", { value: String(l), text: "layer " + l }));
          layerSel.value = layer;
        }
        if (!charts.length) makeCharts();
        else {
          syncing = true;
          charts[0].updateOptions({ file: data1(), labels: labels1(), dateWindow: st.win });
          charts[1].updateOptions({ file: data2(), labels: labels2(), dateWindow: st.win });
          charts[2].updateOptions({ file: data3(), dateWindow: st.win });
          charts[3].updateOptions({ file: data4(), dateWindow: st.win });
          charts[4].updateOptions({ file: data5(), dateWindow: st.win });
          syncing = false;
        }
        titles();
        st.updates++;
        if (!STATIC)
          liveEl.textContent = "step " + series.last_step + " · " + new Date().toLocaleTimeString();
      });
    }
    layerSel.onchange = function () {
      layer = layerSel.value;
      hashNow();
      loadSeries().then(loadReport).catch(fail);
    };
    metricSel.onchange = function () { if (st.report) drawHeads(headsBox, st.report, metricSel.value); };
    reset.onclick = function () { setWin(null, null); };
    hashNow();
    loadSeries().then(loadReport).catch(fail);
    if (!STATIC) timer = setInterval(function () {
      api("state", { id: id }).then(function (s) {
        if (my !== gen) return;
        if (s.rows !== st.rows || s.last_step !== st.lastStep)
          loadSeries().then(loadReport);
      }).catch(function () {});
    }, POLL_MS);
  }

  /* ---- compare ---- */
  /* The compare charts' line colours (d3's category10), run i the colour
   * i, cycled: the table's row of run i carries the same one. */
  var SERIES_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  function seriesColor(i) { return SERIES_COLORS[i % SERIES_COLORS.length]; }
  function viewCompare(params) {
    var my = gen;
    var ids = (params.ids || "");
    main.textContent = "";
    main.appendChild(el("div", null, [el("a", { href: "#/", text: "← runs" })]));
    main.appendChild(el("h1", { text: "Compare" }));
    var c1 = chartBox("cmp-sink", "model mean sink mass"),
      c2 = chartBox("cmp-ent", "model mean content entropy");
    main.appendChild(el("div", { cls: "charts" }, [c1.box, c2.box]));
    var tb = el("tbody", { id: "compare-body" });
    main.appendChild(el("h2", { text: "Whole runs, in parameter order" }));
    main.appendChild(el("table", { id: "compare" }, [el("thead", null, [el("tr", null,
      ["#", "run", "model", "params", "steps", "path dH", "sink channel", "content channel",
        "sink share", "content share"].map(function (h) { return el("th", { text: h }); }))]), tb]));
    var graphs = null;
    function load() {
      return api("compare", { ids: ids }).then(function (j) {
        if (my !== gen) return;
        tb.textContent = "";
        var steps = {}, labels = ["step"];
        j.runs.forEach(function (r, i) {
          /* legend labels are numbers: dygraphs writes labels as HTML */
          labels.push("#" + (i + 1));
          var a = r.model_attribution ? r.model_attribution.path : {};
          var sw = el("span", { cls: "swatch" });
          sw.style.background = seriesColor(i);
          tb.appendChild(el("tr", { "data-id": r.id, "data-color": seriesColor(i) }, [
            el("td", { cls: "series" }, [sw, txt("#" + (i + 1))]),
            el("td", null, [el("a", { href: "#/run?" + qs({ id: r.id }), text: r.run || r.file })]),
            el("td", { text: r.model || "–" }), el("td", { cls: "num", text: fmtParams(r.params),
              "data-value": String(r.params) }),
            el("td", { cls: "num", text: fmtInt(r.steps) }),
            numCell(a.dH), numCell(a.sink), numCell(a.content), numCell(a.sink_share, null, 3),
            numCell(a.content_share, null, 3)]));
          (r.step || []).forEach(function (s, k) {
            if (!steps[s]) steps[s] = { sm: [], ce: [] };
            steps[s].sm[i] = r.sink_mass[k];
            steps[s].ce[i] = r.content_entropy[k];
          });
        });
        var keys = Object.keys(steps).map(Number).sort(function (a, b) { return a - b; });
        var n = j.runs.length;
        function data(f) {
          return keys.map(function (s) {
            var row = [s];
            for (var i = 0; i < n; i++) {
              var v = steps[s][f][i];
              /* undefined: run i has no such step, connected over (null);
               * null: the run has the step but no value, a gap (NaN) */
              row.push(v === undefined ? null : v === null ? NaN : v);
            }
            return row;
          });
        }
        if (!n || !keys.length) return;
        var o = { labels: labels, legend: "always", xlabel: "step", connectSeparatedPoints: true,
          drawGapEdgePoints: true, colors: j.runs.map(function (r, i) { return seriesColor(i); }) };
        if (!graphs) graphs = window.swCompareCharts = [
          new Dygraph(c1.plot, data("sm"), Object.assign({ labelsDiv: c1.legend }, o)),
          new Dygraph(c2.plot, data("ce"), Object.assign({ labelsDiv: c2.legend }, o))];
        else {
          graphs[0].updateOptions({ file: data("sm"), colors: o.colors });
          graphs[1].updateOptions({ file: data("ce"), colors: o.colors });
        }
      });
    }
    load().catch(fail);
    if (!STATIC) timer = setInterval(function () { load().catch(function () {}); }, 2000);
  }

  function route() {
    stop();
    var h = parseHash();
    window.swState.view = h.path;
    if (h.path === "/run" && h.params.id) viewRun(h.params);
    else if (h.path === "/compare") viewCompare(h.params);
    else viewRuns(h.params);
  }
  window.addEventListener("hashchange", route);
  if (STATIC) {
    document.body.className = "static";
    liveEl.textContent = "static copy, exported " + fmtTime(STATIC.exported);
    liveEl.title = "sinkwatch serve --export: no live updates; the report of a zoomed " +
      "range needs the server";
  }
  route();
})();
