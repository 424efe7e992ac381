//! Creating over CalDAV when a `PUT` goes wrong, each create under its call's deadline as
//! `session::runner` runs it. A replay meeting `412` finds its own event despite a fraction of a
//! second; each request ends within the call's time left, and no `PUT` starts without time for it.
//! A `PUT` any attempt of which may have reached the server (a `503` without `Retry-After` among
//! them) is looked for, even when the last was refused a connection or answered `423` or `404` (no
//! second `PUT` elsewhere), and a `404` then leaves it unconfirmed; one the server itself answered
//! `503` with `Retry-After` each time was not stored. Found after an attempt that may have stored
//! it, met (`412`) or looked for, the event is this call's (`created`).

use std::time::Duration;

use super::{COLLECTION, booking, methods, serve};
use crate::tools::calendar::{CalendarBackend, CalendarError, DEFAULT_CALENDAR, EventTiming};
use crate::tools::http::{Failure, within_deadline};

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
