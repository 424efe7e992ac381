//! The two calendar tools: their specs and argument schemas (what the model sees), the results they
//! return (the seed's result models, field names kept) and the confirmation prompt of
//! `create_calendar_event`.

use std::sync::Arc;

use chrono::{DateTime, NaiveDate, Utc};
use chrono_tz::Tz;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::args::{self, CreateRequest, Moment};
use super::backend::{CalendarBackend, CalendarEvent, EventTiming};
use super::error::to_tool_error;
use crate::audit::Recovered;
use crate::tools::{CallContext, Category, DEFAULT_TOOL_TIMEOUT, Risk, Tool, ToolError, ToolOutput, ToolSpec};

const GET: &str = "get_calendar_events";
const CREATE: &str = "create_calendar_event";
/// Calendar tools: 10 calls per minute (TOOLS.md).
const RATE_PER_MINUTE: u32 = 10;

/// Length bounds of the text arguments, in characters.
const MAX_TITLE_CHARS: u64 = 200;
const MAX_LOCATION_CHARS: u64 = 200;
const MAX_DESCRIPTION_CHARS: u64 = 2000;
const MAX_CALENDAR_CHARS: u64 = 100;

/// Per-event text in a listing is cut at these lengths (events written by other clients are unbounded).
const LIST_TITLE_CHARS: usize = 200;
const LIST_LOCATION_CHARS: usize = 200;
const LIST_DESCRIPTION_CHARS: usize = 500;
/// A listing's serialised result stays under this, so one `function_call_output` fits in 32 KiB.
const MAX_RESULT_BYTES: usize = 30 * 1024;

/// `YYYY-MM-DD`.
const DATE_PATTERN: &str = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$";
/// `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM[:SS[.fff]]`, optionally with `Z` or `±HH:MM`.
const DATETIME_PATTERN: &str =
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?(Z|[+-][0-9]{2}:[0-9]{2})?)?$";

/// The event UID for a create call: the same session and `call_id` always give the same UID, so a
/// retried or replayed call finds its own event instead of writing a second one.
pub fn event_uid(session_id: &str, call_id: &str) -> String {
    let mut hash = Sha256::new();
    // Length-prefixed so ("ab", "c") and ("a", "bc") cannot collide.
    for part in [CREATE, session_id, call_id] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    format!("{}@voxgate", &hex::encode(hash.finalize())[..32])
}

// === get_calendar_events ===

/// `get_calendar_events`: read-only listing of a day range.
pub struct GetCalendarEvents {
    spec: ToolSpec,
    backend: Arc<dyn CalendarBackend>,
}

impl GetCalendarEvents {
    pub fn new(backend: Arc<dyn CalendarBackend>) -> Self {
        let spec = ToolSpec {
            name: GET,
            description: format!(
                "List the user's calendar events (appointments, meetings) on a range of days. Days are in the \
                 calendar's time zone ({}); end_date defaults to start_date and the range may cover at most {} days.",
                backend.timezone(),
                args::MAX_RANGE_DAYS
            ),
            parameters: get_schema(),
            category: Category::Calendar,
            phi: true,
            risk: Risk::Low,
            requires_confirmation: false,
            third_party: false,
            rate_limit_per_minute: RATE_PER_MINUTE,
            timeout: DEFAULT_TOOL_TIMEOUT,
        };
        Self { spec, backend }
    }
}

fn get_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "start_date": {
                "type": "string", "format": "date", "pattern": DATE_PATTERN, "minLength": 10, "maxLength": 10,
                "description": "First day to list, ISO 8601 format (YYYY-MM-DD)",
            },
            "end_date": {
                "type": "string", "format": "date", "pattern": DATE_PATTERN, "minLength": 10, "maxLength": 10,
                "description": format!("Last day to list, inclusive, ISO 8601 format (YYYY-MM-DD); defaults to start_date; at most {} days in all", args::MAX_RANGE_DAYS),
            },
            "calendar_name": {
                "type": "string", "minLength": 1, "maxLength": MAX_CALENDAR_CHARS,
                "description": "Only events of this calendar (e.g. \"Default\"); omit for every calendar",
            },
            "max_results": {
                "type": "integer", "minimum": 1, "maximum": args::MAX_RESULTS_LIMIT, "default": args::DEFAULT_MAX_RESULTS,
                "description": "Most events to return, earliest first",
            },
        },
        "required": ["start_date"],
        "additionalProperties": false,
    })
}

#[async_trait::async_trait]
impl Tool for GetCalendarEvents {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn backend_reachable(&self) -> Option<bool> {
        self.backend.reachable()
    }

    async fn call(&self, args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        let query = args::list_query(&args)?;
        let tz = self.backend.timezone();
        let page = self.backend.list_events(&query).await.map_err(|e| to_tool_error(GET, e))?;
        let mut cut_text = false;
        let mut events: Vec<Value> = page
            .events
            .iter()
            .map(|event| {
                let (json, cut) = listed_event(event, tz);
                cut_text |= cut;
                json
            })
            .collect();
        let date_range = format!("{} to {}", query.first_day, query.last_day);
        let build = |events: &[Value], truncated: bool| {
            json!({
                "events": events,
                "count": events.len(),
                "total_count": page.total_count,
                "total_count_exact": page.complete,
                "truncated": truncated,
                "date_range": date_range,
                "timezone": tz.name(),
            })
        };
        let mut result = build(&events, cut_text || !page.complete || events.len() < page.total_count);
        // Drop events from the end (the latest) until the output fits in one function_call_output.
        while result.to_string().len() > MAX_RESULT_BYTES && !events.is_empty() {
            events.pop();
            result = build(&events, true);
        }
        Ok(ToolOutput::new(result))
    }
}

/// One event of a listing (the seed's `CalendarEvent`), and whether any of its text was cut.
fn listed_event(event: &CalendarEvent, tz: Tz) -> (Value, bool) {
    let (title, cut_title) = cut(&event.title, LIST_TITLE_CHARS);
    let location = event.location.as_deref().map(|l| cut(l, LIST_LOCATION_CHARS));
    let description = event.description.as_deref().map(|d| cut(d, LIST_DESCRIPTION_CHARS));
    let was_cut = cut_title || location.as_ref().is_some_and(|l| l.1) || description.as_ref().is_some_and(|d| d.1);
    let json = json!({
        "id": event.id,
        "title": title,
        "start": event.timing.format_start(tz),
        "end": event.timing.format_end(tz),
        "all_day": event.timing.is_all_day(),
        "location": location.map(|l| l.0),
        "description": description.map(|d| d.0),
        "calendar_name": event.calendar,
    });
    (json, was_cut)
}

/// `text` cut to `max` characters (with an ellipsis), and whether it was cut.
fn cut(text: &str, max: usize) -> (String, bool) {
    match text.char_indices().nth(max) {
        None => (text.to_string(), false),
        Some((at, _)) => (format!("{}…", text[..at].trim_end()), true),
    }
}

// === create_calendar_event ===

/// `create_calendar_event`: writes one event after the user confirmed; idempotent per call.
pub struct CreateCalendarEvent {
    spec: ToolSpec,
    backend: Arc<dyn CalendarBackend>,
}

impl CreateCalendarEvent {
    pub fn new(backend: Arc<dyn CalendarBackend>) -> Self {
        let spec = ToolSpec {
            name: CREATE,
            description: format!(
                "Create an event in the user's calendar (the user is asked to confirm first). Times without an \
                 offset are in the calendar's time zone ({}). Give end_datetime, or duration_minutes \
                 (default {}); for all-day events give dates and set all_day.",
                backend.timezone(),
                args::DEFAULT_DURATION_MINUTES
            ),
            parameters: create_schema(),
            category: Category::Calendar,
            phi: true,
            risk: Risk::Medium,
            requires_confirmation: true,
            third_party: false,
            rate_limit_per_minute: RATE_PER_MINUTE,
            timeout: DEFAULT_TOOL_TIMEOUT,
        };
        Self { spec, backend }
    }
}

fn create_schema() -> Value {
    let datetime = |description: &str| {
        json!({
            "type": "string", "pattern": DATETIME_PATTERN, "minLength": 10, "maxLength": 35,
            "description": description,
        })
    };
    json!({
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE_CHARS, "description": "Event title"},
            "start_datetime": datetime("Start, ISO 8601 datetime (e.g. 2024-01-16T14:00, or with Z / +01:00); a date YYYY-MM-DD when all_day"),
            "end_datetime": datetime("End, ISO 8601 datetime, after the start; for all-day events the last day (YYYY-MM-DD, inclusive). Optional"),
            "duration_minutes": {
                "type": "integer", "minimum": 1, "maximum": args::MAX_DURATION_MINUTES,
                "description": format!("Length in minutes when end_datetime is not given (default {})", args::DEFAULT_DURATION_MINUTES),
            },
            "location": {"type": "string", "maxLength": MAX_LOCATION_CHARS, "description": "Where the event takes place"},
            "description": {"type": "string", "maxLength": MAX_DESCRIPTION_CHARS, "description": "Notes for the event"},
            "calendar_name": {
                "type": "string", "minLength": 1, "maxLength": MAX_CALENDAR_CHARS, "default": super::DEFAULT_CALENDAR,
                "description": "Which calendar to put the event in",
            },
            "all_day": {"type": "boolean", "default": false, "description": "An all-day event (dates, no times)"},
        },
        "required": ["title", "start_datetime"],
        "additionalProperties": false,
    })
}

#[async_trait::async_trait]
impl Tool for CreateCalendarEvent {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn confirmation_prompt(&self, args: &Value) -> String {
        confirmation_prompt(args, self.backend.timezone())
    }

    /// The event's UID: derived from the call, known before it runs.
    fn audit_resource(&self, _args: &Value, ctx: &CallContext) -> Option<String> {
        Some(event_uid(&ctx.session_id, &ctx.call_id))
    }

    /// The create is idempotent under the call's UID: if the calendar holds it, the call went through.
    async fn recover(&self, ctx: &CallContext) -> Recovered {
        let uid = event_uid(&ctx.session_id, &ctx.call_id);
        match self.backend.find_event(&uid).await {
            Ok(Some(_)) => Recovered::Completed { resource: Some(uid) },
            Ok(None) | Err(_) => Recovered::Unknown,
        }
    }

    fn backend_reachable(&self) -> Option<bool> {
        self.backend.reachable()
    }

    async fn call(&self, args: Value, ctx: CallContext) -> Result<ToolOutput, ToolError> {
        let tz = self.backend.timezone();
        let CreateRequest { title, timing, location, description, calendar } = args::create_request(&args, tz)?;
        let uid = event_uid(&ctx.session_id, &ctx.call_id);
        let event = CalendarEvent { id: uid, title, timing, location, description, calendar };
        let outcome = self.backend.create_event(event).await.map_err(|e| to_tool_error(CREATE, e))?;
        let event = outcome.event;
        let message = if outcome.created {
            "Event created successfully"
        } else {
            "This event was already created by an earlier attempt of the same call; nothing new was written"
        };
        Ok(ToolOutput::new(json!({
            "event_id": event.id,
            "title": event.title,
            "start": event.timing.format_start(tz),
            "end": event.timing.format_end(tz),
            "all_day": event.timing.is_all_day(),
            "location": event.location,
            "description": event.description,
            "calendar_name": event.calendar,
            "created": outcome.created,
            "message": message,
            "timezone": tz.name(),
        })))
    }
}

/// The seed's prompt: "I'd like to create a calendar event:" and one line per detail, times spelled
/// out in the calendar's zone. Arguments that do not make a valid event (found out on call) are shown
/// as given, so the user still sees what was asked.
pub fn confirmation_prompt(args: &Value, tz: Tz) -> String {
    let text = |field: &str| {
        args.get(field)
            .and_then(Value::as_str)
            .map(one_line)
            .filter(|t| !t.is_empty())
    };
    let (start, end) = match args::create_request(args, tz) {
        Ok(request) => describe_timing(&request.timing, tz),
        Err(_) => (
            text("start_datetime").map(|s| readable_moment(&s, tz)).unwrap_or_default(),
            text("end_datetime").map(|s| readable_moment(&s, tz)).unwrap_or_else(|| "not given".into()),
        ),
    };
    let mut prompt = format!(
        "I'd like to create a calendar event:\n- Title: {}\n- Start: {start}\n- End: {end}",
        text("title").unwrap_or_default()
    );
    for (label, field) in [("Location", "location"), ("Description", "description"), ("Calendar", "calendar_name")] {
        if let Some(value) = text(field) {
            prompt.push_str(&format!("\n- {label}: {value}"));
        }
    }
    prompt.push_str("\n\nShould I proceed?");
    prompt
}

/// Start and end lines: "Tuesday, 16 January 2024 at 14:00 CET"; all-day: "… (all day)".
fn describe_timing(timing: &EventTiming, tz: Tz) -> (String, String) {
    match timing {
        EventTiming::AllDay { first_day, last_day } => (readable_day(*first_day), readable_day(*last_day)),
        EventTiming::Timed { start, end } => (readable_instant(*start, tz), readable_instant(*end, tz)),
    }
}

fn readable_day(day: NaiveDate) -> String {
    format!("{} (all day)", day.format("%A, %-d %B %Y"))
}

fn readable_instant(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz).format("%A, %-d %B %Y at %H:%M %Z").to_string()
}

/// A best-effort reading of a raw argument; unparseable text is shown as given.
fn readable_moment(raw: &str, tz: Tz) -> String {
    match args::parse_moment_text(raw) {
        Some(Moment::Day(day)) => day.format("%A, %-d %B %Y").to_string(),
        Some(Moment::Local(local)) => format!("{} ({tz})", local.format("%A, %-d %B %Y at %H:%M")),
        Some(Moment::Exact(t)) => readable_instant(t, tz),
        None => raw.to_string(),
    }
}

/// Line breaks would break the prompt's list layout.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
