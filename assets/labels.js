/**
 * Words a clinician understands for voxgate's tools, their arguments, states and errors.
 * Used by the page (app.js); usable by any embedding page.
 *
 * @module labels
 */

/**
 * Per tool: `active` is shown while it runs ("Checking your calendar"), `action` names what it
 * does in a confirmation title ("Create a calendar event").
 * @type {Readonly<Record<string, {active: string, action: string}>>}
 */
export const TOOL_LABELS = Object.freeze({
  get_calendar_events: { active: "Checking your calendar", action: "Check your calendar" },
  create_calendar_event: { active: "Creating a calendar event", action: "Create a calendar event" },
  search_nextcloud_files: { active: "Searching your files", action: "Search your files" },
  retrieve_nextcloud_file: { active: "Opening a file", action: "Open a file" },
  search_openevidence: { active: "Searching OpenEvidence", action: "Search OpenEvidence" },
  search_pubmed: { active: "Searching PubMed", action: "Search PubMed" },
  calculate_medical_score: { active: "Calculating a medical score", action: "Calculate a medical score" },
  search_medical_guidelines: { active: "Searching clinical guidelines", action: "Search clinical guidelines" },
  generate_differential_diagnosis: { active: "Suggesting a differential diagnosis", action: "Suggest a differential diagnosis" },
  web_search_medical: { active: "Searching medical websites", action: "Search medical websites" },
});

/** Argument names → labels (others are turned from snake_case into words). */
export const ARGUMENT_LABELS = Object.freeze({
  title: "Title",
  start_datetime: "Start",
  end_datetime: "End",
  start_date: "From",
  end_date: "To",
  location: "Location",
  description: "Description",
  calendar_name: "Calendar",
  all_day: "All day",
  max_results: "At most",
  query: "Search for",
  file_type: "File type",
  include_content: "Search inside files",
  file_id: "File",
  extract_text: "Extract text",
  max_chars: "At most (characters)",
  evidence_level: "Evidence level",
  publication_types: "Publication types",
  date_from: "Published from",
  date_to: "Published until",
  calculator_name: "Calculator",
  parameters: "Values",
  guideline_source: "Guideline source",
  condition: "Condition",
  chief_complaint: "Chief complaint",
  symptoms: "Symptoms",
  patient_age: "Age",
  patient_sex: "Sex",
  relevant_history: "Relevant history",
  domain_filter: "Only these sites",
});

/** `calculate_medical_score` calculators, by `calculator_name`. */
export const CALCULATOR_LABELS = Object.freeze({
  wells_dvt: "Wells score for DVT",
  wells_pe: "Wells score for pulmonary embolism",
  chadsvasc: "CHA₂DS₂-VASc (stroke risk in atrial fibrillation)",
  hasbled: "HAS-BLED (bleeding risk)",
  grace: "GRACE (acute coronary syndrome risk)",
  meld: "MELD (liver disease severity)",
  renal_dosing: "Creatinine clearance (renal dosing)",
  bmi: "Body-mass index",
});

/** `voxgate.tool_call.declined` reasons. */
export const DECLINE_REASONS = Object.freeze({
  user_declined: "you declined",
  expired: "expired (no answer in time)",
  session_closed: "the session ended before it ran",
  client_cannot_confirm: "this app cannot ask for confirmation",
});

/** `voxgate.tool_call.failed` error codes. */
export const FAILURE_REASONS = Object.freeze({
  unknown_tool: "this tool is not available",
  invalid_arguments: "the request was incomplete or not valid",
  permission_denied: "you do not have permission for this",
  rate_limited: "too many requests — try again in a minute",
  phi_blocked: "blocked: the search contained patient details",
  timeout: "the service took too long to answer",
  backend_error: "the service could not be reached",
  internal_error: "something went wrong on the server",
});

/** Activity states shown in the page, by `data-state`. */
export const STATE_LABELS = Object.freeze({
  running: "running",
  awaiting_confirmation: "waiting for your confirmation",
  approved: "approved — starting…",
  declining: "declining…",
  interrupted: "interrupted — outcome unknown",
  done: "done",
  failed: "failed",
  declined: "declined",
});

/**
 * "search_pubmed" → "Search pubmed" (for names nobody labelled).
 * @param {string} name
 * @returns {string}
 */
export function humanize(name) {
  const words = String(name || "").replace(/[_\-.]+/g, " ").trim();
  return words ? words.charAt(0).toUpperCase() + words.slice(1) : "";
}

/**
 * @param {string} name tool name
 * @returns {string} e.g. "Creating a calendar event"
 */
export function toolActivityLabel(name) {
  return (TOOL_LABELS[name] && TOOL_LABELS[name].active) || `Running ${humanize(name).toLowerCase() || "a tool"}`;
}

/**
 * @param {string} name tool name
 * @returns {string} e.g. "Create a calendar event"
 */
export function toolActionLabel(name) {
  return (TOOL_LABELS[name] && TOOL_LABELS[name].action) || humanize(name) || "Run a tool";
}

/**
 * @param {string} key argument name
 * @returns {string}
 */
export function argumentLabel(key) {
  return ARGUMENT_LABELS[key] || humanize(key);
}

const ISO_DATE = /^\d{4}-\d{2}-\d{2}$/;
const ISO_DATETIME = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$/i;

/**
 * "+01:00" / "-0530" / "Z" as "UTC+01:00" / "UTC-05:30" / "UTC".
 * @param {string} offset
 * @returns {string}
 */
function offsetLabel(offset) {
  const digits = offset.replace(":", "");
  if (/^z$/i.test(offset) || /^[+-]0000$/.test(digits)) return "UTC";
  return `UTC${digits.slice(0, 3)}:${digits.slice(3)}`;
}

/**
 * An ISO 8601 date or date-time in words ("Tue 25 Nov 2025, 14:00"); other text unchanged.
 * A date-time is shown as written, never moved to this device's time zone: the server's prompt
 * shows it in the calendar's zone, which a thin client's clock setting does not share. One that
 * carries an offset says so ("Tue 25 Nov 2025, 14:00 UTC+01:00").
 * @param {string} value
 * @param {string} [locale]
 * @returns {string}
 */
export function formatDateValue(value, locale) {
  if (ISO_DATE.test(value)) {
    const [y, m, d] = value.split("-").map(Number);
    const date = new Date(y, m - 1, d);
    // Not a real date (month 13, 30 February; a year 0–99, which `Date` reads as 1900–1999): `Date`
    // reads it as another; shown as written.
    if (date.getFullYear() !== y || date.getMonth() !== m - 1 || date.getDate() !== d) return value;
    return new Intl.DateTimeFormat(locale, { weekday: "short", day: "numeric", month: "short", year: "numeric" }).format(date);
  }
  const parts = ISO_DATETIME.exec(value);
  if (parts) {
    const [, y, mo, d, h, mi, sec, offset] = parts;
    // The wall-clock time as written, formatted in UTC so no zone of this device moves it.
    const date = new Date(Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(sec || 0)));
    // Not a real date or time (month 13, 30 February, 25:00, second 60; a year 0–99, which
    // `Date.UTC` reads as 1900–1999): `Date.UTC` reads it as another; shown as written.
    const written = [y, mo, d, h, mi, sec || 0].map(Number);
    const read = [date.getUTCFullYear(), date.getUTCMonth() + 1, date.getUTCDate(), date.getUTCHours(), date.getUTCMinutes(), date.getUTCSeconds()];
    if (Number.isNaN(date.getTime()) || written.some((n, i) => n !== read[i])) return value;
    const text = new Intl.DateTimeFormat(locale, {
      weekday: "short", day: "numeric", month: "short", year: "numeric", hour: "2-digit", minute: "2-digit", timeZone: "UTC",
    }).format(date);
    return offset ? `${text} ${offsetLabel(offset)}` : text;
  }
  return value;
}

/**
 * One argument value as readable text (nested objects are handled by the caller).
 * @param {string} key
 * @param {unknown} value
 * @returns {string}
 */
export function formatArgumentValue(key, value) {
  if (value === null || value === undefined || value === "") return "—";
  if (typeof value === "boolean") return value ? "Yes" : "No";
  if (typeof value === "number") return String(value);
  if (Array.isArray(value)) return value.map((v) => formatArgumentValue(key, v)).join(", ");
  if (typeof value === "object") return JSON.stringify(value);
  const text = String(value);
  if (key === "calculator_name" && CALCULATOR_LABELS[text]) return CALCULATOR_LABELS[text];
  if (key === "patient_sex") return { M: "Male", F: "Female" }[text] || text;
  return formatDateValue(text);
}

/**
 * A tool call's arguments as label/value rows, in a stable, readable order; nested objects
 * (e.g. a calculator's `parameters`) become indented rows.
 * @param {Record<string, unknown>} args
 * @param {number} [depth]
 * @returns {Array<{key: string, label: string, value: string, depth: number, raw: unknown}>}
 */
export function argumentRows(args, depth = 0) {
  if (!args || typeof args !== "object" || Array.isArray(args)) return [];
  const known = Object.keys(ARGUMENT_LABELS);
  const keys = Object.keys(args).sort((a, b) => {
    const ia = known.indexOf(a);
    const ib = known.indexOf(b);
    return (ia < 0 ? 999 : ia) - (ib < 0 ? 999 : ib);
  });
  const rows = [];
  for (const key of keys) {
    const value = args[key];
    if (value && typeof value === "object" && !Array.isArray(value)) {
      rows.push({ key, label: argumentLabel(key), value: "", depth, raw: value });
      rows.push(...argumentRows(/** @type {Record<string, unknown>} */ (value), depth + 1));
    } else {
      rows.push({ key, label: argumentLabel(key), value: formatArgumentValue(key, value), depth, raw: value });
    }
  }
  return rows;
}

/**
 * Seconds left as "1:05".
 * @param {number} ms
 * @returns {string}
 */
export function formatCountdown(ms) {
  const total = Math.max(0, Math.ceil(ms / 1000));
  const minutes = Math.floor(total / 60);
  const seconds = total % 60;
  return `${minutes}:${String(seconds).padStart(2, "0")}`;
}
