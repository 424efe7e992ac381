//! `CaldavCalendar`: the calendar backend on the clinic's own CalDAV server (Nextcloud, Radicale,
//! any RFC 4791 server), so that staff see what the assistant booked in their own calendar apps.
//!
//! - [`discovery`] finds the user's calendars once (again when a name is not found, or after a
//!   failure) and picks the default one;
//! - listing is a `REPORT calendar-query` with a time range per calendar; the server selects the
//!   events and series that touch the range, and voxgate expands the series itself
//!   ([`super::recur`]). It does not ask for the server's `<C:expand>`: RFC 4791 leaves its result in
//!   UTC and servers differ — Radicale 3.9 expands "09:00 Europe/Berlin" weekly at a fixed UTC time,
//!   so occurrences after a daylight-saving change come out an hour off — while the series itself
//!   (RRULE, TZID, EXDATE, overrides) is exact everywhere;
//! - creating is a `PUT` of one VEVENT to `<uid>.ics` with `If-None-Match: *`: the UID comes from
//!   the session and call id, so a replay meets `412` and finds its own event instead of a second.
//!
//! The readiness of the server (reached at the last attempt or not) is kept for `/readyz`.

mod discovery;
mod http;
#[cfg(test)]
mod tests;
mod xml;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use futures::{StreamExt, TryStreamExt};
use url::Url;

use self::discovery::{Calendars, Collection, XML, discover, expect_multistatus};
use self::http::Dav;
use super::CalendarError;
use super::backend::{CalendarBackend, CalendarEvent, CreateOutcome, DEFAULT_CALENDAR, EventPage, EventQuery};
use super::backend::{local_midnight, next_day};
use super::ics::{self, ParsedEvents};
use super::recur::StoredEvent;
use crate::config::CalendarBackendConfig;

/// Calendars queried at once by a listing of every calendar.
const PARALLEL_QUERIES: usize = 4;

/// What the last contact with the server showed.
const UNKNOWN: u8 = 0;
const REACHED: u8 = 1;
const UNREACHABLE: u8 = 2;

/// The CalDAV backend.
#[derive(Debug)]
pub struct CaldavCalendar {
    dav: Dav,
    url: Url,
    /// `backends.calendar.calendar`: the default calendar by display name or path.
    wanted: Option<String>,
    tz: Tz,
    /// Discovery's result, kept until a name is not found or discovery fails.
    calendars: tokio::sync::Mutex<Option<Arc<Calendars>>>,
    /// [`UNKNOWN`], [`REACHED`] or [`UNREACHABLE`].
    health: AtomicU8,
}

impl CaldavCalendar {
    pub fn new(config: &CalendarBackendConfig, tz: Tz) -> Result<Self, CalendarError> {
        let raw = config.url.as_deref().ok_or(CalendarError::BadUrl("required for kind = \"caldav\""))?;
        let url = Url::parse(raw.trim()).map_err(|_| CalendarError::BadUrl("not a URL"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(CalendarError::BadUrl("must be an http or https URL"));
        }
        // Credentials in the URL would travel into every log line and error that shows it.
        if !url.username().is_empty() || url.password().is_some() {
            return Err(CalendarError::BadUrl("must not contain credentials; use username and password"));
        }
        let dav = Dav::new(&url, config.username.clone(), config.password.clone())
            .map_err(|_| CalendarError::BadUrl("the HTTP client cannot be built"))?;
        Ok(Self {
            dav,
            url,
            wanted: config.calendar.clone(),
            tz,
            calendars: tokio::sync::Mutex::new(None),
            health: AtomicU8::new(UNKNOWN),
        })
    }

    /// Discover the calendars now, in the background, so that `/readyz` knows early whether the
    /// server can be reached; a failure only marks the backend degraded (calls retry discovery).
    pub fn probe_in_background(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let backend = Arc::clone(self);
        runtime.spawn(async move {
            if let Err(err) = backend.calendars(false).await {
                tracing::warn!(error = %err, "the calendar server could not be used at start; calls will try again");
            }
        });
    }

    /// The discovered calendars (discovering them first, or again when `refresh`).
    async fn calendars(&self, refresh: bool) -> Result<Arc<Calendars>, CalendarError> {
        let mut cached = self.calendars.lock().await;
        if let Some(found) = cached.as_ref().filter(|_| !refresh) {
            return Ok(Arc::clone(found));
        }
        let found = self.watch(discover(&self.dav, &self.url, self.wanted.as_deref()).await).map(Arc::new)?;
        *cached = Some(Arc::clone(&found));
        Ok(found)
    }

    /// Record whether the server answered, for `/readyz`.
    fn watch<T>(&self, result: Result<T, CalendarError>) -> Result<T, CalendarError> {
        let health = match &result {
            Err(CalendarError::Unreachable(_) | CalendarError::Status(_) | CalendarError::Refused) => UNREACHABLE,
            _ => REACHED,
        };
        self.health.store(health, Ordering::Relaxed);
        result
    }

    /// The calendars a `calendar_name` means: every one for `None`, the default for "Default"
    /// (unless a calendar is really called that), else the one with that name or path.
    async fn pick(&self, name: Option<&str>) -> Result<Vec<Collection>, CalendarError> {
        let calendars = self.calendars(false).await?;
        let Some(name) = name else { return Ok(calendars.all.clone()) };
        if let Some(found) = chosen(&calendars, name) {
            return Ok(vec![found]);
        }
        // Perhaps created since discovery.
        let calendars = self.calendars(true).await?;
        chosen(&calendars, name).map(|c| vec![c]).ok_or(CalendarError::UnknownCalendar)
    }

    /// The VEVENTs of one calendar overlapping `[from, to)`, named after the calendar.
    async fn query(
        &self,
        calendar: &Collection,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<ParsedEvents, CalendarError> {
        let body = self.report(&calendar.url, xml::calendar_query(&stamp(from), &stamp(to))).await?;
        events_of(&body, calendar, self.tz)
    }

    /// A Depth 1 REPORT; the 207 body.
    async fn report(&self, url: &Url, body: String) -> Result<String, CalendarError> {
        let answer = self.dav.send("REPORT", url, &[("Depth", "1")], Some((XML, body))).await;
        let answer = self.watch(answer.map_err(CalendarError::Unreachable))?;
        expect_multistatus(answer.status.as_u16())?;
        Ok(answer.body)
    }

    /// The event stored at `url` (after a `412`), if it is there.
    async fn fetch(&self, url: &Url, calendar: &Collection, uid: &str) -> Result<Option<CalendarEvent>, CalendarError> {
        let answer = self.watch(self.dav.send("GET", url, &[], None).await.map_err(CalendarError::Unreachable))?;
        match answer.status.as_u16() {
            200 => Ok(named(ics::parse(&answer.body, self.tz)?, calendar).find(uid)),
            404 | 410 => Ok(None),
            401 | 403 => Err(CalendarError::Refused),
            status => Err(CalendarError::Status(status)),
        }
    }
}

#[async_trait::async_trait]
impl CalendarBackend for CaldavCalendar {
    fn timezone(&self) -> Tz {
        self.tz
    }

    async fn list_events(&self, query: &EventQuery) -> Result<EventPage, CalendarError> {
        let calendars = self.pick(query.calendar.as_deref()).await?;
        // A day of margin each side: the exact range is applied after expansion.
        let from = local_midnight(self.tz, query.first_day) - Duration::days(1);
        let to = local_midnight(self.tz, next_day(query.last_day)) + Duration::days(1);
        // A few calendars at a time: quick for a clinic's handful, gentle on the server for fifty.
        let queries: Vec<_> = calendars.iter().map(|c| self.query(c, from, to)).collect();
        let answers: Vec<ParsedEvents> =
            futures::stream::iter(queries).buffered(PARALLEL_QUERIES).try_collect().await?;
        let mut all = ParsedEvents::default();
        for parsed in answers {
            all.events.extend(parsed.events);
            all.skipped += parsed.skipped;
        }
        // The calendars are already chosen; event names are the calendars' own. Expansion is
        // bounded (see `recur`) but still CPU work: it runs off the async workers.
        let (query, tz) = (EventQuery { calendar: None, ..query.clone() }, self.tz);
        tokio::task::spawn_blocking(move || all.page(&query, tz)).await.map_err(|_| CalendarError::Worker)
    }

    async fn create_event(&self, event: CalendarEvent) -> Result<CreateOutcome, CalendarError> {
        let calendar =
            self.pick(Some(&event.calendar)).await?.into_iter().next().ok_or(CalendarError::UnknownCalendar)?;
        let event = CalendarEvent {
            title: ics::clean_text(&event.title),
            location: event.location.as_deref().map(ics::clean_text),
            description: event.description.as_deref().map(ics::clean_text),
            calendar: calendar.name.clone(),
            ..event
        };
        let url = calendar.url.join(&resource_name(&event.id)).map_err(|_| CalendarError::BadAnswer)?;
        let body = ics::insert_event("", &ics::event_to_ics(&event, Utc::now())?)?;
        let answer =
            self.dav.send("PUT", &url, &[("If-None-Match", "*")], Some(("text/calendar; charset=utf-8", body))).await;
        let answer = self.watch(answer.map_err(CalendarError::Unreachable))?;
        match answer.status.as_u16() {
            200..=299 => Ok(CreateOutcome { event, created: true }),
            // Something is stored under this call's name already: an earlier attempt of this call.
            412 => match self.fetch(&url, &calendar, &event.id).await? {
                Some(existing) if existing.title == event.title && existing.timing == event.timing => {
                    Ok(CreateOutcome { event: existing, created: false })
                }
                _ => Err(CalendarError::Conflict),
            },
            401 | 403 => Err(CalendarError::Refused),
            status => Err(CalendarError::Status(status)),
        }
    }

    async fn find_event(&self, uid: &str) -> Result<Option<CalendarEvent>, CalendarError> {
        for calendar in self.pick(None).await? {
            let body = self.report(&calendar.url, xml::uid_query(uid)).await?;
            if let Some(found) = events_of(&body, &calendar, self.tz)?.find(uid) {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    fn reachable(&self) -> Option<bool> {
        match self.health.load(Ordering::Relaxed) {
            UNREACHABLE => Some(false),
            REACHED => Some(true),
            _ => None,
        }
    }
}

/// The calendar a name picks: by display name or path, or the default for "Default".
fn chosen(calendars: &Calendars, name: &str) -> Option<Collection> {
    let found = calendars
        .named(name)
        .or_else(|| name.trim().eq_ignore_ascii_case(DEFAULT_CALENDAR).then(|| calendars.default_calendar()).flatten());
    found.cloned()
}

/// The events in a calendar-query answer, each named after `calendar`.
fn events_of(body: &str, calendar: &Collection, tz: Tz) -> Result<ParsedEvents, CalendarError> {
    let mut all = ParsedEvents::default();
    for resource in xml::multistatus(body).map_err(|_| CalendarError::BadAnswer)? {
        let Some(data) = resource.calendar_data else { continue };
        match ics::parse(&data, tz) {
            Ok(parsed) => {
                all.skipped += parsed.skipped;
                all.events.extend(named(parsed, calendar).events);
            }
            // One unreadable object (another client's bug) must not hide the rest of the calendar.
            Err(_) => all.skipped += 1,
        }
    }
    Ok(all)
}

fn named(mut parsed: ParsedEvents, calendar: &Collection) -> ParsedEvents {
    for StoredEvent { event, .. } in &mut parsed.events {
        event.calendar = calendar.name.clone();
    }
    parsed
}

/// The resource an event is stored at: its UID, with anything but `[A-Za-z0-9._-]` replaced, so
/// the name needs no escaping on any server (voxgate's UIDs are hex plus `@voxgate`).
fn resource_name(uid: &str) -> String {
    let safe: String =
        uid.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '-' }).collect();
    format!("{safe}.ics")
}

/// CalDAV's UTC time format.
fn stamp(t: DateTime<Utc>) -> String {
    t.format("%Y%m%dT%H%M%SZ").to_string()
}
