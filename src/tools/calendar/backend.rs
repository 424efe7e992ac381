//! The `CalendarBackend` trait the tools talk to, and the backend-neutral event model: a local
//! iCalendar file or a CalDAV collection, behind the same calls.

use chrono::{DateTime, Days, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;

use super::CalendarError;

/// The calendar an event belongs to when nobody said otherwise.
pub const DEFAULT_CALENDAR: &str = "Default";

/// When an event happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventTiming {
    /// Whole days, independent of time zone (iCalendar `DATE` values). `last_day` is inclusive; the
    /// file stores the RFC 5545 exclusive `DTEND` (`last_day + 1`).
    AllDay { first_day: NaiveDate, last_day: NaiveDate },
    /// A span of time; `end >= start` (equal for an instant event).
    Timed { start: DateTime<Utc>, end: DateTime<Utc> },
}

impl EventTiming {
    /// The instant the event starts, for ordering (all-day events start at local midnight).
    pub fn start_instant(&self, tz: Tz) -> DateTime<Utc> {
        match self {
            EventTiming::AllDay { first_day, .. } => local_midnight(tz, *first_day),
            EventTiming::Timed { start, .. } => *start,
        }
    }

    /// The instant the event ends (all-day events end at the local midnight after their last day).
    pub fn end_instant(&self, tz: Tz) -> DateTime<Utc> {
        match self {
            EventTiming::AllDay { last_day, .. } => local_midnight(tz, next_day(*last_day)),
            EventTiming::Timed { end, .. } => *end,
        }
    }

    /// Does the event overlap the days `first..=last` (days in `tz`)? An event that ends exactly when
    /// the range starts does not; an instant event counts when it lies inside the range.
    pub fn overlaps(&self, first: NaiveDate, last: NaiveDate, tz: Tz) -> bool {
        match self {
            // Dates against dates: an all-day event is on the same days in every zone.
            EventTiming::AllDay { first_day, last_day } => *first_day <= last && *last_day >= first,
            EventTiming::Timed { start, end } => {
                let range_start = local_midnight(tz, first);
                let range_end = local_midnight(tz, next_day(last));
                if start == end {
                    range_start <= *start && *start < range_end
                } else {
                    *start < range_end && *end > range_start
                }
            }
        }
    }

    /// ISO 8601 start: `YYYY-MM-DD` for all-day events, else date-time with the offset of `tz`.
    pub fn format_start(&self, tz: Tz) -> String {
        match self {
            EventTiming::AllDay { first_day, .. } => first_day.format("%Y-%m-%d").to_string(),
            EventTiming::Timed { start, .. } => format_instant(*start, tz),
        }
    }

    /// ISO 8601 end: the (inclusive) last day for all-day events, else date-time in `tz`.
    pub fn format_end(&self, tz: Tz) -> String {
        match self {
            EventTiming::AllDay { last_day, .. } => last_day.format("%Y-%m-%d").to_string(),
            EventTiming::Timed { end, .. } => format_instant(*end, tz),
        }
    }

    pub fn is_all_day(&self) -> bool {
        matches!(self, EventTiming::AllDay { .. })
    }
}

/// One event as the tools see it, and as they ask a backend to create it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarEvent {
    /// The iCalendar UID. On create it is chosen by the caller, so a replayed create is a no-op.
    pub id: String,
    pub title: String,
    pub timing: EventTiming,
    pub location: Option<String>,
    pub description: Option<String>,
    pub calendar: String,
}

/// What `create_event` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOutcome {
    /// The stored event: the new one, or the one that already had this UID.
    pub event: CalendarEvent,
    /// Whether this call stored the event. `false` when an event with the UID was already there
    /// (a replay) and nothing was written; `true` also when the one found is taken to be what an
    /// earlier attempt of this call's own write stored, an attempt that got no answer saying what
    /// happened (CalDAV: a retry met `412`, or the event was looked for after that attempt).
    pub created: bool,
}

/// Which events to list: those overlapping the days `first_day..=last_day` in the backend's zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventQuery {
    pub first_day: NaiveDate,
    pub last_day: NaiveDate,
    /// Only events of this calendar (compared case-insensitively); `None` = every calendar.
    pub calendar: Option<String>,
    pub max_results: usize,
}

/// The answer to an [`EventQuery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPage {
    /// Matching events sorted by start, at most `max_results` of them.
    pub events: Vec<CalendarEvent>,
    /// How many events matched before truncation to `max_results`.
    pub total_count: usize,
    /// `false` when expanding repeating events stopped at its bound: `total_count` then counts only
    /// the occurrences generated (a lower bound), and later-expanded series may be missing.
    pub complete: bool,
}

/// A calendar store. Shared by every session (`Arc<dyn CalendarBackend>`); implementations
/// serialise their own writers.
#[async_trait::async_trait]
pub trait CalendarBackend: Send + Sync + 'static {
    /// The zone local times are read in and results are shown in.
    fn timezone(&self) -> Tz;

    /// Events overlapping the query's days, filtered, sorted by start and truncated.
    async fn list_events(&self, query: &EventQuery) -> Result<EventPage, CalendarError>;

    /// Create `event` unless an event with its UID exists; then return that one, with `created`
    /// saying whether this call stored it (see [`CreateOutcome::created`]).
    async fn create_event(&self, event: CalendarEvent) -> Result<CreateOutcome, CalendarError>;

    /// The stored event with this UID (a repeating one by its first occurrence), if any: how a
    /// caller finds out whether an earlier create landed.
    async fn find_event(&self, uid: &str) -> Result<Option<CalendarEvent>, CalendarError>;

    /// Whether a remote store answered at the last attempt (`None`: local, or not tried yet), for
    /// `/readyz`.
    fn reachable(&self) -> Option<bool> {
        None
    }
}

/// The day after `day` (saturating at chrono's last date, which no real calendar reaches).
pub fn next_day(day: NaiveDate) -> NaiveDate {
    day.checked_add_days(Days::new(1)).unwrap_or(day)
}

/// Midnight starting `day` in `tz`, as an instant.
pub fn local_midnight(tz: Tz, day: NaiveDate) -> DateTime<Utc> {
    local_to_utc_lenient(tz, day.and_time(chrono::NaiveTime::MIN))
}

/// A wall-clock time in `tz` as an instant, for data read from a store: an ambiguous time (clocks
/// going back) takes the earlier instant, a skipped one (clocks going forward) moves past the gap.
/// Input from the model is checked strictly instead (see `args`).
pub fn local_to_utc_lenient(tz: Tz, local: NaiveDateTime) -> DateTime<Utc> {
    for step in 0..=8 {
        let shifted = local + chrono::Duration::minutes(30 * step);
        if let Some(t) = tz.from_local_datetime(&shifted).earliest() {
            return t.with_timezone(&Utc);
        }
    }
    // No zone has a gap longer than four hours; treat the time as UTC rather than fail a listing.
    Utc.from_utc_datetime(&local)
}

fn format_instant(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz).format("%Y-%m-%dT%H:%M:%S%:z").to_string()
}
