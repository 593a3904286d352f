// A small, safe Markdown renderer: every piece of text is HTML-escaped before it is wrapped in tags,
// links are kept only for http(s)/mailto URLs, and no raw HTML from the model ever reaches the page.
// Supports: fenced code (```lang) with highlighting, inline code, headings, bold/italic/strike,
// links, bullet and numbered lists, block quotes, horizontal rules, tables (pipe rows), paragraphs.

export function escapeHtml(text) {
  return String(text)
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;")
    .replaceAll("'", "&#39;");
}

function safeUrl(url) {
  const u = url.trim();
  return /^(https?:\/\/|mailto:)/i.test(u) ? u : null;
}

// Emphasis (bold, italic, strike) of escaped text that holds no markup of ours yet: the patterns
// only ever see the model's own characters, never the tags and attributes this renderer writes.
function emphasis(escaped) {
  let s = escaped;
  s = s.replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>");
  s = s.replace(/__([^_]+)__/g, "<strong>$1</strong>");
  s = s.replace(/(^|[^*])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>");
  s = s.replace(/(^|\W)_([^_\s][^_]*)_(?=\W|$)/g, "$1<em>$2</em>");
  s = s.replace(/~~([^~]+)~~/g, "<del>$1</del>");
  return s;
}

const LINK = /\[([^\]]+)\]\(([^)\s]+)\)/g;

// Text with links: the text between links and each link's label get emphasis on their own, and the
// link's tag is written last, so no pattern ever rewrites an href or target="_blank".
function linksAndEmphasis(text) {
  let out = "";
  let last = 0;
  for (const m of text.matchAll(LINK)) {
    out += emphasis(escapeHtml(text.slice(last, m.index)));
    const safe = safeUrl(m[2]);
    out += safe
      ? `<a href="${escapeHtml(safe)}" target="_blank" rel="noopener noreferrer">${emphasis(escapeHtml(m[1]))}</a>`
      : emphasis(escapeHtml(m[0]));
    last = m.index + m[0].length;
  }
  return out + emphasis(escapeHtml(text.slice(last)));
}

// Inline spans of one line (or paragraph). Code spans are cut out first so nothing inside them is parsed.
export function renderInline(text) {
  const parts = String(text).split(/(`+[^`]*?`+)/g);
  return parts
    .map((part, i) => {
      if (i % 2 === 1) {
        const code = part.replace(/^`+|`+$/g, "");
        return `<code>${escapeHtml(code)}</code>`;
      }
      return linksAndEmphasis(part);
    })
    .join("");
}

// ---- code highlighting: one regex pass per language family, tokens wrapped in spans.
const KEYWORDS = {
  py: "and as assert async await break class continue def del elif else except False finally for from global if import in is lambda None nonlocal not or pass raise return True try while with yield match case self",
  js: "async await break case catch class const continue default delete do else export extends false finally for from function if import in instanceof let new null of return static super switch this throw true try typeof undefined var void while yield",
  c: "auto bool break case char const continue default do double else enum extern false float for goto if inline int long namespace new nullptr return short signed sizeof static struct switch template this true typedef typename union unsigned using void volatile while class public private protected virtual",
  rust: "as async await break const continue crate else enum extern false fn for if impl in let loop match mod move mut pub ref return self Self static struct super trait true type unsafe use where while",
  go: "break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var nil true false",
  sh: "if then else elif fi for while do done case esac function in return export local echo",
  sql: "select from where and or not insert into values update set delete create table drop alter join left right inner outer on group by order having limit as null is in like",
};
const ALIASES = {
  python: "py", py: "py", javascript: "js", js: "js", ts: "js", typescript: "js", jsx: "js", tsx: "js", json: "js",
  c: "c", h: "c", cpp: "c", "c++": "c", java: "c", cs: "c", csharp: "c", kotlin: "c", swift: "c",
  rust: "rust", rs: "rust", go: "go", golang: "go", sh: "sh", bash: "sh", shell: "sh", zsh: "sh", console: "sh",
  sql: "sql",
};

export function highlight(code, lang) {
  const family = ALIASES[(lang || "").toLowerCase()];
  if (!family) return escapeHtml(code);
  const words = new Set(KEYWORDS[family].split(" "));
  const comment = family === "py" || family === "sh" ? "#[^\\n]*" : family === "sql" ? "--[^\\n]*" : "\\/\\/[^\\n]*|\\/\\*[\\s\\S]*?\\*\\/";
  const re = new RegExp(
    `(${comment})|("""[\\s\\S]*?"""|'''[\\s\\S]*?'''|"(?:\\\\.|[^"\\\\\\n])*"|'(?:\\\\.|[^'\\\\\\n])*'|\`(?:\\\\.|[^\`\\\\])*\`)|(\\b\\d[\\d_]*(?:\\.\\d+)?(?:e[+-]?\\d+)?\\b|\\b0x[0-9a-f]+\\b)|([A-Za-z_$][\\w$]*)`,
    "gi",
  );
  let out = "";
  let last = 0;
  for (const m of code.matchAll(re)) {
    out += escapeHtml(code.slice(last, m.index));
    const [tok, com, str, num, word] = m;
    if (com) out += `<span class="tok-comment">${escapeHtml(tok)}</span>`;
    else if (str) out += `<span class="tok-string">${escapeHtml(tok)}</span>`;
    else if (num) out += `<span class="tok-number">${escapeHtml(tok)}</span>`;
    else if (word && words.has(family === "sql" ? word.toLowerCase() : word))
      out += `<span class="tok-keyword">${escapeHtml(tok)}</span>`;
    else out += escapeHtml(tok);
    last = m.index + tok.length;
  }
  return out + escapeHtml(code.slice(last));
}

function codeBlock(code, lang) {
  const label = lang ? `<span class="code-lang">${escapeHtml(lang)}</span>` : "";
  return `<div class="code">${label}<button class="copy" type="button" title="Copy">Copy</button><pre><code>${highlight(code, lang)}</code></pre></div>`;
}

function table(rows) {
  const cells = (row) => row.trim().replace(/^\||\|$/g, "").split("|").map((c) => renderInline(c.trim()));
  const head = cells(rows[0]);
  const body = rows.slice(2).map(cells);
  return (
    `<table><thead><tr>${head.map((c) => `<th>${c}</th>`).join("")}</tr></thead><tbody>` +
    body.map((r) => `<tr>${r.map((c) => `<td>${c}</td>`).join("")}</tr>`).join("") +
    "</tbody></table>"
  );
}

const FENCE = /^\s*(```+|~~~+)\s*([\w+#.-]*)/;

// Where the finished blocks of a growing text end. renderMarkdown(text) equals
// renderMarkdown(text.slice(0, end)) + renderMarkdown(text.slice(end)), and no text appended later can
// change the first part: the parse starts afresh after a blank line outside a code fence, after a
// fence's closing line and before a fence's opening line, so those are such ends (the last one found).
// update() reads only the lines added since its last call: a streaming answer costs time linear in
// its length (view.js renders the finished blocks once and only the open block each time it grows).
export class BlockEnds {
  constructor() {
    this.end = 0;
    this.fence = null; // the marker of the open fence
    this.at = 0; // where the next unread line starts
  }

  update(text) {
    for (;;) {
      const nl = text.indexOf("\n", this.at);
      if (nl < 0) return this.end; // the last line may still grow
      const line = text.slice(this.at, nl);
      if (this.fence !== null) {
        if (line.trim().startsWith(this.fence)) {
          this.fence = null;
          this.end = nl + 1;
        }
      } else {
        const open = line.match(FENCE);
        if (open) {
          this.fence = open[1];
          this.end = this.at;
        } else if (line.trim() === "") this.end = nl + 1;
      }
      this.at = nl + 1;
    }
  }
}

// Block structure, line by line. An unclosed fence (while streaming) renders as code so far.
export function renderMarkdown(text) {
  const lines = String(text).replaceAll("\r\n", "\n").split("\n");
  const out = [];
  let para = [];
  const flush = () => {
    if (para.length) out.push(`<p>${para.map(renderInline).join("<br>")}</p>`);
    para = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(FENCE);
    if (fence) {
      flush();
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      out.push(codeBlock(body.join("\n"), fence[2]));
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      flush();
      out.push(`<h${heading[1].length}>${renderInline(heading[2])}</h${heading[1].length}>`);
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flush();
      out.push("<hr>");
      continue;
    }
    if (/^\s*\|.*\|\s*$/.test(line) && i + 1 < lines.length && /^\s*\|?\s*:?-{2,}/.test(lines[i + 1])) {
      flush();
      const rows = [];
      while (i < lines.length && /^\s*\|.*\|\s*$/.test(lines[i])) rows.push(lines[i++]);
      i--;
      out.push(table(rows));
      continue;
    }
    const item = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
    if (item) {
      flush();
      const ordered = /\d/.test(item[1]);
      const items = [];
      while (i < lines.length) {
        const m = lines[i].match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
        if (!m || /\d/.test(m[1]) !== ordered) break;
        items.push(`<li>${renderInline(m[2])}</li>`);
        i++;
      }
      i--;
      out.push(ordered ? `<ol>${items.join("")}</ol>` : `<ul>${items.join("")}</ul>`);
      continue;
    }
    if (/^\s*>/.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
      i--;
      out.push(`<blockquote>${renderMarkdown(quoted.join("\n"))}</blockquote>`);
      continue;
    }
    if (line.trim() === "") flush();
    else para.push(line);
  }
  flush();
  return out.join("");
}
