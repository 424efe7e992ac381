//! What Radicale cannot be made to do on demand: a scripted CalDAV server (real HTTP on 127.0.0.1,
//! the server's WebDAV answers as recorded from Radicale) that fails first. 5xx and 429 with
//! `Retry-After` are retried (honouring it) up to three times; other 4xx are not; 403 is refused credentials; every
//! request carries the tool span's `traceparent`; `/readyz`'s flag follows the last contact. Also
//! Nextcloud's home-set layout (answers in sabre/dav's shape, written by hand: no Nextcloud runs
//! here), where the default calendar must skip the read-only birthday calendar; an answer over the
//! cap is not an unreachable server. A create whose `PUT` goes wrong is in [`put`].
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use chrono::NaiveDate;

use super::CaldavCalendar;
use crate::config::{CalendarBackendConfig, CalendarKind, Secret};
use crate::tools::calendar::{CalendarBackend, CalendarError, EventQuery};

mod put;

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
