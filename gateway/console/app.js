// subagents console: the browser side of the gateway.
//
// This module owns the bearer token (sessionStorage only), the JSON API
// client, the Server-Sent Events follower (read with fetch, since
// EventSource cannot send a header), the tree model and its virtualized
// rows, the transcript of the selected session, the composer and the
// interrupt, time travel, diff and verify. Every string from the server is
// untrusted: the DOM is built with createElement and textContent only.

// ---- constants ---------------------------------------------------------

const TOKEN_KEY = 'subagents-token';
const ROW_HEIGHT = 28;
const OVERSCAN_ROWS = 12;
const TREE_DEBOUNCE_MS = 150;
const TREE_MIN_INTERVAL_MS = 200;
const POSITION_DEBOUNCE_MS = 100;
const TRANSCRIPT_PAGE = 1000;
const LATENCY_CAP = 1000;
const JSON_PREVIEW_CHARS = 600;
const PRETTY_JSON_CHARS = 20000;
const RECONNECT_MIN_MS = 500;
const RECONNECT_MAX_MS = 5000;
const MAX_BLOCK_NESTING = 4;
const IMAGE_TYPES = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);

const ERROR_SENTENCES = {
  'gateway/bad-request': 'The request was malformed',
  'gateway/unauthenticated': 'The bearer token was refused: connect again with the token in gateway.token',
  'gateway/forbidden-origin': 'This page\u2019s origin is not allowed by the gateway',
  'gateway/not-found': 'The server does not know this route or item',
  'gateway/method-not-allowed': 'The server does not accept this request method here',
  'gateway/payload-too-large': 'The message is too large: send fewer or smaller images',
  'gateway/timeout': 'The server did not finish the request in time',
  'gateway/internal': 'The server failed internally',
  'gateway/cancelled': 'The request was cancelled before it was accepted',
  'subagent/attachment-invalid': 'An image was refused',
  'subagent/invalid-time-zone': 'The time zone is not a known IANA time zone',
  'subagent/parent-unavailable': 'The parent is not live: hold the root first',
  'subagent/not-resumable': 'This session cannot be resumed (it is external, one-shot or of unknown mode)',
  'subagent/unauthorized': 'The server does not let this console act on this session',
  'subagent/delivery-unavailable': 'The message cannot be delivered right now (the session may be at capacity): try again',
  'subagent/closed': 'The runtime is closed and accepts no further requests',
  'subagent/admission-closed': 'The tree is draining: no new work is admitted below this parent',
  'subagent/root-held': 'This root is already held open',
  'replay/position-past-head': 'That log position is past the head of the log',
  'replay/unknown-session': 'That session is not in the log at this position',
  network: 'Could not reach the server',
  'bad-response': 'The server answered with something that is not JSON',
};

const SOURCE_NAMES = {
  delegation: 'delegation',
  'agent-message': 'agent message',
  'subagent-settled': 'settlement notice',
  'subagent-report': 'report',
  user: 'user',
  browser: 'browser',
};

// ---- state -------------------------------------------------------------

const dom = {};

const state = {
  token: null,
  connected: false,
  connectGen: 0,
  roots: [],
  rootId: null,
  rootGen: 0,
  selectedId: null,
  head: 0,
  follow: true,
  position: null,
  readySet: false,
};

const tree = {
  nodes: [],
  byId: new Map(),
  childCount: new Map(),
  posInSet: new Map(),
  visible: [],
  visibleIndex: new Map(),
  // Children an agent started by a tool call, by `startedKey(parent, turn, callId)`.
  startedBy: new Map(),
  collapsed: new Set(),
  rows: new Map(),
  rowView: new WeakMap(),
  position: null,
  historySeq: 0,
};

const refresh = {
  timer: null,
  inFlight: false,
  again: false,
  lastStart: -Infinity,
  pending: [],
  retries: 0,
  failures: 0,
};

const events = {
  controller: null,
  lastId: 0,
  backoff: RECONNECT_MIN_MS,
};

const transcript = {
  sessionId: null,
  gen: 0,
  lastVersion: 0,
  loading: false,
  dirty: false,
  count: 0,
  // The shown ToolCalled entries, each with its slot for the children it
  // started: `{turn, callId, slot, key}`, re-linked whenever the tree changes.
  calls: [],
};

const attachments = new Map();

const composer = {
  images: [],
  sending: false,
  nextImageId: 1,
};

const timers = {
  position: null,
  treeRetry: null,
  scrollFrame: null,
};

// What `subagents-bench console` and the browser tests read, every time on
// the epoch clock (ms, performance.timeOrigin + performance.now()), so it
// compares with the server's clock on the same machine.
const bench = {
  // The newest log position the rendered live tree covers, and when.
  lastApplied: { position: 0, at: epochNow() },
  // One entry per live event the tree has shown, the newest LATENCY_CAP:
  // its log position, when its frame arrived and when a tree covering it
  // was rendered into the DOM.
  applied: [],
  // The current root's first tree: its size, when loading began, when the
  // answer was parsed, when the rows were in the DOM and when the frame
  // holding them was painted (null until then).
  firstRender: null,
};
window.subagentsConsole = bench;

/** Milliseconds since the epoch, with sub-millisecond resolution. */
function epochNow() {
  return performance.timeOrigin + performance.now();
}

// ---- small helpers -----------------------------------------------------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function isObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function obj(value) {
  return isObject(value) ? value : {};
}

function str(value) {
  return typeof value === 'string' ? value : value === undefined || value === null ? '' : String(value);
}

function num(value) {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

function shortId(id) {
  const text = str(id);
  return text.length > 8 ? text.slice(0, 8) : text;
}

function truncate(text, max) {
  return text.length > max ? `${text.slice(0, max)}\u2026` : text;
}

function compactJson(value, max = JSON_PREVIEW_CHARS) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch (_err) {
    text = String(value);
  }
  if (text === undefined) text = String(value);
  return truncate(text, max);
}

function prettyJson(value) {
  let text;
  try {
    text = JSON.stringify(value, null, 2);
  } catch (_err) {
    text = String(value);
  }
  if (text === undefined) text = String(value);
  return truncate(text, PRETTY_JSON_CHARS);
}

function safeClass(prefix, value) {
  const text = str(value).toLowerCase();
  return /^[a-z0-9][a-z0-9-]{0,40}$/.test(text) ? `${prefix}${text}` : `${prefix}other`;
}

function errorText(err) {
  if (err && typeof err.message === 'string') return err.message;
  return String(err);
}

function isAbortError(err) {
  return Boolean(err) && (err.name === 'AbortError' || err.name === 'TimeoutError');
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (signal) {
      signal.addEventListener('abort', () => {
        clearTimeout(timer);
        resolve();
      }, { once: true });
    }
  });
}

function setText(element, text) {
  if (element && element.textContent !== text) element.textContent = text;
}

function describeError(error) {
  const code = str(error && error.code) || 'unknown';
  const message = str(error && error.message).trim();
  const sentence = ERROR_SENTENCES[code] || `The server refused the request (${code})`;
  return message ? `${sentence}. ${message}` : `${sentence}.`;
}

function readStoredToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch (_err) {
    return null;
  }
}

function storeToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch (_err) {
    // Storage disabled: the token lives in memory for this page only.
  }
}

// ---- API client --------------------------------------------------------

/** One JSON request; never throws: `{ok, data}` or `{ok: false, error}`. */
async function api(path, { method = 'GET', body, signal } = {}) {
  const token = state.token;
  if (!token) return { ok: false, error: { code: 'gateway/unauthenticated', message: 'Not connected.', status: 0 } };
  const headers = { Authorization: `Bearer ${token}`, Accept: 'application/json' };
  const init = { method, headers, signal, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  let text;
  try {
    response = await fetch(path, init);
    text = await response.text();
  } catch (err) {
    if (isAbortError(err)) return { ok: false, aborted: true, error: { code: 'aborted', message: 'Cancelled.', status: 0 } };
    return { ok: false, error: { code: 'network', message: errorText(err), status: 0 } };
  }
  return interpretResponse(response, text, token);
}

function interpretResponse(response, text, token) {
  let data;
  let parsed = false;
  if (text) {
    try {
      data = JSON.parse(text);
      parsed = true;
    } catch (_err) {
      parsed = false;
    }
  }
  if (!response.ok) {
    const error = parsed && isObject(data) && typeof data.code === 'string'
      ? { code: data.code, message: str(data.message), status: response.status }
      : { code: `http-${response.status}`, message: truncate(str(text).trim(), 200) || response.statusText, status: response.status };
    if (response.status === 401) onUnauthenticated(error, token);
    return { ok: false, error };
  }
  if (!parsed) {
    return { ok: false, error: { code: 'bad-response', message: truncate(str(text).trim(), 200), status: response.status } };
  }
  return { ok: true, data, status: response.status };
}

function enc(value) {
  return encodeURIComponent(str(value));
}

// ---- connection --------------------------------------------------------

function onConnectSubmit(event) {
  event.preventDefault();
  const typed = dom.token.value.trim();
  const token = typed || readStoredToken();
  if (!token) {
    setText(dom.connectError, 'Enter the bearer token first.');
    return;
  }
  storeToken(token);
  dom.token.value = '';
  connect(token);
}

async function connect(token) {
  teardown();
  state.token = token;
  const gen = ++state.connectGen;
  setText(dom.connectError, '');
  setText(dom.connectStatus, 'Connecting\u2026');
  const res = await api('/v1/roots');
  if (gen !== state.connectGen) return;
  if (!res.ok) {
    setText(dom.connectStatus, '');
    if (res.error.status !== 401) setText(dom.connectError, describeError(res.error));
    return;
  }
  state.connected = true;
  document.body.dataset.connected = 'true';
  setText(dom.connectStatus, 'Connected.');
  dom.disconnect.hidden = false;
  dom.rootPicker.hidden = false;
  dom.app.hidden = false;
  setRoots(res.data);
  if (state.roots.length === 0) {
    setText(dom.rootStatus, 'There is no root in the log yet.');
    markReady();
    return;
  }
  switchRoot(state.roots[0].sessionId);
}

function onUnauthenticated(error, token) {
  if (token !== state.token) return;
  storeToken(null);
  teardown();
  state.token = null;
  state.connectGen += 1;
  const detail = str(error && error.message).trim();
  setText(dom.connectStatus, '');
  setText(dom.connectError,
    `The server refused the bearer token (401). Copy it from gateway.token in the data directory and connect again.${detail ? ` ${detail}` : ''}`);
  dom.token.focus();
}

function forgetToken() {
  storeToken(null);
  teardown();
  state.token = null;
  state.connectGen += 1;
  setText(dom.connectError, '');
  setText(dom.connectStatus, 'Token forgotten.');
  dom.token.value = '';
}

/** Drops everything tied to the current connection. */
function teardown() {
  stopEvents();
  cancelTreeRefresh();
  clearTimeout(timers.position);
  clearTimeout(timers.treeRetry);
  state.rootGen += 1;
  state.connected = false;
  state.roots = [];
  state.rootId = null;
  state.selectedId = null;
  state.head = 0;
  state.follow = true;
  state.position = null;
  state.readySet = false;
  document.body.dataset.connected = 'false';
  document.body.dataset.ready = 'false';
  document.body.dataset.position = 'live';
  delete document.body.dataset.head;
  delete document.body.dataset.sessions;
  dom.disconnect.hidden = true;
  dom.rootPicker.hidden = true;
  dom.app.hidden = true;
  dom.roots.replaceChildren();
  setText(dom.rootStatus, '');
  setText(dom.rootError, '');
  setText(dom.streamStatus, '');
  clearTree();
  resetTranscript(null);
  clearImages();
  revokeAttachments();
  updatePositionControls();
  updateSelectionPanels();
}

function markReady() {
  if (state.readySet) return;
  state.readySet = true;
  document.body.dataset.ready = 'true';
}

// ---- roots -------------------------------------------------------------

function setRoots(list) {
  const roots = Array.isArray(list) ? list.filter((root) => isObject(root) && typeof root.sessionId === 'string') : [];
  state.roots = roots;
  const options = roots.map((root) => {
    const option = el('option', '', `${str(root.label) || '(no label)'} (${shortId(root.sessionId)})${root.held ? ' \u00b7 held' : ''}`);
    option.value = root.sessionId;
    return option;
  });
  dom.roots.replaceChildren(...options);
  if (state.rootId && roots.some((root) => root.sessionId === state.rootId)) dom.roots.value = state.rootId;
  updateRootStatus();
}

function currentRoot() {
  return state.roots.find((root) => root.sessionId === state.rootId) || null;
}

function updateRootStatus() {
  const root = currentRoot();
  if (!root) {
    dom.holdRoot.hidden = true;
    setText(dom.rootStatus, state.roots.length ? '' : 'There is no root in the log yet.');
    return;
  }
  dom.holdRoot.hidden = Boolean(root.held);
  dom.rootStatus.classList.toggle('held', Boolean(root.held));
  setText(dom.rootStatus, root.held ? 'held by this server' : 'not held: hold it to prompt its children');
}

async function refreshRoots() {
  const res = await api('/v1/roots');
  if (!res.ok) {
    if (!res.aborted) setText(dom.rootError, describeError(res.error));
    return false;
  }
  setText(dom.rootError, '');
  setRoots(res.data);
  if (!currentRoot() && state.roots.length) switchRoot(state.roots[0].sessionId);
  updateSelectionPanels();
  return true;
}

async function holdRoot() {
  const rootId = state.rootId;
  if (!rootId) return;
  dom.holdRoot.disabled = true;
  setText(dom.rootError, '');
  const res = await api(`/v1/roots/${enc(rootId)}/reopen`, { method: 'POST' });
  dom.holdRoot.disabled = false;
  if (!res.ok && res.error.code !== 'subagent/root-held') {
    if (!res.aborted) setText(dom.rootError, describeError(res.error));
    return;
  }
  await refreshRoots();
  if (state.follow) requestTreeRefresh(0);
}

function onRootChange() {
  const id = dom.roots.value;
  if (id && id !== state.rootId) switchRoot(id);
}

function switchRoot(rootId) {
  stopEvents();
  cancelTreeRefresh();
  clearTimeout(timers.treeRetry);
  state.rootGen += 1;
  state.rootId = rootId;
  state.selectedId = null;
  state.head = 0;
  state.follow = true;
  state.position = null;
  document.body.dataset.position = 'live';
  dom.roots.value = rootId;
  setText(dom.rootError, '');
  clearTree();
  resetTranscript(null);
  updateRootStatus();
  updatePositionControls();
  updateSelectionPanels();
  loadRootTree(state.rootGen, 0);
}

async function loadRootTree(gen, attempt) {
  setText(dom.treeStatus, 'Loading the tree\u2026');
  const startedAt = epochNow();
  const res = await fetchTree(null);
  if (gen !== state.rootGen) return;
  if (!res.ok) {
    if (res.aborted || !state.token) return;
    const delay = Math.min(RECONNECT_MAX_MS, RECONNECT_MIN_MS * 2 ** attempt);
    setText(dom.treeStatus, `${describeError(res.error)} Retrying in ${Math.round(delay / 1000)} s.`);
    timers.treeRetry = setTimeout(() => loadRootTree(gen, attempt + 1), delay);
    return;
  }
  setText(dom.treeStatus, '');
  const fetchedAt = epochNow();
  applyTreeAnswer(res.data, []);
  if (!state.selectedId && tree.nodes.length) selectNode(tree.nodes[0].id, { focus: false });
  recordFirstRender(state.rootId, startedAt, fetchedAt);
  markReady();
  const after = num(res.data.position) ?? num(res.data.head) ?? 0;
  startEvents(state.rootId, after, gen);
}

// ---- server-sent events ------------------------------------------------

function stopEvents() {
  if (events.controller) events.controller.abort();
  events.controller = null;
}

function startEvents(rootId, after, gen) {
  stopEvents();
  const controller = new AbortController();
  events.controller = controller;
  events.lastId = after;
  events.backoff = RECONNECT_MIN_MS;
  followEvents(rootId, controller, gen).catch((err) => {
    if (!isAbortError(err)) setText(dom.streamStatus, `The live event stream failed: ${errorText(err)}`);
  });
}

async function followEvents(rootId, controller, gen) {
  while (!controller.signal.aborted && gen === state.rootGen && state.token) {
    const outcome = await readEventStream(rootId, controller.signal);
    if (controller.signal.aborted || gen !== state.rootGen) return;
    if (outcome.fatal) {
      setText(dom.streamStatus, `Live updates stopped: ${describeError(outcome.error)}`);
      return;
    }
    const wait = events.backoff;
    events.backoff = Math.min(RECONNECT_MAX_MS, events.backoff * 2);
    const why = outcome.error ? describeError(outcome.error) : 'The event stream ended.';
    setText(dom.streamStatus, `${why} Reconnecting in ${(wait / 1000).toFixed(1)} s\u2026`);
    await sleep(wait, controller.signal);
  }
}

/** Reads one connection of the stream until it ends; never throws. */
async function readEventStream(rootId, signal) {
  const token = state.token;
  let response;
  try {
    response = await fetch(`/v1/events?root=${enc(rootId)}&after=${events.lastId}`, {
      headers: { Authorization: `Bearer ${token}`, Accept: 'text/event-stream' },
      cache: 'no-store',
      signal,
    });
  } catch (err) {
    if (isAbortError(err)) return { aborted: true };
    return { error: { code: 'network', message: errorText(err) } };
  }
  if (!response.ok) {
    let text = '';
    try {
      text = await response.text();
    } catch (_err) {
      text = '';
    }
    const result = interpretResponse(response, text, token);
    const status = response.status;
    return { error: result.error, fatal: status === 401 || status === 403 || status === 400 || status === 404 };
  }
  if (!response.body || typeof response.body.getReader !== 'function') {
    return { error: { code: 'bad-response', message: 'This browser cannot read a streamed response.' }, fatal: true };
  }
  setText(dom.streamStatus, 'Following live events.');
  events.backoff = RECONNECT_MIN_MS;
  return pumpFrames(response.body.getReader());
}

async function pumpFrames(reader) {
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      buffer = consumeFrames(buffer);
    }
    buffer += decoder.decode();
    consumeFrames(`${buffer}\n\n`);
    return { ended: true };
  } catch (err) {
    if (isAbortError(err)) return { aborted: true };
    return { error: { code: 'network', message: errorText(err) } };
  }
}

/** Dispatches every complete frame of `buffer`; returns the incomplete rest. */
function consumeFrames(buffer) {
  // CRLF and lone CR become LF; a CR at the very end waits for the next chunk.
  const text = buffer.replace(/\r\n|\r(?=[^\n])/g, '\n');
  const frames = text.split('\n\n');
  const rest = frames.pop();
  for (const frame of frames) {
    const parsed = parseFrame(frame);
    if (parsed) dispatchFrame(parsed);
  }
  return rest;
}

function parseFrame(frame) {
  let id = null;
  let type = 'message';
  const data = [];
  for (const line of frame.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'id') id = value;
    else if (field === 'event') type = value;
    else if (field === 'data') data.push(value);
  }
  if (id === null && data.length === 0) return null;
  return { id, type, data: data.join('\n') };
}

function dispatchFrame(frame) {
  let payload = null;
  try {
    payload = frame.data ? JSON.parse(frame.data) : null;
  } catch (_err) {
    payload = null;
  }
  if (frame.type === 'caught-up') {
    const head = num(obj(payload).head);
    if (head !== null) noteHead(head);
    return;
  }
  const position = frame.id === null ? null : Number(frame.id);
  if (position === null || !Number.isFinite(position)) return;
  if (position <= events.lastId) return;
  events.lastId = position;
  onLogEvent(position, isObject(payload) ? payload : null);
}

function onLogEvent(position, record) {
  const receivedAt = epochNow();
  noteHead(position);
  if (state.follow) {
    refresh.pending.push({ position, receivedAt });
    scheduleTreeRefresh();
  }
  if (record && transcript.sessionId && record.stream === `session-${transcript.sessionId}`) {
    onTranscriptRecord(record);
  }
}

function noteHead(head) {
  if (head > state.head) {
    state.head = head;
    updatePositionControls();
  }
}

// ---- tree refresh scheduling ----------------------------------------------

/** Coalesces events: one refresh ~150 ms after the first, at most 5 per second. */
function scheduleTreeRefresh() {
  if (!state.follow || !state.rootId) return;
  if (refresh.inFlight) {
    refresh.again = true;
    return;
  }
  if (refresh.timer !== null) return;
  const sinceLast = performance.now() - refresh.lastStart;
  let delay = Math.max(TREE_DEBOUNCE_MS, TREE_MIN_INTERVAL_MS - sinceLast);
  if (refresh.failures) delay = Math.max(delay, Math.min(RECONNECT_MAX_MS, RECONNECT_MIN_MS * 2 ** refresh.failures));
  refresh.timer = setTimeout(runTreeRefresh, delay);
}

function requestTreeRefresh(delay) {
  if (!state.follow || !state.rootId) return;
  if (refresh.inFlight) {
    refresh.again = true;
    return;
  }
  clearTimeout(refresh.timer);
  refresh.timer = setTimeout(runTreeRefresh, delay);
}

function cancelTreeRefresh() {
  clearTimeout(refresh.timer);
  refresh.timer = null;
  refresh.again = false;
  refresh.pending = [];
  refresh.retries = 0;
  refresh.failures = 0;
}

async function runTreeRefresh() {
  refresh.timer = null;
  if (!state.follow || !state.rootId) return;
  refresh.inFlight = true;
  refresh.again = false;
  refresh.lastStart = performance.now();
  const gen = state.rootGen;
  const waiting = refresh.pending.slice();
  const res = await fetchTree(null);
  refresh.inFlight = false;
  if (gen !== state.rootGen) return;
  if (!state.follow) return;
  if (!res.ok) {
    if (res.aborted || !state.token) return;
    setText(dom.treeStatus, `The tree could not be refreshed. ${describeError(res.error)}`);
    refresh.failures += 1;
    refresh.again = true;
  } else {
    refresh.failures = 0;
    setText(dom.treeStatus, '');
    applyLiveRefresh(res.data, waiting);
  }
  if (refresh.again || refresh.pending.length) scheduleTreeRefresh();
}

/** Renders a live tree and accounts for the SSE events it reflects. */
function applyLiveRefresh(answer, waiting) {
  const treePosition = num(answer.position) ?? num(answer.head);
  const stillPending = new Set(refresh.pending);
  const candidates = waiting.filter((item) => stillPending.has(item));
  let covered = candidates.filter((item) => treePosition === null || item.position <= treePosition);
  if (covered.length < candidates.length) {
    refresh.retries += 1;
    if (refresh.retries > 10) {
      covered = candidates;
      refresh.retries = 0;
    }
  } else {
    refresh.retries = 0;
  }
  const coveredSet = new Set(covered);
  refresh.pending = refresh.pending.filter((item) => !coveredSet.has(item));
  applyTreeAnswer(answer, covered);
}

async function fetchTree(at) {
  const root = state.rootId;
  if (!root) return { ok: false, aborted: true, error: { code: 'aborted', message: '' } };
  const query = at === null ? '' : `?at=${at}`;
  const res = await api(`/v1/sessions/${enc(root)}/tree${query}`);
  if (res.ok && (!isObject(res.data) || !Array.isArray(res.data.nodes))) {
    return { ok: false, error: { code: 'bad-response', message: 'The tree answer has no node list.' } };
  }
  return res;
}

// ---- tree model ------------------------------------------------------------

function clearTree() {
  for (const row of tree.rows.values()) row.remove();
  tree.rows.clear();
  tree.nodes = [];
  tree.byId = new Map();
  tree.childCount = new Map();
  tree.posInSet = new Map();
  tree.visible = [];
  tree.visibleIndex = new Map();
  tree.startedBy = new Map();
  tree.collapsed = new Set();
  tree.position = null;
  if (dom.treeSizer) dom.treeSizer.style.height = '0px';
}

function setTreeNodes(list) {
  const nodes = [];
  const byId = new Map();
  const childCount = new Map();
  const posInSet = new Map();
  const startedBy = new Map();
  for (const raw of list) {
    if (!isObject(raw) || typeof raw.id !== 'string' || byId.has(raw.id)) continue;
    const parentId = typeof raw.parentId === 'string' ? raw.parentId : null;
    const parent = parentId ? byId.get(parentId) : null;
    const node = {
      id: raw.id,
      parentId,
      level: parent ? parent.level + 1 : 0,
      depth: num(raw.depth) ?? (parent ? parent.level + 1 : 0),
      label: str(raw.label),
      provider: raw.provider === null || raw.provider === undefined ? '' : str(raw.provider),
      mode: str(raw.mode) || 'unknown',
      external: raw.external === true,
      state: str(raw.state) || 'unknown',
      stopReason: raw.stopReason === null || raw.stopReason === undefined ? '' : str(raw.stopReason),
      live: raw.live === true,
      requestedBy: parentId ? toolCallRef(raw.requestedBy) : null,
    };
    nodes.push(node);
    byId.set(node.id, node);
    if (parentId) {
      const count = (childCount.get(parentId) || 0) + 1;
      childCount.set(parentId, count);
      posInSet.set(node.id, count);
    }
    if (node.requestedBy) {
      const key = startedKey(parentId, node.requestedBy.turn, node.requestedBy.callId);
      const started = startedBy.get(key);
      if (started) started.push(node);
      else startedBy.set(key, [node]);
    }
  }
  tree.nodes = nodes;
  tree.byId = byId;
  tree.childCount = childCount;
  tree.posInSet = posInSet;
  tree.startedBy = startedBy;
  computeVisible();
}

/** A node's `requestedBy` as `{turn, callId}` (both text), or null. */
function toolCallRef(value) {
  if (!isObject(value)) return null;
  const turn = str(value.turn);
  const callId = str(value.callId);
  return turn && callId ? { turn, callId } : null;
}

function startedKey(parentId, turn, callId) {
  return JSON.stringify([str(parentId), str(turn), str(callId)]);
}

/** The nodes `parentId` started with its tool call `callId` of turn `turn`. */
function startedChildren(parentId, turn, callId) {
  return tree.startedBy.get(startedKey(parentId, turn, callId)) || [];
}

function computeVisible() {
  const visible = [];
  const visibleIndex = new Map();
  let skipBelow = Infinity;
  for (const node of tree.nodes) {
    if (node.level > skipBelow) continue;
    skipBelow = Infinity;
    visibleIndex.set(node.id, visible.length);
    visible.push(node);
    if (tree.collapsed.has(node.id) && hasChildren(node.id)) skipBelow = node.level;
  }
  tree.visible = visible;
  tree.visibleIndex = visibleIndex;
}

function hasChildren(id) {
  return (tree.childCount.get(id) || 0) > 0;
}

function isDescendant(id, ancestorId) {
  let node = tree.byId.get(id);
  while (node && node.parentId) {
    if (node.parentId === ancestorId) return true;
    node = tree.byId.get(node.parentId);
  }
  return false;
}

/** Applies one tree answer (live or historical) and renders it. */
function applyTreeAnswer(answer, covered) {
  const nodes = Array.isArray(answer.nodes) ? answer.nodes : [];
  tree.position = num(answer.position);
  const head = num(answer.head);
  if (head !== null) noteHead(head);
  setTreeNodes(nodes);
  renderTree();
  document.body.dataset.sessions = String(tree.nodes.length);
  const at = epochNow();
  if (state.follow) recordApplied(answer, covered, at);
  updateSelectionPanels();
  linkStartedChildren();
  applyTranscriptFilter();
}

/**
 * Notes the first tree of `rootId`: now its rows are in the DOM; a
 * timeout queued from the next animation frame runs once that frame is
 * painted.
 */
function recordFirstRender(rootId, startedAt, fetchedAt) {
  const entry = {
    rootId, sessions: tree.nodes.length, startedAt, fetchedAt, renderedAt: epochNow(), paintedAt: null,
  };
  bench.firstRender = entry;
  requestAnimationFrame(() => setTimeout(() => { entry.paintedAt = epochNow(); }, 0));
}

function recordApplied(answer, covered, at) {
  let position = num(answer.position) ?? num(answer.head) ?? 0;
  for (const item of covered) {
    position = Math.max(position, item.position);
    bench.applied.push({ position: item.position, receivedAt: item.receivedAt, appliedAt: at });
  }
  if (bench.applied.length > LATENCY_CAP) bench.applied.splice(0, bench.applied.length - LATENCY_CAP);
  bench.lastApplied = { position, at };
  document.body.dataset.head = String(Math.max(position, num(answer.head) ?? 0));
}

// ---- tree rendering (virtualized) -------------------------------------------

function renderTree() {
  dom.treeSizer.style.height = `${tree.visible.length * ROW_HEIGHT}px`;
  renderWindow();
}

function windowRange() {
  const total = tree.visible.length;
  const viewHeight = dom.tree.clientHeight || 600;
  const first = Math.max(0, Math.floor(dom.tree.scrollTop / ROW_HEIGHT) - OVERSCAN_ROWS);
  const last = Math.min(total, Math.ceil((dom.tree.scrollTop + viewHeight) / ROW_HEIGHT) + OVERSCAN_ROWS);
  return [first, last];
}

/** Puts in the DOM exactly the rows in view (plus a margin and the selection). */
function renderWindow() {
  const [first, last] = windowRange();
  const wanted = [];
  for (let i = first; i < last; i += 1) wanted.push(i);
  const selectedIndex = tree.visibleIndex.get(state.selectedId);
  if (selectedIndex !== undefined && (selectedIndex < first || selectedIndex >= last)) {
    wanted.push(selectedIndex);
    wanted.sort((a, b) => a - b);
  }
  const keep = new Set(wanted.map((i) => tree.visible[i].id));
  const focused = document.activeElement;
  for (const [id, row] of tree.rows) {
    if (!keep.has(id)) {
      row.remove();
      tree.rows.delete(id);
    }
  }
  let previous = dom.treeSizer;
  for (const i of wanted) {
    const node = tree.visible[i];
    let row = tree.rows.get(node.id);
    if (!row) {
      row = createRow();
      tree.rows.set(node.id, row);
    }
    patchRow(row, node, i);
    if (previous.nextElementSibling !== row) previous.after(row);
    previous = row;
  }
  if (focused && focused !== document.activeElement && focused.isConnected) focused.focus({ preventScroll: true });
  ensureTabStop();
}

/** Roving tabindex: the selected row, or the first row when it is absent. */
function ensureTabStop() {
  if (tree.rows.has(state.selectedId)) return;
  const first = dom.tree.querySelector('.node');
  if (first) first.tabIndex = 0;
}

function createRow() {
  const row = el('div', 'node');
  row.setAttribute('role', 'treeitem');
  row.tabIndex = -1;
  const toggle = el('button', 'toggle');
  toggle.type = 'button';
  toggle.tabIndex = -1;
  const parts = {
    toggle,
    spacer: el('span', 'toggle-spacer'),
    label: el('span', 'label'),
    requestedBy: el('span', 'requested-by'),
    mode: el('span', 'mode'),
    provider: el('span', 'provider'),
    state: el('span', 'state'),
    stopReason: el('span', 'stop-reason'),
    depth: el('span', 'depth'),
    liveness: el('span', 'liveness'),
  };
  parts.spacer.setAttribute('aria-hidden', 'true');
  row.append(parts.toggle, parts.spacer, parts.label, parts.requestedBy, parts.mode, parts.provider,
    parts.state, parts.stopReason, parts.depth, parts.liveness);
  tree.rowView.set(row, { parts });
  return row;
}

function update(view, key, value, apply) {
  if (view[key] === value) return;
  view[key] = value;
  apply(value);
}

/** Writes only the fields of `row` that differ from what it shows. */
function patchRow(row, node, index) {
  const view = tree.rowView.get(row);
  const p = view.parts;
  const selected = node.id === state.selectedId;
  const parentId = node.parentId;
  const children = hasChildren(node.id);
  const expanded = !tree.collapsed.has(node.id);
  update(view, 'top', index * ROW_HEIGHT, (v) => { row.style.transform = `translateY(${v}px)`; });
  update(view, 'id', node.id, (v) => { row.dataset.id = v; });
  update(view, 'label', node.label, (v) => {
    row.dataset.label = v;
    p.label.textContent = v || '(no label)';
    p.toggle.setAttribute('aria-label', `Collapse or expand ${v || 'this session'}`);
  });
  update(view, 'requestedBy', requestedByTitle(node), (v) => {
    const ref = node.requestedBy;
    p.requestedBy.textContent = ref ? `\u2190 ${truncate(ref.callId, 24)} of turn ${ref.turn}` : '';
    if (v) p.requestedBy.title = v;
    else p.requestedBy.removeAttribute('title');
  });
  update(view, 'state', node.state, (v) => {
    row.dataset.state = v;
    p.state.textContent = v;
  });
  update(view, 'stopReason', node.stopReason, (v) => {
    row.dataset.stopReason = v;
    p.stopReason.textContent = v;
  });
  update(view, 'live', node.live, (v) => {
    row.dataset.live = v ? 'true' : 'false';
    p.liveness.textContent = v ? 'live' : 'inactive';
  });
  update(view, 'mode', node.mode, (v) => {
    row.dataset.mode = v;
    p.mode.textContent = v;
  });
  update(view, 'external', node.external, (v) => { row.classList.toggle('external', v); });
  update(view, 'provider', node.provider, (v) => { p.provider.textContent = v || (parentId ? 'no provider' : 'host root'); });
  update(view, 'depth', node.depth, (v) => {
    p.depth.textContent = `depth ${v}`;
    row.style.setProperty('--depth', String(Math.min(node.level, 40)));
  });
  update(view, 'level', node.level, (v) => { row.setAttribute('aria-level', String(v + 1)); });
  update(view, 'posinset', tree.posInSet.get(node.id) || 1, (v) => { row.setAttribute('aria-posinset', String(v)); });
  update(view, 'setsize', parentId ? tree.childCount.get(parentId) || 1 : 1, (v) => { row.setAttribute('aria-setsize', String(v)); });
  update(view, 'children', children, (v) => {
    p.toggle.hidden = !v;
    p.spacer.hidden = v;
    if (!v) row.removeAttribute('aria-expanded');
    view.expanded = undefined;
  });
  if (children) {
    update(view, 'expanded', expanded, (v) => {
      row.setAttribute('aria-expanded', v ? 'true' : 'false');
      p.toggle.setAttribute('aria-expanded', v ? 'true' : 'false');
      p.toggle.textContent = v ? '\u25be' : '\u25b8';
    });
  }
  update(view, 'selected', selected, (v) => {
    row.classList.toggle('selected', v);
    row.setAttribute('aria-selected', v ? 'true' : 'false');
    row.tabIndex = v ? 0 : -1;
  });
  if (!selected && row.tabIndex !== -1) row.tabIndex = -1;
}

/** The tooltip of a node's "started by" annotation; '' without one. */
function requestedByTitle(node) {
  const ref = node.requestedBy;
  if (!ref) return '';
  const parent = tree.byId.get(node.parentId);
  const parentName = parent ? parent.label || shortId(parent.id) : shortId(node.parentId);
  return `Started by the tool call ${ref.callId} of turn ${ref.turn} of its parent \u201c${parentName}\u201d`;
}

function onTreeScroll() {
  if (timers.scrollFrame) return;
  timers.scrollFrame = requestAnimationFrame(() => {
    timers.scrollFrame = null;
    renderWindow();
  });
}

function scrollIndexIntoView(index) {
  const top = index * ROW_HEIGHT;
  const view = dom.tree;
  const height = view.clientHeight;
  if (top < view.scrollTop) view.scrollTop = top;
  else if (top + ROW_HEIGHT > view.scrollTop + height) view.scrollTop = top + ROW_HEIGHT - height;
}

function focusSelectedRow() {
  const row = tree.rows.get(state.selectedId);
  if (row) row.focus({ preventScroll: true });
}

function selectNode(id, { focus = false } = {}) {
  if (!tree.byId.has(id)) return;
  const changed = id !== state.selectedId;
  state.selectedId = id;
  const index = tree.visibleIndex.get(id);
  if (index !== undefined && focus) scrollIndexIntoView(index);
  renderWindow();
  if (focus) focusSelectedRow();
  if (changed) {
    resetTranscript(id);
    setText(dom.composerStatus, '');
    setText(dom.interruptStatus, '');
    setText(dom.composerError, '');
  }
  updateSelectionPanels();
}

/** Expands the collapsed ancestors of `id`, then selects it as a click on its row does. */
function revealAndSelect(id) {
  if (!tree.byId.has(id)) return;
  let expanded = false;
  for (let node = tree.byId.get(id); node && node.parentId; node = tree.byId.get(node.parentId)) {
    if (tree.collapsed.delete(node.parentId)) expanded = true;
  }
  if (expanded) {
    computeVisible();
    renderTree();
  }
  selectNode(id, { focus: true });
}

function toggleNode(id) {
  if (!hasChildren(id)) return;
  if (tree.collapsed.has(id)) {
    tree.collapsed.delete(id);
  } else {
    tree.collapsed.add(id);
    if (state.selectedId && isDescendant(state.selectedId, id)) {
      computeVisible();
      selectNode(id, { focus: true });
    }
  }
  computeVisible();
  renderTree();
}

function onTreeClick(event) {
  const row = event.target.closest('.node');
  if (!row || !dom.tree.contains(row)) return;
  const id = row.dataset.id;
  if (event.target.closest('.toggle')) {
    event.stopPropagation();
    toggleNode(id);
    const selected = tree.rows.get(state.selectedId);
    if (selected) selected.focus({ preventScroll: true });
    return;
  }
  selectNode(id, { focus: true });
}

function onTreeKeydown(event) {
  if (event.altKey || event.ctrlKey || event.metaKey) return;
  const total = tree.visible.length;
  if (!total) return;
  const current = tree.visibleIndex.get(state.selectedId);
  const index = current === undefined ? 0 : current;
  const node = tree.visible[index];
  const page = Math.max(1, Math.floor(dom.tree.clientHeight / ROW_HEIGHT) - 1);
  let target = null;
  switch (event.key) {
    case 'ArrowDown': target = Math.min(total - 1, current === undefined ? 0 : index + 1); break;
    case 'ArrowUp': target = Math.max(0, index - 1); break;
    case 'Home': target = 0; break;
    case 'End': target = total - 1; break;
    case 'PageDown': target = Math.min(total - 1, index + page); break;
    case 'PageUp': target = Math.max(0, index - page); break;
    case 'ArrowRight':
      if (hasChildren(node.id) && tree.collapsed.has(node.id)) toggleNode(node.id);
      else if (hasChildren(node.id)) target = Math.min(total - 1, index + 1);
      break;
    case 'ArrowLeft':
      if (hasChildren(node.id) && !tree.collapsed.has(node.id)) toggleNode(node.id);
      else if (node.parentId && tree.visibleIndex.has(node.parentId)) target = tree.visibleIndex.get(node.parentId);
      break;
    case 'Enter':
    case ' ': {
      if (event.target.closest('.toggle')) return;
      const row = event.target.closest('.node');
      target = row && tree.visibleIndex.has(row.dataset.id) ? tree.visibleIndex.get(row.dataset.id) : index;
      break;
    }
    default:
      return;
  }
  event.preventDefault();
  if (target !== null) selectNode(tree.visible[target].id, { focus: true });
}

// ---- selection panels: composer hint, interrupt ------------------------------

function selectedNode() {
  return state.selectedId ? tree.byId.get(state.selectedId) || null : null;
}

function promptEligibility() {
  if (!state.connected) return { ok: false, reason: 'Connect first.' };
  if (!state.follow) return { ok: false, reason: 'You are viewing history: press Live to prompt.' };
  const node = selectedNode();
  if (!node) return { ok: false, reason: 'Select a child session in the tree to prompt it.' };
  if (!node.parentId) return { ok: false, reason: 'The root is the host\u2019s own session: select one of its children to prompt it.' };
  if (node.external) return { ok: false, reason: 'This is an external one-shot run: it cannot be prompted.' };
  if (node.mode !== 'continuable') return { ok: false, reason: `Only continuable sessions can be prompted; this one is ${node.mode}.` };
  const parent = tree.byId.get(node.parentId);
  if (!parent) return { ok: false, reason: 'Its parent is not in this tree.' };
  if (!parent.parentId) {
    const root = currentRoot();
    if (!root || !root.held) return { ok: false, reason: 'Its parent is the root, which this server does not hold: press \u201cHold this root\u201d first.' };
    return { ok: true, reason: '' };
  }
  if (!parent.live) return { ok: false, reason: `Its parent \u201c${parent.label || shortId(parent.id)}\u201d is not live, so it cannot relay a prompt.` };
  return { ok: true, reason: '' };
}

function interruptEligibility() {
  if (!state.connected || !state.follow) return false;
  const node = selectedNode();
  return Boolean(node && node.parentId && node.live && (node.state === 'running' || node.state === 'idle'));
}

function updateSelectionPanels() {
  const node = selectedNode();
  const label = node ? node.label || shortId(node.id) : '';
  setText(dom.transcriptTitle, node ? `Transcript: ${label}` : 'Transcript');
  setText(dom.composerTitle, node && node.parentId ? `Prompt \u201c${label}\u201d` : 'Prompt the selected child');
  const eligibility = promptEligibility();
  const disabled = !eligibility.ok;
  for (const control of [dom.promptText, dom.delivery, dom.imageInput, dom.timeZone]) control.disabled = disabled;
  dom.send.disabled = disabled || composer.sending;
  setText(dom.composerHint, eligibility.ok ? 'The message goes through this child\u2019s direct parent.' : eligibility.reason);
  dom.composerHint.classList.toggle('blocked', !eligibility.ok);
  dom.interrupt.disabled = !interruptEligibility();
}

// ---- transcript -----------------------------------------------------------

function resetTranscript(sessionId) {
  transcript.gen += 1;
  transcript.sessionId = sessionId;
  transcript.lastVersion = 0;
  transcript.loading = false;
  transcript.dirty = false;
  transcript.count = 0;
  transcript.calls = [];
  dom.transcriptEntries.replaceChildren();
  setText(dom.transcriptStatus, sessionId ? 'Loading\u2026' : 'Select a session in the tree.');
  if (sessionId) fetchTranscript();
}

async function fetchTranscript() {
  if (!transcript.sessionId) return;
  if (transcript.loading) {
    transcript.dirty = true;
    return;
  }
  transcript.loading = true;
  const gen = transcript.gen;
  const id = transcript.sessionId;
  let after = transcript.lastVersion;
  let failed = null;
  for (;;) {
    const res = await api(`/v1/sessions/${enc(id)}/transcript?after=${after}&limit=${TRANSCRIPT_PAGE}`);
    if (gen !== transcript.gen) return;
    if (!res.ok) {
      failed = res.aborted ? null : res.error;
      break;
    }
    const page = obj(res.data);
    const records = Array.isArray(page.records) ? page.records : [];
    appendRecords(records);
    const next = num(page.next);
    if (next === null || records.length === 0 || next <= after) break;
    after = next;
  }
  transcript.loading = false;
  if (failed) setText(dom.transcriptStatus, `The transcript could not be read. ${describeError(failed)}`);
  else applyTranscriptFilter();
  if (transcript.dirty) {
    transcript.dirty = false;
    fetchTranscript();
  }
}

function onTranscriptRecord(record) {
  const version = num(record.version);
  if (version === null || version <= transcript.lastVersion) return;
  if (!transcript.loading && version === transcript.lastVersion + 1) {
    appendRecords([record]);
    applyTranscriptStatus();
  } else {
    fetchTranscript();
  }
}

function appendRecords(records) {
  if (!records.length) return;
  const box = dom.transcriptEntries;
  const nearBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  const fragment = document.createDocumentFragment();
  for (const record of records) {
    if (!isObject(record)) continue;
    const version = num(record.version);
    if (version !== null) {
      if (version <= transcript.lastVersion) continue;
      transcript.lastVersion = version;
    }
    const entry = renderEntry(record);
    entry.hidden = !isWithinPosition(num(record.position));
    fragment.append(entry);
    transcript.count += 1;
  }
  box.append(fragment);
  if (nearBottom) box.scrollTop = box.scrollHeight;
}

function isWithinPosition(position) {
  if (state.follow || state.position === null) return true;
  return position !== null && position <= state.position;
}

function applyTranscriptFilter() {
  for (const entry of dom.transcriptEntries.children) {
    const position = Number(entry.dataset.position);
    entry.hidden = !isWithinPosition(Number.isFinite(position) ? position : null);
  }
  applyTranscriptStatus();
}

function applyTranscriptStatus() {
  if (!transcript.sessionId) {
    setText(dom.transcriptStatus, 'Select a session in the tree.');
    return;
  }
  if (transcript.loading) return;
  const shown = dom.transcriptEntries.querySelectorAll('.entry:not([hidden])').length;
  const hiddenCount = transcript.count - shown;
  let text = transcript.count === 0 ? 'No records yet.' : `${shown} record${shown === 1 ? '' : 's'}`;
  if (hiddenCount > 0) text += `; ${hiddenCount} later record${hiddenCount === 1 ? '' : 's'} hidden (position ${state.position}).`;
  else if (transcript.count) text += '.';
  setText(dom.transcriptStatus, text);
}

// ---- transcript entries ----------------------------------------------------

function renderEntry(record) {
  const event = obj(record.event);
  const type = str(event.type) || 'Unknown';
  const data = obj(event.data);
  const entry = el('div', 'entry');
  entry.dataset.type = type;
  entry.dataset.position = String(num(record.position) ?? '');
  entry.append(entryHeader(record, type));
  const body = el('div', 'entry-body');
  const render = RENDERERS[type] || renderGeneric;
  try {
    render(body, data, entry, event);
  } catch (err) {
    body.replaceChildren(el('p', 'generic', `${type}: ${compactJson(event.data)}`));
  }
  entry.append(body);
  return entry;
}

function entryHeader(record, type) {
  const header = el('div', 'entry-header');
  header.append(el('span', 'entry-position', `#${str(record.position)}`), el('span', 'entry-type', type));
  const at = num(record.recordedAt);
  if (at !== null) {
    const time = el('time', 'entry-time', new Date(at).toLocaleTimeString());
    try {
      time.dateTime = new Date(at).toISOString();
    } catch (_err) {
      // An out-of-range timestamp keeps only its text.
    }
    header.append(time);
  }
  return header;
}

function metaLine(...items) {
  const line = el('p', 'meta');
  for (const item of items) {
    if (item === null || item === undefined || item === '') continue;
    line.append(typeof item === 'string' ? el('span', 'meta-item', item) : item);
  }
  return line;
}

function badge(className, text) {
  return el('span', `badge ${className}`, text);
}

function stopReasonLine(reason) {
  const line = el('p', 'stop-line', 'stop reason: ');
  line.append(el('span', 'stop-reason', str(reason) || 'unknown'));
  return line;
}

function renderMessageAccepted(body, data, entry) {
  const source = obj(data.source);
  const kind = str(source.kind);
  entry.classList.add('message', safeClass('source-', kind));
  entry.dataset.source = kind;
  if (kind === 'subagent-settled' || kind === 'subagent-report') entry.classList.add('notice');
  const delivery = str(data.delivery);
  body.append(metaLine(
    badge('source', SOURCE_NAMES[kind] || kind || 'unknown source'),
    badge('delivery', delivery || 'unknown delivery'),
    source.requestId !== undefined ? `request ${str(source.requestId)}` : '',
    source.zone !== undefined ? `time zone ${str(source.zone)}` : '',
    source.parentSessionId !== undefined ? `from parent ${shortId(source.parentSessionId)}` : '',
    source.senderSessionId !== undefined ? `from ${shortId(source.senderSessionId)}` : '',
  ));
  if (source.summary !== undefined) body.append(el('p', 'summary', str(source.summary)));
  renderBlocks(body, data.content, 0);
}

function renderAssistantMessage(body, data) {
  const usage = obj(data.usage);
  const tokens = num(usage.inputTokens) !== null || num(usage.outputTokens) !== null
    ? `tokens in ${num(usage.inputTokens) ?? '?'}, out ${num(usage.outputTokens) ?? '?'}` : '';
  body.append(metaLine(`turn ${str(data.turn)}`, tokens));
  const blocks = Array.isArray(data.content) ? data.content : [];
  if (!blocks.length) body.append(el('p', 'muted', '(no content)'));
  renderBlocks(body, blocks, 0);
}

function renderToolCalled(body, data, entry) {
  entry.dataset.turn = str(data.turn);
  entry.dataset.callId = str(data.callId);
  const name = el('p', 'tool-line', 'tool ');
  name.append(el('code', 'tool-name', str(data.name)));
  body.append(name, metaLine(`turn ${str(data.turn)}`, `call ${str(data.callId)}`));
  body.append(el('pre', 'json', compactJson(data.input)));
  // The children this call started, filled from the tree now and whenever it changes.
  const slot = el('div', 'started-children');
  slot.hidden = true;
  body.append(slot);
  const call = { turn: str(data.turn), callId: str(data.callId), slot, entry, key: '' };
  transcript.calls.push(call);
  linkCall(call);
}

/** Re-links every shown tool call to the children it started, as the tree now has them. */
function linkStartedChildren() {
  for (const call of transcript.calls) linkCall(call);
}

/** One "started ‹label›" line per child `call` started; rewritten only when they change. */
function linkCall(call) {
  const children = call.turn && call.callId && transcript.sessionId
    ? startedChildren(transcript.sessionId, call.turn, call.callId) : [];
  const key = JSON.stringify(children.map((node) => [node.id, node.label]));
  if (key === call.key) return;
  call.key = key;
  call.entry.classList.toggle('starts-children', children.length > 0);
  call.slot.hidden = children.length === 0;
  call.slot.replaceChildren(...children.map((node) => {
    const name = node.label || shortId(node.id);
    const link = el('button', 'started-child');
    link.type = 'button';
    link.dataset.childId = node.id;
    link.title = `Select \u201c${name}\u201d, the session this tool call started`;
    const arrow = el('span', 'started-arrow', '\u2192');
    arrow.setAttribute('aria-hidden', 'true');
    link.append(arrow, ' started ', el('span', 'started-label', name));
    link.addEventListener('click', () => revealAndSelect(node.id));
    const line = el('p', 'started-line');
    line.append(link);
    return line;
  }));
}

function renderToolReturned(body, data, entry) {
  const line = metaLine(`turn ${str(data.turn)}`, `call ${str(data.callId)}`);
  if (data.isError === true) {
    entry.classList.add('error');
    line.prepend(badge('badge-error', 'error'));
  }
  if (data.refused === true) {
    entry.classList.add('refused');
    line.prepend(badge('badge-refused', 'refused'));
  }
  body.append(line);
  renderBlocks(body, data.output, 0);
}

/** A plan as a list of its steps, or the context use as a line. */
function renderAgentReported(body, data) {
  const report = obj(data.report);
  body.append(metaLine(`turn ${str(data.turn)}`));
  if (report.kind === 'agent-session') {
    body.append(el('p', 'report-line', `agent session ${str(report.sessionId)}`));
  } else if (report.kind === 'plan') {
    const list = el('ol', 'plan');
    for (const raw of Array.isArray(report.entries) ? report.entries : []) {
      const item = obj(raw);
      const step = el('li', safeClass('plan-', item.status), str(item.content));
      step.append(' ', badge('badge-plan', `${str(item.status)}, ${str(item.priority)}`));
      list.append(step);
    }
    body.append(el('p', 'report-line', 'plan'), list);
  } else if (report.kind === 'context-usage') {
    const cost = isObject(report.cost) ? ` \u00b7 ${str(report.cost.amount)} ${str(report.cost.currency)}` : '';
    body.append(el('p', 'report-line', `context ${str(report.used)} of ${str(report.size)} tokens${cost}`));
  } else {
    body.append(el('pre', 'json', compactJson(report)));
  }
}

function renderResult(body, data, entry) {
  const result = obj(data.result);
  const parts = [];
  if (data.epoch !== undefined) parts.push(`activation ${str(data.epoch)}`);
  if (data.runId !== undefined) parts.push(`run ${shortId(data.runId)}`);
  body.append(metaLine(...parts));
  if (!isObject(data.result)) {
    body.append(el('p', 'generic', compactJson(data)));
    return;
  }
  entry.dataset.stopReason = str(result.stopReason);
  body.append(stopReasonLine(result.stopReason));
  renderBlocks(body, result.output, 0);
  if (result.structured !== undefined) {
    body.append(el('p', 'field-name', 'structured result'));
    body.append(el('pre', 'structured', prettyJson(result.structured)));
  }
  if (result.diagnostic !== undefined && result.diagnostic !== null) {
    body.append(el('p', 'diagnostic', `diagnostic: ${typeof result.diagnostic === 'string' ? result.diagnostic : compactJson(result.diagnostic)}`));
  }
}

function renderTurnEnded(body, data, entry) {
  entry.dataset.stopReason = str(data.stopReason);
  body.append(metaLine(`turn ${str(data.turn)}`), stopReasonLine(data.stopReason));
}

function renderSessionCreated(body, data) {
  body.append(el('p', 'line', `Session \u201c${str(data.label)}\u201d created`));
  body.append(metaLine(
    str(data.mode),
    data.provider ? `provider ${str(data.provider)}` : 'host root',
    `depth ${str(data.depth)}`,
    data.external === true ? 'external' : '',
    data.parent ? `parent ${shortId(data.parent)}` : '',
  ));
}

function renderChildCataloged(body, data) {
  body.append(el('p', 'line', `Child \u201c${str(data.label)}\u201d cataloged`));
  body.append(metaLine(str(data.mode), `provider ${str(data.provider)}`, data.external === true ? 'external' : '', `id ${shortId(data.child)}`));
}

function diagnosticOf(value) {
  if (value === undefined || value === null) return '';
  return typeof value === 'string' ? value : compactJson(value);
}

function lineRenderer(describe) {
  return (body, data) => {
    body.append(el('p', 'line', describe(data)));
    const diagnostic = diagnosticOf(data.diagnostic ?? data.cleanupError ?? obj(data.reason).diagnostic);
    if (diagnostic) body.append(el('p', 'diagnostic', `diagnostic: ${diagnostic}`));
  };
}

function count(list) {
  return Array.isArray(list) ? list.length : 0;
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

const RENDERERS = {
  MessageAccepted: renderMessageAccepted,
  AssistantMessage: renderAssistantMessage,
  ToolCalled: renderToolCalled,
  ToolReturned: renderToolReturned,
  AgentReported: renderAgentReported,
  TurnEnded: renderTurnEnded,
  ActivationSettled: renderResult,
  RunSettled: renderResult,
  SessionCreated: renderSessionCreated,
  ChildCataloged: renderChildCataloged,
  MessagesClaimed: lineRenderer((d) => `Turn ${str(d.turn)} claimed ${plural(count(d.ids), 'message')}`),
  MessagesDropped: lineRenderer((d) => `${plural(count(d.ids), 'message')} dropped with activation ${str(d.epoch)}`),
  TurnStarted: lineRenderer((d) => `Turn ${str(d.turn)} started (activation ${str(d.epoch)})`),
  ActivationRequested: lineRenderer((d) => `Activation ${str(d.epoch)} requested`),
  ActivationPrepared: lineRenderer((d) => `Activation ${str(d.epoch)} prepared (${plural(num(d.seededEvents) ?? 0, 'seeded event')})`),
  ActivationPublished: lineRenderer((d) => `Activation ${str(d.epoch)} published (run ${shortId(d.runId)})`),
  ActivationReleased: lineRenderer((d) => `Activation ${str(d.epoch)} released`),
  ActivationAbandoned: lineRenderer((d) => `Activation ${str(d.epoch)} abandoned: ${str(obj(d.reason).kind) || 'unknown reason'}`),
  RunRequested: lineRenderer((d) => `Run ${shortId(d.runId)} requested from provider ${str(d.provider)}`),
  RunStarted: lineRenderer((d) => `Run ${shortId(d.runId)} started`),
  RunDisposed: lineRenderer((d) => `Run ${shortId(d.runId)} disposed`),
  RunStartFailed: lineRenderer((d) => `Run ${shortId(d.runId)} failed to start`),
  InterruptRequested: lineRenderer((d) => `Interrupt requested by ${str(obj(d.authority).kind) || 'unknown authority'}`),
  HistorySeeded: lineRenderer((d) => `History seeded from ${shortId(d.source)} through version ${str(d.throughVersion)} (${plural(count(d.events), 'event')})`),
};

function renderGeneric(body, _data, _entry, event) {
  body.append(el('p', 'generic', `${str(event.type) || 'Unknown'} ${compactJson(event.data)}`));
}

// ---- content blocks -----------------------------------------------------------

function renderBlocks(container, blocks, nesting) {
  if (!Array.isArray(blocks)) return;
  for (const block of blocks) container.append(renderBlock(block, nesting));
}

function renderBlock(block, nesting) {
  const b = obj(block);
  switch (b.type) {
    case 'text':
      return el('p', 'text', str(b.text));
    case 'image':
      return renderImage(b);
    case 'tool_use': {
      const wrap = el('div', 'tool-use');
      const line = el('p', 'tool-line', 'tool use ');
      line.append(el('code', 'tool-name', str(b.name)));
      wrap.append(line, el('pre', 'json', compactJson(b.input)));
      return wrap;
    }
    case 'tool_result': {
      const wrap = el('div', b.isError === true ? 'tool-result error' : 'tool-result');
      wrap.append(el('p', 'meta', `tool result${b.isError === true ? ' (error)' : ''}`));
      if (nesting < MAX_BLOCK_NESTING) renderBlocks(wrap, b.content, nesting + 1);
      else wrap.append(el('pre', 'json', compactJson(b.content)));
      return wrap;
    }
    default:
      return el('pre', 'json generic', compactJson(block));
  }
}

function renderImage(block) {
  const wrap = el('span', 'image-block');
  const mime = str(block.mimeType);
  if (typeof block.attachment === 'string' && block.attachment) {
    const img = el('img', 'thumb');
    img.alt = 'attached image';
    img.decoding = 'async';
    wrap.append(img);
    loadAttachment(block.attachment).then((url) => {
      if (url) img.src = url;
      else wrap.replaceChildren(el('span', 'muted', '(the attached image could not be loaded)'));
    });
    return wrap;
  }
  if (typeof block.data === 'string' && IMAGE_TYPES.has(mime) && /^[A-Za-z0-9+/=\s]*$/.test(block.data)) {
    const img = el('img', 'thumb');
    img.alt = 'inline image';
    img.src = `data:${mime};base64,${block.data.replace(/\s+/g, '')}`;
    wrap.append(img);
    return wrap;
  }
  wrap.append(el('span', 'muted', `(image${mime ? ` ${mime}` : ''})`));
  return wrap;
}

/** The object URL of an attachment, fetched once with the token; null on failure. */
function loadAttachment(id) {
  const cached = attachments.get(id);
  if (cached) return cached;
  const promise = fetchAttachment(id);
  attachments.set(id, promise);
  promise.then((url) => { if (!url) attachments.delete(id); });
  return promise;
}

async function fetchAttachment(id) {
  const token = state.token;
  if (!token) return null;
  try {
    const response = await fetch(`/v1/attachments/${enc(id)}`, {
      headers: { Authorization: `Bearer ${token}` },
    });
    if (!response.ok) return null;
    const blob = await response.blob();
    if (token !== state.token) return null;
    return URL.createObjectURL(blob);
  } catch (_err) {
    return null;
  }
}

function revokeAttachments() {
  for (const promise of attachments.values()) {
    promise.then((url) => { if (url) URL.revokeObjectURL(url); });
  }
  attachments.clear();
}

// ---- composer ----------------------------------------------------------------

function addImages(files) {
  let refused = 0;
  for (const file of files) {
    if (!file || !IMAGE_TYPES.has(file.type)) {
      refused += 1;
      continue;
    }
    composer.images.push({ id: composer.nextImageId++, file, url: URL.createObjectURL(file) });
  }
  if (refused) setText(dom.composerError, 'Only PNG, JPEG, GIF or WebP images can be attached.');
  renderPreviews();
}

function removeImage(id) {
  const image = composer.images.find((item) => item.id === id);
  if (image) URL.revokeObjectURL(image.url);
  composer.images = composer.images.filter((item) => item.id !== id);
  renderPreviews();
}

function clearImages() {
  for (const image of composer.images) URL.revokeObjectURL(image.url);
  composer.images = [];
  if (dom.imagePreviews) renderPreviews();
}

function renderPreviews() {
  const items = composer.images.map((image, index) => {
    const item = el('figure', 'preview-item');
    const img = el('img', 'preview');
    img.src = image.url;
    const name = image.file.name || `image ${index + 1}`;
    img.alt = `Image to send: ${name}`;
    const remove = el('button', 'remove-image', 'Remove');
    remove.type = 'button';
    remove.setAttribute('aria-label', `Remove image ${name}`);
    remove.addEventListener('click', () => removeImage(image.id));
    item.append(img, el('figcaption', '', name), remove);
    return item;
  });
  dom.imagePreviews.replaceChildren(...items);
}

function onImageInput() {
  addImages(Array.from(dom.imageInput.files || []));
  dom.imageInput.value = '';
}

function onPaste(event) {
  const data = event.clipboardData;
  if (!data) return;
  const files = [];
  if (data.items) {
    for (const item of data.items) {
      if (item.kind === 'file' && item.type.startsWith('image/')) {
        const file = item.getAsFile();
        if (file) files.push(file);
      }
    }
  } else if (data.files) {
    files.push(...Array.from(data.files).filter((file) => file.type.startsWith('image/')));
  }
  if (!files.length) return;
  if (!data.getData('text/plain')) event.preventDefault();
  addImages(files);
}

function bytesToBase64(buffer) {
  const bytes = new Uint8Array(buffer);
  const chunk = 0x8000;
  let binary = '';
  for (let i = 0; i < bytes.length; i += chunk) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + chunk));
  }
  return btoa(binary);
}

async function imageBlocks() {
  const blocks = [];
  for (const image of composer.images) {
    const buffer = await image.file.arrayBuffer();
    blocks.push({ type: 'image', mimeType: image.file.type, data: bytesToBase64(buffer) });
  }
  return blocks;
}

async function onSend(event) {
  event.preventDefault();
  if (composer.sending) return;
  setText(dom.composerError, '');
  setText(dom.composerStatus, '');
  const eligibility = promptEligibility();
  if (!eligibility.ok) {
    setText(dom.composerError, eligibility.reason);
    return;
  }
  const node = selectedNode();
  const text = dom.promptText.value;
  if (!text.trim() && composer.images.length === 0) {
    setText(dom.composerError, 'Write a message or attach an image first.');
    return;
  }
  composer.sending = true;
  dom.send.disabled = true;
  setText(dom.composerStatus, 'Sending\u2026');
  try {
    await sendPrompt(node, text);
  } finally {
    composer.sending = false;
    updateSelectionPanels();
  }
}

async function sendPrompt(node, text) {
  let content;
  try {
    content = text.trim() ? [{ type: 'text', text }] : [];
    content.push(...(await imageBlocks()));
  } catch (err) {
    setText(dom.composerStatus, '');
    setText(dom.composerError, `An image could not be read: ${errorText(err)}`);
    return;
  }
  const body = {
    address: { childSessionId: node.id, parentSessionId: node.parentId, mode: 'continuable' },
    delivery: dom.delivery.value === 'steer' ? 'steer' : 'queue',
    requestId: newRequestId(),
    content,
  };
  const zone = dom.timeZone.value.trim();
  if (zone) body.timeZone = zone;
  const res = await api('/v1/prompt', { method: 'POST', body });
  if (!res.ok) {
    setText(dom.composerStatus, '');
    setText(dom.composerError, describeError(res.error));
    return;
  }
  setText(dom.composerStatus, `Accepted (message ${str(obj(res.data).messageId)})`);
  dom.promptText.value = '';
  clearImages();
}

function newRequestId() {
  if (window.crypto && typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

async function onInterrupt() {
  const node = selectedNode();
  if (!node || !interruptEligibility()) return;
  setText(dom.composerError, '');
  setText(dom.interruptStatus, 'Interrupting\u2026');
  dom.interrupt.disabled = true;
  const res = await api('/v1/interruptByParent', {
    method: 'POST',
    body: { childSessionId: node.id, parentSessionId: node.parentId, mode: 'continuable' },
  });
  updateSelectionPanels();
  if (!res.ok) {
    setText(dom.interruptStatus, '');
    setText(dom.composerError, describeError(res.error));
    return;
  }
  setText(dom.interruptStatus, obj(res.data).interrupted === true ? 'Interrupted' : 'Nothing was running');
}

// ---- time travel ----------------------------------------------------------------

function updatePositionControls() {
  const max = Math.max(1, state.head);
  dom.position.max = String(max);
  dom.positionNumber.max = String(max);
  dom.followLive.setAttribute('aria-pressed', state.follow ? 'true' : 'false');
  dom.followLive.classList.toggle('active', state.follow);
  if (state.follow) {
    dom.position.value = String(max);
    if (document.activeElement !== dom.positionNumber) dom.positionNumber.value = String(max);
    setText(dom.positionLabel, `Live (head ${state.head})`);
  } else {
    setText(dom.positionLabel, `Position ${state.position} of ${state.head}`);
  }
}

function onPositionInput() {
  dom.positionNumber.value = dom.position.value;
  clearTimeout(timers.position);
  timers.position = setTimeout(() => goToPosition(Number(dom.position.value)), POSITION_DEBOUNCE_MS);
}

function onPositionNumberChange() {
  clearTimeout(timers.position);
  const text = dom.positionNumber.value.trim();
  if (!/^\d+$/.test(text)) {
    setText(dom.treeStatus, 'Enter a log position as a whole number.');
    return;
  }
  goToPosition(Number(text));
}

async function goToPosition(requested) {
  if (!state.rootId || !Number.isFinite(requested)) return;
  if (state.head < 1) {
    setText(dom.treeStatus, 'The log is empty: there is no position to travel to.');
    return;
  }
  const position = Math.min(state.head, Math.max(1, Math.round(requested)));
  state.follow = false;
  state.position = position;
  cancelTreeRefresh();
  document.body.dataset.position = String(position);
  dom.position.value = String(position);
  dom.positionNumber.value = String(position);
  updatePositionControls();
  applyTranscriptFilter();
  updateSelectionPanels();
  const seq = ++tree.historySeq;
  const gen = state.rootGen;
  setText(dom.treeStatus, `Loading the tree at position ${position}\u2026`);
  const res = await fetchTree(position);
  if (seq !== tree.historySeq || gen !== state.rootGen || state.follow) return;
  if (!res.ok) {
    if (!res.aborted) setText(dom.treeStatus, `The tree at position ${position} could not be read. ${describeError(res.error)}`);
    return;
  }
  setText(dom.treeStatus, '');
  applyTreeAnswer(res.data, []);
}

function followLive() {
  if (!state.rootId) return;
  clearTimeout(timers.position);
  tree.historySeq += 1;
  state.follow = true;
  state.position = null;
  document.body.dataset.position = 'live';
  updatePositionControls();
  applyTranscriptFilter();
  updateSelectionPanels();
  requestTreeRefresh(0);
}

// ---- diff and verify --------------------------------------------------------------

function readPosition(input) {
  const text = input.value.trim();
  if (!/^\d+$/.test(text)) return null;
  return Number(text);
}

async function runDiff() {
  const from = readPosition(dom.diffFrom);
  const to = readPosition(dom.diffTo);
  if (from === null || to === null) {
    setText(dom.diffStatus, 'Enter two log positions (whole numbers).');
    return;
  }
  dom.diffRun.disabled = true;
  setText(dom.diffStatus, 'Comparing\u2026');
  const res = await api(`/v1/diff?from=${from}&to=${to}`);
  dom.diffRun.disabled = false;
  if (!res.ok) {
    setText(dom.diffStatus, describeError(res.error));
    dom.diffOutput.replaceChildren();
    return;
  }
  const changes = Array.isArray(obj(res.data).changes) ? res.data.changes : [];
  const items = changes.map((change) => {
    const c = obj(change);
    const kind = str(c.change);
    const item = el('li', /^[a-z0-9-]{1,60}$/.test(kind) ? kind : 'change-other', str(c.text) || kind);
    item.dataset.change = kind;
    return item;
  });
  dom.diffOutput.replaceChildren(...items);
  setText(dom.diffStatus, changes.length
    ? `${plural(changes.length, 'change')} from ${str(res.data.from ?? from)} to ${str(res.data.to ?? to)}.`
    : `No changes from ${from} to ${to}.`);
}

async function runVerify() {
  dom.verifyRun.disabled = true;
  dom.verifyStatus.className = 'status';
  dom.verifyStatus.replaceChildren(el('span', '', 'Verifying\u2026'));
  const res = await api('/v1/verify');
  dom.verifyRun.disabled = false;
  if (!res.ok) {
    dom.verifyStatus.className = 'status failed';
    dom.verifyStatus.replaceChildren(el('span', '', describeError(res.error)));
    return;
  }
  const report = obj(res.data);
  const problems = Array.isArray(report.problems) ? report.problems : [];
  const notes = Array.isArray(report.notes) ? report.notes : [];
  if (report.ok === true) {
    dom.verifyStatus.className = 'status ok';
    const said = [el('span', '', `Verified ${str(report.events)} events up to ${str(report.head)}: OK`)];
    if (notes.length > 0) {
      const list = el('ul', 'notes');
      for (const note of notes) list.append(el('li', '', str(note)));
      said.push(list);
    }
    dom.verifyStatus.replaceChildren(...said);
    return;
  }
  dom.verifyStatus.className = 'status failed';
  const list = el('ul', 'problems');
  for (const problem of problems) list.append(el('li', '', typeof problem === 'string' ? problem : compactJson(problem)));
  dom.verifyStatus.replaceChildren(
    el('span', '', `Verification failed with ${plural(problems.length, 'problem')} (${str(report.events)} events up to ${str(report.head)}):`),
    list,
  );
}

// ---- wiring ---------------------------------------------------------------------

function collectDom() {
  const ids = {
    connectForm: 'connect-form', token: 'token', connect: 'connect', disconnect: 'disconnect',
    connectStatus: 'connect-status', connectError: 'connect-error',
    rootPicker: 'root-picker', roots: 'roots', rootsRefresh: 'roots-refresh', holdRoot: 'hold-root',
    rootStatus: 'root-status', rootError: 'root-error', streamStatus: 'stream-status',
    app: 'app', tree: 'tree', treeStatus: 'tree-status',
    transcript: 'transcript', transcriptTitle: 'transcript-title', transcriptStatus: 'transcript-status',
    transcriptEntries: 'transcript-entries',
    composerForm: 'composer', composerTitle: 'composer-title', composerHint: 'composer-hint',
    promptText: 'prompt-text', delivery: 'delivery', timeZone: 'time-zone', imageInput: 'image-input',
    imagePreviews: 'image-previews', send: 'send', composerStatus: 'composer-status',
    composerError: 'composer-error', interrupt: 'interrupt', interruptStatus: 'interrupt-status',
    position: 'position', positionNumber: 'position-number', followLive: 'follow-live',
    positionLabel: 'position-label',
    diffFrom: 'diff-from', diffTo: 'diff-to', diffRun: 'diff-run', diffStatus: 'diff-status',
    diffOutput: 'diff-output', verifyRun: 'verify-run', verifyStatus: 'verify-status',
  };
  for (const [key, id] of Object.entries(ids)) {
    const found = document.getElementById(id);
    if (!found) throw new Error(`the page has no #${id}`);
    dom[key] = found;
  }
  dom.treeSizer = el('div', 'tree-sizer');
  dom.treeSizer.setAttribute('aria-hidden', 'true');
  dom.tree.replaceChildren(dom.treeSizer);
}

function wire() {
  dom.connectForm.addEventListener('submit', onConnectSubmit);
  dom.disconnect.addEventListener('click', forgetToken);
  dom.roots.addEventListener('change', onRootChange);
  dom.rootsRefresh.addEventListener('click', () => { refreshRoots(); });
  dom.holdRoot.addEventListener('click', () => { holdRoot(); });
  dom.tree.addEventListener('click', onTreeClick);
  dom.tree.addEventListener('keydown', onTreeKeydown);
  dom.tree.addEventListener('scroll', onTreeScroll, { passive: true });
  window.addEventListener('resize', onTreeScroll);
  dom.composerForm.addEventListener('submit', (event) => { onSend(event); });
  dom.imageInput.addEventListener('change', onImageInput);
  dom.promptText.addEventListener('paste', onPaste);
  dom.interrupt.addEventListener('click', () => { onInterrupt(); });
  dom.position.addEventListener('input', onPositionInput);
  dom.positionNumber.addEventListener('change', onPositionNumberChange);
  dom.followLive.addEventListener('click', followLive);
  dom.diffRun.addEventListener('click', () => { runDiff(); });
  dom.verifyRun.addEventListener('click', () => { runVerify(); });
  window.addEventListener('unhandledrejection', (event) => {
    setText(dom.connectError, `Unexpected error: ${errorText(event.reason)}`);
  });
}

function defaultTimeZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || '';
  } catch (_err) {
    return '';
  }
}

function start() {
  collectDom();
  wire();
  dom.timeZone.value = defaultTimeZone();
  document.body.dataset.ready = 'false';
  document.body.dataset.position = 'live';
  updatePositionControls();
  updateSelectionPanels();
  setText(dom.transcriptStatus, 'Select a session in the tree.');
  const stored = readStoredToken();
  if (stored) connect(stored);
}

start();
