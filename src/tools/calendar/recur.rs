//! Recurring events (RFC 5545 RRULE, RDATE, EXDATE, RECURRENCE-ID) expanded into the occurrences a
//! listing shows, with the `rrule` crate. Shared by the local `.ics` backend and by CalDAV servers
//! that do not expand on their side.
//!
//! A series repeats in the zone its DTSTART was written in, so "every Monday 09:00 Europe/Berlin"
//! stays at 09:00 local time across daylight-saving changes; all-day series repeat on dates. An
//! occurrence moved or cancelled by a RECURRENCE-ID override is left out of the series: the override
//! is an event of its own (a cancelled one is dropped by the reader). DTSTART is an occurrence of a
//! series made of RDATEs alone, and a date made twice (by the rule and an RDATE) is listed once.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use chrono::{DateTime, Duration, NaiveDate, NaiveTime, Utc};
use chrono_tz::Tz;
use rrule::{Frequency, RRule, RRuleSet, Unvalidated};

use super::backend::{CalendarEvent, EventPage, EventQuery, EventTiming, local_midnight, next_day};

/// Occurrences one series may place in the listing's range (with its margins): an hourly series
/// over the widest range (31 days) needs 792, a minutely one over a day about 4,300. Keeps one odd
/// series from using up the budget of every other.
const MAX_SERIES_OCCURRENCES: usize = 20_000;
/// Occurrences all series of one listing may place in its range together; beyond it the page says
/// it is incomplete (2,000 minutely series over a day would be nine million).
const MAX_TOTAL_OCCURRENCES: usize = 100_000;
/// Dates all series of one listing may walk, before the range or in it: the `rrule` crate walks a
/// rule from its DTSTART, so a series begun years ago costs its whole history (a daily series begun
/// twenty years ago ≈ 7,300 dates, an hourly one begun three years ago ≈ 26,000). Charged apart from
/// the occurrences, so that old series are still listed; this bound only stops a listing that would
/// walk for seconds (a minutely series begun years ago).
const MAX_WALK_STEPS: usize = 1_000_000;
/// Dates one series may walk: an hourly series begun twenty years ago (≈ 175,000) still fits, a
/// minutely one begun years ago does not, and it leaves the rest of [`MAX_WALK_STEPS`] to the others.
const MAX_SERIES_STEPS: usize = 200_000;

/// What one listing may still spend on expansion.
struct Budget {
    occurrences: usize,
    steps: usize,
}

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

/// The page a query asks for: events and occurrences of its calendar overlapping its days, sorted by
/// start, the first `max_results` of them. Occurrences are counted as they are generated and only
/// those that may still be on the page are built (never more than `max_results` at a time), so
/// memory does not grow with the number of occurrences; generation stops at [`MAX_TOTAL_OCCURRENCES`]
/// or [`MAX_WALK_STEPS`], a series' at [`MAX_SERIES_OCCURRENCES`] or [`MAX_SERIES_STEPS`] (then
/// `complete` is false). Series that cannot be expanded (a rule the crate rejects) are shown
/// by their first occurrence, and counted in the second value.
pub fn expand(stored: Vec<StoredEvent>, query: &EventQuery, tz: Tz) -> (EventPage, usize) {
    let wanted = query.calendar.as_deref().map(str::trim);
    let stored: Vec<StoredEvent> = stored
        .into_iter()
        .filter(|e| wanted.is_none_or(|name| e.event.calendar.trim().eq_ignore_ascii_case(name)))
        .collect();
    // By calendar and UID: an invitation copied into two calendars has one UID in both, and an
    // override in one moves that calendar's occurrence only.
    let mut overridden: HashMap<(&str, &str), Vec<DateTime<Utc>>> = HashMap::new();
    for entry in &stored {
        if let Some(at) = entry.recurrence_id {
            overridden.entry((entry.event.calendar.as_str(), entry.event.id.as_str())).or_default().push(at);
        }
    }
    let mut page = Page::new(query, tz);
    // Single events first: they cost nothing, and a budget spent on series must not hide them.
    for entry in stored.iter().filter(|e| !e.cancelled && (e.series.is_none() || e.recurrence_id.is_some())) {
        page.offer(&entry.event, entry.event.timing.clone());
    }
    let mut failed = 0;
    let mut budget = Budget { occurrences: MAX_TOTAL_OCCURRENCES, steps: MAX_WALK_STEPS };
    let mut series: Vec<(&StoredEvent, &Series)> = stored
        .iter()
        .filter(|e| !e.cancelled && e.recurrence_id.is_none())
        .filter_map(|e| e.series.as_ref().map(|s| (e, s)))
        .collect();
    // The cheapest walks first, so that a series that would walk for long (a minutely one begun
    // years ago) uses what the weekly clinics left, not the other way round.
    let until = local_midnight(tz, next_day(query.last_day));
    series.sort_by_cached_key(|(entry, series)| walk_estimate(entry.event.timing.start_instant(tz), series, until));
    for (entry, series) in series {
        let key = (entry.event.calendar.as_str(), entry.event.id.as_str());
        let moved = overridden.get(&key).map(Vec::as_slice).unwrap_or_default();
        match occurrences(&entry.event, series, moved, &mut page, &mut budget) {
            Some(true) => {}
            Some(false) => page.complete = false,
            None => {
                failed += 1;
                page.offer(&entry.event, entry.event.timing.clone());
            }
        }
    }
    (page.finish(), failed)
}

/// The best `max_results` occurrences seen so far (a max-heap: the latest on top, dropped first),
/// and how many matched in all.
struct Page<'q> {
    query: &'q EventQuery,
    tz: Tz,
    best: BinaryHeap<Ranked>,
    total: usize,
    complete: bool,
}

/// An event on the page, ordered like a listing: start, end, then UID.
struct Ranked {
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    event: CalendarEvent,
}

impl Ranked {
    fn key(&self) -> (DateTime<Utc>, DateTime<Utc>, &str) {
        (self.start, self.end, &self.event.id)
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

impl<'q> Page<'q> {
    fn new(query: &'q EventQuery, tz: Tz) -> Self {
        Self { query, tz, best: BinaryHeap::new(), total: 0, complete: true }
    }

    /// Count `event` at `timing` if it overlaps the days; keep a copy only if it is on the page.
    fn offer(&mut self, event: &CalendarEvent, timing: EventTiming) {
        if !timing.overlaps(self.query.first_day, self.query.last_day, self.tz) {
            return;
        }
        self.total += 1;
        let (start, end) = (timing.start_instant(self.tz), timing.end_instant(self.tz));
        if self.best.len() >= self.query.max_results {
            match self.best.peek() {
                Some(latest) if (start, end, event.id.as_str()) < latest.key() => {}
                _ => return,
            }
        }
        self.best.push(Ranked { start, end, event: CalendarEvent { timing, ..event.clone() } });
        if self.best.len() > self.query.max_results {
            self.best.pop();
        }
    }

    fn finish(self) -> EventPage {
        let events = self.best.into_sorted_vec().into_iter().map(|r| r.event).collect();
        EventPage { events, total_count: self.total, complete: self.complete }
    }
}

/// Offer the occurrences of one series near the page's days, placing at most
/// [`MAX_SERIES_OCCURRENCES`] and spending from `budget` each date walked and each occurrence placed. `Some(false)` when a bound
/// stopped it early, `None` when its rule cannot be used.
fn occurrences(
    event: &CalendarEvent,
    series: &Series,
    moved: &[DateTime<Utc>],
    page: &mut Page<'_>,
    budget: &mut Budget,
) -> Option<bool> {
    let (start, length) = match event.timing {
        EventTiming::AllDay { first_day, last_day } => {
            (midnight_utc(first_day), Duration::days((last_day - first_day).num_days()))
        }
        EventTiming::Timed { start, end } => (start, end - start),
    };
    let zone = rrule::Tz::from(series.zone);
    let dt_start = start.with_timezone(&zone);
    // `limit` makes the crate give up on rules that never produce a date instead of looping.
    let mut set = RRuleSet::new(dt_start).limit();
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
    // RFC 5545 §3.8.5.2: DTSTART is the first instance. The crate lists only what the rules and
    // RDATEs make, so a series of RDATEs alone would lose it (with a rule, a DTSTART the rule does
    // not match is left out, as the crate leaves it).
    if series.rules.is_empty() {
        set = set.rdate(dt_start);
    }
    // Wide enough for all-day dates (keyed in UTC) and for the calendar zone's days; `offer` is exact.
    let (first_day, last_day) = (page.query.first_day, page.query.last_day);
    let from = midnight_utc(first_day).min(local_midnight(page.tz, first_day)) - length - Duration::days(1);
    let to = midnight_utc(next_day(last_day)).max(local_midnight(page.tz, next_day(last_day))) + Duration::days(1);
    let (mut placed, mut previous) = (0, None);
    for (walked, at) in (&set).into_iter().enumerate() {
        if budget.steps == 0 || walked == MAX_SERIES_STEPS {
            return Some(false);
        }
        budget.steps -= 1;
        let at = at.with_timezone(&Utc);
        if at > to {
            break;
        }
        // The crate yields dates in order but keeps a date made twice (an RDATE on a date of the
        // rule, the same RDATE listed twice); RFC 5545 counts it once.
        if at < from || previous.replace(at) == Some(at) {
            continue;
        }
        if budget.occurrences == 0 || placed == MAX_SERIES_OCCURRENCES {
            return Some(false);
        }
        budget.occurrences -= 1;
        placed += 1;
        let timing = match event.timing {
            EventTiming::AllDay { .. } => {
                let first = at.date_naive();
                let last = first.checked_add_signed(length).unwrap_or(first);
                EventTiming::AllDay { first_day: first, last_day: last }
            }
            EventTiming::Timed { .. } => EventTiming::Timed { start: at, end: at + length },
        };
        page.offer(event, timing);
    }
    Some(true)
}

/// Roughly how many dates walking `series` from `start` to `until` costs: the time between over the
/// rule's period (`FREQ` and `INTERVAL`; `BY…` parts and `COUNT` are ignored), for ordering only. A
/// rule the crate cannot read costs nothing here: it fails at once when expanded.
fn walk_estimate(start: DateTime<Utc>, series: &Series, until: DateTime<Utc>) -> i64 {
    let span = (until - start).num_seconds().max(0);
    series
        .rules
        .iter()
        .filter_map(|rule| rule.parse::<RRule<Unvalidated>>().ok())
        .map(|rule| {
            let period: i64 = match rule.get_freq() {
                Frequency::Secondly => 1,
                Frequency::Minutely => 60,
                Frequency::Hourly => 3_600,
                Frequency::Daily => 86_400,
                Frequency::Weekly => 604_800,
                Frequency::Monthly => 2_629_746,
                Frequency::Yearly => 31_556_952,
            };
            span / period.saturating_mul(i64::from(rule.get_interval().max(1)))
        })
        .fold(0, i64::saturating_add)
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
