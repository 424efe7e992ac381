//! Recurring events (RFC 5545 RRULE, RDATE, EXDATE, RECURRENCE-ID) expanded into the occurrences a
//! listing shows, with the `rrule` crate. Shared by the local `.ics` backend and by CalDAV servers
//! that do not expand on their side.
//!
//! A series repeats in the zone its DTSTART was written in, so "every Monday 09:00 Europe/Berlin"
//! stays at 09:00 local time across daylight-saving changes; all-day series repeat on dates. An
//! occurrence moved or cancelled by a RECURRENCE-ID override is left out of the series: the override
//! is an event of its own (a cancelled one is dropped by the reader).

use std::collections::HashMap;

use chrono::{DateTime, Duration, NaiveDate, NaiveTime, Utc};
use chrono_tz::Tz;
use rrule::{RRule, RRuleSet, Unvalidated};

use super::backend::{CalendarEvent, EventTiming};

/// Occurrences produced per series and query at most (a daily series over the widest range needs 33).
const MAX_OCCURRENCES: u16 = 500;

/// What makes an event repeat, as read from its VEVENT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    /// The zone the series repeats in: DTSTART's TZID (or the configured zone for floating times);
    /// UTC for all-day series, whose dates are expanded as dates.
    pub zone: Tz,
    /// RRULE values (`FREQ=WEEKLY;BYDAY=MO`), without the `RRULE:` name.
    pub rules: Vec<String>,
    /// RDATE and EXDATE values as instants (dates as midnight UTC, matching all-day expansion).
    pub rdates: Vec<DateTime<Utc>>,
    pub exdates: Vec<DateTime<Utc>>,
}

/// One VEVENT as read from a store: the event (for a series, its first occurrence), how it repeats,
/// and, for an override of one occurrence, which occurrence it replaces.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub event: CalendarEvent,
    pub series: Option<Series>,
    pub recurrence_id: Option<DateTime<Utc>>,
    /// `STATUS:CANCELLED`: never listed; a cancelled override still removes its occurrence.
    pub cancelled: bool,
}

/// Every event and occurrence that may overlap `first_day..=last_day` (a superset, by a day's
/// margin: [`super::backend::select`] applies the exact range). Series that cannot be expanded (a
/// rule the crate rejects) are shown by their first occurrence, and counted in the second value.
pub fn expand(stored: Vec<StoredEvent>, first_day: NaiveDate, last_day: NaiveDate) -> (Vec<CalendarEvent>, usize) {
    let mut overridden: HashMap<String, Vec<DateTime<Utc>>> = HashMap::new();
    for entry in &stored {
        if let Some(at) = entry.recurrence_id {
            overridden.entry(entry.event.id.clone()).or_default().push(at);
        }
    }
    let (mut events, mut failed) = (Vec::new(), 0);
    for entry in stored {
        if entry.cancelled {
            continue;
        }
        match (&entry.series, entry.recurrence_id) {
            (Some(series), None) => {
                let moved = overridden.get(&entry.event.id).map(Vec::as_slice).unwrap_or_default();
                match occurrences(&entry.event, series, moved, first_day, last_day) {
                    Some(found) => events.extend(found),
                    None => {
                        failed += 1;
                        events.push(entry.event);
                    }
                }
            }
            _ => events.push(entry.event),
        }
    }
    (events, failed)
}

/// The occurrences of one series near the days; `None` when its rule cannot be used.
fn occurrences(
    event: &CalendarEvent,
    series: &Series,
    moved: &[DateTime<Utc>],
    first_day: NaiveDate,
    last_day: NaiveDate,
) -> Option<Vec<CalendarEvent>> {
    let (start, length) = match event.timing {
        EventTiming::AllDay { first_day, last_day } => {
            (midnight_utc(first_day), Duration::days((last_day - first_day).num_days()))
        }
        EventTiming::Timed { start, end } => (start, end - start),
    };
    let zone = rrule::Tz::from(series.zone);
    let dt_start = start.with_timezone(&zone);
    let mut set = RRuleSet::new(dt_start);
    for rule in &series.rules {
        let rule: RRule<Unvalidated> = rule.parse().ok()?;
        set = set.rrule(with_utc_until(rule, series.zone).validate(dt_start).ok()?);
    }
    for at in series.exdates.iter().chain(moved) {
        set = set.exdate(at.with_timezone(&zone));
    }
    for at in &series.rdates {
        set = set.rdate(at.with_timezone(&zone));
    }
    // A day of margin on both sides covers every zone's offset; `select` trims exactly.
    let from = midnight_utc(first_day) - length - Duration::days(1);
    let to = midnight_utc(last_day) + Duration::days(2);
    let found = set.after(from.with_timezone(&zone)).before(to.with_timezone(&zone)).all(MAX_OCCURRENCES);
    Some(
        found
            .dates
            .into_iter()
            .map(|at| {
                let at = at.with_timezone(&Utc);
                let timing = match event.timing {
                    EventTiming::AllDay { .. } => {
                        let first = at.date_naive();
                        let last = first.checked_add_signed(length).unwrap_or(first);
                        EventTiming::AllDay { first_day: first, last_day: last }
                    }
                    EventTiming::Timed { .. } => EventTiming::Timed { start: at, end: at + length },
                };
                CalendarEvent { timing, ..event.clone() }
            })
            .collect(),
    )
}

/// RFC 5545 writes UNTIL in UTC (`Z`) for zoned series, but as a date or floating time for all-day
/// and floating ones; the crate reads those in the machine's zone and then refuses them. Read them in
/// the series' zone instead, as UTC.
fn with_utc_until(rule: RRule<Unvalidated>, zone: Tz) -> RRule<Unvalidated> {
    match rule.get_until() {
        Some(until) if until.timezone().is_local() => {
            let instant = super::backend::local_to_utc_lenient(zone, until.naive_local());
            rule.until(instant.with_timezone(&rrule::Tz::UTC))
        }
        _ => rule,
    }
}

/// Midnight UTC starting `day`: how all-day series and their date exceptions are keyed.
pub fn midnight_utc(day: NaiveDate) -> DateTime<Utc> {
    day.and_time(NaiveTime::MIN).and_utc()
}
