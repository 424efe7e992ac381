//! `CaldavCalendar`: the calendar backend on the clinic's own CalDAV server (Nextcloud, Radicale,
//! any RFC 4791 server), so that staff see what the assistant booked in their own calendar apps.
//!
//! - [`discovery`] finds the user's calendars once and picks the default one; it runs again after a
//!   failed discovery, when a calendar answers as if deleted or unshared (404, 410, 401/403; Radicale
//!   answers a PUT into a deleted collection 409), and for a name not found (at most once a minute);
//! - listing is a `REPORT calendar-query` with a time range per calendar (one that still fails after
//!   a new discovery is left out of a listing of every calendar, which is then marked incomplete;
//!   answers are parsed off the async workers); the server selects the
//!   events and series that touch the range, and voxgate expands the series itself
//!   ([`super::recur`]). It does not ask for the server's `<C:expand>`: RFC 4791 leaves its result in
//!   UTC and servers differ — Radicale 3.9 expands "09:00 Europe/Berlin" weekly at a fixed UTC time,
//!   so occurrences after a daylight-saving change come out an hour off — while the series itself
//!   (RRULE, TZID, EXDATE, overrides) is exact everywhere;
//! - creating is a `PUT` of one VEVENT to `<uid>.ics` with `If-None-Match: *`: the UID comes from
//!   the session and call id, so a replay meets `412` and finds its own event instead of a second
//!   (the same title and times, to the second: [`ics::same_details`], as in the local backend;
//!   `created: false`, unless an earlier attempt of this `PUT` may have stored it: then it is that
//!   attempt's, `created: true`, as when it is looked for below). A
//!   `PUT` is not started with less than [`MIN_TIME_FOR_PUT`] of the call left, and keeps
//!   [`CHECK_RESERVE`] of it back: when any attempt of a `PUT` may have reached the server without
//!   an answer saying what happened (cut off, connection lost, a 500, a gateway's 502/504, a 503
//!   without `Retry-After`; not a refused connection, a 429/501/507 or a 503 with `Retry-After`),
//!   the event may be stored all the same, or be stored later, so unless the last attempt got a
//!   2xx or 412, a `GET` looks for it before anything else (no new discovery and second `PUT`
//!   after a 403/404/409/410), and a `404` there does not prove it absent.
//!
//! The readiness of the server (reached at the last attempt or not; an answer over the size cap
//! came from it, so it counts as reached) is kept for `/readyz`.

mod discovery;
mod http;
#[cfg(test)]
mod tests;
mod xml;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration as Elapsed;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use futures::StreamExt;
use tokio::time::Instant;
use url::Url;

use self::discovery::{Calendars, Collection, XML, discover, expect_multistatus};
use self::http::{Dav, Written};
use super::CalendarError;
use super::backend::{CalendarBackend, CalendarEvent, CreateOutcome, DEFAULT_CALENDAR, EventPage, EventQuery};
use super::backend::{local_midnight, next_day};
use super::ics::{self, ParsedEvents};
use super::recur::StoredEvent;
use crate::config::CalendarBackendConfig;
use crate::tools::http::{Failure, time_left, within_deadline};

/// Calendars queried at once by a listing of every calendar.
const PARALLEL_QUERIES: usize = 4;
/// A `calendar_name` that matches nothing makes voxgate discover again (the calendar may be new) at
/// most this long after the last discovery: a model repeating a wrong name must not make every call
/// walk the server while holding the lock every calendar call waits on.
const UNKNOWN_NAME_REDISCOVERY: Elapsed = Elapsed::from_secs(60);

/// Least of the call's timeout that must be left to send a `PUT` (see [`CaldavCalendar::put`]):
/// [`CHECK_RESERVE`] and a second for the `PUT` (a clinic's server stores an event in well under one).
const MIN_TIME_FOR_PUT: Elapsed = Elapsed::from_millis(2_500);
/// What a `PUT` leaves of the call for the `GET` that looks for its event when it got no answer.
const CHECK_RESERVE: Elapsed = Elapsed::from_millis(1_500);
/// The least `tools.create_calendar_event.timeout_ms` with which this backend can create an event:
/// [`MIN_TIME_FOR_PUT`] and half a second for what comes before the `PUT` (the calendar's name
/// checked against the cached discovery). With less every create fails, so the configuration is
/// refused at start.
pub(crate) const MIN_CREATE_TIMEOUT: Elapsed = MIN_TIME_FOR_PUT.saturating_add(Elapsed::from_millis(500));

/// What the last contact with the server showed.
const UNKNOWN: u8 = 0;
const REACHED: u8 = 1;
const UNREACHABLE: u8 = 2;

/// The calendars found by one discovery.
#[derive(Debug)]
struct Discovered {
    calendars: Arc<Calendars>,
    at: Instant,
}

/// The CalDAV backend.
#[derive(Debug)]
pub struct CaldavCalendar {
    dav: Dav,
    url: Url,
    /// `backends.calendar.calendar`: the default calendar by display name or path.
    wanted: Option<String>,
    tz: Tz,
    /// Discovery's result and when it was made (see [`CaldavCalendar::discovered`]).
    calendars: tokio::sync::Mutex<Option<Discovered>>,
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
            if let Err(err) = backend.discovered(|_| true).await {
                tracing::warn!(error = %err, "the calendar server could not be used at start; calls will try again");
            }
        });
    }

    /// The discovered calendars: the cached ones if `keep` accepts them, else a new discovery's. A
    /// discovery that fails leaves nothing cached, so the next call tries again.
    async fn discovered(&self, keep: impl FnOnce(&Discovered) -> bool) -> Result<Arc<Calendars>, CalendarError> {
        let mut cached = self.calendars.lock().await;
        if let Some(found) = cached.as_ref().filter(|found| keep(found)) {
            return Ok(Arc::clone(&found.calendars));
        }
        *cached = None;
        let found = self.watch(discover(&self.dav, &self.url, self.wanted.as_deref()).await).map(Arc::new)?;
        *cached = Some(Discovered { calendars: Arc::clone(&found), at: Instant::now() });
        Ok(found)
    }

    /// Discover again because a calendar of `stale` answered as if deleted or unshared; if another
    /// call has done so meanwhile, its result.
    async fn rediscover(&self, stale: &Arc<Calendars>) -> Result<Arc<Calendars>, CalendarError> {
        tracing::info!("a calendar answered as if deleted or unshared; discovering the calendars again");
        self.discovered(|found| !Arc::ptr_eq(&found.calendars, stale)).await
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

    /// The calendars a `calendar_name` means (see [`chosen`]), and the discovery they come from.
    async fn pick(&self, name: Option<&str>) -> Result<(Arc<Calendars>, Vec<Collection>), CalendarError> {
        let calendars = self.discovered(|_| true).await?;
        if let Ok(found) = chosen(&calendars, name) {
            return Ok((calendars, found));
        }
        // Perhaps created since discovery.
        let calendars = self.discovered(|found| found.at.elapsed() < UNKNOWN_NAME_REDISCOVERY).await?;
        let found = chosen(&calendars, name)?;
        Ok((calendars, found))
    }

    /// Every calendar's answer for `[from, to)`, in order, a few at a time: quick for a clinic's
    /// handful, gentle on the server for fifty.
    async fn query_all(
        &self,
        calendars: &[Collection],
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Vec<Result<ParsedEvents, CalendarError>> {
        let queries: Vec<_> = calendars.iter().map(|c| self.query(c, from, to)).collect();
        futures::stream::iter(queries).buffered(PARALLEL_QUERIES).collect().await
    }

    /// The VEVENTs of one calendar overlapping `[from, to)`, named after the calendar.
    async fn query(
        &self,
        calendar: &Collection,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<ParsedEvents, CalendarError> {
        let body = self.report(&calendar.url, xml::calendar_query(&stamp(from), &stamp(to))).await?;
        events_off_thread(body, calendar, self.tz).await
    }

    /// A Depth 1 REPORT; the 207 body.
    async fn report(&self, url: &Url, body: String) -> Result<String, CalendarError> {
        let answer = self.dav.send("REPORT", url, &[("Depth", "1")], Some((XML, body))).await;
        let answer = self.watch(answer.map_err(CalendarError::from))?;
        expect_multistatus(answer.status.as_u16())?;
        Ok(answer.body)
    }

    /// `PUT` the event into `calendar`: the outcome, or the status of an answer that says the
    /// calendar may be gone (403, 404, 409, 410), for the caller to discover again; not when an
    /// earlier attempt may have stored the event (it is looked for instead).
    async fn put(
        &self,
        calendar: &Collection,
        event: &CalendarEvent,
    ) -> Result<Result<CreateOutcome, u16>, CalendarError> {
        let event = CalendarEvent {
            title: ics::clean_text(&event.title),
            location: event.location.as_deref().map(ics::clean_text),
            description: event.description.as_deref().map(ics::clean_text),
            calendar: calendar.name.clone(),
            ..event.clone()
        };
        let url = calendar.url.join(&resource_name(&event.id)).map_err(|_| CalendarError::BadAnswer)?;
        let body = ics::insert_event("", &ics::event_to_ics(&event, Utc::now())?)?;
        // A PUT cut off in flight may still be stored while the call reports a failure, and the
        // model, told so, books again under a new id: with less left than a PUT and a look for its
        // event need (after a slow discovery), nothing is sent and the failure is certain.
        if time_left().is_some_and(|left| left < MIN_TIME_FOR_PUT) {
            return Err(CalendarError::OutOfTime);
        }
        let put =
            self.dav.send_write("PUT", &url, &[("If-None-Match", "*")], Some(("text/calendar; charset=utf-8", body)));
        // Part of the call is kept back to look for the event if the PUT gets no answer.
        let Written { sent, may_have_arrived } = match time_left() {
            Some(left) => within_deadline(Instant::now() + left.saturating_sub(CHECK_RESERVE), put).await,
            None => put.await,
        };
        // Some attempt, perhaps not the last (a restarting server refuses the retries, or answers
        // 423 while the first one's lock is held), was cut off, lost its connection or met a 500,
        // a gateway's 502/504 or a 503 without Retry-After: the event may be stored. Unless the
        // last attempt stored it (2xx) or met it (412), it is looked for before anything else: a
        // 404 must not send it into another calendar after a new discovery, nor a 423 tell the
        // model to book again.
        let settled = sent.as_ref().is_ok_and(|answer| matches!(answer.status.as_u16(), 200..=299 | 412));
        if may_have_arrived && !settled {
            let last = sent.as_ref().map_or_else(Failure::to_string, |answer| format!("HTTP status {}", answer.status));
            tracing::info!(last = %last, "a calendar PUT may have been stored unanswered; looking for the event");
            return self.look_for(&url, calendar, event).await.map(Ok);
        }
        let answer = self.watch(sent.map_err(CalendarError::from))?;
        match answer.status.as_u16() {
            200..=299 => Ok(Ok(CreateOutcome { event, created: true })),
            // Something is stored under this call's name already: an earlier attempt of this call.
            // It exists, so a look at it that fails leaves the outcome unknown, not "unavailable".
            // After an attempt of this PUT that may have arrived, it is taken to be that attempt's,
            // as when the event is looked for (`created: true`); met at once, a replay's.
            412 => match self.fetch(&url, calendar, &event.id).await {
                Ok(Some(existing)) if ics::same_details(&existing, &event) => {
                    Ok(Ok(CreateOutcome { event: existing, created: may_have_arrived }))
                }
                Ok(Some(_)) => Err(CalendarError::Conflict),
                // Not there to read (a replica behind, or deleted meanwhile), or not readable.
                Ok(None) => Err(CalendarError::Unconfirmed),
                Err(err) => {
                    tracing::info!(error = %err, "the event stored under this call's name could not be read");
                    Err(CalendarError::Unconfirmed)
                }
            },
            status @ (403 | 404 | 409 | 410) => Ok(Err(status)),
            401 => Err(CalendarError::Refused),
            status => Err(CalendarError::Status(status)),
        }
    }

    /// After a `PUT` some attempt of which may have reached the server, and whose last attempt
    /// neither stored the event nor met it (see [`CaldavCalendar::put`]): found as written, the
    /// event is this call's. Otherwise nobody knows ([`CalendarError::Unconfirmed`]): a `404` does
    /// not prove the event absent, as a `PUT` that got no answer (often one waiting on a lock) may
    /// still be stored after the `GET`.
    async fn look_for(
        &self,
        url: &Url,
        calendar: &Collection,
        event: CalendarEvent,
    ) -> Result<CreateOutcome, CalendarError> {
        match self.fetch(url, calendar, &event.id).await {
            Ok(Some(existing)) if ics::same_details(&existing, &event) => Ok(CreateOutcome { event, created: true }),
            Ok(Some(_)) => Err(CalendarError::Conflict),
            Ok(None) | Err(_) => Err(CalendarError::Unconfirmed),
        }
    }

    /// The stored event with this UID in one of `calendars`.
    async fn find_in(&self, calendars: &[Collection], uid: &str) -> Result<Option<CalendarEvent>, CalendarError> {
        for calendar in calendars {
            let body = self.report(&calendar.url, xml::uid_query(uid)).await?;
            if let Some(found) = events_off_thread(body, calendar, self.tz).await?.find(uid) {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The event stored at `url` (after a `412`, or a `PUT` without an answer), if it is there.
    async fn fetch(&self, url: &Url, calendar: &Collection, uid: &str) -> Result<Option<CalendarEvent>, CalendarError> {
        let answer = self.watch(self.dav.send("GET", url, &[], None).await.map_err(CalendarError::from))?;
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
        let name = query.calendar.as_deref();
        let (discovered, calendars) = self.pick(name).await?;
        // A day of margin each side: the exact range is applied after expansion.
        let from = local_midnight(self.tz, query.first_day) - Duration::days(1);
        let to = local_midnight(self.tz, next_day(query.last_day)) + Duration::days(1);
        let mut answers = self.query_all(&calendars, from, to).await;
        if answers.iter().any(|a| a.as_ref().is_err_and(is_stale)) {
            // Deleted or unshared since discovery: ask again with what the server lists now.
            let calendars = chosen(&*self.rediscover(&discovered).await?, name)?;
            answers = self.query_all(&calendars, from, to).await;
        }
        let mut all = ParsedEvents::default();
        let (mut listed, mut failure) = (0, None);
        for answer in answers {
            match answer {
                Ok(parsed) => {
                    listed += 1;
                    all.events.extend(parsed.events);
                    all.skipped += parsed.skipped;
                }
                Err(err) => {
                    tracing::warn!(error = %err, "a calendar could not be listed; the listing is marked incomplete");
                    failure.get_or_insert(err);
                }
            }
        }
        // One calendar that cannot be read (too large, refused) must not hide every other; when
        // none answered, that is the answer.
        let failed = match failure {
            Some(err) if listed == 0 => return Err(err),
            other => other.is_some(),
        };
        // The calendars are already chosen; event names are the calendars' own. Expansion is
        // bounded (see `recur`) but still CPU work: it runs off the async workers.
        let (query, tz) = (EventQuery { calendar: None, ..query.clone() }, self.tz);
        let mut page =
            tokio::task::spawn_blocking(move || all.page(&query, tz)).await.map_err(|_| CalendarError::Worker)?;
        page.complete &= !failed;
        Ok(page)
    }

    async fn create_event(&self, event: CalendarEvent) -> Result<CreateOutcome, CalendarError> {
        let (discovered, calendars) = self.pick(Some(&event.calendar)).await?;
        let calendar = writable(calendars)?;
        match self.put(&calendar, &event).await? {
            Ok(outcome) => Ok(outcome),
            Err(_) => {
                // The calendar was deleted or unshared since discovery: put the event where the
                // name points now (the default may have moved to the next writable calendar).
                let calendar = writable(chosen(&*self.rediscover(&discovered).await?, Some(&event.calendar))?)?;
                self.put(&calendar, &event).await?.map_err(|status| match status {
                    403 => CalendarError::Refused,
                    status => CalendarError::Status(status),
                })
            }
        }
    }

    async fn find_event(&self, uid: &str) -> Result<Option<CalendarEvent>, CalendarError> {
        let (discovered, calendars) = self.pick(None).await?;
        match self.find_in(&calendars, uid).await {
            Err(err) if is_stale(&err) => self.find_in(&self.rediscover(&discovered).await?.all, uid).await,
            found => found,
        }
    }

    fn reachable(&self) -> Option<bool> {
        match self.health.load(Ordering::Relaxed) {
            UNREACHABLE => Some(false),
            REACHED => Some(true),
            _ => None,
        }
    }
}

/// The calendars a `calendar_name` means: every one for `None`, else the one with that display
/// name or path, else the default for "Default".
fn chosen(calendars: &Calendars, name: Option<&str>) -> Result<Vec<Collection>, CalendarError> {
    let Some(name) = name else { return Ok(calendars.all.clone()) };
    if let Some(found) = calendars.named(name) {
        return Ok(vec![found.clone()]);
    }
    if !name.trim().eq_ignore_ascii_case(DEFAULT_CALENDAR) {
        return Err(CalendarError::UnknownCalendar);
    }
    calendars.default_calendar().map(|c| vec![c.clone()]).ok_or(CalendarError::NoDefaultCalendar)
}

/// The one calendar picked for a create, if the user may write to it: a read-only one would answer
/// 403, which reads as refused credentials.
fn writable(calendars: Vec<Collection>) -> Result<Collection, CalendarError> {
    let calendar = calendars.into_iter().next().ok_or(CalendarError::UnknownCalendar)?;
    if calendar.read_only { Err(CalendarError::ReadOnlyCalendar) } else { Ok(calendar) }
}

/// Whether a calendar's failure says it may have been deleted (404, 410) or unshared (403) since
/// discovery: worth one new discovery.
fn is_stale(err: &CalendarError) -> bool {
    matches!(err, CalendarError::Status(404 | 410) | CalendarError::Refused)
}

/// [`events_of`] on a blocking thread: an answer may be 8 MiB of XML and iCalendar, and the async
/// workers also relay the audio of every session on them.
async fn events_off_thread(body: String, calendar: &Collection, tz: Tz) -> Result<ParsedEvents, CalendarError> {
    let calendar = calendar.clone();
    tokio::task::spawn_blocking(move || events_of(&body, &calendar, tz)).await.map_err(|_| CalendarError::Worker)?
}

/// The events in a calendar-query answer, each named after `calendar`.
fn events_of(body: &str, calendar: &Collection, tz: Tz) -> Result<ParsedEvents, CalendarError> {
    #[cfg(test)]
    tests::parsed_on(std::thread::current().id());
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
