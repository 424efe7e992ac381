//! The calendar tools' arguments, read into calendar terms: a day range to list, or an event to create.
//!
//! The JSON Schema has already checked shapes and bounds; this adds what a schema cannot say (real
//! dates, end after start, local times that exist in the calendar's zone). Reading is strict here —
//! an ambiguous wall-clock time from the model is refused — while data read from the store is
//! interpreted leniently (`backend::local_to_utc_lenient`). Error messages name the field, never echo
//! the value.

use chrono::{DateTime, Duration, FixedOffset, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde_json::Value;

use super::backend::{DEFAULT_CALENDAR, EventQuery, EventTiming};
use crate::tools::ToolError;
use crate::tools::args::whole_number;

/// The widest day range one `get_calendar_events` call may list (inclusive days).
pub const MAX_RANGE_DAYS: i64 = 31;
/// `max_results` when the model does not say.
pub const DEFAULT_MAX_RESULTS: u64 = 50;
/// The schema's upper bound for `max_results`.
pub const MAX_RESULTS_LIMIT: u64 = 100;
/// The length of a timed event given without `end_datetime` or `duration_minutes`.
pub const DEFAULT_DURATION_MINUTES: i64 = 60;
/// The longest `duration_minutes` accepted (one day; longer events give `end_datetime`).
pub const MAX_DURATION_MINUTES: i64 = 24 * 60;
/// The longest event `create_calendar_event` accepts, in days.
pub const MAX_EVENT_DAYS: i64 = 31;

/// An event to create, before it gets its UID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    pub title: String,
    pub timing: EventTiming,
    pub location: Option<String>,
    pub description: Option<String>,
    pub calendar: String,
}

/// `get_calendar_events` arguments as a backend query.
pub fn list_query(args: &Value) -> Result<EventQuery, ToolError> {
    let first_day = parse_day(args, "start_date")?
        .ok_or_else(|| invalid("start_date", "is required (YYYY-MM-DD)"))?;
    let last_day = parse_day(args, "end_date")?.unwrap_or(first_day);
    if last_day < first_day {
        return Err(invalid("end_date", "must not be before `start_date`"));
    }
    if (last_day - first_day).num_days() + 1 > MAX_RANGE_DAYS {
        return Err(invalid(
            "end_date",
            &format!("the range may cover at most {MAX_RANGE_DAYS} days; split the request into smaller ranges"),
        ));
    }
    let max_results = match args.get("max_results") {
        None | Some(Value::Null) => DEFAULT_MAX_RESULTS,
        // `whole_number`: 2.0 is the integer the schema accepted it as.
        Some(_) => whole_number(args, "max_results")
            .filter(|n| (1..=MAX_RESULTS_LIMIT).contains(n))
            .ok_or_else(|| invalid("max_results", &format!("must be an integer from 1 to {MAX_RESULTS_LIMIT}")))?,
    };
    Ok(EventQuery {
        first_day,
        last_day,
        calendar: optional_text(args, "calendar_name")?,
        max_results: usize::try_from(max_results).unwrap_or(usize::MAX),
    })
}

/// `create_calendar_event` arguments as an event, local times read in `tz`.
pub fn create_request(args: &Value, tz: Tz) -> Result<CreateRequest, ToolError> {
    let title = optional_text(args, "title")?.ok_or_else(|| invalid("title", "is required and must not be blank"))?;
    let all_day = match args.get("all_day") {
        None | Some(Value::Null) => false,
        Some(value) => value.as_bool().ok_or_else(|| invalid("all_day", "must be true or false"))?,
    };
    let start = parse_moment(args, "start_datetime")?
        .ok_or_else(|| invalid("start_datetime", "is required (ISO 8601, e.g. 2024-01-16T14:00)"))?;
    let end = parse_moment(args, "end_datetime")?;
    let timing = if all_day { all_day_timing(start, end, tz)? } else { timed(start, end, args, tz)? };
    Ok(CreateRequest {
        title,
        timing,
        location: optional_text(args, "location")?,
        description: optional_text(args, "description")?,
        calendar: optional_text(args, "calendar_name")?.unwrap_or_else(|| DEFAULT_CALENDAR.to_string()),
    })
}

/// A point in time as the model wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// `YYYY-MM-DD`.
    Day(NaiveDate),
    /// `YYYY-MM-DDTHH:MM[:SS]` without offset: wall-clock time in the calendar's zone.
    Local(NaiveDateTime),
    /// With `Z` or `±HH:MM`: an exact instant.
    Exact(DateTime<Utc>),
}

/// Parse `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS[.fff]]`, optionally followed by `Z` or `±HH:MM`.
pub fn parse_moment_text(text: &str) -> Option<Moment> {
    let text = text.trim();
    let Some((date, rest)) = text.split_once(['T', 't']) else {
        return parse_date_text(text).map(Moment::Day);
    };
    let date = parse_date_text(date)?;
    let (time, offset) = split_offset(rest)?;
    let time = NaiveTime::parse_from_str(time, "%H:%M:%S%.f")
        .or_else(|_| NaiveTime::parse_from_str(time, "%H:%M"))
        .ok()?;
    let local = date.and_time(time);
    match offset {
        None => Some(Moment::Local(local)),
        Some(offset) => offset.from_local_datetime(&local).single().map(|t| Moment::Exact(t.with_timezone(&Utc))),
    }
}

/// Split `HH:MM[:SS]` from a trailing `Z` / `±HH:MM`.
fn split_offset(rest: &str) -> Option<(&str, Option<FixedOffset>)> {
    if let Some(time) = rest.strip_suffix(['Z', 'z']) {
        return Some((time, FixedOffset::east_opt(0)));
    }
    let Some(at) = rest.find(['+', '-']) else { return Some((rest, None)) };
    let (time, offset) = rest.split_at(at);
    let sign = if offset.starts_with('-') { -1 } else { 1 };
    let (hours, minutes) = offset[1..].split_once(':')?;
    if hours.len() != 2 || minutes.len() != 2 {
        return None;
    }
    let (hours, minutes): (i32, i32) = (hours.parse().ok()?, minutes.parse().ok()?);
    if hours > 23 || minutes > 59 {
        return None;
    }
    Some((time, Some(FixedOffset::east_opt(sign * (hours * 3600 + minutes * 60))?)))
}

fn parse_date_text(text: &str) -> Option<NaiveDate> {
    // chrono accepts unpadded fields; the contract says YYYY-MM-DD, so insist on the shape too.
    let shaped = text.len() == 10 && text.as_bytes()[4] == b'-' && text.as_bytes()[7] == b'-';
    shaped.then(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()).flatten()
}

fn parse_day(args: &Value, field: &str) -> Result<Option<NaiveDate>, ToolError> {
    match args.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => parse_date_text(text.trim())
            .map(Some)
            .ok_or_else(|| invalid(field, "must be a real calendar date in the form YYYY-MM-DD")),
        Some(_) => Err(invalid(field, "must be a string in the form YYYY-MM-DD")),
    }
}

fn parse_moment(args: &Value, field: &str) -> Result<Option<Moment>, ToolError> {
    match args.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => parse_moment_text(text).map(Some).ok_or_else(|| {
            invalid(field, "must be an ISO 8601 date-time such as 2024-01-16T14:00 (optionally with Z or an offset such as +01:00), or a date YYYY-MM-DD for all-day events")
        }),
        Some(_) => Err(invalid(field, "must be a string")),
    }
}

/// Trimmed text; blank counts as absent.
fn optional_text(args: &Value, field: &str) -> Result<Option<String>, ToolError> {
    match args.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.trim()).filter(|t| !t.is_empty()).map(str::to_string)),
        Some(_) => Err(invalid(field, "must be a string")),
    }
}

/// All-day: the start's day, through the end's day (inclusive). An end written as midnight
/// (`2024-01-17T00:00`) is the exclusive iCalendar style and means "through the day before".
fn all_day_timing(start: Moment, end: Option<Moment>, tz: Tz) -> Result<EventTiming, ToolError> {
    let first_day = local_of(start, tz).date();
    let last_day = match end {
        None => first_day,
        Some(end) => {
            let local = local_of(end, tz);
            match end {
                Moment::Day(day) => day,
                _ if local.time() == NaiveTime::MIN && local.date() > first_day => {
                    local.date().pred_opt().unwrap_or(first_day)
                }
                _ => local.date(),
            }
        }
    };
    if last_day < first_day {
        return Err(invalid("end_datetime", "must not be before `start_datetime`"));
    }
    if (last_day - first_day).num_days() + 1 > MAX_EVENT_DAYS {
        return Err(invalid("end_datetime", &format!("an event may last at most {MAX_EVENT_DAYS} days")));
    }
    Ok(EventTiming::AllDay { first_day, last_day })
}

/// Timed: start and end as instants; the end defaults to start + `duration_minutes` (60).
fn timed(start: Moment, end: Option<Moment>, args: &Value, tz: Tz) -> Result<EventTiming, ToolError> {
    let start = instant(start, tz, "start_datetime")?;
    let duration = match args.get("duration_minutes") {
        None | Some(Value::Null) => None,
        Some(_) => Some(
            whole_number(args, "duration_minutes")
                .and_then(|m| i64::try_from(m).ok())
                .filter(|m| (1..=MAX_DURATION_MINUTES).contains(m))
                .map(Duration::minutes)
                .ok_or_else(|| {
                    invalid("duration_minutes", &format!("must be an integer from 1 to {MAX_DURATION_MINUTES}"))
                })?,
        ),
    };
    let end = match (end, duration) {
        (Some(end), duration) => {
            let end = instant(end, tz, "end_datetime")?;
            if duration.is_some_and(|d| end.signed_duration_since(start) != d) {
                return Err(invalid("duration_minutes", "disagrees with `end_datetime`; give only one of them"));
            }
            end
        }
        (None, duration) => start + duration.unwrap_or_else(|| Duration::minutes(DEFAULT_DURATION_MINUTES)),
    };
    if end <= start {
        return Err(invalid("end_datetime", "must be after `start_datetime`"));
    }
    if end - start > Duration::days(MAX_EVENT_DAYS) {
        return Err(invalid("end_datetime", &format!("an event may last at most {MAX_EVENT_DAYS} days")));
    }
    Ok(EventTiming::Timed { start, end })
}

/// The wall-clock reading of a moment in `tz` (a bare day is its midnight).
fn local_of(moment: Moment, tz: Tz) -> NaiveDateTime {
    match moment {
        Moment::Day(day) => day.and_time(NaiveTime::MIN),
        Moment::Local(local) => local,
        Moment::Exact(t) => t.with_timezone(&tz).naive_local(),
    }
}

/// A timed event's instant; wall-clock times must exist exactly once in `tz`.
fn instant(moment: Moment, tz: Tz, field: &str) -> Result<DateTime<Utc>, ToolError> {
    match moment {
        Moment::Exact(t) => Ok(t),
        Moment::Day(_) => Err(invalid(field, "needs a time of day (YYYY-MM-DDTHH:MM) unless `all_day` is true")),
        Moment::Local(local) => match tz.from_local_datetime(&local) {
            LocalResult::Single(t) => Ok(t.with_timezone(&Utc)),
            LocalResult::Ambiguous(_, _) => Err(invalid(
                field,
                &format!("this local time occurs twice in {tz} (clocks go back); add the UTC offset, e.g. +01:00"),
            )),
            LocalResult::None => Err(invalid(
                field,
                &format!("this local time does not exist in {tz} (clocks go forward); choose another time"),
            )),
        },
    }
}

fn invalid(field: &str, what: &str) -> ToolError {
    ToolError::InvalidArguments(format!("`/{field}`: {what}"))
}
