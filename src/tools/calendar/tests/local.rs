//! The local `.ics` backend: range selection across zones and all-day events, atomic and
//! idempotent writes, and what happens with a file that is not iCalendar.

use serde_json::{Value, json};

use super::super::local::faults;
use super::{Fixture, stray_files, tz, vevent_count};
use crate::config::{CalendarBackendConfig, CalendarKind};
use crate::tools::ToolError;
use crate::session::runner::ToolJob;
use crate::tools::registry::{RegisteredTool, RegistryError, ToolPolicy};

/// Events chosen around the edges of 2024-01-16 in Europe/Berlin (UTC+1 in January) and in UTC.
const EDGES: &str = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n\
BEGIN:VEVENT\r\nUID:a-late-utc\r\nSUMMARY:Late UTC\r\nDTSTART:20240115T233000Z\r\nDTEND:20240116T000000Z\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:b-allday\r\nSUMMARY:Ward round\r\nDTSTART;VALUE=DATE:20240116\r\nDTEND;VALUE=DATE:20240117\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:c-multiday\r\nSUMMARY:Congress\r\nDTSTART;VALUE=DATE:20240114\r\nDTEND;VALUE=DATE:20240116\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:d-newyork\r\nSUMMARY:Call with New York\r\nDTSTART;TZID=America/New_York:20240116T180000\r\nDTEND;TZID=America/New_York:20240116T190000\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:e-ends-at-midnight\r\nSUMMARY:Evening\r\nDTSTART:20240115T220000Z\r\nDTEND:20240115T230000Z\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:f-floating\r\nSUMMARY:Floating\r\nDTSTART:20240116T090000\r\nDURATION:PT30M\r\nLOCATION:Room 3\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:g-cancelled\r\nSUMMARY:Cancelled\r\nSTATUS:CANCELLED\r\nDTSTART:20240116T100000Z\r\nDTEND:20240116T110000Z\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:h-clinic\r\nSUMMARY:Clinic hours\r\nX-VOXGATE-CALENDAR:Clinic\r\nDTSTART:20240116T120000Z\r\nDTEND:20240116T130000Z\r\nEND:VEVENT\r\n\
BEGIN:VTODO\r\nUID:todo-1\r\nSUMMARY:Keep me\r\nX-FOREIGN-PROP:untouched\r\nEND:VTODO\r\n\
END:VCALENDAR\r\n";

fn ids(result: &Value) -> Vec<&str> {
    result["events"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn a_day_in_berlin_includes_all_day_and_zone_shifted_events_only() {
    let f = Fixture::with_file(tz("Europe/Berlin"), Some(EDGES));
    let day = f.get(json!({"start_date": "2024-01-16"})).await;
    // All-day first (local midnight), then 00:30 Berlin, the floating 09:00 local, 13:00 Berlin.
    assert_eq!(ids(&day), ["b-allday", "a-late-utc", "f-floating", "h-clinic"]);
    assert_eq!(day["count"], 4);
    assert_eq!(day["total_count"], 4);
    assert_eq!(day["truncated"], false);
    assert_eq!(day["timezone"], "Europe/Berlin");
    assert_eq!(day["date_range"], "2024-01-16 to 2024-01-16");
    let allday = &day["events"][0];
    assert_eq!(allday["all_day"], true);
    assert_eq!((allday["start"].as_str(), allday["end"].as_str()), (Some("2024-01-16"), Some("2024-01-16")));
    assert_eq!(allday["calendar_name"], "Default");
    assert_eq!(allday["location"], Value::Null);
    let late = &day["events"][1];
    assert_eq!(late["start"], "2024-01-16T00:30:00+01:00");
    assert_eq!(late["end"], "2024-01-16T01:00:00+01:00");
    assert_eq!(late["all_day"], false);
    assert_eq!(day["events"][2]["start"], "2024-01-16T09:00:00+01:00");
    assert_eq!(day["events"][2]["end"], "2024-01-16T09:30:00+01:00");
    assert_eq!(day["events"][2]["location"], "Room 3");

    // The multi-day event ends (inclusive) on the 15th, and its DTEND is exclusive.
    let before = f.get(json!({"start_date": "2024-01-14", "end_date": "2024-01-15"})).await;
    assert_eq!(ids(&before), ["c-multiday", "e-ends-at-midnight"]);
    assert_eq!(before["events"][0]["end"], "2024-01-15");

    let clinic = f.get(json!({"start_date": "2024-01-16", "calendar_name": "clinic"})).await;
    assert_eq!(ids(&clinic), ["h-clinic"]);
    assert_eq!(clinic["events"][0]["calendar_name"], "Clinic");
}

#[tokio::test]
async fn the_same_day_in_utc_selects_different_timed_events() {
    let f = Fixture::with_file(tz("UTC"), Some(EDGES));
    let day = f.get(json!({"start_date": "2024-01-16", "end_date": "2024-01-16"})).await;
    assert_eq!(ids(&day), ["b-allday", "f-floating", "h-clinic", "d-newyork"]);
    assert_eq!(day["events"][3]["start"], "2024-01-16T23:00:00+00:00");
}

#[tokio::test]
async fn max_results_truncates_and_reports_the_total() {
    let f = Fixture::with_file(tz("Europe/Berlin"), Some(EDGES));
    let day = f.get(json!({"start_date": "2024-01-16", "max_results": 2})).await;
    assert_eq!(ids(&day), ["b-allday", "a-late-utc"]);
    assert_eq!((day["count"].as_u64(), day["total_count"].as_u64()), (Some(2), Some(4)));
    assert_eq!(day["truncated"], true);
    // 2.0 passes the schema's "integer": it is 2, not an invalid argument.
    let as_float = f.get(json!({"start_date": "2024-01-16", "max_results": 2.0})).await;
    assert_eq!(as_float["events"], day["events"]);
}

#[tokio::test]
async fn a_long_description_is_cut_and_flagged() {
    let long = "x".repeat(5000);
    let ics = format!(
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\nBEGIN:VEVENT\r\nUID:long\r\nSUMMARY:Long\r\n\
         DTSTART:20240116T100000Z\r\nDTEND:20240116T110000Z\r\nDESCRIPTION:{long}\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    );
    let f = Fixture::with_file(tz("UTC"), Some(&ics));
    let day = f.get(json!({"start_date": "2024-01-16"})).await;
    let description = day["events"][0]["description"].as_str().unwrap();
    assert!(description.chars().count() <= 501 && description.ends_with('…'), "{}", description.len());
    assert_eq!(day["truncated"], true);
    assert_eq!(day["count"], 1);
}

#[tokio::test]
async fn writes_are_atomic_and_keep_foreign_components() {
    let f = Fixture::with_file(tz("Europe/Berlin"), Some(EDGES));
    let created = f
        .create(json!({"title": "Follow-up", "start_datetime": "2024-01-16T14:00"}), "s1", "c1")
        .await;
    assert_eq!(created["created"], true);
    let text = f.text();
    // The old text is kept byte for byte; the new VEVENT goes before END:VCALENDAR.
    let prefix = EDGES.trim_end_matches("END:VCALENDAR\r\n");
    assert!(text.starts_with(prefix));
    assert!(text.ends_with("END:VCALENDAR\r\n"));
    assert!(text.contains("X-FOREIGN-PROP:untouched"));
    assert_eq!(vevent_count(&text), 9);
    assert!(super::super::ics::parse(&text, tz("UTC")).is_ok());
    let dir = f.path().parent().unwrap().to_path_buf();
    assert!(stray_files(&dir, &f.path()).is_empty(), "temp files left behind");
}

#[tokio::test]
async fn concurrent_creates_from_many_sessions_all_land() {
    let f = std::sync::Arc::new(Fixture::new(tz("UTC")));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..12 {
        let f = f.clone();
        tasks.spawn(async move {
            let args = json!({"title": format!("Slot {i}"), "start_datetime": format!("2024-03-01T{:02}:00Z", 8 + i)});
            f.create(args, &format!("session-{i}"), "call-1").await
        });
    }
    while let Some(done) = tasks.join_next().await {
        assert_eq!(done.unwrap()["created"], true);
    }
    assert_eq!(vevent_count(&f.text()), 12);
    let listed = f.get(json!({"start_date": "2024-03-01", "max_results": 100})).await;
    assert_eq!(listed["count"], 12);
}

#[tokio::test]
async fn a_malformed_file_fails_clearly_and_is_not_overwritten() {
    let garbage = "this is not a calendar\nPatient: Zebulon Quixote\n";
    let f = Fixture::with_file(tz("UTC"), Some(garbage));
    let path = f.path().display().to_string();
    let listed = f.call("get_calendar_events", json!({"start_date": "2024-01-16"}), "s", "c").await;
    let err = listed.unwrap_err();
    assert_eq!(err, ToolError::Backend("the calendar data could not be read".into()));
    let created = f
        .call("create_calendar_event", json!({"title": "X", "start_datetime": "2024-01-16T10:00Z"}), "s", "c")
        .await;
    let err = created.unwrap_err();
    assert_eq!(err.code().as_str(), "backend_error");
    for message in [err.to_string(), err.public_message()] {
        assert!(!message.contains(&path) && !message.contains("Zebulon"), "{message}");
    }
    assert_eq!(f.text(), garbage);
}

#[tokio::test]
async fn a_missing_file_and_its_directory_are_created_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("deeper").join("calendar.ics");
    let config = CalendarBackendConfig { path: path.clone(), timezone: "Europe/Berlin".into(), ..Default::default() };
    let tools = super::super::tools(&config).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.spec().name).collect();
    assert_eq!(names, ["get_calendar_events", "create_calendar_event"]);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("BEGIN:VCALENDAR\r\n") && text.ends_with("END:VCALENDAR\r\n"));
    assert_eq!(vevent_count(&text), 0);
}

#[test]
fn bad_caldav_urls_and_unknown_zones_are_refused_naming_the_key() {
    for url in ["not a url", "ftp://cal.example/dav", "file:///etc/passwd", "https://alice:pw@cal.example/dav"] {
        let caldav = CalendarBackendConfig { kind: CalendarKind::Caldav, url: Some(url.into()), ..Default::default() };
        let err = RegistryError::from(super::super::tools(&caldav).err().unwrap());
        assert!(err.to_string().contains("backends.calendar.url"), "{err}");
    }
    let bad_zone = CalendarBackendConfig { timezone: "Mars/Olympus".into(), ..Default::default() };
    let err = super::super::tools(&bad_zone).err().unwrap();
    assert!(err.to_string().contains("backends.calendar.timezone"), "{err}");
}

/// A create cut off (its future dropped) before its write commits writes nothing, but its worker
/// still holds the write lock until it is done: the next create must neither run alongside it nor
/// lose anything to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_cut_off_writes_nothing_and_holds_the_lock_until_its_worker_is_done() {
    // Large enough that reading and parsing it takes far longer than the 1 ms timeout.
    let f = std::sync::Arc::new(Fixture::with_file(tz("UTC"), Some(&bulk_calendar(20_000))));
    let first = json!({"title": "Cut off", "start_datetime": "2024-03-01T08:00Z"});
    let cut = tokio::time::timeout(std::time::Duration::from_millis(1), f.create(first, "s", "a")).await;
    assert!(cut.is_err(), "the first create should still be running after 1 ms");
    let second = f.create(json!({"title": "Next one", "start_datetime": "2024-03-01T09:00Z"}), "s", "b").await;
    assert_eq!(second["created"], true);
    let text = f.text();
    assert!(!text.contains("SUMMARY:Cut off"), "the cut-off create was written after all");
    assert!(text.contains("SUMMARY:Next one"), "the second create was lost");
    assert_eq!(vevent_count(&text), 20_001);
    assert!(stray_files(f.path().parent().unwrap(), &f.path()).is_empty());
    // The cut-off worker saw the gate before writing its copy of the file, and so spent no time on it.
    assert_eq!(faults::get(&f.path()).temp_writes, 1, "the cut-off create still wrote its temp file");
}

/// One process owns the file: a second owner (another process's `flock` on the lock file next to
/// it) makes `open` fail clearly, and its temp files, which may be in flight, are left alone.
#[test]
fn a_file_another_process_holds_is_refused_and_its_temp_files_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("calendar.ics");
    let lock_path = dir.path().join(".calendar.ics.lock");
    let other = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).unwrap();
    other.try_lock().unwrap();
    let in_flight = dir.path().join(".calendar.ics.4242.0.tmp");
    std::fs::write(&in_flight, "BEGIN:VCALENDAR").unwrap();

    let err = super::super::LocalCalendar::open(&path, tz("UTC")).expect_err("a second owner is refused");
    let reason = RegistryError::from(err).to_string();
    assert!(reason.contains("another process") && reason.contains("backends.calendar.path"), "{reason}");
    assert!(!reason.contains(&dir.path().display().to_string()), "{reason}");
    assert!(in_flight.exists(), "another owner's temp file was removed");

    // Once the other owner is gone, the file opens and the stale temp file is cleaned up.
    drop(other);
    let calendar = super::super::LocalCalendar::open(&path, tz("UTC")).unwrap();
    assert!(!in_flight.exists());
    // Opening it again in the same process shares the lock (and the write lock) instead.
    let again = super::super::LocalCalendar::open(&path, tz("UTC")).unwrap();
    let third = std::fs::OpenOptions::new().write(true).open(&lock_path).unwrap();
    assert!(third.try_lock().is_err(), "the lock is held while a calendar is open");
    drop((calendar, again));
    assert!(third.try_lock().is_ok(), "the lock is released with the last calendar");
}

/// A create that runs out of its call's time (as the session runs it: `ToolJob`) must say what
/// became of its event. Before the fix its write went on after the call was cut off and landed,
/// while the model was told `timeout` and so told the user the appointment was not made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_runs_out_of_time_reports_what_became_of_its_event() {
    let f = std::sync::Arc::new(Fixture::with_file(tz("UTC"), Some(&bulk_calendar(60_000))));
    // Far shorter than reading and parsing the file takes.
    let outcome = create_job(&f, json!({"title": "Cut off", "start_datetime": "2024-03-01T08:00Z"}), 200).run().await;
    // The next create waits on the write lock until the first one's worker is done.
    let second = f.create(json!({"title": "Next one", "start_datetime": "2024-03-01T09:00Z"}), "s", "b").await;
    assert_eq!(second["created"], true);
    let text = f.text();
    let written = text.contains("SUMMARY:Cut off");
    match &outcome {
        Ok(out) => assert!(written && out.result["created"] == true, "{out:?}"),
        Err(ToolError::Backend(message)) if message.contains("was not created") => {
            assert!(!written, "the event was written although the model was told it was not")
        }
        Err(ToolError::Backend(message)) if message.contains("may have been created") => {}
        Err(other) => panic!("{other:?} reported; the event was written: {written}"),
    }
    assert_eq!(vevent_count(&text), 60_001 + usize::from(written));
    assert!(stray_files(f.path().parent().unwrap(), &f.path()).is_empty());
}

/// A replayed create (its event already in the file) whose worker answers only after the call gave
/// up on it: the answer is final (nothing left to commit), so the call reports it rather than
/// "the event was not created" about an event that is in the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_create_answering_after_the_give_up_reports_the_event_in_the_file() {
    let f = Fixture::new(tz("UTC"));
    let args = json!({"title": "Replayed", "start_datetime": "2024-03-01T08:00Z"});
    assert_eq!(f.create(args.clone(), "s", "a").await["created"], true);
    faults::set(&f.path(), |faults| faults.answer_after_give_up = true);
    let out = create_job(&f, args, 400).run().await.expect("the event is in the file");
    assert_eq!(out.result["created"], false);
    assert_eq!(vevent_count(&f.text()), 1);
}

/// The rename is the commit: a directory fsync failing after it leaves the event in the file, so
/// the create must not say "unavailable; try again" (a retry would book it twice).
#[tokio::test]
async fn a_create_whose_directory_fsync_fails_says_the_event_may_have_been_created() {
    let f = Fixture::new(tz("UTC"));
    faults::set(&f.path(), |faults| faults.fail_dir_sync = true);
    let args = json!({"title": "Unsynced", "start_datetime": "2024-03-01T08:00Z"});
    let err = f.call("create_calendar_event", args, "s", "a").await.unwrap_err();
    assert!(matches!(&err, ToolError::Backend(m) if m.contains("may have been created")), "{err:?}");
    assert!(f.text().contains("SUMMARY:Unsynced"));
    assert!(stray_files(f.path().parent().unwrap(), &f.path()).is_empty());
}

/// A create of `args` (call "a" of session "s") as the session runs it, with a `timeout_ms` timeout.
fn create_job(f: &Fixture, args: Value, timeout_ms: u64) -> ToolJob {
    let registered = f.tool("create_calendar_event");
    let policy = ToolPolicy { timeout: std::time::Duration::from_millis(timeout_ms), ..registered.policy.clone() };
    ToolJob {
        tool: std::sync::Arc::new(RegisteredTool::new(registered.tool.clone(), policy).unwrap()),
        args,
        ctx: super::ctx("s", "a"),
        span: tracing::Span::none(),
    }
}

/// A calendar of `events` one-hour events: large enough that reading and parsing it takes a while.
fn bulk_calendar(events: usize) -> String {
    let mut big = String::from("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\n");
    for i in 0..events {
        big.push_str(&format!(
            "BEGIN:VEVENT\r\nUID:bulk-{i}\r\nSUMMARY:Bulk {i}\r\nDTSTART:20230101T100000Z\r\nDTEND:20230101T110000Z\r\nEND:VEVENT\r\n"
        ));
    }
    big.push_str("END:VCALENDAR\r\n");
    big
}
