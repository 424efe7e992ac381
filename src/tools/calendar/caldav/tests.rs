//! What Radicale cannot be made to do on demand: a scripted CalDAV server (real HTTP on 127.0.0.1,
//! the server's WebDAV answers as recorded from Radicale) that fails first. 5xx and 429 with
//! `Retry-After` are retried (honouring it) up to three times; other 4xx are not; 403 is refused credentials; every
//! request carries the tool span's `traceparent`; `/readyz`'s flag follows the last contact. Also
//! Nextcloud's home-set layout (answers in sabre/dav's shape, written by hand: no Nextcloud runs
//! here), where the default calendar must skip the read-only birthday calendar. A replay meeting
//! `412` finds its own event despite a fraction of a second; an answer over the cap is not an
//! unreachable server; each request ends within the call's time left, and no `PUT` starts without
//! time for it. A `PUT` any attempt of which may have reached the server (a `503` without
//! `Retry-After` among them) is looked for, even when the last was refused a connection or answered
//! `423` or `404` (no second `PUT` elsewhere), and a `404` then leaves it unconfirmed; one the
//! server itself answered `503` with `Retry-After` each time was not stored. Found after an
//! attempt that may have stored it, met (`412`) or looked for, the event is this call's (`created`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use chrono::NaiveDate;

use super::CaldavCalendar;
use crate::config::{CalendarBackendConfig, CalendarKind, Secret};
use crate::tools::calendar::{CalendarBackend, CalendarError, DEFAULT_CALENDAR, EventQuery, EventTiming};
use crate::tools::http::{Failure, within_deadline};

/// Radicale's answer to a Depth 0 PROPFIND on a calendar collection.
const COLLECTION: &str = r#"<?xml version='1.0' encoding='utf-8'?>
<multistatus xmlns="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav"><response><href>/alice/clinic/</href><propstat><prop><resourcetype><C:calendar /><collection /></resourcetype><displayname>Clinic Rota</displayname><C:supported-calendar-component-set><C:comp name="VEVENT" /></C:supported-calendar-component-set></prop><status>HTTP/1.1 200 OK</status></propstat></response></multistatus>"#;

/// Radicale's answer to a calendar-query: one event.
const EVENTS: &str = "<?xml version='1.0' encoding='utf-8'?>\n<multistatus xmlns=\"DAV:\" xmlns:C=\"urn:ietf:params:xml:ns:caldav\"><response><href>/alice/clinic/a.ics</href><propstat><prop><getetag>\"1\"</getetag><C:calendar-data>BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//t//EN\nBEGIN:VEVENT\nUID:a\nDTSTART:20240401T100000Z\nDTEND:20240401T110000Z\nSUMMARY:Ward round\nEND:VEVENT\nEND:VCALENDAR\n</C:calendar-data></prop><status>HTTP/1.1 200 OK</status></propstat></response></multistatus>";

/// Answers given in order (those for a path first, for requests that run in parallel); what was
/// asked is recorded.
#[derive(Default)]
struct Script {
    answers: Mutex<VecDeque<(u16, &'static str)>>,
    by_path: Mutex<HashMap<&'static str, VecDeque<(u16, String)>>>,
    seen: Mutex<Vec<(Method, String, Option<String>)>>,
    /// How long requests of a method wait before their answer (recorded as seen at once).
    delays: Mutex<HashMap<&'static str, Duration>>,
    /// After this many requests the server stops listening (a restart): later connections are refused.
    closes_after: Mutex<Option<usize>>,
    closed: tokio::sync::Notify,
    /// The `Retry-After` sent with each 429 and 503 (`"0"` unless changed); none for `None`, as from
    /// a proxy whose connection to the server dropped.
    retry_after: Mutex<Option<&'static str>>,
}

async fn answer(State(script): State<Arc<Script>>, method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok()).map(String::from);
    let delay = script.delays.lock().unwrap().get(method.as_str()).copied();
    let seen = {
        let mut seen = script.seen.lock().unwrap();
        seen.push((method, uri.path().to_string(), traceparent));
        seen.len()
    };
    if *script.closes_after.lock().unwrap() == Some(seen) {
        script.closed.notify_one();
    }
    let for_path = script.by_path.lock().unwrap().get_mut(uri.path()).and_then(VecDeque::pop_front);
    let (status, body) = for_path
        .or_else(|| script.answers.lock().unwrap().pop_front().map(|(s, b)| (s, b.to_string())))
        .unwrap_or((500, String::new()));
    // After taking the answer: the requests that come meanwhile get the next ones.
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let status = StatusCode::from_u16(status).unwrap();
    let mut response = (status, body).into_response();
    if let Some(after) = *script.retry_after.lock().unwrap()
        && matches!(status.as_u16(), 429 | 503)
    {
        response.headers_mut().insert("retry-after", after.parse().unwrap());
    }
    response
}

async fn serve(answers: &[(u16, &'static str)]) -> (Arc<Script>, CaldavCalendar) {
    let script = Arc::new(Script::default());
    script.answers.lock().unwrap().extend(answers.iter().copied());
    *script.retry_after.lock().unwrap() = Some("0");
    let app = axum::Router::new().fallback(answer).with_state(Arc::clone(&script));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let closing = Arc::clone(&script);
    let closed = async move { closing.closed.notified().await };
    tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(closed).await.unwrap() });
    let config = CalendarBackendConfig {
        kind: CalendarKind::Caldav,
        url: Some(format!("http://{addr}/alice/clinic/")),
        username: Some("alice".into()),
        password: Some(Secret::new("pw")),
        ..Default::default()
    };
    (script, CaldavCalendar::new(&config, chrono_tz::UTC).unwrap())
}

fn april_first() -> EventQuery {
    let day = NaiveDate::from_ymd_opt(2024, 4, 1).unwrap();
    EventQuery { first_day: day, last_day: day, calendar: None, max_results: 10 }
}

fn methods(script: &Script) -> Vec<String> {
    script.seen.lock().unwrap().iter().map(|(m, _, _)| m.to_string()).collect()
}

#[tokio::test]
async fn server_errors_and_429_are_retried() {
    let (script, backend) = serve(&[(503, ""), (429, ""), (207, COLLECTION), (502, ""), (207, EVENTS)]).await;
    let page = backend.list_events(&april_first()).await.unwrap();
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].calendar, "Clinic Rota");
    assert_eq!(methods(&script), ["PROPFIND", "PROPFIND", "PROPFIND", "REPORT", "REPORT"]);
    assert_eq!(backend.reachable(), Some(true));
}

#[tokio::test]
async fn four_failures_give_up_and_mark_the_server_unreachable() {
    let (script, backend) = serve(&[(500, ""), (500, ""), (500, ""), (500, ""), (207, COLLECTION)]).await;
    let err = backend.list_events(&april_first()).await.unwrap_err();
    assert!(matches!(err, CalendarError::Unreachable(_)), "{err:?}");
    // The first attempt and three retries (TOOLS.md).
    assert_eq!(methods(&script).len(), 4);
    assert_eq!(backend.reachable(), Some(false));
    // The next call discovers again and succeeds: the flag follows the last contact.
    script.answers.lock().unwrap().push_back((207, EVENTS));
    backend.list_events(&april_first()).await.unwrap();
    assert_eq!(backend.reachable(), Some(true));
}

#[tokio::test]
async fn client_errors_are_not_retried_and_403_is_refused_credentials() {
    let (script, backend) = serve(&[(207, COLLECTION), (400, "")]).await;
    let err = backend.list_events(&april_first()).await.unwrap_err();
    assert!(matches!(err, CalendarError::Status(400)), "{err:?}");
    assert_eq!(methods(&script), ["PROPFIND", "REPORT"]);

    let (_, backend) = serve(&[(403, "")]).await;
    let err = backend.list_events(&april_first()).await.unwrap_err();
    assert!(matches!(err, CalendarError::Refused), "{err:?}");
    let public = crate::tools::ToolError::from(err).public_message();
    assert!(public.contains("refused the credentials") && !public.contains("127.0.0.1"), "{public}");
}

/// Nextcloud's answers (sabre/dav): the DAV root names the home set, whose listing starts with the
/// read-only birthday calendar.
const NEXTCLOUD_ROOT: &str = r#"<?xml version="1.0"?>
<d:multistatus xmlns:d="DAV:" xmlns:s="http://sabredav.org/ns" xmlns:cal="urn:ietf:params:xml:ns:caldav"><d:response><d:href>/remote.php/dav/</d:href><d:propstat><d:prop><d:resourcetype><d:collection/></d:resourcetype><d:current-user-principal><d:href>/remote.php/dav/principals/users/alice/</d:href></d:current-user-principal><cal:calendar-home-set><d:href>/remote.php/dav/calendars/alice/</d:href></cal:calendar-home-set></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response></d:multistatus>"#;
const NEXTCLOUD_HOME: &str = r#"<?xml version="1.0"?>
<d:multistatus xmlns:d="DAV:" xmlns:cal="urn:ietf:params:xml:ns:caldav" xmlns:nc="http://nextcloud.org/ns">
<d:response><d:href>/remote.php/dav/calendars/alice/</d:href><d:propstat><d:prop><d:resourcetype><d:collection/></d:resourcetype></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
<d:response><d:href>/remote.php/dav/calendars/alice/contact_birthdays/</d:href><d:propstat><d:prop><d:resourcetype><d:collection/><cal:calendar/></d:resourcetype><d:displayname>Contact birthdays</d:displayname><d:current-user-privilege-set><d:privilege><d:read/></d:privilege></d:current-user-privilege-set></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
<d:response><d:href>/remote.php/dav/calendars/alice/personal/</d:href><d:propstat><d:prop><d:resourcetype><d:collection/><cal:calendar/></d:resourcetype><d:displayname>Personal</d:displayname><d:current-user-privilege-set><d:privilege><d:all/></d:privilege></d:current-user-privilege-set></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
<d:response><d:href>/remote.php/dav/calendars/alice/inbox/</d:href><d:propstat><d:prop><d:resourcetype><d:collection/><cal:schedule-inbox/></d:resourcetype></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
</d:multistatus>"#;

#[tokio::test]
async fn nextcloud_default_calendar_is_the_first_writable_one() {
    let (script, backend) = serve(&[(207, NEXTCLOUD_ROOT), (207, NEXTCLOUD_HOME), (201, "")]).await;
    let outcome = backend.create_event(booking(crate::tools::calendar::DEFAULT_CALENDAR)).await.unwrap();
    assert!(outcome.created);
    assert_eq!(outcome.event.calendar, "Personal");
    let seen = script.seen.lock().unwrap().clone();
    let paths: Vec<(String, &str)> = seen.iter().map(|(m, p, _)| (m.to_string(), p.as_str())).collect();
    assert_eq!(
        paths,
        [
            ("PROPFIND".to_string(), "/alice/clinic/"),
            ("PROPFIND".to_string(), "/remote.php/dav/calendars/alice/"),
            ("PUT".to_string(), "/remote.php/dav/calendars/alice/personal/abc-voxgate.ics"),
        ]
    );
}

#[tokio::test]
async fn requests_carry_traceparent_of_the_tool_span() {
    use opentelemetry::trace::TracerProvider as _;
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::layer::SubscriberExt;

    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));

    let (script, backend) = serve(&[(207, COLLECTION), (207, EVENTS)]).await;
    let span = crate::telemetry::tool_span(&tracing::Span::none(), crate::telemetry::metrics::Metrics::new().tool_label("get_calendar_events"), "call_1");
    let trace_id = {
        use opentelemetry::trace::TraceContextExt;
        span.context().span().span_context().trace_id().to_string()
    };
    backend.list_events(&april_first()).instrument(span).await.unwrap();
    let seen = script.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for (_, _, traceparent) in seen {
        let header = traceparent.expect("traceparent header");
        assert!(header.starts_with(&format!("00-{trace_id}-")), "{header}");
    }
}

fn booking(calendar: &str) -> crate::tools::calendar::CalendarEvent {
    crate::tools::calendar::CalendarEvent {
        id: "abc@voxgate".into(),
        title: "Ward round".into(),
        timing: crate::tools::calendar::EventTiming::Timed {
            start: chrono::DateTime::from_timestamp(1_711_965_600, 0).unwrap(),
            end: chrono::DateTime::from_timestamp(1_711_969_200, 0).unwrap(),
        },
        location: None,
        description: None,
        calendar: calendar.into(),
    }
}

/// Nextcloud's birthday calendar is read-only (discovery knows it): creating there is the caller's
/// mistake, said as such, and no PUT is sent (it would come back 403, read as refused credentials).
#[tokio::test]
async fn creating_in_a_read_only_calendar_is_refused_without_a_request() {
    let (script, backend) = serve(&[(207, NEXTCLOUD_ROOT), (207, NEXTCLOUD_HOME), (403, "")]).await;
    let err = backend.create_event(booking("Contact birthdays")).await.unwrap_err();
    let public = crate::tools::ToolError::from(err);
    assert_eq!(public.code().as_str(), "invalid_arguments", "{}", public.public_message());
    assert!(public.public_message().contains("read-only"), "{}", public.public_message());
    assert_eq!(methods(&script), ["PROPFIND", "PROPFIND"]);
}

/// When every calendar is listed, one that cannot be read (here an answer over the 8 MiB limit) is
/// left out and the page says it is incomplete; the others are listed.
#[tokio::test]
async fn one_calendar_that_fails_is_skipped_and_the_listing_marked_incomplete() {
    let (script, backend) = serve(&[(207, NEXTCLOUD_ROOT), (207, NEXTCLOUD_HOME)]).await;
    let oversized = format!("{EVENTS}{}", " ".repeat(8 * 1024 * 1024));
    script.by_path.lock().unwrap().extend([
        ("/remote.php/dav/calendars/alice/contact_birthdays/", VecDeque::from([(207, oversized)])),
        ("/remote.php/dav/calendars/alice/personal/", VecDeque::from([(207, EVENTS.to_string())])),
    ]);
    let page = backend.list_events(&april_first()).await.unwrap();
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].calendar, "Personal");
    assert!(!page.complete);
    // Asked for that calendar alone, its failure is the answer.
    script
        .by_path
        .lock()
        .unwrap()
        .insert("/remote.php/dav/calendars/alice/contact_birthdays/", VecDeque::from([(400, String::new())]));
    let query = EventQuery { calendar: Some("Contact birthdays".into()), ..april_first() };
    let err = backend.list_events(&query).await.unwrap_err();
    assert!(matches!(err, CalendarError::Status(400)), "{err:?}");
}

/// A `calendar_name` that names nothing must not make every call discover again while holding the
/// backend's lock: at most once a minute.
#[tokio::test]
async fn unknown_names_rediscover_at_most_once_a_minute() {
    let (script, backend) = serve(&[(207, COLLECTION), (207, COLLECTION), (207, COLLECTION)]).await;
    let nowhere = EventQuery { calendar: Some("Nowhere".into()), ..april_first() };
    for _ in 0..3 {
        let err = backend.list_events(&nowhere).await.unwrap_err();
        assert!(matches!(err, CalendarError::UnknownCalendar), "{err:?}");
    }
    assert_eq!(methods(&script), ["PROPFIND"]);
    // The clock moves on only between requests (paused, a request's own timeouts would fire).
    let later = |by: std::time::Duration| async move {
        tokio::time::pause();
        tokio::time::advance(by).await;
        tokio::time::resume();
    };
    // 45 s, not 59: real time passes too between the jumps, and a loaded machine may stall.
    later(std::time::Duration::from_secs(45)).await;
    backend.list_events(&nowhere).await.unwrap_err();
    assert_eq!(methods(&script), ["PROPFIND"]);
    // A minute after the discovery, a name not found is looked for again (perhaps created since).
    later(std::time::Duration::from_secs(15)).await;
    let err = backend.list_events(&nowhere).await.unwrap_err();
    assert!(matches!(err, CalendarError::UnknownCalendar), "{err:?}");
    assert_eq!(methods(&script), ["PROPFIND", "PROPFIND"]);
    backend.list_events(&nowhere).await.unwrap_err();
    assert_eq!(methods(&script), ["PROPFIND", "PROPFIND"]);
}

/// Threads the CalDAV answers were parsed on (see `events_of`).
static PARSED_ON: Mutex<Vec<std::thread::ThreadId>> = Mutex::new(Vec::new());

pub(super) fn parsed_on(thread: std::thread::ThreadId) {
    PARSED_ON.lock().unwrap().push(thread);
}

/// A REPORT answer of up to 8 MiB per calendar is parsed off the runtime's threads, which also relay
/// the audio of every session on them: this test's runtime (one thread) never parses.
#[tokio::test]
async fn answers_are_parsed_off_the_runtime_thread() {
    let (_, backend) = serve(&[(207, COLLECTION), (207, EVENTS)]).await;
    let page = backend.list_events(&april_first()).await.unwrap();
    assert_eq!(page.events.len(), 1);
    let threads = PARSED_ON.lock().unwrap().clone();
    assert!(!threads.is_empty());
    assert!(!threads.contains(&std::thread::current().id()), "parsed on the runtime thread");
}

/// What the stored event looks like when the server answers a `GET` after `412`: whole seconds.
const STORED: &str = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\nBEGIN:VEVENT\r\nUID:abc@voxgate\r\n\
DTSTAMP:20240301T000000Z\r\nDTSTART:20240401T100000Z\r\nDTEND:20240401T110000Z\r\nSUMMARY:Ward round\r\n\
END:VEVENT\r\nEND:VCALENDAR\r\n";

/// The PUT is stored but a proxy answers 500; the retry meets `412`, and the stored event (whole
/// seconds) is this call's own although it asked for 10:00:00.250: not a conflict, as in the local
/// backend, and stored by this call's first attempt (`created`).
#[tokio::test]
async fn a_replay_meeting_its_event_ignores_a_fraction_of_a_second() {
    let (script, backend) = serve(&[(207, COLLECTION), (500, ""), (412, ""), (200, STORED)]).await;
    let mut event = booking(DEFAULT_CALENDAR);
    let quarter = chrono::Duration::milliseconds(250);
    if let EventTiming::Timed { start, end } = event.timing {
        event.timing = EventTiming::Timed { start: start + quarter, end: end + quarter };
    }
    let outcome = backend.create_event(event).await.unwrap();
    assert!(outcome.created);
    assert_eq!(outcome.event.title, "Ward round");
    assert_eq!(methods(&script), ["PROPFIND", "PUT", "PUT", "GET"]);
}

/// An answer over the 8 MiB cap comes from a server that answered: its own error, with advice the
/// model can act on, and `/readyz` still sees the server reached.
#[tokio::test]
async fn an_answer_over_the_cap_is_not_an_unreachable_server() {
    let (script, backend) = serve(&[]).await;
    let oversized = format!("{EVENTS}{}", " ".repeat(8 * 1024 * 1024));
    script.by_path.lock().unwrap().insert("/alice/clinic/", VecDeque::from([(207, COLLECTION.to_string()), (207, oversized)]));
    let err = backend.list_events(&april_first()).await.unwrap_err();
    assert!(matches!(err, CalendarError::AnswerTooLarge), "{err:?}");
    assert_eq!(backend.reachable(), Some(true));
    let public = crate::tools::ToolError::from(err);
    assert_eq!(public.code().as_str(), "backend_error");
    assert!(public.public_message().contains("fewer days"), "{}", public.public_message());
}

/// The call under its deadline, cut off there, as `session::runner` runs it; `None` when cut off.
async fn within<F: Future>(timeout: Duration, call: F) -> Option<F::Output> {
    let deadline = tokio::time::Instant::now() + timeout;
    tokio::time::timeout_at(deadline, within_deadline(deadline, call)).await.ok()
}

/// Each request gets at most what is left of the call (less a margin), not the client's 10 s: a PUT
/// the server does not answer is cut off before the call's deadline, with time kept to look for the
/// event. Stored after all, it was this call's; not there (yet: the server may still be storing
/// it) or when the server does not say, the model hears that it may have been created.
#[tokio::test]
async fn a_hanging_put_is_cut_off_in_time_and_then_looked_for() {
    let call = Duration::from_secs(4);
    let (script, backend) = serve(&[(207, COLLECTION), (201, ""), (200, STORED)]).await;
    script.delays.lock().unwrap().insert("PUT", Duration::from_secs(30));
    let result = within(call, backend.create_event(booking(DEFAULT_CALENDAR))).await;
    let outcome = result.expect("cut off by the call's deadline").unwrap();
    assert!(outcome.created);
    assert_eq!(methods(&script), ["PROPFIND", "PUT", "GET"]);

    let (script, backend) = serve(&[(207, COLLECTION), (201, ""), (404, "")]).await;
    script.delays.lock().unwrap().insert("PUT", Duration::from_secs(30));
    let result = within(call, backend.create_event(booking(DEFAULT_CALENDAR))).await;
    let err = result.expect("cut off by the call's deadline").unwrap_err();
    assert!(matches!(err, CalendarError::Unconfirmed), "{err:?}");
    assert_eq!(methods(&script), ["PROPFIND", "PUT", "GET"]);
}

/// A `PUT` that reached the server (a proxy answered 502) and retries that then find it gone (a
/// restart: connection refused): the last failure says nothing was sent, but the first attempt may
/// have stored the event, so it is looked for; the `GET` cannot reach the server either.
#[tokio::test]
async fn a_put_that_may_have_arrived_is_looked_for_whatever_the_last_attempt_met() {
    let (script, backend) = serve(&[(207, COLLECTION), (502, "")]).await;
    *script.closes_after.lock().unwrap() = Some(2);
    let result = within(Duration::from_secs(10), backend.create_event(booking(DEFAULT_CALENDAR))).await;
    let err = result.expect("within the call's time").unwrap_err();
    assert!(matches!(err, CalendarError::Unconfirmed), "{err:?}");
    assert_eq!(methods(&script), ["PROPFIND", "PUT"]);
}

/// A `503` with `Retry-After` is the server itself saying "come back later": when every attempt got
/// one, nothing is looked for and the failure stands. A `500` may follow a stored event (a failure
/// on the way back), so one among them is looked for.
#[tokio::test]
async fn a_put_refused_by_the_server_each_time_is_not_created() {
    let (script, backend) = serve(&[(207, COLLECTION), (503, ""), (503, ""), (503, ""), (503, "")]).await;
    *script.retry_after.lock().unwrap() = Some("1");
    let result = within(Duration::from_secs(10), backend.create_event(booking(DEFAULT_CALENDAR))).await;
    let err = result.expect("within the call's time").unwrap_err();
    assert!(matches!(err, CalendarError::Unreachable(Failure::Status(503))), "{err:?}");
    assert_eq!(methods(&script), ["PROPFIND", "PUT", "PUT", "PUT", "PUT"]);

    // The script's default afterwards is 500: the GET fails too, so the create is unconfirmed.
    let (script, backend) = serve(&[(207, COLLECTION), (503, ""), (500, ""), (503, ""), (503, "")]).await;
    let result = within(Duration::from_secs(10), backend.create_event(booking(DEFAULT_CALENDAR))).await;
    let err = result.expect("within the call's time").unwrap_err();
    assert!(matches!(err, CalendarError::Unconfirmed), "{err:?}");
    let methods = methods(&script);
    assert_eq!(methods[..5], ["PROPFIND", "PUT", "PUT", "PUT", "PUT"]);
    assert!(methods.len() > 5 && methods[5..].iter().all(|m| m == "GET"), "looked for: {methods:?}");
}

/// After `412` an event under this call's name certainly exists: a `GET` that then fails (here `500`
/// each time) leaves it unconfirmed, not "unavailable; try again".
#[tokio::test]
async fn a_412_whose_event_cannot_be_read_is_unconfirmed() {
    let (script, backend) = serve(&[(207, COLLECTION), (412, "")]).await;
    let result = within(Duration::from_secs(10), backend.create_event(booking(DEFAULT_CALENDAR))).await;
    let err = result.expect("within the call's time").unwrap_err();
    assert!(matches!(err, CalendarError::Unconfirmed), "{err:?}");
    assert_eq!(methods(&script)[..3], ["PROPFIND", "PUT", "GET"]);

    // The GET finds nothing (a replica lagging behind, or the event deleted meanwhile): not a
    // conflict with different details, which would have the model book again under a new name.
    let (script, backend) = serve(&[(207, COLLECTION), (412, ""), (404, "")]).await;
    let result = within(Duration::from_secs(10), backend.create_event(booking(DEFAULT_CALENDAR))).await;
    let err = result.expect("within the call's time").unwrap_err();
    assert!(matches!(err, CalendarError::Unconfirmed), "{err:?}");
    assert_eq!(methods(&script), ["PROPFIND", "PUT", "GET"]);
}

#[tokio::test]
async fn a_put_nobody_can_confirm_says_the_event_may_exist() {
    // Every request after discovery answers 500 (the script's default).
    let (script, backend) = serve(&[(207, COLLECTION), (201, "")]).await;
    script.delays.lock().unwrap().insert("PUT", Duration::from_secs(30));
    let result = within(Duration::from_secs(4), backend.create_event(booking(DEFAULT_CALENDAR))).await;
    let err = result.expect("cut off by the call's deadline").unwrap_err();
    assert!(matches!(err, CalendarError::Unconfirmed), "{err:?}");
    assert_eq!(methods(&script)[..3], ["PROPFIND", "PUT", "GET"]);
    let public = crate::tools::ToolError::from(err).public_message();
    assert!(public.contains("may have been created"), "{public}");
}

/// A PUT cut off in flight may still be stored while the model hears it failed (and books again
/// under a new id): when a slow discovery leaves too little of the call, the PUT is not sent.
#[tokio::test]
async fn no_put_starts_without_time_for_it() {
    let (script, backend) = serve(&[(207, COLLECTION), (201, "")]).await;
    script.delays.lock().unwrap().insert("PROPFIND", Duration::from_secs(3));
    let result = within(Duration::from_secs(5), backend.create_event(booking(DEFAULT_CALENDAR))).await;
    let err = result.expect("cut off by the call's deadline").unwrap_err();
    assert!(matches!(err, CalendarError::OutOfTime), "{err:?}");
    assert_eq!(methods(&script), ["PROPFIND"]);
    let public = crate::tools::ToolError::from(err).public_message();
    assert!(public.contains("not created"), "{public}");
}

/// A `503` without `Retry-After` may be a proxy's (Envoy, Istio) whose connection to the server
/// dropped after forwarding the `PUT`: the event may be stored, so it is looked for, not reported
/// "unavailable; try again" (the model would book again under a new UID).
#[tokio::test]
async fn a_put_answered_503_without_retry_after_is_looked_for() {
    let (script, backend) =
        serve(&[(207, COLLECTION), (503, ""), (503, ""), (503, ""), (503, ""), (200, STORED)]).await;
    *script.retry_after.lock().unwrap() = None;
    let result = within(Duration::from_secs(10), backend.create_event(booking(DEFAULT_CALENDAR))).await;
    let outcome = result.expect("within the call's time").unwrap();
    assert!(outcome.created);
    assert_eq!(methods(&script), ["PROPFIND", "PUT", "PUT", "PUT", "PUT", "GET"]);
}

/// The first attempt may have stored the event (a gateway's `502`); a retry's answer does not undo
/// that. A `423` (the first one's lock) is not "unavailable; try again": the event is looked for.
#[tokio::test]
async fn a_later_answer_after_a_put_that_may_have_arrived_is_looked_for() {
    let (script, backend) = serve(&[(207, COLLECTION), (502, ""), (423, ""), (404, "")]).await;
    let result = within(Duration::from_secs(10), backend.create_event(booking(DEFAULT_CALENDAR))).await;
    let err = result.expect("within the call's time").unwrap_err();
    assert!(matches!(err, CalendarError::Unconfirmed), "{err:?}");
    assert_eq!(methods(&script), ["PROPFIND", "PUT", "PUT", "GET"]);

    let (script, backend) = serve(&[(207, COLLECTION), (502, ""), (423, ""), (200, STORED)]).await;
    let result = within(Duration::from_secs(10), backend.create_event(booking(DEFAULT_CALENDAR))).await;
    assert!(result.expect("within the call's time").unwrap().created);
    assert_eq!(methods(&script), ["PROPFIND", "PUT", "PUT", "GET"]);
}

/// A `404` after a `502` would make voxgate discover again and `PUT` into wherever the name points
/// now, a second event if the first attempt stored one: the event is looked for instead.
#[tokio::test]
async fn a_404_after_a_put_that_may_have_arrived_sends_no_second_put() {
    let (script, backend) = serve(&[(207, COLLECTION), (502, ""), (404, ""), (404, ""), (207, COLLECTION)]).await;
    let result = within(Duration::from_secs(10), backend.create_event(booking(DEFAULT_CALENDAR))).await;
    let err = result.expect("within the call's time").unwrap_err();
    assert!(matches!(err, CalendarError::Unconfirmed), "{err:?}");
    assert_eq!(methods(&script), ["PROPFIND", "PUT", "PUT", "GET"]);
}

/// `created` says whether this call stored the event, whichever way it is found after an attempt
/// that may have stored it (a gateway's `502`): met by a retry (`412`) or looked for after a `423`.
/// Only a `412` with no such attempt before it means a replay: `created: false`.
#[tokio::test]
async fn created_is_the_same_whether_the_event_is_met_or_looked_for() {
    for (retry, created) in [(Some(412), true), (Some(423), true), (None, false)] {
        let first = retry.map(|_| (502, ""));
        let answers = [Some((207, COLLECTION)), first, Some((retry.unwrap_or(412), "")), Some((200, STORED))];
        let (script, backend) = serve(&answers.into_iter().flatten().collect::<Vec<_>>()).await;
        let result = within(Duration::from_secs(10), backend.create_event(booking(DEFAULT_CALENDAR))).await;
        assert_eq!(result.expect("within the call's time").unwrap().created, created, "{retry:?}");
        assert_eq!(methods(&script).last().map(String::as_str), Some("GET"), "{retry:?}");
    }
}
