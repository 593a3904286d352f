// The chat page: wires the form, the model picker, the settings and the conversation list to the
// API (api.js), the browser store (store.js) and the renderer (view.js).

import { ApiError, listModels, streamChat } from "./api.js";
import { chatRequest } from "./request.js";
import * as store from "./store.js";
import { renderConversationList, renderMessages, updateMessage } from "./view.js";

const $ = (id) => document.getElementById(id);
const ui = {
  sidebar: $("sidebar"),
  list: $("conversations"),
  model: $("model"),
  messages: $("messages"),
  error: $("error"),
  form: $("composer"),
  input: $("input"),
  send: $("send"),
  stop: $("stop"),
  settings: $("settings"),
  settingsToggle: $("settings-toggle"),
  fields: {
    system: $("system"),
    temperature: $("temperature"),
    top_p: $("top_p"),
    max_tokens: $("max_tokens"),
    extra: $("extra"),
    apiKey: $("api-key"),
  },
};

const state = {
  settings: store.loadSettings(),
  conversations: store.loadConversations(),
  currentId: null,
  controller: null, // the AbortController of the answer streaming now
};

function current() {
  return state.conversations.find((c) => c.id === state.currentId) || null;
}

function persist() {
  store.saveConversations(state.conversations);
  store.saveSettings({ ...state.settings, currentId: state.currentId });
}

function showError(text) {
  ui.error.textContent = text || "";
  ui.error.hidden = !text;
}

function renderList() {
  renderConversationList(ui.list, state.conversations, state.currentId, {
    onOpen: (id) => {
      if (state.controller) return;
      state.currentId = id;
      const conv = current();
      if (conv?.model && [...ui.model.options].some((o) => o.value === conv.model)) ui.model.value = conv.model;
      ui.sidebar.classList.remove("open");
      persist();
      render();
    },
    onDelete: (id) => {
      if (state.controller && id === state.currentId) return;
      state.conversations = state.conversations.filter((c) => c.id !== id);
      if (state.currentId === id) state.currentId = state.conversations[0]?.id || null;
      persist();
      render();
    },
  });
}

function render() {
  renderList();
  renderMessages(ui.messages, current()?.messages || []);
  ui.messages.scrollTop = ui.messages.scrollHeight;
}

// ---- settings
function loadFields() {
  for (const [k, input] of Object.entries(ui.fields)) input.value = state.settings[k] ?? "";
}

function readFields() {
  const f = ui.fields;
  state.settings.system = f.system.value;
  state.settings.temperature = f.temperature.value === "" ? "" : Number(f.temperature.value);
  state.settings.top_p = f.top_p.value === "" ? "" : Number(f.top_p.value);
  state.settings.max_tokens = f.max_tokens.value === "" ? "" : Number(f.max_tokens.value);
  state.settings.extra = f.extra.value;
  state.settings.apiKey = f.apiKey.value;
  persist();
}

// ---- models
async function loadModels() {
  try {
    const models = await listModels(state.settings.apiKey);
    ui.model.replaceChildren(...models.map((m) => new Option(m, m)));
    const want = current()?.model || state.settings.model;
    if (want && models.includes(want)) ui.model.value = want;
    state.settings.model = ui.model.value;
    showError("");
  } catch (e) {
    showError(e instanceof ApiError ? e.describe() : `Cannot reach the server: ${e.message}`);
    if (e.status === 401) openSettings(true);
  }
}

function openSettings(open) {
  ui.settings.hidden = !open;
  ui.settingsToggle.setAttribute("aria-expanded", String(open));
}

// ---- chat
function setStreaming(on) {
  ui.send.hidden = on;
  ui.stop.hidden = !on;
  ui.model.disabled = on;
}

async function send(text) {
  if (state.controller) return;
  let conv = current();
  if (!conv) {
    conv = store.newConversation(ui.model.value);
    state.conversations.unshift(conv);
    state.currentId = conv.id;
  }
  if (!conv.messages.length) conv.title = store.titleFrom(text);
  conv.model = ui.model.value;
  conv.messages.push({ role: "user", content: text });
  let body;
  try {
    body = chatRequest(conv, state.settings, ui.model.value);
  } catch (e) {
    conv.messages.pop();
    showError(e.describe());
    return;
  }
  const answer = { role: "assistant", content: "", reasoning: "", stats: null };
  conv.messages.push(answer);
  conv.updated = Date.now();
  persist();
  render();
  showError("");
  const node = ui.messages.lastElementChild;
  const controller = new AbortController();
  state.controller = controller;
  setStreaming(true);
  const t0 = performance.now();
  let first = null;
  let deltas = 0;
  let pending = false;
  const redraw = () => {
    pending = false;
    updateMessage(node, answer);
    ui.messages.scrollTop = ui.messages.scrollHeight;
  };
  let usage = null;
  let finish = null;
  try {
    ({ usage, finishReason: finish } = await streamChat({
      key: state.settings.apiKey,
      body,
      signal: controller.signal,
      onDelta: ({ content, reasoning }) => {
        if (first === null) first = performance.now();
        deltas += 1;
        answer.content += content;
        answer.reasoning += reasoning;
        if (!pending) {
          pending = true;
          requestAnimationFrame(redraw);
        }
      },
    }));
  } catch (e) {
    if (e.name === "AbortError") answer.stopped = true;
    else {
      answer.error = e instanceof ApiError ? e.describe() : `Connection failed: ${e.message}`;
      showError(answer.error);
    }
  }
  const end = performance.now();
  const tokens = usage?.completion_tokens ?? deltas;
  const decodeS = first !== null ? (end - first) / 1000 : 0;
  answer.stats =
    answer.error && first === null
      ? null
      : {
          ttftMs: first !== null ? first - t0 : null,
          tokens,
          tokensPerS: tokens > 1 && decodeS > 0 ? (tokens - 1) / decodeS : null,
          finish,
          stopped: Boolean(answer.stopped),
        };
  delete answer.stopped;
  if (!answer.reasoning) delete answer.reasoning;
  state.controller = null;
  setStreaming(false);
  conv.updated = Date.now();
  persist();
  updateMessage(node, answer);
  renderList();
}

// ---- wiring
ui.form.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = ui.input.value.trim();
  if (!text || state.controller) return;
  ui.input.value = "";
  send(text);
});
ui.input.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    ui.form.requestSubmit();
  }
});
ui.stop.addEventListener("click", () => state.controller?.abort());
$("new-chat").addEventListener("click", () => {
  if (state.controller) return;
  state.currentId = null;
  ui.sidebar.classList.remove("open");
  persist();
  render();
  ui.input.focus();
});
ui.model.addEventListener("change", () => {
  state.settings.model = ui.model.value;
  persist();
});
ui.settingsToggle.addEventListener("click", () => openSettings(ui.settings.hidden));
for (const input of Object.values(ui.fields)) input.addEventListener("change", readFields);
ui.fields.apiKey.addEventListener("change", loadModels);
$("open-sidebar").addEventListener("click", () => ui.sidebar.classList.add("open"));
$("close-sidebar").addEventListener("click", () => ui.sidebar.classList.remove("open"));
$("export").addEventListener("click", () => {
  const blob = new Blob([store.exportJson(state.conversations)], { type: "application/json" });
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = `modelc-conversations-${new Date().toISOString().slice(0, 10)}.json`;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
});
$("import-file").addEventListener("change", async (ev) => {
  const file = ev.target.files?.[0];
  ev.target.value = "";
  if (!file) return;
  try {
    const imported = store.importJson(await file.text());
    state.conversations = store.merge(state.conversations, imported);
    state.currentId = imported[0]?.id ?? state.currentId;
    persist();
    render();
    showError("");
  } catch (e) {
    showError(`Import failed: ${e.message}`);
  }
});
ui.messages.addEventListener("click", (ev) => {
  const button = ev.target.closest("button.copy");
  if (!button) return;
  const code = button.parentElement.querySelector("pre")?.textContent ?? "";
  navigator.clipboard?.writeText(code).then(() => {
    button.textContent = "Copied";
    setTimeout(() => (button.textContent = "Copy"), 1200);
  });
});

state.currentId = store.loadSettings().currentId || null;
if (!current()) state.currentId = state.conversations[0]?.id || null;
loadFields();
render();
loadModels();
