// The server's API as the page uses it: models, and a streamed chat completion read from SSE.
// Every call sends the API key (when one is set) as a bearer token.

export class ApiError extends Error {
  constructor(status, message, retryAfter) {
    super(message);
    this.status = status;
    this.retryAfter = retryAfter;
  }

  // What the user reads: the server's own message, with the HTTP meaning in front.
  describe() {
    const what = {
      400: "Bad request",
      401: "Unauthorized: set the API key in Settings",
      404: "Not found",
      408: "Timed out",
      413: "Request too large",
      429: "Rate limited",
      503: "Server busy or loading",
    }[this.status];
    const retry = this.retryAfter ? ` (retry after ${this.retryAfter}s)` : "";
    if (!this.status) return this.message;
    return `${what || "Error"} (HTTP ${this.status})${retry}: ${this.message}`;
  }
}

function headers(key) {
  const h = { "Content-Type": "application/json" };
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function failure(resp) {
  let message = resp.statusText || "request failed";
  try {
    const body = await resp.json();
    message = body?.error?.message || message;
  } catch {
    /* not JSON: keep the status text */
  }
  return new ApiError(resp.status, message, resp.headers.get("Retry-After"));
}

// The models the chat page can talk to: those whose card says they chat (a chat template), not the
// embedding models, rerankers or template-less models the server also lists.
export async function listModels(key) {
  const resp = await fetch("v1/models", { headers: headers(key) });
  if (!resp.ok) throw await failure(resp);
  const body = await resp.json();
  const chat = body.data.filter((m) => m.capabilities?.includes("chat")).map((m) => m.id);
  if (!chat.length) {
    const names = body.data.map((m) => m.id).join(", ");
    throw new ApiError(0, `No chat model on this server (it serves ${names || "no model"}): the chat page needs one.`);
  }
  return chat;
}

// SSE `data:` payloads from a fetch body, as parsed JSON ("[DONE]" ends it).
async function* sseData(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const data = block
        .split("\n")
        .filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).trimStart())
        .join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      yield JSON.parse(data);
    }
  }
}

// Stream one chat completion. onDelta({content, reasoning}) per chunk; resolves with
// {usage, finishReason}. Aborting `signal` closes the connection: the server then aborts the
// generation and frees its KV cache blocks.
export async function streamChat({ key, body, signal, onDelta }) {
  const resp = await fetch("v1/chat/completions", {
    method: "POST",
    headers: headers(key),
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    signal,
  });
  if (!resp.ok) throw await failure(resp);
  let usage = null;
  let finishReason = null;
  for await (const chunk of sseData(resp.body)) {
    if (chunk.error) throw new ApiError(chunk.error.code === "overloaded" ? 503 : 0, chunk.error.message);
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices?.[0];
    if (!choice) continue;
    const d = choice.delta || {};
    const reasoning = d.reasoning_content || d.reasoning || "";
    if (d.content || reasoning) onDelta({ content: d.content || "", reasoning });
    if (d.tool_calls) onDelta({ content: "", reasoning: "", toolCalls: d.tool_calls });
    if (choice.finish_reason) finishReason = choice.finish_reason;
  }
  return { usage, finishReason };
}
