// A view's state in the URL's hash query (`#/compare?jobs=a,b&x=step`): parsed and
// written here, so a comparison or a filtered jobs list is a link to share.
//
// Lists are comma-separated with each item percent-encoded on its own, so an item
// holding a comma (a tag, a series name) survives, and the common case stays readable
// (`jobs=run-a,run-b` rather than `jobs=run-a%2Crun-b`). Pure: no DOM, no window.

/** The part of a hash after its first "?" ("" when none): `#/compare?jobs=a` → `jobs=a`. */
export function hashQuery(hash) {
  const at = hash.indexOf("?");
  return at < 0 ? "" : hash.slice(at + 1);
}

function decode(text) {
  try {
    return decodeURIComponent(text.replace(/\+/g, " "));
  } catch {
    return text; // a stray "%" in a hand-edited link: keep it literally
  }
}

/**
 * The raw (still encoded) value of every parameter, the first one winning when a
 * name repeats: a Map name → encoded value.
 */
function rawParams(query) {
  const params = new Map();
  for (const part of query.replace(/^\?/, "").split("&")) {
    if (!part) continue;
    const at = part.indexOf("=");
    const name = decode(at < 0 ? part : part.slice(0, at));
    if (!params.has(name)) params.set(name, at < 0 ? "" : part.slice(at + 1));
  }
  return params;
}

/** `name` → decoded value ("" for a bare name); absent names are not in the map. */
export function parseParams(query) {
  const out = new Map();
  for (const [name, raw] of rawParams(query)) out.set(name, decode(raw));
  return out;
}

/** The list parameter `name`: decoded items, empty ones dropped, duplicates dropped. */
export function parseList(query, name) {
  const raw = rawParams(query).get(name);
  if (raw === undefined) return [];
  const items = raw.split(",").map(decode).map((item) => item.trim()).filter(Boolean);
  return [...new Set(items)];
}

/**
 * A query string from [name, value] pairs, in order. A value that is an array is
 * written as a list (items encoded, commas literal); null, undefined, "" and empty
 * lists are left out.
 */
export function buildQuery(pairs) {
  const parts = [];
  for (const [name, value] of pairs) {
    if (value === null || value === undefined || value === "") continue;
    if (Array.isArray(value)) {
      const items = value.filter((item) => item !== null && item !== undefined && item !== "");
      if (!items.length) continue;
      parts.push(`${encodeURIComponent(name)}=${items.map((item) => encodeURIComponent(item)).join(",")}`);
    } else {
      parts.push(`${encodeURIComponent(name)}=${encodeURIComponent(value)}`);
    }
  }
  return parts.join("&");
}
