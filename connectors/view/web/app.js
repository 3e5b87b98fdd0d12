// braid view: the pages of the drill-down view. Plain JavaScript, no build
// step; Apache ECharts draws the heatmaps and charts, Cytoscape.js the
// pollution graph (both vendored under /assets/vendor). Data comes from the
// read-only JSON API (connectors/view/api.go).
'use strict';

(function () {
  const main = document.getElementById('main');
  const braid = (window.braid = { charts: {} });

  // ---- utilities --------------------------------------------------------

  // The bearer token: taken once from ?token=… and kept for the session.
  const params0 = new URLSearchParams(location.search);
  if (params0.get('token')) {
    sessionStorage.setItem('braid-token', params0.get('token'));
    params0.delete('token');
    history.replaceState(null, '', location.pathname + (params0.toString() ? '?' + params0 : ''));
  }

  async function api(path) {
    const headers = {};
    const token = sessionStorage.getItem('braid-token');
    if (token) headers.Authorization = 'Bearer ' + token;
    const resp = await fetch(path, { headers });
    let body;
    try { body = await resp.json(); } catch (e) { body = { error: resp.statusText }; }
    if (!resp.ok) throw new Error((body && body.error) || resp.status + ' ' + resp.statusText);
    return body;
  }

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (k.startsWith('data-')) e.setAttribute(k, v);
      else e.setAttribute(k, v);
    }
    for (const kid of nodeList(kids)) e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    return e;
  }

  // nodeList flattens nested lists of children and drops the empty ones
  // (null, undefined, false): what el, the pages and the tables return.
  function nodeList(list) {
    return list.flat(Infinity).filter((n) => n !== null && n !== undefined && n !== false);
  }

  function link(href, text, cls) {
    return el('a', { href, class: cls, onclick: (ev) => { if (!ev.metaKey && !ev.ctrlKey) { ev.preventDefault(); go(href); } } }, text);
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined || ms < 0) return '–';
    if (ms < 1) return (ms * 1000).toFixed(0) + ' µs';
    if (ms < 1000) return ms.toFixed(ms < 10 ? 2 : 0) + ' ms';
    return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
  }
  const pad = (n) => String(n).padStart(2, '0');
  function fmtTime(ms) {
    if (!ms) return '–';
    const d = new Date(ms);
    return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  }
  function fmtTimeMs(ms) {
    const d = new Date(ms);
    return fmtTime(ms) + '.' + String(d.getMilliseconds()).padStart(3, '0');
  }
  const pct = (x) => (x * 100).toFixed(x < 0.1 ? 1 : 0) + '%';
  const short = (s, n) => (s && s.length > n ? s.slice(0, n) + '…' : s || '');

  // Dimensions the API filters on (query parameters).
  const DIMS = ['instance', 'gpu', 'host', 'model', 'service', 'tenant', 'prompt', 'cache_hit', 'preempted', 'incident', 'error', 'slowest_layer'];

  function query() { return new URLSearchParams(location.search); }
  function withParams(path, set, drop) {
    const q = query();
    for (const k of drop || []) q.delete(k);
    for (const [k, v] of Object.entries(set || {})) { if (v === null) q.delete(k); else q.set(k, v); }
    const s = q.toString();
    return path + (s ? '?' + s : '');
  }

  // ---- page lifecycle --------------------------------------------------

  let refreshTimer = null;
  let brushing = false;

  function setReady(page) { document.body.dataset.ready = page; }
  function setEmpty(empty) { if (empty) document.body.dataset.empty = '1'; else delete document.body.dataset.empty; }

  function disposeCharts() {
    for (const c of Object.values(braid.charts)) c.dispose();
    braid.charts = {};
    if (braid.cy) { braid.cy.destroy(); braid.cy = null; }
  }

  function go(href) {
    history.pushState(null, '', href);
    route();
  }
  window.addEventListener('popstate', route);

  async function route() {
    clearInterval(refreshTimer);
    refreshTimer = null;
    document.body.dataset.ready = '';
    setEmpty(false);
    const path = location.pathname;
    const nav = path === '/' ? 'overview' : path.split('/')[1];
    for (const a of document.querySelectorAll('header nav a')) a.classList.toggle('active', a.dataset.nav === nav);
    let page, render;
    if (path === '/') [page, render] = ['overview', overview];
    else if (path === '/explain') [page, render] = ['explain', explain];
    else if (path === '/layers') [page, render] = ['layers', layers];
    else if (path.startsWith('/incident/')) [page, render] = ['incident', () => incident(decodeURIComponent(path.slice(10)))];
    else if (path === '/incidents') [page, render] = ['incidents', incidents];
    else if (path.startsWith('/trace/')) [page, render] = ['trace', () => trace(path.slice(7))];
    else if (path.startsWith('/alerts/')) [page, render] = ['alert', () => alertPage(decodeURIComponent(path.slice(8)))];
    else if (path === '/alerts') [page, render] = ['alerts', alerts];
    else [page, render] = ['notfound', async () => [el('div', { class: 'empty' }, 'No such page: ' + path)]];
    try {
      const t0 = performance.now();
      const nodes = await render();
      const t1 = performance.now();
      if (nodes) { disposeCharts(); main.replaceChildren(...nodeList(nodes)); }
      if (nodes && nodes.after) nodes.after();
      // What the page took: its data (fetch and DOM) and its charts.
      braid.timing = { page, dataMs: t1 - t0, drawMs: performance.now() - t1, sinceNavigationMs: performance.now() };
      setReady(page);
    } catch (err) {
      disposeCharts();
      main.replaceChildren(el('div', { class: 'error', id: 'error' }, 'Could not load this page: ' + err.message));
      setReady(page);
    }
    updateStatus();
  }

  async function updateStatus() {
    try {
      const st = await api('/api/status');
      document.getElementById('status').textContent =
        `${st.traces.toLocaleString()} traces · ${st.incidents} incidents · ${st.alerts} alert episodes · indexed up to ${fmtTime(st.newest)}` + (st.lag > 100 ? ` · ${st.lag.toLocaleString()} records behind` : '');
      return st;
    } catch (e) {
      document.getElementById('status').textContent = 'status unavailable: ' + e.message;
      return null;
    }
  }

  function noData(what) {
    setEmpty(true);
    return el('div', { class: 'empty card' }, what || 'No traces indexed yet — braid view reads braid.fused, braid.incidents and braid.alerts; the demo\'s first traces arrive within seconds.');
  }

  // ---- shared pieces ---------------------------------------------------

  function rangeBar(st) {
    const q = query();
    const bar = el('div', { class: 'bar' });
    const now = (st && st.newest) || Date.now();
    for (const [label, mins] of [['5m', 5], ['15m', 15], ['1h', 60]]) {
      const from = now - mins * 60000 + 1000, to = now + 1000;
      const on = q.get('from') && Math.abs(Number(q.get('to')) - Number(q.get('from')) - mins * 60000) < 2000;
      bar.append(el('button', { class: on ? 'on' : '', onclick: () => go(withParams(location.pathname, { from, to })) }, 'last ' + label));
    }
    bar.append(el('button', { onclick: () => go(withParams(location.pathname, { from: null, to: null })) }, 'follow'));
    for (const d of DIMS) {
      if (q.get(d) !== null) {
        bar.append(el('span', { class: 'chip', title: 'remove this filter', onclick: () => go(withParams(location.pathname, { [d]: null })) }, `${d} = ${q.get(d)}`, el('b', {}, '×')));
      }
    }
    return bar;
  }

  // heatmap draws a Heatmap (api.go) into container and returns the chart.
  function heatmap(container, hm, title, selection) {
    const chart = echarts.init(container);
    braid.charts[hm.metric] = chart;
    const labels = hm.bounds.slice(0, -1).map((b) => fmtMs(b));
    const opt = {
      animation: false,
      title: { text: title, left: 0, top: 0, textStyle: { fontSize: 13 } },
      tooltip: { formatter: (p) => `${fmtTime(hm.times[p.value[0]])}<br>${fmtMs(hm.bounds[p.value[1]])} – ${fmtMs(hm.bounds[p.value[1] + 1])}<br><b>${p.value[2]}</b> requests` },
      grid: { left: 64, right: 70, top: 30, bottom: 40 },
      xAxis: { type: 'category', data: hm.times.map(fmtTime), splitArea: { show: false } },
      yAxis: { type: 'category', data: labels, splitArea: { show: false } },
      visualMap: { min: 0, max: Math.max(hm.max, 1), calculable: false, orient: 'vertical', right: 0, top: 30, itemHeight: 120, text: ['more', ''],
        inRange: { color: ['#eef2ff', '#a5b4fc', '#6366f1', '#f59e0b', '#dc2626'] } },
      series: [{ type: 'heatmap', data: hm.cells, emphasis: { itemStyle: { borderColor: '#111', borderWidth: 1 } } }],
    };
    if (selection) {
      opt.series.push({ type: 'scatter', data: [], markArea: { silent: true, itemStyle: { color: 'rgba(220,38,38,0.08)', borderColor: '#dc2626', borderWidth: 2 },
        data: [[{ coord: [selection.x0, selection.y0] }, { coord: [selection.x1, selection.y1] }]] } });
    }
    chart.setOption(opt);
    chart.hm = hm;
    return chart;
  }

  // heatmapPixel: client coordinates of (time, latency) on a heatmap, for
  // tests that drag the brush with a real mouse.
  braid.heatmapPixel = function (metric, timeMs, latencyMs) {
    const chart = braid.charts[metric];
    if (!chart) return null;
    const hm = chart.hm;
    const xi = Math.min(Math.max(Math.floor((timeMs - hm.times[0]) / hm.bucket_ms), 0), hm.times.length - 1);
    let yi = 0;
    while (yi + 1 < hm.bounds.length - 1 && latencyMs >= hm.bounds[yi + 1]) yi++;
    const [x, y] = chart.convertToPixel({ seriesIndex: 0 }, [xi, yi]);
    const r = chart.getDom().getBoundingClientRect();
    return { x: r.left + x, y: r.top + y };
  };

  // enableBrush lets a mouse drag select a rectangle on the heatmap (a
  // plain overlay: the ECharts brush component costs more to set up than
  // the chart); the selection navigates to the explanation of that region.
  function enableBrush(chart, metric) {
    const dom = chart.getDom();
    dom.style.position = 'relative';
    dom.style.cursor = 'crosshair';
    const box = el('div', { class: 'brush' });
    const at = (ev) => { const r = dom.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; };
    dom.addEventListener('mousedown', (ev) => {
      const p0 = at(ev);
      if (ev.button !== 0 || !chart.containPixel('grid', p0)) return;
      ev.preventDefault();
      brushing = true;
      const draw = (p1) => Object.assign(box.style, { left: Math.min(p0[0], p1[0]) + 'px', top: Math.min(p0[1], p1[1]) + 'px',
        width: Math.abs(p1[0] - p0[0]) + 'px', height: Math.abs(p1[1] - p0[1]) + 'px' });
      draw(p0);
      dom.append(box);
      const move = (e) => draw(at(e));
      const up = (e) => {
        window.removeEventListener('mousemove', move);
        window.removeEventListener('mouseup', up);
        box.remove();
        brushing = false;
        const p1 = at(e);
        if (Math.abs(p1[0] - p0[0]) < 3 && Math.abs(p1[1] - p0[1]) < 3) return; // a click, not a drag
        const hm = chart.hm;
        const [ax, ay] = chart.convertFromPixel({ seriesIndex: 0 }, p0), [bx, by] = chart.convertFromPixel({ seriesIndex: 0 }, p1);
        const clampX = (v) => Math.min(Math.max(Math.round(v), 0), hm.times.length - 1), clampY = (v) => Math.min(Math.max(Math.round(v), 0), hm.bounds.length - 2);
        const xs = clampX(Math.min(ax, bx)), xe = clampX(Math.max(ax, bx)), ys = clampY(Math.min(ay, by)), ye = clampY(Math.max(ay, by));
        go(withParams('/explain', { metric, lo: hm.bounds[ys], hi: hm.bounds[ye + 1], sel_from: hm.times[xs], sel_to: hm.times[xe] + hm.bucket_ms,
          from: query().get('from') || hm.times[0], to: query().get('to') || hm.times[hm.times.length - 1] + hm.bucket_ms }));
      };
      window.addEventListener('mousemove', move);
      window.addEventListener('mouseup', up);
    });
  }

  function lineChart(container, times, series, yfmt) {
    const chart = echarts.init(container);
    braid.charts['line' + Object.keys(braid.charts).length] = chart;
    chart.setOption({
      animation: false, tooltip: { trigger: 'axis' }, legend: { top: 0 },
      grid: { left: 60, right: 20, top: 30, bottom: 30 },
      xAxis: { type: 'category', data: times.map(fmtTime) },
      yAxis: { type: 'value', axisLabel: { formatter: yfmt } },
      series: series.map((s) => ({ name: s.name, type: 'line', showSymbol: false, data: s.data.map((v) => (v < 0 ? null : v)), connectNulls: false })),
    });
    return chart;
  }

  function alertRow(a) {
    return el('tr', {},
      el('td', {}, el('span', { class: 'badge ' + a.state.toLowerCase() }, a.state)),
      el('td', {}, link('/alerts/' + encodeURIComponent(a.key), a.rule)),
      el('td', {}, Object.entries(a.group || {}).map(([k, v]) => `${k}=${v}`).join(', ')),
      el('td', { class: 'num' }, a.value !== undefined ? a.value.toPrecision(3) : '–'),
      el('td', {}, fmtTime(a.starts_at || a.active_since)));
  }
  // more: a line under a table cut to its first rows, linking to the rest.
  function more(list, shown, href, what) {
    return list.length > shown ? el('p', { class: 'hint' }, link(href, `${list.length - shown} more ${what} →`)) : null;
  }
  function alertTable(list, emptyText, limit) {
    if (!list.length) return el('p', { class: 'hint' }, emptyText);
    const rows = limit ? list.slice(0, limit) : list;
    return [el('table', {}, el('tr', {}, ['state', 'rule', 'group', 'value', 'since'].map((h) => el('th', {}, h))), rows.map(alertRow)),
      more(list, rows.length, '/alerts', 'alerts')];
  }
  function incidentTable(list, emptyText, limit) {
    if (!list.length) return el('p', { class: 'hint' }, emptyText);
    const rows = limit ? list.slice(0, limit) : list;
    return [el('table', {}, el('tr', {}, ['incident', 'pattern', 'GPU', 'root cause', 'victims', 'first', 'state'].map((h) => el('th', {}, h))),
      rows.map((i) => el('tr', {},
        el('td', {}, link('/incident/' + encodeURIComponent(i.id), i.id, 'incident-link')),
        el('td', {}, i.pattern), el('td', { title: i.gpu }, i.host + ' / ' + short(i.gpu, 12)), el('td', { title: i.root }, short(i.root, 24)),
        el('td', { class: 'num' }, i.victims), el('td', {}, fmtTime(i.first)),
        el('td', {}, el('span', { class: 'badge ' + i.state.toLowerCase() }, i.state))))),
      more(list, rows.length, '/incidents', 'incidents')];
  }
  function seriesTable(rows) {
    if (!rows || !rows.length) return el('p', { class: 'hint' }, 'No resource series matched.');
    const f = (v) => (v === undefined || v === null ? '–' : Number(v).toPrecision(4));
    return el('table', {}, el('tr', {}, ['metric', 'resource', 'at start', 'at end', 'min', 'max', 'delta', 'samples'].map((h) => el('th', {}, h))),
      rows.map((r) => el('tr', {}, el('td', {}, r.metric), el('td', {}, short(r.resource, 60)), el('td', { class: 'num' }, f(r.at_start)), el('td', { class: 'num' }, f(r.at_end)),
        el('td', { class: 'num' }, f(r.min)), el('td', { class: 'num' }, f(r.max)), el('td', { class: 'num' }, f(r.delta)), el('td', { class: 'num' }, r.samples))));
  }

  // ---- overview --------------------------------------------------------

  async function overview() {
    const [st, ov] = await Promise.all([api('/api/status'), api('/api/overview' + location.search)]);
    const nodes = [el('h1', {}, 'Overview'), rangeBar(st)];
    if (!st.traces) {
      nodes.push(noData());
      scheduleRefresh();
      return nodes;
    }
    if (!ov.total) nodes.push(noData('No traces in this range and filter.'));
    const ttft = el('div', { id: 'ttft-heatmap', class: 'chart' });
    const e2e = el('div', { id: 'e2e-heatmap', class: 'chart' });
    const rate = el('div', { class: 'chart small' }), p99 = el('div', { class: 'chart small' }), kv = el('div', { class: 'chart small' });
    nodes.push(el('div', { class: 'grid' },
      el('div', { class: 'card' }, ttft, el('p', { class: 'hint' }, 'Drag a rectangle over a spike to see what tells those requests apart.')),
      el('div', { class: 'card' }, e2e, el('p', { class: 'hint' }, 'Drag to select; the explanation compares the selection with the rest of the range.'))));
    nodes.push(el('div', { class: 'grid' }, el('div', { class: 'card' }, el('h2', {}, 'Requests and errors'), rate),
      el('div', { class: 'card' }, el('h2', {}, 'p99 latency'), p99), el('div', { class: 'card' }, el('h2', {}, 'KV-cache usage and polluted requests'), kv)));
    nodes.push(el('div', { class: 'grid' },
      el('div', { class: 'card', id: 'firing' }, el('h2', {}, 'Firing alerts'), alertTable(ov.firing, 'No alert is firing.', 10)),
      el('div', { class: 'card', id: 'incidents' }, el('h2', {}, 'KV-cache incidents'), incidentTable(ov.incidents, 'No incident in this range.', 10))));
    const groups = el('table', { id: 'groups' }, el('tr', {}, ['model', 'instance', 'host', 'requests', 'errors', 'TTFT p50', 'TTFT p99', 'e2e p99', 'polluted'].map((h) => el('th', { class: h === 'model' || h === 'instance' || h === 'host' ? '' : 'num' }, h))),
      ov.groups.map((g) => el('tr', { class: 'click', 'data-instance': g.instance, 'data-model': g.model, onclick: () => go(withParams('/', { instance: g.instance, model: g.model })) },
        el('td', {}, g.model), el('td', {}, g.instance), el('td', {}, g.host), el('td', { class: 'num' }, g.requests), el('td', { class: 'num' }, pct(g.error_rate)),
        el('td', { class: 'num' }, fmtMs(g.ttft_p50)), el('td', { class: 'num' }, fmtMs(g.ttft_p99)), el('td', { class: 'num' }, fmtMs(g.e2e_p99)), el('td', { class: 'num' }, g.polluted))));
    nodes.push(el('div', { class: 'card' }, el('h2', {}, 'Model × instance'), groups));
    nodes.after = () => {
      enableBrush(heatmap(ttft, ov.ttft, 'Time to first token'), 'ttft');
      enableBrush(heatmap(e2e, ov.e2e, 'End-to-end latency'), 'e2e');
      const s = ov.series;
      lineChart(rate, s.times, [{ name: 'requests/s', data: s.rate }, { name: 'error share', data: s.error_rate }]);
      lineChart(p99, s.times, [{ name: 'TTFT p99', data: s.ttft_p99 }, { name: 'e2e p99', data: s.e2e_p99 }], (v) => fmtMs(v));
      lineChart(kv, s.times, [{ name: 'KV usage', data: s.kv_usage }, { name: 'polluted', data: s.polluted }]);
    };
    scheduleRefresh();
    return nodes;
  }

  function scheduleRefresh() {
    if (query().get('from')) return; // a fixed range does not move
    refreshTimer = setInterval(async () => {
      if (brushing || location.pathname !== '/') return;
      try {
        const [st, ov] = await Promise.all([api('/api/status'), api('/api/overview' + location.search)]);
        if (!braid.charts.ttft) { if (st.traces) route(); return; }
        for (const [m, hm] of [['ttft', ov.ttft], ['e2e', ov.e2e]]) {
          const c = braid.charts[m];
          c.hm = hm;
          c.setOption({ xAxis: { data: hm.times.map(fmtTime) }, visualMap: { max: Math.max(hm.max, 1) }, series: [{ data: hm.cells }] });
        }
        document.getElementById('firing').replaceChildren(...nodeList([el('h2', {}, 'Firing alerts'), alertTable(ov.firing, 'No alert is firing.', 10)]));
        document.getElementById('incidents').replaceChildren(...nodeList([el('h2', {}, 'KV-cache incidents'), incidentTable(ov.incidents, 'No incident in this range.', 10)]));
        updateStatus();
      } catch (e) { /* the next tick tries again */ }
    }, 5000);
  }

  // ---- explain (BubbleUp) ----------------------------------------------

  async function explain() {
    const q = query();
    const [ov, ex, tl] = await Promise.all([api('/api/overview' + location.search), api('/api/explain' + location.search), api('/api/traces' + location.search + '&limit=20')]);
    const metric = q.get('metric');
    const hm = metric === 'e2e' ? ov.e2e : ov.ttft;
    const xi = (t) => Math.min(Math.max(Math.floor((t - hm.times[0]) / hm.bucket_ms), 0), hm.times.length - 1);
    const yi = (ms) => { let i = 0; while (i + 1 < hm.bounds.length - 1 && ms >= hm.bounds[i + 1]) i++; return i; };
    const sel = { x0: xi(Number(q.get('sel_from'))), x1: xi(Number(q.get('sel_to')) - 1), y0: yi(Number(q.get('lo'))), y1: yi(Number(q.get('hi')) * 0.999) };
    const chartEl = el('div', { id: (metric || 'ttft') + '-heatmap', class: 'chart' });
    const nodes = [el('h1', {}, 'What explains the selection'), rangeBar(null),
      el('div', { class: 'card' }, chartEl,
        el('p', {}, el('b', { id: 'selected-count' }, ex.selected.toLocaleString()), ` requests selected (${metric} ${fmtMs(Number(q.get('lo')))} – ${fmtMs(Number(q.get('hi')))}, ${fmtTime(Number(q.get('sel_from')))}–${fmtTime(Number(q.get('sel_to')))}) against `,
          el('b', { id: 'baseline-count' }, ex.baseline.toLocaleString()), ' in the rest of the range. ',
          link(withParams('/layers', {}), 'Layer heatmap for this selection →')))];
    if (!ex.selected) {
      nodes.push(noData('The selection holds no request.'));
    } else {
      const dims = el('div', { id: 'dimensions' });
      for (const d of ex.dimensions) {
        const vals = el('div', {});
        for (const v of d.values.slice(0, 6)) {
          vals.append(el('div', { class: 'dimension-value', 'data-value': v.value, title: 'filter the overview to ' + d.name + ' = ' + (v.value || '(none)'),
            onclick: () => go(withParams('/', { [d.name]: v.value }, ['metric', 'lo', 'hi', 'sel_from', 'sel_to'])) },
            el('span', { class: 'v' }, v.value || '(none)'),
            el('div', { class: 'bars' }, el('span', { class: 'sel', style: `width:${(v.sel_share * 100).toFixed(1)}%` }), el('span', { class: 'base', style: `width:${(v.base_share * 100).toFixed(1)}%` })),
            el('span', { class: 'num' }, `${pct(v.sel_share)} vs ${pct(v.base_share)}`)));
        }
        dims.append(el('div', { class: 'dimension', 'data-dimension': d.name },
          el('div', {}, el('div', { class: 'dimension-name' }, d.name), el('div', { class: 'dimension-score' }, 'difference ' + d.score.toFixed(2))), vals));
      }
      nodes.push(el('div', { class: 'card' }, el('h2', {}, 'Dimensions, most telling first'),
        el('p', { class: 'legend hint' }, el('span', { style: 'background:#d92d20' }), 'selection', el('span', { style: 'background:#98a2b3' }), 'baseline · click a value to filter to it'), dims));
      nodes.push(el('div', { class: 'card', id: 'slow-traces' }, el('h2', {}, `Slowest selected requests (${tl.total.toLocaleString()})`), traceTable(tl.traces)));
    }
    nodes.after = () => heatmap(chartEl, hm, metric === 'e2e' ? 'End-to-end latency' : 'Time to first token', sel);
    return nodes;
  }

  function traceTable(rows) {
    return el('table', {}, el('tr', {}, ['trace', 'start', 'model', 'instance', 'tenant', 'TTFT', 'e2e', ''].map((h) => el('th', {}, h))),
      rows.map((r) => el('tr', {}, el('td', {}, link('/trace/' + r.trace_id, r.trace_id.slice(0, 16) + '…', 'trace-link')), el('td', {}, fmtTime(r.start)), el('td', {}, r.model),
        el('td', {}, r.instance), el('td', {}, r.tenant), el('td', { class: 'num' }, fmtMs(r.ttft_ms)), el('td', { class: 'num' }, fmtMs(r.e2e_ms)),
        el('td', {}, r.error ? el('span', { class: 'flag bad' }, 'error') : '', r.polluted ? el('span', { class: 'flag bad' }, 'polluted') : ''))));
  }

  // ---- layers ----------------------------------------------------------

  async function layers() {
    const q = query();
    const ly = await api('/api/layers' + location.search);
    const nodes = [el('h1', {}, 'Decoder layers' + (q.get('incident') ? ' — incident ' + q.get('incident') + ', its GPU' + (q.get('gpu') ? ' ' + q.get('gpu') : '') : '')), rangeBar(null)];
    const hit = el('div', { id: 'hit-heatmap', class: 'chart' }), dec = el('div', { id: 'decode-heatmap', class: 'chart' });
    let corrupted = null;
    if (ly.corrupted) {
      corrupted = el('div', { id: 'corrupted-layers', class: 'chart small' });
      nodes.push(el('div', { class: 'card' }, el('h2', {}, 'Corrupted reads per layer'),
        el('p', { id: 'polluted-layers' }, ly.polluted.length ? ['Polluted layers: ', ly.polluted.map((l) => el('span', { class: 'layer', 'data-layer': l }, 'layer ' + l))] : 'No layer of this incident was hit.'),
        corrupted, el('p', {}, link('/incident/' + encodeURIComponent(q.get('incident')), '← back to the incident'))));
    }
    if (!ly.layers.length || !ly.traces) nodes.push(noData('No decode-layer spans in this selection (spans llm.decode.layer.N with layer_id).'));
    nodes.push(el('div', { class: 'grid' }, el('div', { class: 'card' }, el('h2', {}, `KV-cache hit ratio by layer (${ly.traces} requests)`), hit),
      el('div', { class: 'card' }, el('h2', {}, 'Decode time by layer'), dec)));
    nodes.after = () => {
      const draw = (container, cells, name, fmt, colors) => {
        const c = echarts.init(container);
        braid.charts[container.id] = c;
        const vals = cells.map((x) => x[2]);
        c.setOption({ animation: false, tooltip: { formatter: (p) => `${fmtTime(ly.times[p.value[0]])} layer ${ly.layers[p.value[1]]}<br><b>${fmt(p.value[2])}</b>` },
          grid: { left: 64, right: 70, top: 10, bottom: 40 },
          xAxis: { type: 'category', data: ly.times.map(fmtTime) }, yAxis: { type: 'category', name: 'layer', data: ly.layers.map(String) },
          visualMap: { min: Math.min(0, ...vals), max: Math.max(1e-9, ...vals), right: 0, top: 10, itemHeight: 120, inRange: { color: colors } },
          series: [{ type: 'heatmap', name, data: cells }] });
      };
      draw(hit, ly.hit_ratio, 'hit ratio', (v) => pct(v), ['#dc2626', '#f59e0b', '#e0e7ff', '#4f46e5']);
      draw(dec, ly.decode_ms, 'decode', fmtMs, ['#eef2ff', '#6366f1', '#dc2626']);
      if (corrupted) {
        const c = echarts.init(corrupted);
        braid.charts.corrupted = c;
        c.setOption({ animation: false, tooltip: { trigger: 'axis' }, legend: { top: 0 }, grid: { left: 50, right: 20, top: 30, bottom: 30 },
          xAxis: { type: 'category', name: 'layer', data: ly.corrupted.map((l) => String(l.layer)) }, yAxis: { type: 'value' },
          series: [{ name: 'corrupted reads', type: 'bar', data: ly.corrupted.map((l) => l.corrupted_reads), itemStyle: { color: '#dc2626' } },
            { name: 'foreign writes', type: 'bar', data: ly.corrupted.map((l) => l.hits), itemStyle: { color: '#f59e0b' } }] });
      }
    };
    return nodes;
  }

  // ---- incidents -------------------------------------------------------

  async function incidents() {
    const list = await api('/api/incidents');
    if (!list.length) return [el('h1', {}, 'KV-cache incidents'), noData('No incident indexed yet.')];
    return [el('h1', {}, 'KV-cache incidents'), el('div', { class: 'card', id: 'incidents' }, incidentTable(list, ''))];
  }

  // Cytoscape.js is loaded on the first incident page only (index.html
  // prefetches it).
  let cytoscapeLoaded = null;
  function loadCytoscape() {
    if (window.cytoscape) return Promise.resolve();
    if (!cytoscapeLoaded) {
      cytoscapeLoaded = new Promise((resolve, reject) => {
        const s = document.createElement('script');
        s.src = document.getElementById('cytoscape-src').getAttribute('href');
        s.onload = resolve;
        s.onerror = () => { cytoscapeLoaded = null; reject(new Error('could not load Cytoscape.js')); };
        document.head.append(s);
      });
    }
    return cytoscapeLoaded;
  }

  // reportLink opens (HTML) or downloads (Markdown) the incident's
  // attribution report; with a bearer token it fetches it with the token
  // and hands the browser the file.
  function reportLink(id, format, text) {
    const href = '/api/report/' + encodeURIComponent(id) + '?format=' + format;
    return el('a', { href, id: 'report-' + format, target: format === 'html' ? '_blank' : null, onclick: async (ev) => {
      const token = sessionStorage.getItem('braid-token');
      if (!token) return;
      ev.preventDefault();
      const resp = await fetch(href, { headers: { Authorization: 'Bearer ' + token } });
      if (!resp.ok) return;
      const a = el('a', { href: URL.createObjectURL(await resp.blob()), download: id + '.' + format });
      a.click();
    } }, text);
  }

  async function incident(id) {
    const [p] = await Promise.all([api('/api/incident/' + encodeURIComponent(id)), loadCytoscape()]);
    const s = p.summary, g = p.graph, r = g.root || {};
    const graphEl = el('div', { id: 'graph' });
    const tl = el('div', { id: 'timeline', class: 'chart small' });
    const around = withParams('/layers', { incident: id, from: s.first - 60000, to: s.last + 60000 }, DIMS.concat(['metric', 'lo', 'hi', 'sel_from', 'sel_to']));
    const nodes = [el('h1', {}, `Incident ${s.id}`),
      el('div', { class: 'grid' },
        el('div', { class: 'card' }, el('dl', { class: 'kv' },
          el('dt', {}, 'pattern'), el('dd', {}, el('b', {}, s.pattern)),
          el('dt', {}, 'state'), el('dd', {}, el('span', { class: 'badge ' + s.state.toLowerCase() }, s.state), ` revision ${s.revision}`),
          el('dt', {}, 'where'), el('dd', {}, `${s.host} · ${s.gpu}`),
          el('dt', {}, 'when'), el('dd', {}, `${fmtTimeMs(s.first)} – ${fmtTimeMs(s.last)}`),
          el('dt', {}, 'victims'), el('dd', {}, String(s.victims)),
          el('dt', {}, 'layers'), el('dd', {}, link(around, 'layer heatmap of the incident →')),
          el('dt', {}, 'report'), el('dd', {}, reportLink(id, 'html', 'attribution report'), ' · ', reportLink(id, 'md', 'Markdown')))),
        el('div', { class: 'card root-box', id: 'root-cause', 'data-request': r.request_id || '' },
          el('h2', {}, 'Root cause'),
          g.continues ? el('p', { class: 'hint', id: 'continues' }, 'carries on incident ', link('/incident/' + g.continues, g.continues),
            ' (closed): requests it polluted shared their content by prefix hash after it closed') : null,
          el('p', {}, el('b', {}, r.request_id ? 'request ' + r.request_id : r.node || 'unknown'), r.kind ? ` (${r.kind})` : ''),
          el('p', {}, r.detail || ''),
          el('p', { class: 'hint' }, `block ${r.block ?? '–'}${r.layer >= 0 ? ', layer ' + r.layer : ''} at ${r.time || '–'}`),
          r.trace_id ? link('/trace/' + r.trace_id, 'the root request\'s trace →', 'trace-link') : null)),
      el('div', { class: 'card' }, el('h2', {}, 'Pollution graph'),
        el('p', { class: 'legend hint' }, el('span', { style: 'background:#d92d20' }), 'root cause', el('span', { style: 'background:#f79009' }), 'victim (direct)',
          el('span', { style: 'background:#fdb022' }), 'victim (prefix cache)', el('span', { style: 'background:#98a2b3' }), 'block', el('span', { style: 'background:#a78bfa' }), 'layer',
          g.edges_dropped ? ` · ${g.edges_dropped} edges not shown (braid.pollution has them all)` : ''),
        graphEl),
      el('div', { class: 'card' }, el('h2', {}, 'Evidence timeline'), tl, el('table', {}, el('tr', {}, ['time', 'kind', 'what', 'input record'].map((h) => el('th', {}, h))),
        p.timeline.map((e) => el('tr', { class: 'event-' + e.kind }, el('td', {}, fmtTimeMs(e.time)), el('td', {}, e.kind), el('td', {}, e.text), el('td', {}, el('code', {}, e.origin || '')))))),
      el('div', { class: 'card' }, el('h2', {}, `Victims (${p.victims.length})`),
        el('table', { id: 'victims' }, el('tr', {}, ['request', 'via', 'from', 'when', 'trace'].map((h) => el('th', {}, h))),
          p.victims.map((v) => el('tr', { 'data-request': v.request_id }, el('td', {}, v.request_id), el('td', {}, v.via), el('td', {}, v.from), el('td', {}, fmtTimeMs(v.time)),
            el('td', {}, v.trace_id ? (v.indexed ? link('/trace/' + v.trace_id, v.trace_id.slice(0, 16) + '…', 'trace-link') : v.trace_id.slice(0, 16) + '… (not indexed)') : '–'))))),
      el('div', { class: 'card', id: 'incident-alerts' }, el('h2', {}, 'Alerts naming it'), alertTable(p.alerts, 'No alert names this incident.')),
      el('div', { class: 'card' }, el('h2', {}, 'Resources during the incident'), seriesTable(p.resources))];
    nodes.after = () => {
      const elements = [];
      for (const n of g.nodes) {
        const cls = [n.kind, n.root ? 'root' : '', n.polluted ? 'victim' : '', n.via === 'propagated' ? 'propagated' : ''].filter(Boolean).join(' ');
        elements.push({ group: 'nodes', data: { id: n.id, label: short(n.label, 28), trace: n.trace_id || '' }, classes: cls });
      }
      g.edges.forEach((e, i) => elements.push({ group: 'edges', data: { id: 'e' + i, source: e.source, target: e.target, label: e.kind + (e.layer >= 0 ? ' L' + e.layer : '') }, classes: e.kind }));
      braid.cy = cytoscape({
        container: graphEl, elements, wheelSensitivity: 0.3,
        layout: { name: 'breadthfirst', directed: true, roots: g.nodes.filter((n) => n.root).map((n) => n.id), spacingFactor: 1.1, animate: false },
        style: [
          { selector: 'node', style: { label: 'data(label)', 'font-size': 10, 'text-valign': 'bottom', 'text-margin-y': 4, 'background-color': '#98a2b3', width: 18, height: 18 } },
          { selector: 'node.block', style: { shape: 'round-rectangle', 'background-color': '#98a2b3' } },
          { selector: 'node.layer', style: { shape: 'hexagon', 'background-color': '#a78bfa' } },
          { selector: 'node.request', style: { 'background-color': '#cbd5e1' } },
          { selector: 'node.victim', style: { 'background-color': '#f79009', width: 22, height: 22 } },
          { selector: 'node.propagated', style: { 'background-color': '#fdb022', 'border-width': 2, 'border-style': 'dashed', 'border-color': '#b54708' } },
          { selector: 'node.root', style: { 'background-color': '#d92d20', width: 36, height: 36, 'border-width': 3, 'border-color': '#7a271a', 'font-weight': 700 } },
          { selector: 'edge', style: { width: 1.5, 'curve-style': 'bezier', 'target-arrow-shape': 'triangle', 'line-color': '#98a2b3', 'target-arrow-color': '#98a2b3', label: 'data(label)', 'font-size': 8, color: '#667085' } },
          { selector: 'edge.mixed_write', style: { 'line-color': '#d92d20', 'target-arrow-color': '#d92d20' } },
          { selector: 'edge.dirty_residue', style: { 'line-color': '#f79009', 'target-arrow-color': '#f79009' } },
          { selector: 'edge.propagated', style: { 'line-style': 'dashed', 'line-color': '#3559e0', 'target-arrow-color': '#3559e0' } },
          { selector: 'edge.layer_oob', style: { 'line-color': '#7c3aed', 'target-arrow-color': '#7c3aed' } },
        ],
      });
      braid.cy.on('tap', 'node', (ev) => { const t = ev.target.data('trace'); if (t) go('/trace/' + t); });
      const kinds = ['root', 'kv', 'victim', 'sanitizer', 'xid', 'preemption'];
      const colors = { root: '#d92d20', kv: '#f79009', victim: '#fdb022', sanitizer: '#7c3aed', xid: '#111827', preemption: '#3559e0' };
      const c = echarts.init(tl);
      braid.charts.timeline = c;
      const ts = p.timeline.map((e) => e.time);
      const tmin = ts.length ? Math.min(...ts) - 1000 : null, tmax = ts.length ? Math.max(...ts) + 1000 : null;
      c.setOption({ animation: false, grid: { left: 80, right: 20, top: 10, bottom: 30 }, tooltip: { formatter: (x) => `${fmtTimeMs(x.value[0])}<br>${x.data.text}` },
        xAxis: { type: 'time', min: tmin, max: tmax }, yAxis: { type: 'category', data: kinds },
        series: [{ type: 'scatter', symbolSize: 9, data: p.timeline.map((e) => ({ value: [e.time, e.kind], text: e.text, itemStyle: { color: colors[e.kind] || '#667085' } })) }] });
    };
    return nodes;
  }

  // ---- trace -----------------------------------------------------------

  async function trace(id) {
    const p = await api('/api/trace/' + encodeURIComponent(id));
    const d = p.derived || {};
    let t0 = p.start, t1 = p.end;
    for (const e of p.kv_events.concat(p.logs)) { t0 = Math.min(t0, e.time); t1 = Math.max(t1, e.time); }
    const span = Math.max(t1 - t0, 0.001);
    const x = (t) => (((t - t0) / span) * 100).toFixed(3) + '%';
    const w = (a, b) => Math.max(((b - a) / span) * 100, 0.2).toFixed(3) + '%';
    const wf = el('div', { id: 'waterfall', class: 'waterfall' },
      el('div', { class: 'axis' }, el('div', {}, ''), el('div', {}, el('span', {}, fmtTimeMs(t0)), el('span', {}, '+' + fmtMs(span / 2)), el('span', {}, '+' + fmtMs(span)))),
      p.spans.map((s) => el('div', { class: 'span-row', 'data-span-id': s.span_id, title: Object.entries(s.attrs).map(([k, v]) => `${k}=${v}`).join('\n') },
        el('div', { class: 'span-name', style: `padding-left:${s.depth * 14}px` }, s.name, el('span', { class: 'hint' }, ' ' + fmtMs(s.end - s.start))),
        el('div', { class: 'lane' }, el('div', { class: 'b' + (s.error ? ' err' : ''), style: `left:${x(s.start)};width:${w(s.start, s.end)}` })))),
      el('div', { class: 'span-row' }, el('div', { class: 'span-name' }, el('b', {}, 'logs')),
        el('div', { class: 'lane' }, p.logs.map((l) => el('div', { class: 'm', style: `left:${x(l.time)}`, title: l.body })))),
      el('div', { class: 'span-row' }, el('div', { class: 'span-name' }, el('b', {}, 'KV events')),
        el('div', { class: 'lane' }, p.kv_events.map((e) => el('div', { class: 'm kv', style: `left:${x(e.time)}`, title: e.text })))));
    const flags = el('div', { id: 'flags' }, p.flags.map((f) => el('span', { class: 'flag' + (f === 'FLAG_POLLUTED' || f === 'FLAG_ERROR' ? ' bad' : '') }, f.replace('FLAG_', '').toLowerCase())));
    const fig = (label, v) => [el('dt', {}, label), el('dd', {}, v)];
    const ns = (v) => (v ? fmtMs(Number(v) / 1e6) : '–');
    return [el('h1', {}, 'Trace ' + p.trace_id),
      el('div', { class: 'grid' },
        el('div', { class: 'card' }, el('dl', { class: 'kv' }, fig('model', p.model || '–'), fig('instance', p.instance || '–'), fig('host', p.host || '–'), fig('GPU', p.gpu || '–'),
          fig('tenant', p.tenant || '–'), fig('revision', String(p.revision)), fig('flags', flags),
          fig('incidents', p.incidents.length ? p.incidents.map((i) => link('/incident/' + encodeURIComponent(i.id), i.id + ' ', 'incident-link')) : 'none'))),
        el('div', { class: 'card' }, el('dl', { class: 'kv' }, fig('TTFT', ns(d.ttftNanos)), fig('TPOT', ns(d.tpotNanos)), fig('e2e', ns(d.e2eNanos)), fig('queue', ns(d.queueTimeNanos)),
          fig('tokens in / out', `${d.inputTokens || '–'} / ${d.outputTokens || '–'}`), fig('prefix-cache hit', d.kvCacheHitRatio !== undefined ? pct(d.kvCacheHitRatio) : '–'),
          fig('request ids', (d.requestIds || []).join(', ') || '–'),
          fig('layers', (d.layers || []).map((l) => `L${l.key} ${fmtMs(Number(l.totalNanos) / 1e6)}`).join(' · ') || '–')))),
      el('div', { class: 'card' }, el('h2', {}, `Timeline: ${p.spans.length} spans, ${p.logs.length} logs, ${p.kv_events.length} KV events`), wf),
      el('div', { class: 'card' }, el('h2', {}, 'KV events of the incidents naming this request'),
        p.kv_events.length ? el('table', { id: 'kv-events' }, el('tr', {}, ['time', 'kind', 'what', 'input records'].map((h) => el('th', {}, h))),
          p.kv_events.map((e) => el('tr', { class: 'kv-event' }, el('td', {}, fmtTimeMs(e.time)), el('td', {}, e.kind), el('td', {}, e.text), el('td', {}, el('code', {}, e.origin || '')))))
          : el('p', { class: 'hint', id: 'kv-events' }, 'No incident names this request.')),
      el('div', { class: 'card' }, el('h2', {}, 'Logs'), el('table', { id: 'logs' }, el('tr', {}, ['time', 'severity', 'body', 'input record'].map((h) => el('th', {}, h))),
        p.logs.map((l) => el('tr', { class: 'log-row' }, el('td', {}, fmtTimeMs(l.time)), el('td', {}, l.severity), el('td', {}, l.body), el('td', {}, el('code', {}, l.origin || '')))))),
      el('div', { class: 'card' }, el('h2', {}, 'Resource context during the request'), seriesTable(p.resources))];
  }

  // ---- alerts ----------------------------------------------------------

  async function alerts() {
    const list = await api('/api/alerts');
    if (!list.length) return [el('h1', {}, 'Alerts'), noData('No alert state change indexed yet.')];
    return [el('h1', {}, 'Alerts'), el('div', { class: 'card' }, alertTable(list, ''))];
  }

  async function alertPage(key) {
    const p = await api('/api/alert/' + encodeURIComponent(key).replace(/%2F/g, '/'));
    return [el('h1', {}, 'Alert ' + p.key), p.episodes.map((a) => el('div', { class: 'card episode', 'data-rule': a.rule, 'data-state': a.state },
      el('h2', {}, `Episode ${a.episode}: `, el('span', { class: 'badge ' + a.state.toLowerCase() }, a.state)),
      el('dl', { class: 'kv' }, el('dt', {}, 'value'), el('dd', {}, a.value !== undefined ? `${a.value.toPrecision(4)} (threshold ${a.threshold ?? '–'})` : '–'),
        el('dt', {}, 'active since'), el('dd', {}, fmtTime(a.active_since)), el('dt', {}, 'fired'), el('dd', {}, fmtTime(a.starts_at)), el('dt', {}, 'ended'), el('dd', {}, fmtTime(a.ends_at)),
        Object.entries(a.annotations || {}).map(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]).flat(),
        el('dt', {}, 'traces'), el('dd', {}, (a.trace_ids || []).map((t) => link('/trace/' + t, t.slice(0, 12) + '… ', 'trace-link'))),
        el('dt', {}, 'incidents'), el('dd', {}, (a.incident_ids || []).map((i) => link('/incident/' + encodeURIComponent(i), i + ' ', 'incident-link'))))))];
  }

  route();
})();
