// Conversations and settings kept in the browser (localStorage), with JSON export and import.
// A conversation: {id, title, model, messages: [{role, content, reasoning?, stats?, error?}], updated}.

const CONVERSATIONS = "modelc.conversations";
const SETTINGS = "modelc.settings";
const FORMAT = "modelc-conversations";

export const DEFAULT_SETTINGS = {
  system: "",
  temperature: 0.7,
  top_p: 1.0,
  max_tokens: 512,
  extra: "",
  apiKey: "",
  model: "",
};

function read(key, fallback) {
  try {
    const raw = localStorage.getItem(key);
    return raw ? JSON.parse(raw) : fallback;
  } catch {
    return fallback;
  }
}

export function loadSettings() {
  return { ...DEFAULT_SETTINGS, ...read(SETTINGS, {}) };
}

export function saveSettings(settings) {
  localStorage.setItem(SETTINGS, JSON.stringify(settings));
}

export function loadConversations() {
  const list = read(CONVERSATIONS, []);
  return Array.isArray(list) ? list.filter(isConversation) : [];
}

export function saveConversations(list) {
  localStorage.setItem(CONVERSATIONS, JSON.stringify(list));
}

export function newConversation(model) {
  const id = crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2);
  return { id, title: "New chat", model, messages: [], updated: Date.now() };
}

export function titleFrom(text) {
  const t = text.trim().replace(/\s+/g, " ");
  return t.length > 48 ? `${t.slice(0, 45)}...` : t || "New chat";
}

function isConversation(c) {
  return (
    c &&
    typeof c.id === "string" &&
    typeof c.title === "string" &&
    Array.isArray(c.messages) &&
    c.messages.every((m) => m && typeof m.role === "string" && typeof m.content === "string")
  );
}

export function exportJson(list) {
  return JSON.stringify({ format: FORMAT, version: 1, conversations: list }, null, 2);
}

// Parse an exported file; returns the conversations or throws an Error saying what is wrong.
export function importJson(text) {
  let data;
  try {
    data = JSON.parse(text);
  } catch (e) {
    throw new Error(`not a JSON file: ${e.message}`);
  }
  const list = Array.isArray(data) ? data : data?.conversations;
  if (!Array.isArray(list)) throw new Error("no 'conversations' list in this file");
  const bad = list.findIndex((c) => !isConversation(c));
  if (bad >= 0) throw new Error(`conversation ${bad} is not in modelc's format`);
  return list;
}

// Imported conversations join the list; one with a known id replaces the stored one.
export function merge(list, imported) {
  const byId = new Map(list.map((c) => [c.id, c]));
  for (const c of imported) byId.set(c.id, c);
  return [...byId.values()].sort((a, b) => (b.updated || 0) - (a.updated || 0));
}
