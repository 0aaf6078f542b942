// ray-rs insight dashboard: the five views in the browser.
// Plain ES2020, no dependencies, works offline. Every request carries the
// access token (`token=` query parameter) read from <meta name="rayrs-token">.
'use strict';
(function () {

// ===== Core: token, requests, formatting, shared state =====
const $ = (id) => document.getElementById(id);
const TABS = ['logical', 'physical', 'stack', 'flame', 'gantt'];
const SVG_NS = 'http://www.w3.org/2000/svg';
// Built by concatenation so that the server's substitution never touches it.
const PLACEHOLDER = '__RAYRS_' + 'TOKEN__';
// The server reads at most 64 KiB of request head.
const MAX_URL = 60000;

const META_TOKEN = (document.querySelector('meta[name="rayrs-token"]') || { content: '' }).content;
// The page's own `?token=` when the page was not served with the token written in.
const TOKEN = META_TOKEN && META_TOKEN !== PLACEHOLDER ? META_TOKEN : new URLSearchParams(location.search).get('token') || '';

/** `path?k=v&...&token=T`, leaving out parameters that are null, undefined or ''. */
function apiUrl(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  q.set('token', TOKEN);
  return path + '?' + q.toString();
}

async function fetchText(path, params) {
  const url = apiUrl(path, params);
  if (url.length > MAX_URL) throw new Error(`${path}: the request is too long (${url.length} characters)`);
  let resp, text = '';
  try { resp = await fetch(url, { cache: 'no-store' }); } catch (e) {
    throw new Error(`cannot reach the dashboard server (${path}): ${e.message}`);
  }
  try { text = await resp.text(); } catch (e) { /* keep '' */ }
  if (!resp.ok) throw new Error(`${path}: HTTP ${resp.status}: ${text.trim().split('\n')[0] || resp.statusText}`);
  return text;
}

async function fetchJson(path, params) {
  const text = await fetchText(path, params);
  try { return JSON.parse(text); } catch (e) { throw new Error(`${path}: bad JSON (${e.message})`); }
}

/** The key of an item of a summary's array: its `key`, else its `id` (as the server's `item_key`). */
function itemKey(item) {
  const k = item && typeof item === 'object' ? (item.key ?? item.id) : undefined;
  return k === undefined || k === null ? null : typeof k === 'string' ? k : JSON.stringify(k);
}

/** Applies a delta pushed by the server (`summary::diff`) to `data` in place: fields replaced,
 *  array items removed and upserted by key (kept items stay where they were, new ones go last). */
function applyDelta(data, delta) {
  if (delta.replace !== undefined) return delta.replace;
  for (const [name, v] of Object.entries(delta.fields || {})) { if (v === null) delete data[name]; else data[name] = v; }
  for (const [name, change] of Object.entries(delta.arrays || {})) {
    const removed = new Set(change.remove || []);
    const items = (Array.isArray(data[name]) ? data[name] : []).filter((i) => !removed.has(itemKey(i)));
    const at = new Map(items.map((i, n) => [itemKey(i), n]));
    for (const item of change.upsert || []) {
      const k = itemKey(item);
      if (k !== null && at.has(k)) items[at.get(k)] = item; else { at.set(k, items.length); items.push(item); }
    }
    data[name] = items;
  }
  return data;
}

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const esc = (s) => String(s === undefined || s === null ? '' : s).replace(/[&<>"']/g, (c) => ESC[c]);

const fmtCount = (n) => (n === undefined || n === null ? '–' : Number(n).toLocaleString('en-US'));
function fmtBytes(b) {
  if (b === undefined || b === null) return '–';
  let v = Number(b), i = 0;
  for (; v >= 1024 && i < 4; i++) v /= 1024;
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 2 : 1)) + ' ' + ['B', 'KiB', 'MiB', 'GiB', 'TiB'][i];
}
function fmtNanos(ns) {
  if (ns === undefined || ns === null) return '–';
  const v = Number(ns);
  return v < 1e3 ? v.toFixed(0) + ' ns' : v < 1e6 ? (v / 1e3).toFixed(1) + ' µs'
    : v < 1e9 ? (v / 1e6).toFixed(2) + ' ms' : (v / 1e9).toFixed(3) + ' s';
}
const fmtMicros = (us) => fmtNanos(us * 1e3);
const fmtPct = (p) => (p === undefined || p === null ? '–' : Number(p).toFixed(1) + ' %');
const fmtSecs = (ns) => (Number(ns) / 1e9).toFixed(3) + ' s';
/** `a::b::C::method` → `method`. */
const shortName = (name) => String(name || '').split('::').pop() || String(name || '');
/** `a::b::Type actor-1` → `Type actor-1`. */
const stripPaths = (s) => String(s || '').replace(/(?:[A-Za-z_]\w*::)+/g, '');
function truncate(s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + '…' : s; }
function hashHue(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
  return (h >>> 0) % 360;
}
/** Labels as [[k, v]], from an object, [[k, v]], [{key, value}] or "k=v,k=v". */
function labelPairs(labels) {
  if (!labels) return [];
  if (typeof labels === 'string') return labels.split(',').filter(Boolean).map((p) => p.split('='));
  if (!Array.isArray(labels)) return typeof labels === 'object' ? Object.entries(labels) : [];
  return labels.map((l) => (Array.isArray(l) ? l : l && typeof l === 'object' ? [l.key, l.value] : [String(l), '']));
}
function labelsHtml(labels) {
  const pairs = labelPairs(labels).map(([k, v]) => `<span>${esc(k)}=${esc(v)}</span>`);
  return pairs.length ? `<div class="labels">${pairs.join('')}</div>` : '';
}
function svgEl(tag, attrs, text) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}
function errorHtml(e) { return `<div class="error">${esc(e && e.message ? e.message : e)}</div>`; }
function setPanelMsg(name, html) { $(name + '-msg').innerHTML = html || ''; }

// The tabs the server summarizes (`/api/summary`); while live, their data is pushed over the
// event stream: the summary once, then only deltas.
const SUMMARY_TABS = ['logical', 'physical', 'stack', 'gantt'];

// `at` (nanoseconds) is used when not live; `now` is the job's latest time.
const state = { job: null, filter: '', live: true, at: null, now: 0, version: null, tab: 'logical' };

/** The common parameters of a view request. */
function viewParams(view, format, extra) {
  const at = state.live || state.at === null ? null : Math.round(state.at);
  return Object.assign({ job: state.job, view, format, at, filter: state.filter || null }, extra || {});
}

// ===== Tab machinery: load a tab when what it shows changed =====
/** Per tab: its loader, the key it last loaded, and a minimum gap between live refreshes. */
const tabs = {};
function defineTab(name, load, opts) {
  tabs[name] = Object.assign({
    name, load, extraKey: () => '', clear: () => {}, onShow: () => {}, canLiveRefresh: () => true,
    // Summary tabs: the extra request parameters, the data shown now, and what shows new data.
    summaryExtra: () => ({}), current: () => null, receive: () => {},
    minGap: 1000, loadedKey: null, okBase: null, loadedAt: 0, busy: false, again: false, timer: 0,
  }, opts || {});
}
// What a tab shows: without the version (its base), and with it while live.
const baseKey = (tab) => JSON.stringify([state.job, state.filter, state.live ? 'live' : state.at, tab.extraKey()]);
const fullKey = (tab) => baseKey(tab) + (state.live ? '#' + state.version : '');

async function runTab(name, force) {
  const tab = tabs[name];
  if (!tab || state.job === null) return;
  // The event stream follows the tab shown even when its data need not reload.
  subscribe();
  const key = fullKey(tab), base = baseKey(tab);
  if (!force && key === tab.loadedKey) return;
  if (tab.busy) { tab.again = true; return; }
  const versionOnly = !force && base === tab.okBase && tab.loadedKey !== null;
  if (versionOnly) {
    if (!tab.canLiveRefresh()) return;
    const wait = tab.minGap - (Date.now() - tab.loadedAt);
    if (wait > 0) {
      if (!tab.timer) tab.timer = setTimeout(() => { tab.timer = 0; if (state.tab === name) runTab(name); }, wait);
      return;
    }
  }
  Object.assign(tab, { busy: true, loadedKey: key, loadedAt: Date.now() });
  try {
    await tab.load();
    tab.okBase = base;
    setPanelMsg(name, '');
  } catch (e) {
    if (base !== tab.okBase) { tab.clear(); tab.okBase = null; }
    setPanelMsg(name, errorHtml(e));
  } finally {
    tab.busy = false;
    if (tab.again) { tab.again = false; if (state.tab === name) runTab(name); }
  }
}
function refreshActive(force) { runTab(state.tab, force); }

function selectTab(name) {
  if (!TABS.includes(name)) name = 'logical';
  state.tab = name;
  for (const t of TABS) {
    $('tab-' + t).classList.toggle('active', t === name);
    $('panel-' + t).hidden = t !== name;
  }
  tabs[name].onShow();
  runTab(name);
}

// ===== Header: jobs, filter, time slider, counters, live events =====
let events = null, eventsRetry = 0;
// An open event stream stops headless Chrome's virtual time (`--virtual-time-budget`
// would never end), so there each stream is closed after its first event and
// reopened a second later: the same updates, one connection per second.
const HEADLESS = /HeadlessChrome/.test(navigator.userAgent);

function setBadge(kind, text) { $('conn-badge').className = 'badge ' + kind; $('conn-badge').textContent = text || kind; }
const setGlobalMsg = (html) => { $('global-msg').innerHTML = html || ''; };

function updateTimeUi() {
  const slider = $('time-slider');
  slider.max = String(state.now);
  slider.value = String(state.live || state.at === null ? state.now : Math.min(state.at, state.now));
  $('live-checkbox').checked = state.live;
  $('time-label').textContent = state.live ? `now ${fmtSecs(state.now)}` : `at ${fmtSecs(state.at || 0)} / ${fmtSecs(state.now)}`;
}

function onStats(d) {
  if (!d || typeof d !== 'object') return;
  if (d.error) { setGlobalMsg(errorHtml(d.error)); return; }
  setGlobalMsg('');
  if (typeof d.now_nanos === 'number') state.now = d.now_nanos;
  for (const [k, wrap] of [['applied', null], ['dropped', 'dropped-wrap'], ['lost', 'lost-wrap']]) {
    if (d[k] === undefined) continue;
    $('count-' + k).textContent = fmtCount(d[k]);
    if (wrap) $(wrap).classList.toggle('warn', Number(d[k]) > 0);   // records were lost: warn
  }
  const extra = ['ignored', 'unmatched', 'live_tasks'].filter((k) => d[k] !== undefined)
    .map((k) => `${k}: ${fmtCount(d[k])}`);
  if (extra.length) $('counters').title = 'Records. ' + extra.join(', ');
  updateTimeUi();
  if (d.version !== undefined && d.version !== state.version) {
    state.version = d.version;
    // Summary tabs get their deltas pushed; the flame graph is fetched again.
    if (state.live && !SUMMARY_TABS.includes(state.tab)) refreshActive(false);
  }
}

/** What the event stream should carry now: the counters, and while live the active summary tab. */
function subscriptionParams() {
  const p = { job: state.job };
  if (state.live && SUMMARY_TABS.includes(state.tab)) {
    Object.assign(p, { view: state.tab, filter: state.filter || null }, tabs[state.tab].summaryExtra());
  }
  return p;
}

/** Reopens the event stream when what it should carry changed. */
function subscribe() {
  if (state.job === null) return;
  if (!events || events.key !== JSON.stringify(subscriptionParams())) connectEvents(true);
}

/** Loads a summary tab: while live it arrives over the event stream, else it is fetched at the time. */
async function loadSummary(name) {
  if (state.live) return;
  const tab = tabs[name];
  tab.receive(await fetchJson('api/summary', viewParams(name, null, tab.summaryExtra())));
}

/** A message of the event stream: counters; a summary tab's full summary or its delta; an error. */
function onEvent(es, d) {
  if (d.stats) onStats(d.stats);
  const tab = es.view ? tabs[es.view] : null;
  if (d.error) {
    if (tab) setPanelMsg(tab.name, errorHtml(d.error)); else setGlobalMsg(errorHtml(d.error));
  }
  if (!tab || es.view !== state.tab || !state.live) return;
  if (d.full) { setPanelMsg(tab.name, ''); tab.receive(d.full); } else if (d.delta && tab.current()) {
    tab.receive(applyDelta(tab.current(), d.delta));
  }
}

function connectEvents(quiet) {
  if (events) { events.close(); events = null; }
  clearTimeout(eventsRetry);
  if (typeof EventSource === 'undefined') { setBadge('disconnected', 'no live events'); return; }
  if (!quiet) setBadge('connecting');
  const params = subscriptionParams();
  const es = new EventSource(apiUrl('api/events', params));
  Object.assign(es, { key: JSON.stringify(params), view: params.view || null });
  events = es;
  es.onopen = () => { if (events === es) setBadge('connected'); };
  es.onmessage = (ev) => {
    if (events !== es) return;
    setBadge('connected');
    let d;
    // (Kept as `events` while closed, so that `subscribe` sees what it carries.)
    if (HEADLESS) { es.close(); eventsRetry = setTimeout(() => { if (events === es) connectEvents(true); }, 1000); }
    try { d = JSON.parse(ev.data); } catch (e) { return; }
    onEvent(es, d);
  };
  es.onerror = () => {
    if (events !== es) return;
    setBadge('disconnected');
    // EventSource reconnects by itself unless the server refused it outright.
    if (es.readyState === EventSource.CLOSED) eventsRetry = setTimeout(connectEvents, 5000);
  };
}

async function loadStats() {
  try { onStats(await fetchJson('api/stats', { job: state.job })); } catch (e) { setGlobalMsg(errorHtml(e)); }
}

/** What the job selector shows for a job: its label (the driver program's name) and its id. */
function jobText(j) {
  const id = String(j.job), label = String(j.label || '').trim();
  return label && label !== id ? `${label} · ${id}` : id;
}

/** The selector's tooltip: the whole text of the job shown (a long program name is cut in the box). */
function showJobTitle() {
  const sel = $('job-select'), opt = sel.selectedOptions[0];
  sel.title = 'Job: ' + (opt ? opt.title : '');
}

/** Fills the job selector; the first time, shows `wanted` or the latest job. Later calls keep the job shown. */
async function loadJobs(wanted) {
  let jobs;
  try { jobs = await fetchJson('api/jobs'); } catch (e) {
    setGlobalMsg(errorHtml(e));
    if (state.job === null) setTimeout(() => loadJobs(wanted), 5000);
    return;
  }
  if (!Array.isArray(jobs)) jobs = [];
  const sel = $('job-select');
  sel.textContent = '';
  for (const j of jobs) {
    const opt = new Option(jobText(j) + (j.latest ? ' (latest)' : ''), String(j.job));
    opt.title = jobText(j);
    sel.appendChild(opt);
  }
  if (state.job !== null) {
    if (!jobs.some((j) => String(j.job) === state.job)) sel.appendChild(Object.assign(new Option(state.job, state.job), { title: state.job }));
    sel.value = state.job;
    showJobTitle();
    return;
  }
  if (!jobs.length) {
    setGlobalMsg('<span class="note">no job has recorded anything yet</span>');
    setTimeout(() => loadJobs(wanted), 3000);
    return;
  }
  const pick = jobs.find((j) => j.job === wanted) || jobs.find((j) => j.latest) || jobs[jobs.length - 1];
  sel.value = String(pick.job);
  showJobTitle();
  changeJob(String(pick.job));
}

function changeJob(job) {
  Object.assign(state, { job, version: null });
  Object.assign(logical, { fitted: false, selected: null });
  gantt.fitted = true;
  connectEvents();
  loadStats().then(() => refreshActive(true));
}

function setLive(live) {
  Object.assign(state, { live, at: live ? null : state.at ?? state.now });
  updateTimeUi();
  refreshActive(false);
}

function applyFilter() {
  const input = $('filter-input'), v = input.value.trim(), ok = v === '' || /^[^=]+=/.test(v);
  input.classList.toggle('invalid', !ok);
  if (!ok) { setGlobalMsg(errorHtml('the context filter must be key=value')); return; }
  setGlobalMsg('');
  if (v === state.filter) return;
  state.filter = v;
  logical.fitted = false;
  refreshActive(false);
}

/** `#tab` or `#tab?at=SECONDS&job=J&filter=k%3Dv`; also `metric=`, `fold=class` (flame), `labels=N` (logical),
 *  `arrows=bundled|hover|off` (Gantt). */
function parseHash() {
  const [name, query] = location.hash.replace(/^#/, '').split('?');
  return { name: name || 'logical', params: new URLSearchParams(query || '') };
}
function applyHashParams(params) {
  if (params.has('filter')) { state.filter = params.get('filter'); $('filter-input').value = state.filter; }
  if (params.has('at')) {
    const s = Number(params.get('at'));
    if (Number.isFinite(s) && s >= 0) { state.live = false; state.at = Math.round(s * 1e9); }
  }
  // A value a select does not offer is ignored (it would blank the select).
  const choose = (id, key) => {
    const v = params.get(key), sel = $(id);
    if (v !== null && [...sel.options].some((o) => o.value === v)) sel.value = v;
  };
  choose('flame-metric', 'metric');
  choose('flame-fold', 'fold');
  choose('logical-labels', 'labels');
  choose('gantt-flows', 'arrows');
}

function initHeader() {
  $('job-select').addEventListener('change', (e) => { showJobTitle(); changeJob(e.target.value); });
  $('filter-input').addEventListener('keydown', (e) => { if (e.key === 'Enter') applyFilter(); });
  let debounce = 0;
  const slider = $('time-slider');
  slider.addEventListener('input', () => {
    state.live = false;
    state.at = Math.round(Number(slider.value));
    updateTimeUi();
    clearTimeout(debounce);
    debounce = setTimeout(() => refreshActive(false), 300);
  });
  slider.addEventListener('change', () => { clearTimeout(debounce); refreshActive(false); });
  $('live-checkbox').addEventListener('change', (e) => setLive(e.target.checked));
  for (const t of TABS) $('tab-' + t).addEventListener('click', () => { location.hash = t; });
  window.addEventListener('hashchange', () => {
    const { name, params } = parseHash();
    applyHashParams(params);
    updateTimeUi();
    if (params.has('job') && params.get('job') !== state.job) {
      $('job-select').value = params.get('job');
      changeJob(params.get('job'));
    }
    selectTab(name);
  });
}

// ===== Tab 1: Logical — call graph of functions, actor classes and instances =====
// `expand`: the actor class shown instance by instance when the server collapses classes.
const logical = { data: null, nodes: new Map(), vb: null, content: null, fitted: false, selected: null, expand: null };
const NODE_H = 28, ROW_H = 50, COL_GAP = 170, BAND_GAP = 48;

// The bottleneck summary (`rayrs insight top`) comes with the logical summary: this many rows of each kind.
const BOTTLENECK_ROWS = 5;

/** Shows a logical summary: nodes (actor classes collapsed to one node each in large jobs), edges, and
 *  the bottlenecks above the graph. */
function receiveLogical(d) {
  logical.data = d;
  renderLogical();
  renderBottlenecks(d && d.bottlenecks);
}

/** `Class[actor-1.7].method` → `actor:actor-1.7` (the instance's node); a function's frame → `fn:NAME`. */
function frameKey(frame) {
  const m = /\[([^\]]+)\]\.[^.[\]]*$/.exec(String(frame));
  return m ? 'actor:' + m[1] : 'fn:' + frame;
}

/** The bottleneck panel: the frames with the most self time and the longest waits, the largest data
 *  edges and the deadlocks; what the graph draws links to its node. */
function renderBottlenecks(b) {
  const body = $('bottlenecks-body'), info = $('bottlenecks-info');
  if (!b) { body.innerHTML = ''; info.textContent = ''; return; }
  const link = (key, text) => (key && logical.nodes.has(key)
    ? `<button class="linklike" data-goto="${esc(key)}" title="${esc(text)}">${esc(stripPaths(text))}</button>`
    : `<span title="${esc(text)}">${esc(stripPaths(text))}</span>`);
  const table = (rows, cells) => (rows.length
    ? `<table>${rows.map((r) => `<tr>${cells(r)}</tr>`).join('')}</table>` : '<div class="note">none</div>');
  const times = (n, what) => `${fmtCount(n)} ${what}${Number(n) === 1 ? '' : 's'}`;
  const frames = (rows) => table(rows, (r) => `<td>${link(frameKey(r.frame), r.frame)}</td>`
    + `<td class="num">${esc(fmtNanos(r.nanos))}</td><td class="num">${esc(times(r.calls, 'call'))}</td>`);
  const data = (rows) => table(rows, (d) => `<td>${link(d.from_key, d.from)} → ${link(d.to_key, d.to)}</td>`
    + `<td class="num">${esc(fmtBytes(d.bytes))}</td><td class="num">${esc(times(d.gets, 'get'))}</td>`);
  const deadlocks = b.deadlocks || [];
  body.innerHTML = `<section data-kind="self"><h3>Most self time</h3>${frames(b.self_time || [])}</section>`
    + `<section data-kind="waits"><h3>Longest waits</h3>${frames(b.waits || [])}</section>`
    + `<section data-kind="data"><h3>Largest data edges</h3>${data(b.data || [])}</section>`
    + `<section data-kind="deadlocks"><h3>Deadlocks</h3>${deadlocks.length
      ? deadlocks.map((d) => `<div class="bn-deadlock">DEADLOCK ${esc(stripPaths(d))}</div>`).join('')
      : '<div class="note">none</div>'}</section>`;
  const top = (b.self_time || [])[0];
  info.textContent = [top ? `most self time: ${stripPaths(top.frame)} (${fmtNanos(top.nanos)})` : 'nothing finished yet',
    deadlocks.length ? `${deadlocks.length} deadlock${deadlocks.length === 1 ? '' : 's'}` : ''].filter(Boolean).join(' · ');
  info.classList.toggle('bn-deadlock', deadlocks.length > 0);
}

const nodeKey = (n) => String(n.key ?? n.id ?? n.name);
const nodeLabel = (n) => (n.kind === 'actor' ? n.actor_id || n.name : n.kind === 'function' ? shortName(n.name)
  : n.kind === 'class' ? `${fmtCount(n.instances)} instances` : n.name || nodeKey(n));

/** Columns by longest path from the roots (driver first) over call edges; cycles broken by DFS. */
function layerNodes(keys, edges) {
  const succ = new Map(keys.map((k) => [k, new Set()]));
  const hasPred = new Set();
  for (const e of edges) {
    if (e.from !== e.to && succ.has(e.from) && succ.has(e.to)) { succ.get(e.from).add(e.to); hasPred.add(e.to); }
  }
  const roots = [...keys].sort((a, b) => (a === 'driver' ? -1 : b === 'driver' ? 1 : 0)
    || (hasPred.has(a) - hasPred.has(b)) || a.localeCompare(b));
  const mark = new Map(), post = [], dag = new Map(keys.map((k) => [k, []]));   // mark: 1 on the DFS stack, 2 done
  for (const r of roots) {
    if (mark.has(r)) continue;
    const stack = [[r, [...succ.get(r)], 0]];
    mark.set(r, 1);
    while (stack.length) {
      const top = stack[stack.length - 1];
      if (top[2] < top[1].length) {
        const v = top[1][top[2]++];
        const m = mark.get(v);
        if (m === 1) continue;               // back edge: breaks a cycle
        dag.get(top[0]).push(v);
        if (!m) { mark.set(v, 1); stack.push([v, [...succ.get(v)], 0]); }
      } else { mark.set(top[0], 2); post.push(top[0]); stack.pop(); }
    }
  }
  const depth = new Map(keys.map((k) => [k, 0]));
  for (const u of post.reverse()) for (const v of dag.get(u)) depth.set(v, Math.max(depth.get(v), depth.get(u) + 1));
  return depth;
}

function layoutLogical(nodes, callEdges) {
  const keys = nodes.map(nodeKey);
  const depth = layerNodes(keys, callEdges);
  const preds = new Map(keys.map((k) => [k, []]));
  for (const e of callEdges) if (preds.has(e.to) && e.from !== e.to) preds.get(e.to).push(e.from);
  const groupOf = (n) => (n.kind === 'actor' || n.kind === 'class' ? String(n.class || '?') : '');
  const groups = [...new Set(nodes.map(groupOf))].sort();
  const ncols = Math.max(0, ...depth.values()) + 1;
  // cells[group][col] = nodes
  const cells = new Map(groups.map((g) => [g, Array.from({ length: ncols }, () => [])]));
  for (const n of nodes) cells.get(groupOf(n))[depth.get(nodeKey(n))].push(n);
  const width = new Map(nodes.map((n) => [nodeKey(n), Math.min(240, Math.max(70, truncate(nodeLabel(n), 32).length * 7 + 22))]));
  const colW = Math.max(...width.values(), 70) + COL_GAP;
  const pos = new Map(), boxes = [];
  let top = 0;
  for (const g of groups) {
    const cols = cells.get(g);
    const rows = Math.max(...cols.map((c) => c.length));
    const bandTop = top + (g ? 30 : 0);
    cols.forEach((col, ci) => {
      const bary = (n) => {
        const ys = preds.get(nodeKey(n)).map((p) => pos.get(p)).filter(Boolean).map((p) => p.y);
        return ys.length ? ys.reduce((a, b) => a + b, 0) / ys.length : Infinity;
      };
      col.sort((a, b) => (bary(a) - bary(b)) || nodeLabel(a).localeCompare(nodeLabel(b), 'en', { numeric: true }));
      const off = (rows - col.length) * ROW_H / 2;
      col.forEach((n, i) => pos.set(nodeKey(n), { x: ci * colW, y: bandTop + off + i * ROW_H, w: width.get(nodeKey(n)), h: NODE_H }));
    });
    if (g) {
      const members = cols.flat().map((n) => pos.get(nodeKey(n)));
      const x0 = Math.min(...members.map((p) => p.x)) - 14;
      const x1 = Math.max(...members.map((p) => p.x + p.w)) + 14;
      boxes.push({ cls: g, x: x0, y: top, w: x1 - x0, h: rows * ROW_H + 30 });
    }
    top = bandTop + rows * ROW_H + BAND_GAP;
  }
  return { pos, boxes };
}

/** A cubic from `a` to `b`, bent by `bend`, with its label's place at parameter `t`. */
function edgeGeometry(a, b, bend, t) {
  if (a === b) {
    const x = a.x + a.w, y = a.y;
    return { d: `M${x - 12},${y} C${x + 30},${y - 40 - bend} ${x + 40},${y + 10} ${x},${y + a.h / 2}`, lx: x + 26, ly: y - 18 - bend / 2 };
  }
  // Forward: right side → left side; backward: left side → right side; same column: a bulge to the right.
  const dir = b.x > a.x + a.w ? 1 : b.x + b.w < a.x ? -1 : 0;
  const x1 = dir < 0 ? a.x : a.x + a.w, y1 = a.y + a.h / 2, x2 = dir > 0 ? b.x - 2 : b.x + b.w + 2, y2 = b.y + b.h / 2;
  const dx = dir ? Math.max(60, Math.abs(x2 - x1) * 0.45) : 50 + Math.abs(y2 - y1) * 0.2;
  const c1x = x1 + (dir || 1) * dx, c1y = y1 + bend, c2x = x2 - (dir || -1) * dx, c2y = y2 + bend;
  const k = [(1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t * t, t ** 3];
  const lx = k[0] * x1 + k[1] * c1x + k[2] * c2x + k[3] * x2, ly = k[0] * y1 + k[1] * c1y + k[2] * c2y + k[3] * y2;
  return { d: `M${x1},${y1} C${c1x},${c1y} ${c2x},${c2y} ${x2},${y2}`, lx, ly };
}

function renderLogical() {
  const svg = $('logical-svg'), d = logical.data || {};
  const showData = $('logical-show-data').checked, showUnknown = $('logical-show-unknown').checked;
  const nodes = (d.nodes || []).filter((n) => showUnknown || n.kind !== 'unknown');
  const keys = new Set(nodes.map(nodeKey));
  const calls = (d.call_edges || []).filter((e) => keys.has(e.from) && keys.has(e.to));
  const datas = showData ? (d.data_edges || []).filter((e) => keys.has(e.from) && keys.has(e.to)) : [];
  logical.nodes = new Map(nodes.map((n) => [nodeKey(n), n]));
  svg.textContent = '';
  const sum = d.summary || {}, om = sum.omitted || {};
  const left = [['call edges', om.call_edges], ['data edges', om.data_edges], ['nodes', om.nodes]].filter(([, n]) => n > 0)
    .map(([what, n]) => `${fmtCount(n)} ${what}`);
  $('logical-info').textContent = `${nodes.length} nodes, ${calls.length} call edges, ${datas.length} data edges`
    + edgeLabelNote(calls.length + datas.length, Number($('logical-labels').value) || 0)
    + (sum.collapsed_classes ? ` · ${fmtCount(sum.actors)} actors: classes drawn as one node each (click one to expand it)` : '')
    + (logical.expand ? ` · expanded: ${shortName(logical.expand)}` : '')
    + (left.length ? ` · left out (the busiest kept): ${left.join(', ')}` : '');
  if (!nodes.length) {
    renderWidthLegend(1, false);
    svg.appendChild(svgEl('text', { x: 20, y: 30, class: 'note' }, 'Nothing recorded for this job and time.'));
    logical.content = { x: 0, y: 0, w: 400, h: 100 };
    if (!logical.fitted) fitLogical();
    return;
  }
  const { pos, boxes } = layoutLogical(nodes, calls);
  const defs = svgEl('defs');
  for (const [id, color] of [['arr-call', '#46536b'], ['arr-data', '#8e44ad']]) {
    const m = svgEl('marker', { id, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 9, markerHeight: 9, markerUnits: 'userSpaceOnUse', orient: 'auto' });
    m.appendChild(svgEl('path', { d: 'M0,0 L10,5 L0,10 z', fill: color }));
    defs.appendChild(m);
  }
  svg.appendChild(defs);
  const [layerCls, layerEdges, layerNodesG] = ['classes', 'edges', 'nodes'].map((n) => svgEl('g', { class: 'layer-' + n }));
  svg.append(layerCls, layerEdges, layerNodesG);

  for (const b of boxes) {
    const g = svgEl('g', { class: 'cls', 'data-class': b.cls });
    g.appendChild(svgEl('rect', { x: b.x, y: b.y, width: b.w, height: b.h, rx: 12 }));
    g.appendChild(svgEl('text', { x: b.x + 10, y: b.y + 19 }, `${shortName(b.cls)} (class)`));
    g.appendChild(svgEl('title', {}, b.cls));
    layerCls.appendChild(g);
  }

  // Stroke widths grow with an edge's count, up to the busiest of its kind (the legend shows the calls'
  // scale); data edges stay thinner, under the calls they go with.
  const maxOf = (list) => Math.max(1, ...list.map((e) => Number(e.count) || 0));
  const maxCount = { call: maxOf(calls), data: maxOf(datas) }, widest = { call: 6, data: 3 };
  renderWidthLegend(maxCount.call, calls.length > 0);
  // Parallel edges between the same pair bend apart; data edges bend the other way. Labels are
  // placed afterwards, for the busiest edges only.
  const drawn = [];
  const drawEdges = (list, kind) => {
    const groups = new Map();
    for (const e of list) { const k = e.from + '\u0000' + e.to; groups.set(k, (groups.get(k) || []).concat([e])); }
    for (const group of groups.values()) {
      group.forEach((e, i) => {
        const bend = kind === 'call' ? (i - (group.length - 1) / 2) * 22 : 30 + i * 16;
        const geo = edgeGeometry(pos.get(e.from), pos.get(e.to), bend, kind === 'call' ? 0.5 : 0.3);
        const count = Number(e.count) || 0;
        const vague = logical.nodes.get(e.from).kind === 'unknown' ? ' from-unknown' : '';
        const label = kind === 'call' ? `${shortName(e.name)} ×${fmtCount(count)}` : `${fmtBytes(e.total_bytes)} ×${fmtCount(count)}`;
        const g = svgEl('g', { class: `edge ${kind}${vague}`, 'data-count': count, 'data-from': e.from, 'data-to': e.to,
          'data-label': label, 'data-lx': geo.lx.toFixed(1), 'data-ly': (geo.ly - 3).toFixed(1) });
        g.appendChild(svgEl('path', { class: 'hit', d: geo.d }));
        g.appendChild(svgEl('path', { d: geo.d, 'stroke-width': edgeWidth(count, maxCount[kind], widest[kind]).toFixed(2), 'marker-end': `url(#arr-${kind})` }));
        g.appendChild(svgEl('title', {}, kind === 'call'
          ? `${e.name} (${e.kind || 'call'}) ×${count}: total ${fmtNanos(e.total_nanos)}, mean ${fmtNanos(e.mean_nanos)}, max ${fmtNanos(e.max_nanos)}`
          : `data ×${count}, ${fmtBytes(e.total_bytes)}: same node ${e.same_node ?? '?'}, cross node ${e.cross_node ?? '?'}, unknown ${e.unknown_locality ?? '?'}`));
        layerEdges.appendChild(g);
        drawn.push({ g, count, kind });
      });
    }
  };
  drawEdges(calls, 'call');
  drawEdges(datas, 'data');
  placeEdgeLabels(drawn, pos);

  for (const n of nodes) {
    const k = nodeKey(n), p = pos.get(k);
    const g = svgEl('g', { class: `node kind-${n.kind || 'unknown'}`, 'data-key': k, transform: `translate(${p.x},${p.y})` });
    g.appendChild(svgEl('rect', { width: p.w, height: p.h, rx: n.kind === 'function' ? 14 : 5 }));
    g.appendChild(svgEl('text', { x: p.w / 2, y: p.h / 2 + 4, 'text-anchor': 'middle' }, truncate(nodeLabel(n), 32)));
    g.appendChild(svgEl('title', {}, n.name || k));
    layerNodesG.appendChild(g);
  }
  const xs = [...pos.values()].flatMap((p) => [p.x, p.x + p.w]).concat(boxes.flatMap((b) => [b.x, b.x + b.w]));
  const ys = [...pos.values()].flatMap((p) => [p.y, p.y + p.h]).concat(boxes.flatMap((b) => [b.y, b.y + b.h]));
  const m = 60;
  logical.content = { x: Math.min(...xs) - m, y: Math.min(...ys) - m, w: Math.max(...xs) - Math.min(...xs) + 2 * m, h: Math.max(...ys) - Math.min(...ys) + 2 * m };
  if (!logical.fitted || !logical.vb) fitLogical(); else setViewBox(logical.vb);
  applyLogicalHighlight();
  if (logical.selected && logical.nodes.has(logical.selected)) showLogicalSide(logical.selected);
  else closeLogicalSide();
}

/** What the info line says of the labels when not every edge has one. */
function edgeLabelNote(edges, want) {
  if (edges <= want) return '';
  return want ? ' · labels on the busiest edges (hover an edge, or select a node, for the others)' : ' · hover an edge for its label';
}

/** An edge's stroke width: 1 for one call, `widest` (6) for the busiest edge of its kind, on a log scale between. */
const edgeWidth = (count, max, widest = 6) => 1 + (max > 1 ? (widest - 1) * Math.log(Math.max(1, count)) / Math.log(max) : 0);

/** The stroke-width legend: a few counts from 1 to the busiest call edge's, each as wide as its edges. */
function renderWidthLegend(max, any) {
  const counts = any ? [...new Set([1, Math.round(Math.sqrt(max)), max])] : [];
  $('logical-widths').innerHTML = counts.map((c) => `<span class="lg-w" style="border-top-width:${edgeWidth(c, max).toFixed(1)}px"></span>`
    + `×${esc(fmtCount(c))}`).join('');
}

// Edge labels: the box a label takes, from its text's length (10px text).
const LABEL_CHAR_W = 5.8, LABEL_H = 12;
function labelBox(g) {
  const w = g.getAttribute('data-label').length * LABEL_CHAR_W + 4;
  const x = Number(g.getAttribute('data-lx')), y = Number(g.getAttribute('data-ly'));
  return { x: x - w / 2, y: y - LABEL_H + 2, w, h: LABEL_H };
}
const boxesOverlap = (a, b) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;

/** Labels the busiest edges (as many as the labels selector says; call edges before data edges, whose
 *  counts are of gets), skipping any whose label would cover another label or a node: with a dozen
 *  actors, labels on every edge overprint each other. */
function placeEdgeLabels(drawn, pos) {
  const want = Number($('logical-labels').value) || 0;
  const taken = [...pos.values()].map((p) => ({ x: p.x, y: p.y, w: p.w, h: p.h }));
  const order = [...drawn].sort((a, b) => (a.kind === b.kind ? 0 : a.kind === 'call' ? -1 : 1) || b.count - a.count);
  let placed = 0;
  for (const { g } of order) {
    if (placed >= want) break;
    if (g.classList.contains('from-unknown')) continue;
    const box = labelBox(g);
    if (taken.some((t) => boxesOverlap(t, box))) continue;
    taken.push(box);
    addEdgeLabel(g, 'edge-label');
    placed++;
  }
  $('logical-svg').dataset.labels = String(placed);   // for tests and tools
}

/** Writes `g`'s label on it (class `cls`), unless it has one. */
function addEdgeLabel(g, cls) {
  if (g.querySelector('text')) return;
  g.appendChild(svgEl('text', { class: cls, x: g.getAttribute('data-lx'), y: g.getAttribute('data-ly'), 'text-anchor': 'middle' },
    g.getAttribute('data-label')));
}

function setViewBox(vb) { logical.vb = vb; $('logical-svg').setAttribute('viewBox', `${vb.x} ${vb.y} ${vb.w} ${vb.h}`); }
function fitLogical() { if (logical.content) { logical.fitted = true; setViewBox(Object.assign({}, logical.content)); } }

function applyLogicalHighlight() {
  const svg = $('logical-svg');
  const q = $('logical-search').value.trim().toLowerCase();
  const sel = logical.selected;
  const matched = new Set();
  for (const g of svg.querySelectorAll('.node')) {
    const k = g.getAttribute('data-key');
    const n = logical.nodes.get(k) || {};
    const hit = q !== '' && (k.toLowerCase().includes(q) || String(n.name || '').toLowerCase().includes(q));
    if (hit) matched.add(k);
    g.classList.toggle('match', hit);
    g.classList.toggle('selected', k === sel);
  }
  const neighbours = new Set(sel ? [sel] : []);
  for (const g of svg.querySelectorAll('.edge')) {
    const f = g.getAttribute('data-from'), t = g.getAttribute('data-to');
    const touches = sel && (f === sel || t === sel);
    if (touches) { neighbours.add(f); neighbours.add(t); }
    g.classList.toggle('hot', Boolean(touches));
    // The selected node's edges say their counts, whether or not they are among the busiest.
    for (const label of g.querySelectorAll('text.hot-label')) if (!touches) label.remove();
    if (touches) addEdgeLabel(g, 'edge-label hot-label');
    g.classList.toggle('dim', Boolean((q && !matched.has(f) && !matched.has(t)) || (sel && !touches)));
  }
  for (const g of svg.querySelectorAll('.node')) {
    const k = g.getAttribute('data-key');
    g.classList.toggle('dim', Boolean((q && !matched.has(k) && k !== sel) || (sel && !neighbours.has(k))));
  }
  if (q) $('logical-info').dataset.matches = String(matched.size);
}

function edgeTable(rows, cols) {
  if (!rows.length) return '<div class="note">none</div>';
  return `<table><tr>${cols.map((c) => `<th class="${c.num ? 'num' : ''}">${esc(c.h)}</th>`).join('')}</tr>`
    + rows.map((r) => `<tr>${cols.map((c) => `<td class="${c.num ? 'num' : ''}">${c.f(r)}</td>`).join('')}</tr>`).join('')
    + '</table>';
}
function nodeLink(key) {
  const n = logical.nodes.get(key);
  return `<button class="linklike" data-goto="${esc(key)}" title="${esc(n ? n.name : key)}">${esc(n ? nodeLabel(n) : key)}</button>`;
}

function showLogicalSide(key) {
  const n = logical.nodes.get(key);
  const side = $('logical-side');
  if (!n) { closeLogicalSide(); return; }
  const d = logical.data || {};
  const calls = d.call_edges || [], datas = d.data_edges || [];
  const callCols = (end) => [
    { h: end === 'from' ? 'caller' : 'callee', f: (e) => nodeLink(e[end]) },
    { h: 'call', f: (e) => `<span title="${esc(e.name)}">${esc(shortName(e.name))}</span>` },
    { h: 'count', num: true, f: (e) => fmtCount(e.count) },
    { h: 'mean', num: true, f: (e) => fmtNanos(e.mean_nanos) },
    { h: 'total', num: true, f: (e) => fmtNanos(e.total_nanos) },
  ];
  const dataCols = (end) => [
    { h: end === 'from' ? 'from' : 'to', f: (e) => nodeLink(e[end]) },
    { h: 'gets', num: true, f: (e) => fmtCount(e.count) },
    { h: 'bytes', num: true, f: (e) => fmtBytes(e.total_bytes) },
    { h: 'same/cross', num: true, f: (e) => `${fmtCount(e.same_node)}/${fmtCount(e.cross_node)}` },
  ];
  const consumers = (list) => {
    const all = list.flatMap((e) => e.consumers || []);
    if (!all.length) return '';
    const more = list.some((e) => e.consumers_truncated) ? ' …' : '';
    return `<div class="mono">consumers: ${esc(all.slice(0, 40).join(', '))}${all.length > 40 ? ' …' : more}</div>`;
  };
  const dataIn = datas.filter((e) => e.to === key), dataOut = datas.filter((e) => e.from === key);
  const rows = [['kind', n.kind], ['class', n.class], ['actor', n.actor_id], ['instances', n.instances], ['key', key],
    ['puts', n.puts !== undefined ? `${fmtCount(n.puts)} (${fmtBytes(n.put_bytes)})` : null]]
    .filter(([, v]) => v !== null && v !== undefined && v !== '');
  side.innerHTML = `<button class="close" type="button" data-close="1" title="Close">✕</button>
    <h2>${esc(n.name)}</h2>
    ${n.kind === 'class' ? `<button type="button" data-expand="${esc(n.class)}">Show its busiest instances</button>` : ''}
    ${n.kind === 'actor' && logical.expand === n.class ? '<button type="button" data-expand="">Collapse the class again</button>' : ''}
    <table>${rows.map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(v)}</td></tr>`).join('')}</table>
    ${n.labels ? `<h3>Context labels</h3>${labelsHtml(n.labels) || '<div class="note">none</div>'}` : ''}
    <h3>Callers</h3>${edgeTable(calls.filter((e) => e.to === key), callCols('from'))}
    <h3>Callees</h3>${edgeTable(calls.filter((e) => e.from === key), callCols('to'))}
    <h3>Data in</h3>${edgeTable(dataIn, dataCols('from'))}${consumers(dataIn)}
    <h3>Data out</h3>${edgeTable(dataOut, dataCols('to'))}${consumers(dataOut)}`;
  side.hidden = false;
}
function closeLogicalSide() { $('logical-side').hidden = true; }

function selectLogicalNode(key) { logical.selected = key; applyLogicalHighlight(); if (key) showLogicalSide(key); else closeLogicalSide(); }

function initLogical() {
  const svg = $('logical-svg');
  let drag = null;
  const userScale = () => { const ctm = svg.getScreenCTM(); return ctm && ctm.a ? 1 / ctm.a : 1; };
  svg.addEventListener('pointerdown', (e) => {
    if (e.button !== 0 || !logical.vb) return;
    drag = { x: e.clientX, y: e.clientY, vb: Object.assign({}, logical.vb), moved: false, target: e.target, id: e.pointerId };
  });
  svg.addEventListener('pointermove', (e) => {
    if (!drag) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (!drag.moved && Math.hypot(dx, dy) < 4) return;
    if (!drag.moved) { drag.moved = true; svg.classList.add('dragging'); try { svg.setPointerCapture(drag.id); } catch (err) { /* ignore */ } }
    const s = userScale();
    setViewBox({ x: drag.vb.x - dx * s, y: drag.vb.y - dy * s, w: drag.vb.w, h: drag.vb.h });
  });
  const end = () => {     // a click (no drag) selects the node under it, or none
    const d = drag;
    drag = null;
    svg.classList.remove('dragging');
    if (!d || d.moved) return;
    const node = d.target && d.target.closest ? d.target.closest('.node') : null;
    selectLogicalNode(node ? node.getAttribute('data-key') : null);
  };
  svg.addEventListener('pointerup', end);
  svg.addEventListener('pointercancel', () => { drag = null; svg.classList.remove('dragging'); });
  svg.addEventListener('wheel', (e) => {
    const ctm = svg.getScreenCTM();
    if (!logical.vb || !ctm) return;
    e.preventDefault();
    const p = new DOMPoint(e.clientX, e.clientY).matrixTransform(ctm.inverse());
    const f = Math.exp(Math.max(-1, Math.min(1, e.deltaY * 0.0015)));
    const vb = logical.vb;
    setViewBox({ x: p.x - (p.x - vb.x) * f, y: p.y - (p.y - vb.y) * f, w: vb.w * f, h: vb.h * f });
  }, { passive: false });
  // Hovering an edge shows its label while the pointer is on it.
  svg.addEventListener('pointerover', (e) => {
    const g = e.target.closest && e.target.closest('.edge');
    if (g) addEdgeLabel(g, 'edge-label transient');
  });
  svg.addEventListener('pointerout', (e) => {
    const g = e.target.closest && e.target.closest('.edge');
    if (g && !(e.relatedTarget && g.contains(e.relatedTarget))) for (const label of g.querySelectorAll('text.transient')) label.remove();
  });
  $('logical-labels').addEventListener('change', () => { if (logical.data) renderLogical(); });
  $('bottlenecks-body').addEventListener('click', (e) => {
    const go = e.target.closest('[data-goto]');
    if (go) selectLogicalNode(go.getAttribute('data-goto'));
  });
  $('logical-search').addEventListener('input', applyLogicalHighlight);
  $('logical-fit').addEventListener('click', fitLogical);
  $('logical-show-data').addEventListener('change', () => { if (logical.data) renderLogical(); });
  $('logical-show-unknown').addEventListener('change', () => { if (logical.data) { logical.fitted = false; renderLogical(); } });
  $('logical-side').addEventListener('click', (e) => {
    const expand = e.target.closest('[data-expand]');
    if (expand) {
      Object.assign(logical, { expand: expand.getAttribute('data-expand') || null, selected: null, fitted: false });
      closeLogicalSide();
      refreshActive(false);
      return;
    }
    const go = e.target.closest('[data-goto]');
    if (go || e.target.closest('[data-close]')) selectLogicalNode(go ? go.getAttribute('data-goto') : null);
  });
}

defineTab('logical', () => loadSummary('logical'), {
  extraKey: () => logical.expand || '',
  summaryExtra: () => ({ expand: logical.expand, top: BOTTLENECK_ROWS }),
  current: () => logical.data,
  receive: receiveLogical,
  clear: () => {
    logical.data = null; $('logical-svg').textContent = ''; closeLogicalSide(); $('logical-info').textContent = '';
    renderBottlenecks(null);
  } });

// ===== Tab 2: Physical — nodes → workers → actors and running tasks =====
const phys = { data: null };



/** A worker's context labels, from wherever the view puts them. */
function workerLabels(w) {
  const out = {};
  const add = (l) => { for (const [k, v] of labelPairs(l)) out[k] = v; };
  add(w.labels); add(w.context);
  for (const a of w.actors || []) { add(a.labels); add(a.context); }
  for (const t of w.running || []) { add(t.labels); add(t.context); }
  return out;
}
const latestSample = (w) => (w.samples && w.samples.length ? w.samples[w.samples.length - 1] : {});
const workerCpu = (w) => w.cpu_percent ?? latestSample(w).cpu_percent ?? null;
const workerRss = (w) => w.rss_bytes ?? latestSample(w).rss_bytes ?? null;
/** 0 → green, 1 → red. */
const heat = (f) => { const x = Math.max(0, Math.min(1, f)); return `hsl(${Math.round(130 - 130 * x)}, 70%, ${Math.round(90 - 18 * x)}%)`; };

function sparkline(samples) {
  const pts = (samples || []).filter((s) => typeof s.cpu_percent === 'number');
  if (pts.length < 2) return '';
  const t0 = pts[0].t_ms, t1 = pts[pts.length - 1].t_ms || t0 + 1;
  const max = Math.max(100, ...pts.map((p) => p.cpu_percent));
  const step = Math.max(1, Math.floor(pts.length / 200));
  const coords = pts.filter((p, i) => i % step === 0)
    .map((p) => `${((p.t_ms - t0) / (t1 - t0 || 1) * 200).toFixed(1)},${(25 - p.cpu_percent / max * 24).toFixed(1)}`);
  return `<svg class="spark" viewBox="0 0 200 26" preserveAspectRatio="none"><title>CPU % over time (max ${esc(fmtPct(max))})</title>`
    + `<polyline points="${coords.join(' ')}" fill="none" stroke="#2f6fde" stroke-width="1.2" vector-effect="non-scaling-stroke"/></svg>`;
}

function renderPhysical() {
  const body = $('phys-body'), nodes = (phys.data && phys.data.nodes) || [];
  const mode = $('phys-color').value, ctxKey = $('phys-ctx-key').value.trim();
  $('phys-ctx-key').hidden = mode !== 'ctx';
  const workers = nodes.flatMap((n) => n.workers || []);
  const keys = new Set(workers.flatMap((w) => Object.keys(workerLabels(w))));
  $('phys-ctx-keys').innerHTML = [...keys].sort().map((k) => `<option value="${esc(k)}">`).join('');
  const maxRss = Math.max(1, ...workers.map((w) => workerRss(w) || 0));
  const maxCpu = Math.max(100, ...workers.map((w) => workerCpu(w) || 0));
  const ctxValues = new Map();
  const colour = (w) => {
    if (mode === 'ctx') {     // a context value hashed to a hue
      const v = ctxKey ? workerLabels(w)[ctxKey] : undefined;
      if (v === undefined) return '#fff';
      ctxValues.set(String(v), `hsl(${hashHue(String(v))}, 65%, 84%)`);
      return ctxValues.get(String(v));
    }
    const v = mode === 'rss' ? workerRss(w) : workerCpu(w);
    return v === null ? '#fff' : heat(v / (mode === 'rss' ? maxRss : maxCpu));
  };
  if (!nodes.length) { body.innerHTML = '<div class="note">No node has reported yet.</div>'; $('phys-legend').innerHTML = ''; return; }
  body.innerHTML = nodes.map((n) => {
    const t = n.totals || {};
    const parts = [];
    const add = (label, value) => { if (value !== null && value !== undefined) parts.push(`${esc(label)} <b>${esc(value)}</b>`); };
    add('CPU', t.cpu_percent != null ? fmtPct(t.cpu_percent) : null);
    add('RSS', t.rss_bytes != null ? fmtBytes(t.rss_bytes) : null);
    add('CPU used', t.cpu_total != null ? `${t.cpu_used ?? 0}/${t.cpu_total}` : null);
    add('memory', t.memory_total != null ? `${fmtBytes(t.memory_used)}/${fmtBytes(t.memory_total)}` : null);
    add('GPU', t.gpu_total != null ? `${t.gpu_used ?? 0}/${t.gpu_total}` : null);
    add('GPUs', t.gpu_count);
    add('GPU util', t.gpu_util_percent != null ? fmtPct(t.gpu_util_percent) : null);
    add('GPU mem', t.gpu_mem_total_bytes != null ? `${fmtBytes(t.gpu_mem_used_bytes)}/${fmtBytes(t.gpu_mem_total_bytes)}` : null);
    add('processes', t.processes);
    add('running tasks', n.running_tasks);
    const res = Object.entries(n.resources || {}).map(([k, v]) => `${esc(k)}: ${esc(v)}`).join(', ');
    const bundles = (n.bundles || []).map((b) => `<span class="phys-bundle" title="placement group bundle">`
      + `PG ${esc(b.group_id)} #${esc(typeof b.bundle === 'object' ? JSON.stringify(b.bundle) : b.bundle)}`
      + `${b.strategy ? ' · ' + esc(b.strategy) : ''}</span>`).join('');
    const ws = (n.workers || []).map((w) => {
      const labels = workerLabels(w);
      const listed = (w.actors || []).length, total = w.actors_total ?? listed;
      const classes = Object.entries(w.actor_classes || {}).map(([c, k]) => `${shortName(c)} ×${fmtCount(k)}`).join(', ');
      // Busiest first (the summary sorts them): CPU time of its calls, and running time.
      const usage = (a) => (a.runs ? ` · ${a.cpu_ms != null ? 'CPU ' + fmtNanos(a.cpu_ms * 1e6) + ' / ' : ''}`
        + `running ${fmtNanos((a.running_ms || 0) * 1e6)} · ${fmtCount(a.runs)} runs` : '');
      const actors = (w.actors || []).map((a) => `<span class="phys-actor" data-cpu-ms="${esc(a.cpu_ms ?? '')}" title="${esc(a.class)} ${esc(a.actor_id)}${esc(usage(a))}">`
        + `${esc(shortName(a.class))} ${esc(a.actor_id)}${a.cpu_ms != null ? ` <b>${esc(fmtNanos(a.cpu_ms * 1e6))}</b>` : ''}</span>`).join('')
        + (total > listed ? `<span class="note more">+${fmtCount(total - listed)} more actors (${esc(classes)})</span>` : '');
      const moreRunning = (w.running_total ?? 0) - (w.running || []).length;
      const running = (w.running || []).map((r) => `<span class="phys-task" title="${esc(r.task_id)} ${esc(r.name)}">`
        + `${esc(truncate(shortName(r.name), 40))}</span>`).join('')
        + (moreRunning > 0 ? `<span class="note more">+${fmtCount(moreRunning)} more running</span>` : '');
      return `<div class="phys-worker" data-worker="${esc(w.worker_id)}" style="background:${colour(w)}">
        <h3><span>${esc(w.worker_id)}</span><span class="mono">${w.pid != null ? 'pid ' + esc(w.pid) : ''}</span></h3>
        <div class="wstats">CPU ${esc(fmtPct(workerCpu(w)))} · RSS ${esc(fmtBytes(workerRss(w)))}${w.cpu_used != null ? ' · CPU used ' + esc(w.cpu_used) : ''}</div>
        ${sparkline(w.samples)}${labelsHtml(labels)}
        <div>${actors}</div><div>${running}</div></div>`;
    }).join('');
    // What the head said of it: dead (with why), or registered and idle.
    const state = n.alive === false ? `<span class="phys-dead" title="${esc(n.death_cause || '')}">dead${n.death_cause ? ': ' + esc(truncate(n.death_cause, 60)) : ''}</span>`
      : n.alive === true && !(n.workers || []).length ? '<span class="note">idle</span>' : '';
    return `<div class="phys-node${n.alive === false ? ' dead' : ''}" data-node="${esc(n.node_id)}" data-alive="${esc(n.alive ?? '')}">
      <h2>${esc(n.node_id)}${n.address ? ` <span class="mono note">${esc(n.address)}</span>` : ''} ${state}</h2>
      <div class="phys-totals">${parts.join(' · ')}${res ? ` · resources <b>${res}</b>` : ''}</div>
      ${bundles ? `<div class="phys-bundles">placement groups: ${bundles}</div>` : ''}
      <div class="phys-workers">${ws || '<span class="note">no workers</span>'}${(n.workers_total ?? 0) > (n.workers || []).length
        ? `<span class="note more">+${fmtCount(n.workers_total - n.workers.length)} quieter workers not listed</span>` : ''}</div></div>`;
  }).join('');
  const max = mode === 'rss' ? fmtBytes(maxRss) : fmtPct(maxCpu);
  $('phys-legend').innerHTML = mode !== 'ctx'
    ? [0, 0.5, 1].map((f) => `<span class="phys-swatch" style="background:${heat(f)}"></span>${f === 0 ? '0' : f === 1 ? esc(max) : ''}`).join('')
    : !ctxKey ? 'type a context key' : !ctxValues.size ? `no worker has ${esc(ctxKey)}`
      : [...ctxValues].map(([v, c]) => `<span class="phys-swatch" style="background:${c}"></span>${esc(ctxKey)}=${esc(v)}`).join('');
}

function initPhysical() {
  $('phys-color').addEventListener('change', () => { renderPhysical(); if ($('phys-color').value === 'ctx') $('phys-ctx-key').focus(); });
  $('phys-ctx-key').addEventListener('input', renderPhysical);
}

defineTab('physical', () => loadSummary('physical'), {
  current: () => phys.data,
  receive: (d) => { phys.data = d; renderPhysical(); },
  clear: () => { phys.data = null; $('phys-body').innerHTML = ''; },
});

// ===== Tab 3: Stack — each running/blocked task, what it waits on, deadlocks =====
const stack = { data: null };



const taskRef = (r) => (r ? `${esc(r.name)} <span class="mono">(${esc(r.task_id)})</span>` : '?');

function renderStack() {
  const body = $('stack-body'), d = stack.data || {};
  const tasks = d.tasks || [], deadlocks = d.deadlocks || [];
  const byId = new Map(tasks.map((t) => [t.task_id, t]));
  const inCycle = new Set(deadlocks.flatMap((c) => (c.cycle || []).map((r) => r.task_id)));
  // The server's order (deadlocked, then blocked, then oldest), kept after deltas appended to the list.
  const rankOf = (t) => [inCycle.has(t.task_id) ? 0 : 1, (t.waits_on || []).length ? 0 : 1, Number(t.started_nanos) || 0];
  tasks.sort((a, b) => { const x = rankOf(a), y = rankOf(b); return x[0] - y[0] || x[1] - y[1] || x[2] - y[2]; });
  const q = $('stack-search').value.trim().toLowerCase(), want = $('stack-state').value, now = d.now_nanos ?? state.now;
  let html = '';
  for (const dl of deadlocks) {
    const cycle = dl.cycle || [];
    const chain = cycle.concat(cycle.length ? [cycle[0]] : []).map(taskRef).join(' → ');
    html += `<div class="deadlock"><h2>DEADLOCK (${cycle.length} tasks)</h2><div class="cycle">${chain}</div>` + cycle.map((r) => {
        const t = byId.get(r.task_id);
        return t ? `<div>${taskRef(r)} <span class="state ${esc(t.state)}">${esc(t.state)}</span>${t.node_id ? ' on ' + esc(t.node_id) : ''}</div>`
          : `<div>${taskRef(r)} <span class="state submitted">not started (queued)</span></div>`;
      }).join('') + '</div>';
  }
  const shown = tasks.filter((t) => (!want || t.state === want)
    && (!q || `${t.name} ${t.task_id} ${t.node_id || ''} ${t.worker_id || ''}`.toLowerCase().includes(q)));
  const counts = {};
  for (const t of tasks) counts[t.state] = (counts[t.state] || 0) + 1;
  $('stack-info').textContent = `${tasks.length} tasks (${Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(', ') || 'none'}), `
    + `${deadlocks.length} deadlock${deadlocks.length === 1 ? '' : 's'}, at ${fmtSecs(now)}`
    + ((d.summary && d.summary.omitted && d.summary.omitted.tasks) > 0
      ? ` · ${fmtCount(d.summary.omitted.tasks)} more tasks not listed (deadlocked and blocked first)` : '');
  if (!tasks.length) html += '<div class="note">No running or blocked task at this time. Move the time slider back to see the stacks as they were.</div>';
  for (const t of shown) {
    const waits = (t.waits_on || []).map((w) => {
      let line = `waits on <span class="mono">${esc(w.object_id)}</span>`;
      if (w.producer) {
        const p = byId.get(w.producer.task_id);
        const pstate = w.producer_state || (p && p.state) || 'finished/unknown';
        const node = w.producer_node || (p && p.node_id);
        line += ` ← ${taskRef(w.producer)} <span class="state ${esc(pstate)}">${esc(pstate)}</span>${node ? ' on ' + esc(node) : ''}`;
      }
      const mailbox = w.mailbox || w.actor_mailbox || w.actor_id;
      if (mailbox) line += ` (actor mailbox of ${esc(mailbox)})`;
      else if (w.producer_state === 'submitted') line += ' — not started: queued (an actor call waits in its mailbox)';
      return `<li class="wait">${line}</li>`;
    }).join('');
    const chain = (t.wait_chain || []).length > 1 ? `<li class="wait">wait chain: ${t.wait_chain.map(taskRef).join(' → ')}</li>` : '';
    const anc = (t.ancestors || []).map((a) => `<li>called from ${taskRef(a)}</li>`).join('');
    // The application's own spans it is inside, outermost first.
    const spans = (t.spans || []).length ? `<li class="span">in ${t.spans.map((n) => esc(n)).join(' › ')}</li>` : '';
    const dur = t.started_nanos != null ? ` for ${fmtNanos(Math.max(0, now - t.started_nanos))}` : '';
    html += `<div class="stack-task${inCycle.has(t.task_id) ? ' in-deadlock' : ''}" data-task="${esc(t.task_id)}">
      <div class="head"><span class="name">${esc(t.name)}</span><span class="mono">${esc(t.task_id)}</span>
      <span class="state ${esc(t.state)}">${esc(t.state)}${esc(dur)}</span>
      <span class="where">${t.node_id ? 'node ' + esc(t.node_id) : ''}${t.worker_id ? ' · worker ' + esc(t.worker_id) : ''}</span></div>
      ${labelsHtml(t.labels)}<ul>${spans}${waits}${chain}${anc}</ul></div>`;
  }
  body.innerHTML = html;
}

function initStack() {
  for (const [id, ev] of [['stack-search', 'input'], ['stack-state', 'change']]) $(id).addEventListener(ev, () => { if (stack.data) renderStack(); });
}

defineTab('stack', () => loadSummary('stack'), {
  current: () => stack.data,
  receive: (d) => { stack.data = d; renderStack(); },
  clear: () => { stack.data = null; $('stack-body').innerHTML = ''; $('stack-info').textContent = ''; },
});

// ===== Tab 4: Flame — inferno SVG in an iframe, by actor instance or class; baseline and diff mode =====
const flame = { mode: 'normal', baseline: null, baselineAt: '', baselineMetric: null, blobUrl: null, frames: 0 };

/** The flame graph's URL; in diff mode the server's SVG (the baseline posted in the body) as a blob URL. */
async function flameFrameUrl() {
  const metric = $('flame-metric').value;
  if (flame.mode !== 'diff') return apiUrl('api/view', viewParams('flame', 'svg', { metric, fold: $('flame-fold').value }));
  // Now against the baseline, in the baseline's metric.
  const p = viewParams(null, null, { metric: flame.baselineMetric || metric });
  delete p.view; delete p.format;
  let resp, text = '';
  try {
    resp = await fetch(apiUrl('api/flamediff', p), { method: 'POST', body: flame.baseline, cache: 'no-store' });
    text = await resp.text();
  } catch (e) { throw new Error(`cannot reach the dashboard server (api/flamediff): ${e.message}`); }
  if (!resp.ok) throw new Error(`api/flamediff: HTTP ${resp.status}: ${text.trim().split('\n')[0] || resp.statusText}`);
  if (flame.blobUrl) URL.revokeObjectURL(flame.blobUrl);
  flame.blobUrl = URL.createObjectURL(new Blob([text], { type: 'image/svg+xml' }));
  return flame.blobUrl;
}

/** Navigates the frame to `url`; rejects with the server's message when it did not get an SVG. */
function loadFrame(frame, url) {
  return new Promise((resolve, reject) => {
    const done = () => {
      frame.removeEventListener('load', done);
      clearTimeout(timer);
      let doc = null;
      try { doc = frame.contentDocument; } catch (e) { /* not same-origin: trust it */ }
      const root = doc && doc.documentElement;
      if (!root || (root.localName === 'svg' && !doc.querySelector('parsererror'))) { resolve(); return; }
      const text = ((doc.body || root).textContent || '').trim();
      reject(new Error(text.split('\n')[0] || 'the flame graph could not be loaded'));
    };
    const timer = setTimeout(() => { frame.removeEventListener('load', done); reject(new Error('timed out loading the flame graph')); }, 120000);
    frame.addEventListener('load', done);
    frame.src = url;
  });
}

async function loadFlame() {
  await loadFrame($('flame-frame'), await flameFrameUrl());
  countFlameFrames();
  updateFlameUi();
}

/** Counts the frames drawn (for the info line), and those naming an actor instance (`Class[actor].method`),
 *  onto the iframe (`data-frames`, `data-instance-frames`) for tests and tools. */
function countFlameFrames() {
  const frame = $('flame-frame');
  let titles = [];
  try { titles = [...frame.contentDocument.querySelectorAll('#frames g > title')].map((t) => t.textContent); } catch (e) { /* not readable */ }
  const instances = titles.filter((t) => /\w\[[^\]]+\]\./.test(t)).length;
  Object.assign(frame.dataset, { frames: titles.length, instanceFrames: instances });
  flame.frames = titles.length;
}

/** True while the user has zoomed or searched inside the flame graph (live refresh would reset it). */
function flameInteracting() {
  try {
    const doc = $('flame-frame').contentDocument, unzoom = doc.getElementById('unzoom'), search = doc.getElementById('search');
    return Boolean((unzoom && !unzoom.classList.contains('hide')) || (search && search.classList.contains('show')));
  } catch (e) { return false; }
}

function updateFlameUi() {
  $('flame-diff').disabled = !flame.baseline || flame.mode === 'diff';
  $('flame-normal').disabled = flame.mode !== 'diff';
  const fold = flame.mode === 'diff' ? 'by class' : $('flame-fold').value === 'class' ? 'by class' : 'by instance';
  $('flame-info').textContent = (flame.mode === 'diff' ? 'diff vs baseline (red: grew, blue: shrank)' : 'click a frame to zoom, Ctrl+F to search')
    + ` · ${flame.frames ? fmtCount(flame.frames) + ' ' : ''}frames ${fold}`
    + (flame.baseline ? ` · baseline: ${flame.baselineAt}` : '');
}

async function takeBaseline() {
  $('flame-baseline').disabled = true;
  try {
    const metric = $('flame-metric').value;
    const text = flame.baseline = await fetchText('api/view', viewParams('flame', 'folded', { metric }));
    flame.baselineMetric = metric;
    const stacks = text.split('\n').filter((l) => l.trim()).length;
    flame.baselineAt = `${state.job}, ${state.live ? 'now ' + fmtSecs(state.now) : 'at ' + fmtSecs(state.at)}, ${metric}, ${stacks} stacks`;
    setPanelMsg('flame', '');
  } catch (e) {
    setPanelMsg('flame', errorHtml(e));
  } finally { $('flame-baseline').disabled = false; updateFlameUi(); }
}

function initFlame() {
  $('flame-metric').addEventListener('change', () => refreshActive(false));
  $('flame-fold').addEventListener('change', () => { updateFlameUi(); refreshActive(false); });
  $('flame-baseline').addEventListener('click', takeBaseline);
  $('flame-diff').addEventListener('click', () => { if (flame.baseline) { flame.mode = 'diff'; updateFlameUi(); refreshActive(false); } });
  $('flame-normal').addEventListener('click', () => { flame.mode = 'normal'; updateFlameUi(); refreshActive(false); });
  updateFlameUi();
}

defineTab('flame', loadFlame, {
  minGap: 3000,
  extraKey: () => `${$('flame-metric').value}|${$('flame-fold').value}|${flame.mode}|${flame.mode === 'diff' ? flame.baselineAt : ''}`,
  canLiveRefresh: () => !flameInteracting(),
  clear: () => { $('flame-frame').removeAttribute('src'); },
});

// ===== Tab 5: Gantt — lanes of slices on a canvas, flow arrows, zoom and pan =====
// `hover`: the slice under the pointer, whose own arrows are drawn highlighted.
const gantt = { data: null, windowTimer: 0, rows: [], flows: [], slices: 0, minTs: 0, maxTs: 1, height: 0, view: null, vy: 0, fitted: true, drawPending: 0, drag: null, note: '', hover: null };
const LANE_H = 20, PROC_H = 18, AXIS_H = 24, LABEL_W = 230;
// Arrows: bundled per pair of lanes and FLOW_BUCKET_PX of the time axis; at most MAX_ARROWS (the largest bundles).
const FLOW_BUCKET_PX = 60, MAX_ARROWS = 120;
// How each state is drawn, in this order, so that what a lane is doing reads at a glance: queued
// (submitted) and scheduled calls as light outlined bars underneath, running calls a saturated green
// over them, and time blocked in a get/wait (nested in its running call) hatched amber on top.
// `inset`: pixels left free above and below the bar in its lane; `label`: named where wide enough.
// As the legend in index.html (app.css).
const STATE_STYLES = {
  submitted: { fill: '#eef1f5', stroke: '#9aa6b6', inset: 5, text: 'queued (submitted)' },
  scheduled: { fill: '#dfe7f7', stroke: '#7f95c0', inset: 5, text: 'scheduled' },
  other: { fill: '#8aa2c8', inset: 3, text: 'other' },
  running: { fill: '#2e9e4f', inset: 2, text: 'running', label: true },
  blocked: { fill: '#f5b041', hatch: '#b9770e', inset: 2, text: 'waiting (get/wait)', label: true },
};

/** The slice's state: its `cat`, else its name's prefix (`submitted X`, `scheduled X`, `wait X`). */
function sliceState(e) {
  const c = String(e.cat || ''), n = String(e.name || '');
  if (STATE_STYLES[c] && c !== 'other') return c;
  const m = /^(submitted|scheduled|wait|blocked)\b/.exec(n);
  return m ? (m[1] === 'wait' ? 'blocked' : m[1]) : c === '' ? 'running' : 'other';
}

function parseTrace(d) {
  const events = Array.isArray(d) ? d : (d && d.traceEvents) || [];
  const procNames = new Map(), lanes = new Map(), starts = new Map(), ends = new Map();
  const lane = (pid, tid) => {
    const k = pid + ':' + tid;
    if (!lanes.has(k)) lanes.set(k, { pid, tid, name: null, slices: [], maxDur: 0, order: lanes.size });
    return lanes.get(k);
  };
  let minTs = Infinity, maxTs = -Infinity, count = 0;
  for (const e of events) {
    if (!e || typeof e !== 'object') continue;
    if (e.ph === 'M') {
      const name = e.args && e.args.name;
      if (e.name === 'process_name') procNames.set(e.pid, name); else if (e.name === 'thread_name') lane(e.pid, e.tid).name = name;
    } else if (e.ph === 'X') {
      const ts = Number(e.ts) || 0, dur = Math.max(0, Number(e.dur) || 0);
      const l = lane(e.pid, e.tid);
      l.slices.push({ ts, dur, name: String(e.name ?? ''), st: sliceState(e), args: e.args || {} });
      l.maxDur = Math.max(l.maxDur, dur);
      minTs = Math.min(minTs, ts);
      maxTs = Math.max(maxTs, ts + dur);
      count++;
    } else if (e.ph === 's' || e.ph === 'f') {
      // The server bundles arrows: `args.calls` is how many calls one stands for.
      (e.ph === 's' ? starts : ends).set(String(e.id), { lane: lane(e.pid, e.tid), ts: Number(e.ts) || 0, n: Number(e.args && e.args.calls) || 1 });
    }
  }
  // Rows: a header per process (node) when there are names or several, then its lanes.
  const sorted = [...lanes.values()].sort((a, b) => (a.pid - b.pid) || (a.tid - b.tid) || (a.order - b.order));
  const rows = [], multiProc = new Set(sorted.map((l) => l.pid)).size > 1 || procNames.size > 0;
  let lastPid = null, y = 0;
  for (const l of sorted) {
    if (multiProc && l.pid !== lastPid) { rows.push({ proc: procNames.get(l.pid) || `process ${l.pid}`, y, h: PROC_H }); y += PROC_H; }
    lastPid = l.pid;
    l.slices.sort((a, b) => a.ts - b.ts);
    l.y = y;
    rows.push({ lane: l, y, h: LANE_H });
    y += LANE_H;
  }
  const flows = [...starts].filter(([id]) => ends.has(id)).map(([id, s]) => ({ a: s.lane, at: s.ts, b: ends.get(id).lane, bt: ends.get(id).ts, n: s.n }));
  if (!Number.isFinite(minTs)) { minTs = 0; maxTs = 1; }
  return { rows, flows, slices: count, minTs, maxTs: Math.max(maxTs, minTs + 1), height: y };
}

/** Shows a Gantt summary (a Chrome trace: the busiest lanes, sub-pixel slices merged by the server). */
function receiveGantt(d) {
  gantt.data = d;
  gantt.hover = null;
  Object.assign(gantt, parseTrace(d));
  if (gantt.fitted || !gantt.view) fitGantt(); else requestGanttDraw();
  const lanes = gantt.rows.filter((r) => r.lane).length, c = $('gantt-canvas');
  const sum = d.summary || {}, om = sum.omitted || {};
  const notes = [];
  if (om.slices_merged > 0) notes.push(`${fmtCount(sum.slices_in_window)} slices in the window, those under ${fmtNanos(sum.column_nanos)} merged`);
  if (om.lanes > 0) notes.push(`${fmtCount(om.lanes)} quieter lanes left out`);
  if (om.slices > 0) notes.push(`${fmtCount(om.slices)} short slices left out`);
  if (om.flows > 0) notes.push(`${fmtCount(om.flows)} calls' arrows left out`);
  const calls = gantt.flows.reduce((sum, f) => sum + f.n, 0);
  $('gantt-info').textContent = `${lanes} lanes, ${fmtCount(gantt.slices)} slices, ${fmtCount(calls)} calls in ${fmtCount(gantt.flows.length)} arrows`
    + (notes.length ? ' · ' + notes.join(' · ') : '');
  Object.assign(c.dataset, { lanes, slices: gantt.slices, flows: gantt.flows.length });   // for tests and tools
  c.setAttribute('aria-label', 'Gantt lanes: ' + gantt.rows.filter((r) => r.lane).map((r) => r.lane.name || r.lane.tid).join(', '));
}

/** The window asked of the server once zoomed in (nanoseconds), so that it sends that part in detail. */
function ganttWindow() {
  if (gantt.fitted || !gantt.view) return {};
  // Nanoseconds, kept within integers the server parses (a far zoom-out would print 1e+21).
  const clamp = (ns) => Math.min(Number.MAX_SAFE_INTEGER, Math.max(0, ns));
  const from = clamp(Math.floor(gantt.view.s * 1e3)), to = clamp(Math.ceil(gantt.view.e * 1e3));
  return to > from ? { from, to } : {};
}

/** After zooming or panning settles, fetch the window in detail. */
function ganttWindowChanged() {
  clearTimeout(gantt.windowTimer);
  gantt.windowTimer = setTimeout(() => refreshActive(false), 500);
}

function fitGantt() {
  const span = gantt.maxTs - gantt.minTs;
  Object.assign(gantt, { view: { s: gantt.minTs - span * 0.01, e: gantt.maxTs + span * 0.01 }, vy: 0, fitted: true });
  requestGanttDraw();
}

function requestGanttDraw() {
  if (gantt.drawPending) return;
  gantt.drawPending = requestAnimationFrame(() => { gantt.drawPending = 0; drawGantt(); });
}

/** First index in slices (sorted by ts) with ts >= t. */
function lowerBound(slices, t) {
  let lo = 0, hi = slices.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (slices[mid].ts < t) lo = mid + 1; else hi = mid; }
  return lo;
}

function niceStep(span, px) {
  const raw = span / Math.max(1, px / 110);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function drawGantt() {
  const canvas = $('gantt-canvas'), wrap = $('gantt-wrap');
  const W = wrap.clientWidth, H = wrap.clientHeight;
  if (!W || !H || !gantt.view) return;
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(W * dpr)) canvas.width = Math.round(W * dpr);
  if (canvas.height !== Math.round(H * dpr)) canvas.height = Math.round(H * dpr);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, W, H);
  ctx.font = '11px system-ui, sans-serif';
  ctx.textBaseline = 'middle';
  const plotW = W - LABEL_W, { s: vs, e: ve } = gantt.view, scale = plotW / (ve - vs);
  const X = (t) => LABEL_W + (t - vs) * scale;
  gantt.vy = Math.max(0, Math.min(gantt.vy, gantt.height - (H - AXIS_H)));
  const top = AXIS_H - gantt.vy;

  // Lanes and slices: rectangles batched per state (drawn in STATE_STYLES order), slices narrower
  // than a pixel merged into one mark per pixel column, labels where they do not overlap, and a
  // thin gap where one running call follows another, so that back-to-back calls stay apart.
  ctx.save();
  ctx.beginPath(); ctx.rect(0, AXIS_H, W, H - AXIS_H); ctx.clip();
  const batch = Object.fromEntries(Object.keys(STATE_STYLES).map((k) => [k, []])), labels = [], gaps = [];
  gantt.rows.forEach((row, i) => {
    const y = top + row.y;
    if (y + row.h < AXIS_H || y > H) return;
    if (!row.lane) { ctx.fillStyle = '#e6eaf1'; ctx.fillRect(0, y, W, row.h); return; }
    ctx.fillStyle = i % 2 ? '#f7f8fa' : '#ffffff'; ctx.fillRect(LABEL_W, y, plotW, row.h);
    const sl = row.lane.slices;
    let lastPx = -1, labelEnd = -1;
    for (let j = lowerBound(sl, vs - row.lane.maxDur); j < sl.length && sl[j].ts <= ve; j++) {
      const s = sl[j], x0 = X(s.ts), x1 = X(s.ts + s.dur);
      if (x1 < LABEL_W) continue;
      const inset = (STATE_STYLES[s.st] || STATE_STYLES.other).inset;
      if (x1 - x0 < 1) {
        const px = Math.floor(x0);
        if (px !== lastPx) { lastPx = px; batch[s.st].push(px, y + inset, 1, row.h - 2 * inset); }
        continue;
      }
      const a = Math.max(x0, LABEL_W), b = Math.min(x1, W);
      batch[s.st].push(a, y + inset, b - a, row.h - 2 * inset);
      if (s.st === 'running' && b - a > 4 && x0 >= LABEL_W) gaps.push(a, y + inset, row.h - 2 * inset);
      if (b - a > 44 && a >= labelEnd && STATE_STYLES[s.st].label) { labels.push([a, y, b - a, row.h, s.name]); labelEnd = b; }
    }
  });
  const hatch = hatchPattern(ctx);
  const drawnBy = {};
  for (const [st, r] of Object.entries(batch)) {
    const style = STATE_STYLES[st];
    ctx.beginPath();
    for (let k = 0; k < r.length; k += 4) ctx.rect(r[k], r[k + 1], r[k + 2], r[k + 3]);
    ctx.fillStyle = style.fill; ctx.fill();
    if (style.hatch && hatch) { ctx.fillStyle = hatch; ctx.fill(); }
    if (style.stroke) {
      ctx.beginPath();
      for (let k = 0; k < r.length; k += 4) if (r[k + 2] >= 3) ctx.rect(r[k] + 0.5, r[k + 1] + 0.5, r[k + 2] - 1, r[k + 3] - 1);
      ctx.strokeStyle = style.stroke; ctx.lineWidth = 1; ctx.stroke();
    }
    if (st === 'running') {
      ctx.fillStyle = 'rgba(255, 255, 255, 0.85)';
      for (let k = 0; k < gaps.length; k += 3) ctx.fillRect(gaps[k], gaps[k + 1], 1, gaps[k + 2]);
    }
    drawnBy[st] = r.length / 4;
  }
  const drawn = Object.values(drawnBy).reduce((a, b) => a + b, 0);
  // Dark text on a light halo: readable on green and on hatched amber alike.
  ctx.lineWidth = 3; ctx.lineJoin = 'round'; ctx.strokeStyle = 'rgba(255, 255, 255, 0.8)'; ctx.fillStyle = '#111';
  for (const [a, y, w, h, name] of labels) {
    ctx.save();
    ctx.beginPath(); ctx.rect(a + 2, y, w - 4, h); ctx.clip();
    ctx.strokeText(stripPaths(name), a + 3, y + h / 2 + 0.5);
    ctx.fillText(stripPaths(name), a + 3, y + h / 2 + 0.5);
    ctx.restore();
  }

  // Flow arrows (caller's slice → callee's slice), bundled; the hovered slice's own on top.
  gantt.note = '';
  const mode = $('gantt-flows').value;
  let arrows = 0;
  if (mode !== 'off' && gantt.flows.length) {
    const inView = (f) => Math.max(f.at, f.bt) >= vs && Math.min(f.at, f.bt) <= ve;
    const geo = { X, top };
    if (mode === 'bundled') {
      const bundles = bundleArrows(gantt.flows.filter(inView), X);
      const shown = bundles.slice(0, MAX_ARROWS);
      if (bundles.length > shown.length) gantt.note = `${fmtCount(bundles.length)} arrows in view: the ${MAX_ARROWS} largest drawn, zoom in for the rest`;
      arrows += drawArrows(ctx, shown, geo, 'rgba(40, 50, 70, 0.38)', 'rgba(40, 50, 70, 0.55)');
    }
    const h = gantt.hover;
    if (h) {
      const own = gantt.flows.filter((f) => inView(f) && ((f.b === h.lane && f.bt >= h.s.ts && f.bt <= h.s.ts + h.s.dur)
        || (f.a === h.lane && f.at >= h.s.ts && f.at <= h.s.ts + h.s.dur)));
      arrows += drawArrows(ctx, bundleArrows(own, X).slice(0, MAX_ARROWS), geo, 'rgba(47, 111, 222, 0.9)', 'rgba(47, 111, 222, 1)');
    }
  }
  gantt.arrows = arrows;

  // Lane labels over the left gutter.
  ctx.fillStyle = '#fbfcfd'; ctx.fillRect(0, AXIS_H, LABEL_W, H - AXIS_H);
  for (const row of gantt.rows) {
    const y = top + row.y;
    if (y + row.h < AXIS_H || y > H) continue;
    const l = row.lane;
    if (!l) { ctx.fillStyle = '#e6eaf1'; ctx.fillRect(0, y, LABEL_W, row.h); }
    ctx.fillStyle = l ? '#1d2330' : '#3b4456';
    ctx.fillText(l ? truncate(stripPaths(l.name) || `${l.pid}/${l.tid}`, 34) : truncate(row.proc, 36), l ? 12 : 6, y + row.h / 2);
  }
  ctx.strokeStyle = '#d5dae3'; ctx.beginPath(); ctx.moveTo(LABEL_W + 0.5, AXIS_H); ctx.lineTo(LABEL_W + 0.5, H); ctx.stroke();
  ctx.restore();

  // Time axis (relative to the recording's epoch).
  ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, W, AXIS_H);
  ctx.strokeStyle = '#d5dae3'; ctx.beginPath(); ctx.moveTo(0, AXIS_H - 0.5); ctx.lineTo(W, AXIS_H - 0.5); ctx.stroke();
  const step = niceStep(ve - vs, plotW);
  ctx.fillStyle = '#5d6677'; ctx.strokeStyle = '#e3e7ee';
  for (let t = Math.ceil(vs / step) * step; t <= ve; t += step) {
    const x = Math.round(X(t)) + 0.5;
    if (x < LABEL_W) continue;
    ctx.beginPath(); ctx.moveTo(x, AXIS_H - 6); ctx.lineTo(x, AXIS_H); ctx.stroke();
    ctx.fillText(fmtMicros(t), x + 3, AXIS_H / 2);
  }
  if (!gantt.slices) ctx.fillText('No slice for this job, time and filter.', LABEL_W + 12, AXIS_H + 20);
  $('gantt-view').textContent = `${fmtMicros(ve - vs)} shown${gantt.note ? ' · ' + gantt.note : ''}`;
  gantt.drawn = drawn;
  // What was drawn, for tests and tools: marks per state, and arrows.
  Object.assign(canvas.dataset, { drawnRunning: drawnBy.running, drawnWaiting: drawnBy.blocked,
    drawnQueued: drawnBy.submitted + drawnBy.scheduled, arrows });
}

/** The amber's hatching: dark diagonal strokes on a transparent tile, repeated. */
function hatchPattern(ctx) {
  if (!gantt.hatchTile) {
    const tile = document.createElement('canvas');
    tile.width = tile.height = 6;
    const t = tile.getContext('2d');
    t.strokeStyle = STATE_STYLES.blocked.hatch; t.lineWidth = 1.5;
    t.beginPath(); t.moveTo(-1, 7); t.lineTo(7, -1); t.moveTo(5, 7); t.lineTo(7, 5); t.moveTo(-1, 1); t.lineTo(1, -1); t.stroke();
    gantt.hatchTile = tile;
  }
  return ctx.createPattern(gantt.hatchTile, 'repeat');
}

/** Flows bundled per (caller lane, callee lane, FLOW_BUCKET_PX column of the call): one arrow, from the
 *  earliest flow of the bundle, standing for all their calls (`n`). Largest first. */
function bundleArrows(flows, X) {
  const bundles = new Map();
  for (const f of flows) {
    const k = `${f.a.pid}:${f.a.tid}>${f.b.pid}:${f.b.tid}@${Math.floor(X(f.at) / FLOW_BUCKET_PX)}`;
    const b = bundles.get(k);
    if (!b) bundles.set(k, Object.assign({}, f));
    else { if (f.at < b.at) Object.assign(b, { at: f.at, bt: f.bt }); b.n += f.n; }
  }
  return [...bundles.values()].sort((p, q) => q.n - p.n || p.at - q.at);
}

/** Draws `bundles` as curved arrows, thicker the more calls they carry, with `×N` beside those of several
 *  calls (where there is room); the number drawn. */
function drawArrows(ctx, bundles, { X, top }, stroke, fill) {
  ctx.strokeStyle = stroke; ctx.fillStyle = fill;
  let lastLabel = -Infinity;
  const counts = [];
  for (const f of bundles) {
    const x1 = X(f.at), y1 = top + f.a.y + LANE_H / 2, x2 = X(f.bt), y2 = top + f.b.y + LANE_H / 2, mx = (x1 + x2) / 2;
    ctx.lineWidth = Math.min(3, 1 + Math.log2(f.n) * 0.4);
    ctx.beginPath(); ctx.moveTo(x1, y1); ctx.bezierCurveTo(mx, y1, mx, y2, x2, y2); ctx.stroke();
    const ang = Math.atan2(y2 - y1, Math.max(1, x2 - x1) * 0.3);
    ctx.beginPath(); ctx.moveTo(x2, y2);
    ctx.lineTo(x2 - 6 * Math.cos(ang - 0.4), y2 - 6 * Math.sin(ang - 0.4));
    ctx.lineTo(x2 - 6 * Math.cos(ang + 0.4), y2 - 6 * Math.sin(ang + 0.4)); ctx.fill();
    if (f.n > 1 && Math.abs(x2 - lastLabel) > 28) { counts.push(['×' + fmtCount(f.n), x2 + 3, y2 - 6]); lastLabel = x2; }
  }
  // The counts last, dark on a light halo, over every arrow.
  ctx.save();
  ctx.lineWidth = 3; ctx.lineJoin = 'round'; ctx.strokeStyle = 'rgba(255, 255, 255, 0.85)'; ctx.fillStyle = '#1d2330';
  for (const [text, x, y] of counts) { ctx.strokeText(text, x, y); ctx.fillText(text, x, y); }
  ctx.restore();
  return bundles.length;
}

function ganttHit(x, y) {
  const W = $('gantt-wrap').clientWidth;
  if (!gantt.view || x < LABEL_W || y < AXIS_H) return null;
  const yy = y - AXIS_H + gantt.vy;
  const row = gantt.rows.find((r) => yy >= r.y && yy < r.y + r.h);
  if (!row || !row.lane) return null;
  const { s: vs, e: ve } = gantt.view;
  const per = (ve - vs) / (W - LABEL_W);
  const t = vs + (x - LABEL_W) * per, tol = 3 * per;
  const sl = row.lane.slices;
  let best = null;
  for (let j = lowerBound(sl, t - tol - row.lane.maxDur); j < sl.length && sl[j].ts <= t + tol; j++) {
    if (sl[j].ts - tol <= t && t <= sl[j].ts + sl[j].dur + tol) best = sl[j];   // the last drawn wins
  }
  return best ? { s: best, lane: row.lane } : null;
}

function showGanttTip(x, y) {
  const tip = $('gantt-tip');
  const hit = gantt.drag ? null : ganttHit(x, y);
  // The hovered slice's arrows are drawn highlighted: redraw when it changes.
  if ((hit && hit.s) !== (gantt.hover && gantt.hover.s)) {
    gantt.hover = hit;
    if ($('gantt-flows').value !== 'off') requestGanttDraw();
  }
  if (!hit) { tip.hidden = true; return; }
  const { s, lane } = hit;
  const a = s.args || {};
  tip.innerHTML = `<b>${esc(s.name)}</b><br>${esc((STATE_STYLES[s.st] || STATE_STYLES.other).text)} · ${esc(fmtMicros(s.dur))}${a.finished === false ? ' (still open)' : ''}`
    + `<br>start ${esc(fmtMicros(s.ts))} · ${esc(lane.name || lane.tid)}`
    + (a.task_id ? `<br>task ${esc(a.task_id)}` : '')
    + (a.objects ? `<br>objects ${esc(typeof a.objects === 'object' ? JSON.stringify(a.objects) : a.objects)}` : '');
  tip.hidden = false;
  const wrap = $('gantt-wrap');
  tip.style.left = Math.max(0, Math.min(x + 14, wrap.clientWidth - tip.offsetWidth - 4)) + 'px';
  tip.style.top = Math.max(0, y + 16 + tip.offsetHeight > wrap.clientHeight ? y - tip.offsetHeight - 8 : y + 16) + 'px';
}

function initGantt() {
  const canvas = $('gantt-canvas'), wrap = $('gantt-wrap');
  const local = (e) => { const r = canvas.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
  canvas.addEventListener('wheel', (e) => {
    if (!gantt.view) return;
    e.preventDefault();
    const [x] = local(e);
    const plotW = wrap.clientWidth - LABEL_W;
    const { s, e: end } = gantt.view;
    if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) {     // horizontal scroll pans
      const dt = e.deltaX / plotW * (end - s);
      gantt.view = { s: s + dt, e: end + dt };
    } else {
      const t = s + Math.max(0, x - LABEL_W) / plotW * (end - s);
      const f = Math.exp(Math.max(-1, Math.min(1, e.deltaY * 0.0015)));
      const span = Math.max(1e-3, (end - s) * f);
      const k = (t - s) / (end - s);
      gantt.view = { s: t - k * span, e: t - k * span + span };
    }
    gantt.fitted = false;
    $('gantt-tip').hidden = true;
    requestGanttDraw();
    ganttWindowChanged();
  }, { passive: false });
  canvas.addEventListener('pointerdown', (e) => {
    if (e.button !== 0 || !gantt.view) return;
    gantt.drag = { x: e.clientX, y: e.clientY, view: Object.assign({}, gantt.view), vy: gantt.vy };
    try { canvas.setPointerCapture(e.pointerId); } catch (err) { /* synthetic events */ }
    canvas.classList.add('dragging');
    $('gantt-tip').hidden = true;
  });
  canvas.addEventListener('pointermove', (e) => {
    const d = gantt.drag;
    if (!d) { showGanttTip(...local(e)); return; }
    const dt = (e.clientX - d.x) / (wrap.clientWidth - LABEL_W) * (d.view.e - d.view.s);
    Object.assign(gantt, { view: { s: d.view.s - dt, e: d.view.e - dt }, vy: d.vy - (e.clientY - d.y) });
    if (e.clientX !== d.x) gantt.fitted = false;
    requestGanttDraw();
  });
  const end = () => {
    if (gantt.drag && !gantt.fitted) ganttWindowChanged();
    gantt.drag = null;
    canvas.classList.remove('dragging');
  };
  canvas.addEventListener('pointerup', end);
  canvas.addEventListener('pointercancel', end);
  canvas.addEventListener('pointerleave', () => {
    $('gantt-tip').hidden = true;
    if (gantt.hover) { gantt.hover = null; requestGanttDraw(); }
  });
  $('gantt-fit').addEventListener('click', () => { fitGantt(); ganttWindowChanged(); });
  $('gantt-flows').addEventListener('change', requestGanttDraw);
  if (typeof ResizeObserver !== 'undefined') new ResizeObserver(requestGanttDraw).observe(wrap);
  else window.addEventListener('resize', requestGanttDraw);
}

defineTab('gantt', () => loadSummary('gantt'), {
  extraKey: () => JSON.stringify(ganttWindow()),
  summaryExtra: ganttWindow,
  current: () => gantt.data,
  receive: receiveGantt,
  minGap: 3000,
  onShow: requestGanttDraw,
  clear: () => { Object.assign(gantt, { data: null, rows: [], flows: [], slices: 0, height: 0, hover: null }); $('gantt-info').textContent = ''; requestGanttDraw(); },
});

// ===== Start =====
function start() {
  for (const init of [initHeader, initLogical, initPhysical, initStack, initFlame, initGantt]) init();
  const { name, params } = parseHash();
  applyHashParams(params);
  updateTimeUi();
  selectTab(name);
  loadJobs(params.get('job'));
  setInterval(() => { if (state.job !== null) loadJobs(); }, 10000);   // new jobs appear in the selector
}

window.addEventListener('error', (e) => setGlobalMsg(errorHtml('internal error: ' + (e.message || e))));
window.addEventListener('unhandledrejection', (e) => setGlobalMsg(errorHtml('internal error: ' + (e.reason && e.reason.message ? e.reason.message : e.reason))));
if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
})();
