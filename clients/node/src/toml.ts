/**
 * Just enough TOML to find the daemon: the string value of one key in one `[table]` of
 * the config file (`[server] socket`, `[store] path`), written as the config's own
 * example writes them. Anything else in the file is skipped unread; the daemon itself
 * checks the file.
 */

const HEADER = /^\[\s*([A-Za-z0-9_.-]+)\s*\]\s*(?:#.*)?$/;
const KEY_VALUE = /^([A-Za-z0-9_-]+|"[^"]*")\s*=\s*(.*)$/;

/** The string `key` of `[table]`, or null when it is absent (or not a plain string). */
export function tableString(text: string, table: string, key: string): string | null {
  let current: string | null = null;
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    if (line.startsWith("[")) {
      const m = HEADER.exec(line);
      current = m ? (m[1] as string) : null; // `[[array]]` tables never match
      continue;
    }
    if (current !== table) continue;
    const kv = KEY_VALUE.exec(line);
    if (!kv) continue;
    const name = (kv[1] as string).replace(/^"|"$/g, "");
    if (name === key) return stringValue(kv[2] as string);
  }
  return null;
}

function stringValue(text: string): string | null {
  if (text.startsWith("'")) {
    const end = text.indexOf("'", 1);
    return end > 0 ? text.slice(1, end) : null;
  }
  if (!text.startsWith('"')) return null;
  let out = "";
  for (let i = 1; i < text.length; i++) {
    const c = text[i] as string;
    if (c === '"') return out;
    if (c !== "\\") {
      out += c;
      continue;
    }
    const e = text[++i];
    const simple: Record<string, string> = { b: "\b", t: "\t", n: "\n", f: "\f", r: "\r", '"': '"', "\\": "\\" };
    if (e !== undefined && e in simple) {
      out += simple[e];
    } else if (e === "u" || e === "U") {
      const len = e === "u" ? 4 : 8;
      const hex = text.slice(i + 1, i + 1 + len);
      if (!/^[0-9A-Fa-f]+$/.test(hex) || hex.length !== len) return null;
      out += String.fromCodePoint(parseInt(hex, 16));
      i += len;
    } else {
      return null;
    }
  }
  return null;
}
