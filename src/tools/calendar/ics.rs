//! iCalendar (RFC 5545) text <-> the event model, with the `icalendar` crate.
//!
//! Reading is lenient about what other tools write (TZID parameters, DATE values, floating times,
//! DURATION instead of DTEND); writing produces one VEVENT that is spliced into the existing text, so
//! components voxgate does not understand (VTIMEZONE, VTODO, X- properties) survive byte for byte.

use chrono::{DateTime, Days, NaiveDate, SubsecRound, Utc};
use chrono_tz::Tz;
use icalendar::{CalendarComponent, CalendarDateTime, Component, DatePerhapsTime, Event, EventLike, Property};

use super::backend::{
    CalendarEvent, DEFAULT_CALENDAR, EventPage, EventQuery, EventTiming, local_to_utc_lenient, next_day,
};
use super::recur::{Series, StoredEvent, expand, midnight_utc};
use super::CalendarError;

/// The property that names an event's calendar (`calendar_name`).
pub const CALENDAR_PROPERTY: &str = "X-VOXGATE-CALENDAR";

/// Events read from a store, plus how many VEVENTs had to be skipped (no readable start).
#[derive(Debug, Default)]
pub struct ParsedEvents {
    pub events: Vec<StoredEvent>,
    pub skipped: usize,
}

impl ParsedEvents {
    /// The event with this UID as stored (a series by its first occurrence, not an override).
    pub fn find(&self, uid: &str) -> Option<CalendarEvent> {
        self.events
            .iter()
            .find(|e| e.event.id == uid && e.recurrence_id.is_none() && !e.cancelled)
            .map(|e| e.event.clone())
    }

    /// The events and occurrences matching `query` (series expanded), sorted and truncated.
    pub fn page(self, query: &EventQuery, tz: Tz) -> EventPage {
        let (page, failed) = expand(self.events, query, tz);
        if self.skipped > 0 || failed > 0 {
            tracing::warn!(
                skipped = self.skipped,
                unexpanded = failed,
                "calendar events without a readable start were skipped, or repeating ones shown once"
            );
        }
        page
    }
}

/// A new, empty calendar file.
pub fn empty_calendar() -> String {
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//voxgate//calendar//EN\r\nCALSCALE:GREGORIAN\r\nEND:VCALENDAR\r\n"
        .to_string()
}

/// Components nested deeper than this are refused before parsing. Real calendars nest three deep
/// (VCALENDAR > VEVENT > VALARM, VCALENDAR > VTIMEZONE > STANDARD); the parser recurses once per
/// level, so a server's answer nesting thousands of levels would overflow the parsing thread's
/// stack, which aborts the whole process.
const MAX_NESTING: usize = 16;

/// How deep `BEGIN:` lines nest in unfolded iCalendar text (the deepest point reached).
fn nesting_depth(unfolded: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for line in unfolded.lines() {
        let name = |prefix: &str| line.get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix));
        if name("BEGIN:") {
            depth += 1;
            deepest = deepest.max(depth);
        } else if name("END:") {
            depth = depth.saturating_sub(1);
        }
    }
    deepest
}

/// Parse a whole store. Blank text is an empty calendar; anything else must be one or more
/// VCALENDAR objects. Cancelled events are kept, marked, so that a cancelled occurrence can remove
/// itself from its series ([`super::recur::expand`] drops them).
pub fn parse(text: &str, tz: Tz) -> Result<ParsedEvents, CalendarError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Ok(ParsedEvents::default());
    }
    let unfolded = icalendar::parser::unfold(text);
    if nesting_depth(&unfolded) > MAX_NESTING {
        return Err(CalendarError::Malformed);
    }
    // The parser's error text quotes the input (patient data): keep only the fact.
    let roots = icalendar::parser::read_components(&unfolded).map_err(|_| CalendarError::Malformed)?;
    if roots.is_empty() || roots.iter().any(|root| !root.name.as_str().eq_ignore_ascii_case("VCALENDAR")) {
        return Err(CalendarError::Malformed);
    }
    let mut parsed = ParsedEvents::default();
    for (index, child) in roots.into_iter().flat_map(|root| root.components).enumerate() {
        if let CalendarComponent::Event(event) = CalendarComponent::from(child) {
            match read_event(&event, tz, index) {
                Some(found) => parsed.events.push(found),
                None => parsed.skipped += 1,
            }
        }
    }
    Ok(parsed)
}

/// `None`: unreadable (no usable DTSTART).
fn read_event(event: &Event, tz: Tz, index: usize) -> Option<StoredEvent> {
    let recurrence_id = event.get_recurrence_id().map(|at| point_key(to_point(at, tz)));
    let status = event.property_value("STATUS").map(str::trim);
    let cancelled = status.is_some_and(|s| s.eq_ignore_ascii_case("CANCELLED"));
    let dtstart = event.get_start()?;
    let series = read_series(event, &dtstart, tz);
    let start = to_point(dtstart, tz);
    let end = event.get_end().map(|end| to_point(end, tz));
    let duration = event.property_value("DURATION").and_then(parse_duration);
    let timing = match start {
        Point::Day(first_day) => {
            let last_day = match (end, duration) {
                // DTEND of an all-day event is exclusive.
                (Some(Point::Day(end)), _) => end.pred_opt().unwrap_or(end),
                (Some(Point::Instant(end)), _) => (end - chrono::Duration::seconds(1)).with_timezone(&tz).date_naive(),
                (None, Some(d)) => first_day
                    .checked_add_days(Days::new(u64::try_from(d.num_days()).unwrap_or(1).max(1) - 1))
                    .unwrap_or(first_day),
                (None, None) => first_day,
            };
            EventTiming::AllDay { first_day, last_day: last_day.max(first_day) }
        }
        Point::Instant(start) => {
            let end = match (end, duration) {
                (Some(Point::Instant(end)), _) => end,
                (Some(Point::Day(day)), _) => local_to_utc_lenient(tz, day.and_time(chrono::NaiveTime::MIN)),
                (None, Some(d)) => start.checked_add_signed(d).unwrap_or(start),
                // RFC 5545 §3.6.1: a DATE-TIME start without end or duration is an instant.
                (None, None) => start,
            };
            EventTiming::Timed { start, end: end.max(start) }
        }
    };
    let text = |key: &str| event.property_value(key).map(str::trim).filter(|v| !v.is_empty()).map(str::to_string);
    let event = CalendarEvent {
        // RFC 5545 requires a UID; an event without one still gets a stable-enough id to show.
        id: text("UID").unwrap_or_else(|| format!("no-uid-{index}")),
        title: text("SUMMARY").unwrap_or_default(),
        timing,
        location: text("LOCATION"),
        description: text("DESCRIPTION"),
        calendar: text(CALENDAR_PROPERTY).unwrap_or_else(|| DEFAULT_CALENDAR.to_string()),
    };
    Some(StoredEvent { event, series, recurrence_id, cancelled })
}

/// RRULE / RDATE / EXDATE of a series; `None` for a single event.
fn read_series(event: &Event, dtstart: &DatePerhapsTime, tz: Tz) -> Option<Series> {
    let rules: Vec<String> = event
        .properties()
        .get("RRULE")
        .map(|p| p.value().trim().to_string())
        .into_iter()
        .chain(event.multi_properties().get("RRULE").into_iter().flatten().map(|p| p.value().trim().to_string()))
        .filter(|r| !r.is_empty())
        .collect();
    let dates = |key: &str| -> Vec<DateTime<Utc>> {
        let single = event.properties().get(key);
        let multi = event.multi_properties().get(key).into_iter().flatten();
        single.into_iter().chain(multi).flat_map(|p| date_list(p, tz)).collect()
    };
    let rdates = dates("RDATE");
    if rules.is_empty() && rdates.is_empty() {
        return None;
    }
    let zone = match dtstart {
        DatePerhapsTime::Date(_) | DatePerhapsTime::DateTime(CalendarDateTime::Utc(_)) => Tz::UTC,
        DatePerhapsTime::DateTime(CalendarDateTime::Floating(_)) => tz,
        DatePerhapsTime::DateTime(CalendarDateTime::WithTimezone { tzid, .. }) => resolve_tzid(tzid).unwrap_or(tz),
    };
    Some(Series { zone, rules, rdates, exdates: dates("EXDATE") })
}

/// The instants of an RDATE/EXDATE property, whose value may list several (`a,b,c`).
fn date_list(property: &Property, tz: Tz) -> Vec<DateTime<Utc>> {
    property
        .value()
        .split(',')
        .filter_map(|value| {
            let mut single = Property::new(property.key(), value.trim());
            for parameter in property.params().values() {
                single.append_parameter(parameter.clone());
            }
            DatePerhapsTime::from_property(&single).map(|at| point_key(to_point(at, tz)))
        })
        .collect()
}

/// How a point is matched against occurrences: instants as they are, dates as midnight UTC.
fn point_key(point: Point) -> DateTime<Utc> {
    match point {
        Point::Day(day) => midnight_utc(day),
        Point::Instant(at) => at,
    }
}

#[derive(Debug, Clone, Copy)]
enum Point {
    Day(NaiveDate),
    Instant(DateTime<Utc>),
}

fn to_point(value: DatePerhapsTime, tz: Tz) -> Point {
    match value {
        DatePerhapsTime::Date(day) => Point::Day(day),
        DatePerhapsTime::DateTime(CalendarDateTime::Utc(t)) => Point::Instant(t),
        // Floating times follow "the attendee's zone": ours is the configured one.
        DatePerhapsTime::DateTime(CalendarDateTime::Floating(local)) => Point::Instant(local_to_utc_lenient(tz, local)),
        DatePerhapsTime::DateTime(CalendarDateTime::WithTimezone { date_time, tzid }) => {
            Point::Instant(local_to_utc_lenient(resolve_tzid(&tzid).unwrap_or(tz), date_time))
        }
    }
}

/// An IANA zone from a TZID parameter, also in the prefixed forms some clients write
/// (`/mozilla.org/20050126_1/Europe/Berlin`, `/citadel.org/.../Europe/Berlin`). Unknown ids (custom
/// VTIMEZONE names) fall back to the configured zone.
fn resolve_tzid(tzid: &str) -> Option<Tz> {
    let tzid = tzid.trim().trim_matches('"');
    if let Ok(tz) = tzid.parse::<Tz>() {
        return Some(tz);
    }
    tzid.match_indices('/').find_map(|(i, _)| tzid[i + 1..].parse::<Tz>().ok())
}

/// An RFC 5545 DURATION (`P1D`, `PT1H30M`, `-PT15M`, `P2W`); `None` if it is not one.
fn parse_duration(value: &str) -> Option<chrono::Duration> {
    let value = value.trim();
    let (negative, rest) = match value.as_bytes().first()? {
        b'-' => (true, &value[1..]),
        b'+' => (false, &value[1..]),
        _ => (false, value),
    };
    let rest = rest.strip_prefix('P')?;
    let (mut seconds, mut number, mut in_time, mut seen_unit) = (0i64, String::new(), false, false);
    for c in rest.chars() {
        match c {
            '0'..='9' => number.push(c),
            'T' if number.is_empty() => in_time = true,
            unit => {
                let n: i64 = number.parse().ok()?;
                number.clear();
                let scale = match (unit, in_time) {
                    ('W', false) => 7 * 86_400,
                    ('D', false) => 86_400,
                    ('H', true) => 3_600,
                    ('M', true) => 60,
                    ('S', true) => 1,
                    _ => return None,
                };
                seconds = seconds.checked_add(n.checked_mul(scale)?)?;
                seen_unit = true;
            }
        }
    }
    if !number.is_empty() || !seen_unit {
        return None;
    }
    chrono::Duration::try_seconds(if negative { -seconds } else { seconds })
}

/// One VEVENT for `event`, serialised (CRLF lines, folded, text escaped).
pub fn event_to_ics(event: &CalendarEvent, now: DateTime<Utc>) -> Result<String, CalendarError> {
    let mut vevent = Event::new();
    vevent.uid(&event.id).summary(&clean_text(&event.title)).timestamp(now);
    match event.timing {
        EventTiming::AllDay { first_day, last_day } => {
            vevent.starts(first_day).ends(next_day(last_day));
        }
        EventTiming::Timed { start, end } => {
            vevent.starts(CalendarDateTime::Utc(start)).ends(CalendarDateTime::Utc(end));
        }
    }
    if let Some(location) = &event.location {
        vevent.location(&clean_text(location));
    }
    if let Some(description) = &event.description {
        vevent.description(&clean_text(description));
    }
    // VALUE=TEXT makes the writer escape the name and the reader unescape it (X- properties are
    // otherwise written raw, and a newline would end the line).
    vevent.append_property(
        Property::new(CALENDAR_PROPERTY, clean_text(&event.calendar)).add_parameter("VALUE", "TEXT").done(),
    );
    vevent.done().try_into_string().map_err(|_| CalendarError::Malformed)
}

/// Whether the stored `existing` event is what `event` would write: the same title and times. A
/// store keeps whole seconds (the file as the CalDAV server), so a fraction of a second in the call's
/// times is not a difference. Both backends decide with it whether a replay met its own event.
pub fn same_details(existing: &CalendarEvent, event: &CalendarEvent) -> bool {
    let seconds = |timing: &EventTiming| match timing {
        EventTiming::Timed { start, end } => {
            EventTiming::Timed { start: start.trunc_subsecs(0), end: end.trunc_subsecs(0) }
        }
        all_day => all_day.clone(),
    };
    existing.title == clean_text(&event.title) && seconds(&existing.timing) == seconds(&event.timing)
}

/// Put a serialised VEVENT before the last `END:VCALENDAR` line of `text` (blank text becomes a new
/// calendar first).
pub fn insert_event(text: &str, vevent: &str) -> Result<String, CalendarError> {
    let base = if text.trim().is_empty() { empty_calendar() } else { text.to_string() };
    // ASCII upper-casing keeps byte offsets, so the index is valid in `base`.
    let upper = base.to_ascii_uppercase();
    let at = upper
        .match_indices("END:VCALENDAR")
        .map(|(i, _)| i)
        .filter(|&i| i == 0 || upper.as_bytes()[i - 1] == b'\n')
        .last()
        .ok_or(CalendarError::Malformed)?;
    let mut out = String::with_capacity(base.len() + vevent.len());
    out.push_str(&base[..at]);
    out.push_str(vevent);
    out.push_str(&base[at..]);
    Ok(out)
}

/// Text as it may be stored: line breaks normalised to `\n` (escaped by the writer), other control
/// characters dropped — a bare CR is not escaped by the writer and would corrupt the line.
pub fn clean_text(value: &str) -> String {
    value
        .replace("\r\n", "\n")
        .replace('\r', "\n")
        .chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect()
}
