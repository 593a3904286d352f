// DOM rendering: the conversation list and the messages. Message text goes through the safe
// Markdown renderer (markdown.js); every other string is set with textContent.

import { renderMarkdown } from "./markdown.js";

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c) node.append(c);
  return node;
}

export function renderConversationList(ul, list, currentId, { onOpen, onDelete }) {
  ul.replaceChildren(
    ...list.map((c) =>
      el(
        "li",
        { class: c.id === currentId ? "active" : "", "data-id": c.id },
        el("button", { type: "button", class: "open", text: c.title, title: c.title, onclick: () => onOpen(c.id) }),
        el("button", {
          type: "button",
          class: "icon delete",
          "aria-label": "Delete conversation",
          text: "\u00d7",
          onclick: () => onDelete(c.id),
        }),
      ),
    ),
  );
}

export function statsText(stats) {
  if (!stats) return "";
  const parts = [];
  if (stats.ttftMs != null) parts.push(`TTFT ${Math.round(stats.ttftMs)} ms`);
  if (stats.tokens != null) parts.push(`${stats.tokens} tokens`);
  if (stats.tokensPerS != null) parts.push(`${stats.tokensPerS.toFixed(1)} tok/s`);
  if (stats.stopped) parts.push("stopped");
  else if (stats.finish) parts.push(stats.finish);
  return parts.join(" \u00b7 ");
}

// One message's element; updateMessage refreshes it while it streams.
export function messageNode(msg) {
  const node = el("article", { class: `message ${msg.role}` });
  updateMessage(node, msg);
  return node;
}

export function updateMessage(node, msg) {
  const parts = [el("div", { class: "role", text: msg.role === "user" ? "You" : "Assistant" })];
  if (msg.reasoning) {
    const details = el("details", { class: "reasoning" }, el("summary", { text: "Reasoning" }));
    const body = el("div", { class: "reasoning-body" });
    body.innerHTML = renderMarkdown(msg.reasoning);
    details.append(body);
    const old = node.querySelector("details.reasoning");
    if (old?.open) details.open = true;
    parts.push(details);
  }
  const body = el("div", { class: "content" });
  if (msg.role === "user") body.textContent = msg.content;
  else body.innerHTML = renderMarkdown(msg.content);
  parts.push(body);
  if (msg.error) parts.push(el("div", { class: "message-error", text: msg.error }));
  const stats = statsText(msg.stats);
  if (stats) parts.push(el("div", { class: "stats", text: stats }));
  node.replaceChildren(...parts);
}

export function renderMessages(container, messages) {
  container.replaceChildren(...messages.map(messageNode));
  if (!messages.length) {
    container.append(el("div", { class: "empty", text: "Start a conversation: type a message below." }));
  }
}
