// DOM rendering: the conversation list and the messages. Message text goes through the safe
// Markdown renderer (markdown.js); every other string is set with textContent.

import { BlockEnds, renderMarkdown } from "./markdown.js";

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

function nodesOf(html) {
  const tpl = document.createElement("template");
  tpl.innerHTML = html;
  return [...tpl.content.childNodes];
}

// A growing Markdown text in `container`: the finished blocks (markdown.js BlockEnds) are rendered once
// and kept; only the block still open is rendered again on each update, so streaming an answer costs
// time linear in its length. The result is exactly renderMarkdown(text). `renderedChars` counts the
// text handed to the renderer (the tests check it stays linear).
export class MarkdownView {
  constructor(container) {
    this.container = container;
    this.reset();
  }

  reset() {
    this.text = "";
    this.ends = new BlockEnds();
    this.done = 0; // text[0:done] is rendered into finished nodes
    this.tail = []; // the open block's nodes
    this.renderedChars = 0;
    this.container.replaceChildren();
  }

  update(text) {
    if (text === this.text) return;
    if (!text.startsWith(this.text)) this.reset(); // not a continuation: start over
    const end = this.ends.update(text);
    for (const n of this.tail) n.remove();
    if (end > this.done) {
      this.container.append(...nodesOf(this.render(text.slice(this.done, end))));
      this.done = end;
    }
    this.tail = nodesOf(this.render(text.slice(this.done)));
    this.container.append(...this.tail);
    this.text = text;
  }

  render(text) {
    this.renderedChars += text.length;
    return renderMarkdown(text);
  }
}

// One message's element; updateMessage refreshes it while it streams (only what changed).
export function messageNode(msg) {
  const node = el("article", { class: `message ${msg.role}` });
  updateMessage(node, msg);
  return node;
}

function messageParts(node, msg) {
  if (!node.parts) {
    const content = el("div", { class: "content" });
    node.replaceChildren(el("div", { class: "role", text: msg.role === "user" ? "You" : "Assistant" }), content);
    node.parts = { content, view: msg.role === "user" ? null : new MarkdownView(content) };
  }
  return node.parts;
}

// The optional part `key` of a message (made on first use, placed before `before`), or null when empty.
function optional(node, parts, key, make, before, wanted) {
  if (!wanted) {
    parts[key]?.remove();
    delete parts[key];
    return null;
  }
  if (!parts[key]) {
    parts[key] = make();
    node.insertBefore(parts[key], before);
  }
  return parts[key];
}

export function updateMessage(node, msg) {
  const parts = messageParts(node, msg);
  const reasoning = optional(
    node,
    parts,
    "reasoning",
    () => {
      const body = el("div", { class: "reasoning-body" });
      parts.reasoningView = new MarkdownView(body);
      return el("details", { class: "reasoning" }, el("summary", { text: "Reasoning" }), body);
    },
    parts.content,
    Boolean(msg.reasoning),
  );
  if (reasoning) parts.reasoningView.update(msg.reasoning);
  if (parts.view) parts.view.update(msg.content || "");
  else if (parts.content.textContent !== msg.content) parts.content.textContent = msg.content;
  const makeError = () => el("div", { class: "message-error" });
  const error = optional(node, parts, "error", makeError, parts.stats || null, Boolean(msg.error));
  if (error) error.textContent = msg.error;
  const stats = statsText(msg.stats);
  const statsNode = optional(node, parts, "stats", () => el("div", { class: "stats" }), null, Boolean(stats));
  if (statsNode) statsNode.textContent = stats;
}

export function renderMessages(container, messages) {
  container.replaceChildren(...messages.map(messageNode));
  if (!messages.length) {
    container.append(el("div", { class: "empty", text: "Start a conversation: type a message below." }));
  }
}
