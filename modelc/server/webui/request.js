// The chat-completions request for a conversation: system prompt, the turns that got an answer,
// the sampling settings and the user's extra JSON fields. Pure: no DOM, no network.

import { ApiError } from "./api.js";

export function extraFields(raw) {
  const text = (raw || "").trim();
  if (!text) return {};
  let obj;
  try {
    obj = JSON.parse(text);
  } catch (e) {
    throw new ApiError(0, `Extra request JSON is not valid JSON: ${e.message}`);
  }
  if (!obj || typeof obj !== "object" || Array.isArray(obj)) throw new ApiError(0, "Extra request JSON must be an object");
  return obj;
}

export function chatRequest(conv, settings, model) {
  const messages = [];
  if (settings.system.trim()) messages.push({ role: "system", content: settings.system });
  conv.messages.forEach((m, i) => {
    const next = conv.messages[i + 1];
    const failed = next?.role === "assistant" && next.error && !next.content; // a turn that got no answer
    if ((m.role === "user" && !failed) || (m.role === "assistant" && m.content)) {
      messages.push({ role: m.role, content: m.content });
    }
  });
  const body = { model, messages };
  for (const k of ["temperature", "top_p", "max_tokens"]) {
    if (settings[k] !== "" && settings[k] != null) body[k] = settings[k];
  }
  return { ...body, ...extraFields(settings.extra) };
}
