//! Repeating events in the local backend: weekly series across a daylight-saving change stay at
//! their wall-clock time, EXDATE and RECURRENCE-ID overrides (moved and cancelled) replace their
//! occurrence, all-day series repeat on dates, COUNT/UNTIL end a series, an RDATE-only series keeps
//! its DTSTART, a date made twice is one occurrence, and an unusable rule shows the first occurrence
//! instead of failing the listing.

use serde_json::{Value, json};

use super::{Fixture, tz};

fn calendar(events: &str) -> String {
    format!("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n{events}END:VCALENDAR\r\n")
}

fn starts(result: &Value) -> Vec<(&str, &str)> {
    result["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["id"].as_str().unwrap(), e["start"].as_str().unwrap()))
        .collect()
}

/// Every Monday 09:00 Berlin from 2024-03-18; Europe/Berlin moves to summer time on 2024-03-31.
const WEEKLY_BERLIN: &str = "BEGIN:VEVENT\r\nUID:weekly\r\nSUMMARY:Team meeting\r\n\
DTSTART;TZID=Europe/Berlin:20240318T090000\r\nDTEND;TZID=Europe/Berlin:20240318T100000\r\n\
RRULE:FREQ=WEEKLY;BYDAY=MO\r\nEND:VEVENT\r\n";

#[tokio::test]
async fn weekly_series_keeps_its_wall_clock_time_across_the_dst_change() {
    let f = Fixture::with_file(tz("Europe/Berlin"), Some(&calendar(WEEKLY_BERLIN)));
    let result = f.get(json!({"start_date": "2024-03-18", "end_date": "2024-04-08"})).await;
    assert_eq!(
        starts(&result),
        [
            ("weekly", "2024-03-18T09:00:00+01:00"),
            ("weekly", "2024-03-25T09:00:00+01:00"),
            ("weekly", "2024-04-01T09:00:00+02:00"),
            ("weekly", "2024-04-08T09:00:00+02:00"),
        ]
    );
    assert_eq!(result["events"][2]["end"], "2024-04-01T10:00:00+02:00");
    assert_eq!(result["events"][2]["title"], "Team meeting");
    // Shown in another zone, the summer occurrences move by the hour Berlin moved.
    let utc = Fixture::with_file(tz("UTC"), Some(&calendar(WEEKLY_BERLIN)));
    let result = utc.get(json!({"start_date": "2024-03-25", "end_date": "2024-04-01"})).await;
    assert_eq!(starts(&result), [("weekly", "2024-03-25T08:00:00+00:00"), ("weekly", "2024-04-01T07:00:00+00:00")]);
    // Before the series starts there is nothing.
    let before = f.get(json!({"start_date": "2024-03-11", "end_date": "2024-03-17"})).await;
    assert_eq!(before["count"], 0);
}

#[tokio::test]
async fn exdate_and_overrides_replace_their_occurrences() {
    let events = format!(
        "{}BEGIN:VEVENT\r\nUID:weekly\r\nRECURRENCE-ID;TZID=Europe/Berlin:20240325T090000\r\nSUMMARY:Team meeting (moved)\r\n\
DTSTART;TZID=Europe/Berlin:20240326T140000\r\nDTEND;TZID=Europe/Berlin:20240326T150000\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:weekly\r\nRECURRENCE-ID;TZID=Europe/Berlin:20240408T090000\r\nSTATUS:CANCELLED\r\nSUMMARY:Team meeting\r\n\
DTSTART;TZID=Europe/Berlin:20240408T090000\r\nEND:VEVENT\r\n",
        WEEKLY_BERLIN.replace(
            "RRULE:FREQ=WEEKLY;BYDAY=MO\r\n",
            "RRULE:FREQ=WEEKLY;BYDAY=MO\r\nEXDATE;TZID=Europe/Berlin:20240401T090000\r\n"
        )
    );
    let f = Fixture::with_file(tz("Europe/Berlin"), Some(&calendar(&events)));
    let result = f.get(json!({"start_date": "2024-03-18", "end_date": "2024-04-15"})).await;
    assert_eq!(
        starts(&result),
        [
            ("weekly", "2024-03-18T09:00:00+01:00"),
            ("weekly", "2024-03-26T14:00:00+01:00"),
            ("weekly", "2024-04-15T09:00:00+02:00"),
        ]
    );
    assert_eq!(result["events"][1]["title"], "Team meeting (moved)");
}

#[tokio::test]
async fn all_day_series_count_and_until_end_the_series() {
    let events = "BEGIN:VEVENT\r\nUID:rounds\r\nSUMMARY:Ward round\r\nDTSTART;VALUE=DATE:20240101\r\nDTEND;VALUE=DATE:20240102\r\n\
RRULE:FREQ=DAILY;COUNT=3\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:standup\r\nSUMMARY:Standup\r\nDTSTART:20240101T080000Z\r\nDURATION:PT15M\r\n\
RRULE:FREQ=DAILY;UNTIL=20240102T080000Z\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:monthly\r\nSUMMARY:Board\r\nDTSTART;VALUE=DATE:20231204\r\nRRULE:FREQ=MONTHLY;UNTIL=20240104\r\nEND:VEVENT\r\n";
    let f = Fixture::with_file(tz("America/New_York"), Some(&calendar(events)));
    let result = f.get(json!({"start_date": "2024-01-01", "end_date": "2024-01-10"})).await;
    assert_eq!(
        starts(&result),
        [
            ("rounds", "2024-01-01"),
            ("standup", "2024-01-01T03:00:00-05:00"),
            ("rounds", "2024-01-02"),
            ("standup", "2024-01-02T03:00:00-05:00"),
            ("rounds", "2024-01-03"),
            ("monthly", "2024-01-04"),
        ]
    );
    assert_eq!(result["events"][0]["all_day"], true);
    assert_eq!(result["events"][0]["end"], "2024-01-01");
}

#[tokio::test]
async fn an_unusable_rule_shows_the_first_occurrence() {
    let events = "BEGIN:VEVENT\r\nUID:odd\r\nSUMMARY:Odd\r\nDTSTART:20240105T080000Z\r\nRRULE:FREQ=FORTNIGHTLY\r\nEND:VEVENT\r\n";
    let f = Fixture::with_file(tz("UTC"), Some(&calendar(events)));
    let result = f.get(json!({"start_date": "2024-01-01", "end_date": "2024-01-31"})).await;
    assert_eq!(starts(&result), [("odd", "2024-01-05T08:00:00+00:00")]);
}

#[tokio::test]
async fn find_event_returns_the_series_not_an_override() {
    let events = format!(
        "{WEEKLY_BERLIN}BEGIN:VEVENT\r\nUID:weekly\r\nRECURRENCE-ID;TZID=Europe/Berlin:20240325T090000\r\nSUMMARY:Moved\r\n\
DTSTART;TZID=Europe/Berlin:20240326T140000\r\nEND:VEVENT\r\n"
    );
    let f = Fixture::with_file(tz("Europe/Berlin"), Some(&calendar(&events)));
    use crate::tools::calendar::CalendarBackend;
    let found = f.backend.find_event("weekly").await.unwrap().unwrap();
    assert_eq!(found.title, "Team meeting");
    assert!(f.backend.find_event("missing").await.unwrap().is_none());
}

/// `count` series repeating every `freq` from 2024-01-01 00:00 UTC, each with `description`.
fn many_series(count: usize, freq: &str, description: &str) -> String {
    let mut events = String::new();
    for n in 0..count {
        events.push_str(&format!(
            "BEGIN:VEVENT\r\nUID:s{n:04}\r\nSUMMARY:Series {n}\r\nDESCRIPTION:{description}\r\n\
DTSTART:20240101T000000Z\r\nDTEND:20240101T000100Z\r\nRRULE:FREQ={freq}\r\nEND:VEVENT\r\n"
        ));
    }
    calendar(&events)
}

#[tokio::test]
async fn an_hourly_series_over_a_month_is_counted_in_full() {
    // 31 days × 24 hours: more than the 500 occurrences a series used to be cut to, silently.
    let f = Fixture::with_file(tz("UTC"), Some(&many_series(1, "HOURLY", "Obs")));
    let result = f.get(json!({"start_date": "2024-01-01", "end_date": "2024-01-31"})).await;
    assert_eq!(result["total_count"], 744);
    assert_eq!(result["total_count_exact"], true);
    assert_eq!(result["count"], 50);
    assert_eq!(result["truncated"], true);
    assert_eq!(result["events"][0]["start"], "2024-01-01T00:00:00+00:00");
    assert_eq!(result["events"][49]["start"], "2024-01-03T01:00:00+00:00");
    // The month's last occurrence is found too: the last day alone has all 24.
    let last = f.get(json!({"start_date": "2024-01-31", "max_results": 100})).await;
    assert_eq!((last["total_count"].as_u64(), last["count"].as_u64()), (Some(24), Some(24)));
    assert_eq!(last["events"][23]["start"], "2024-01-31T23:00:00+00:00");
    assert_eq!(last["truncated"], false);
}

#[tokio::test]
async fn expansion_has_a_total_bound_and_says_when_it_was_reached() {
    // 300 minutely series with 1 KB descriptions: 432,000 occurrences in the day. They used to be
    // built in full (500 per series, each with its own copy of the text) before the cut to
    // max_results; now counting stops at the budget and only the page is built.
    let description = "x".repeat(1024);
    let f = Fixture::with_file(tz("UTC"), Some(&many_series(300, "MINUTELY", &description)));
    let started = std::time::Instant::now();
    let result = f.get(json!({"start_date": "2024-01-01", "max_results": 10})).await;
    let elapsed = started.elapsed();
    assert_eq!(result["total_count_exact"], false);
    assert_eq!(result["truncated"], true);
    assert_eq!(result["count"], 10);
    let total = result["total_count"].as_u64().unwrap();
    assert!((10..432_000).contains(&total), "{total}");
    // The page is still the earliest occurrences, in order.
    assert_eq!(
        starts(&result),
        (0..10).map(|n| (format!("s{n:04}"), "2024-01-01T00:00:00+00:00")).collect::<Vec<_>>().iter().map(|(id, at)| (id.as_str(), *at)).collect::<Vec<_>>()
    );
    assert!(result.to_string().len() <= 32 * 1024);
    assert!(elapsed < std::time::Duration::from_secs(3), "took {elapsed:?}");
}

/// A series is walked from its DTSTART, so a long history must not use up the occurrence budget:
/// an hourly series begun three years before the listing (≈ 26,000 earlier dates) and thirty daily
/// series begun ten years before (≈ 110,000 together) are all listed, and the count is exact.
#[tokio::test]
async fn series_begun_years_ago_are_still_listed() {
    let mut events = String::from(
        "BEGIN:VEVENT\r\nUID:hourly\r\nSUMMARY:Obs\r\nDTSTART:20210101T000000Z\r\nDTEND:20210101T000500Z\r\n\
RRULE:FREQ=HOURLY\r\nEND:VEVENT\r\n",
    );
    for n in 0..30 {
        events.push_str(&format!(
            "BEGIN:VEVENT\r\nUID:daily{n:02}\r\nSUMMARY:Round {n}\r\nDTSTART:20140101T{:02}0000Z\r\n\
DTEND:20140101T{:02}3000Z\r\nRRULE:FREQ=DAILY\r\nEND:VEVENT\r\n",
            n % 24,
            n % 24
        ));
    }
    let f = Fixture::with_file(tz("UTC"), Some(&calendar(&events)));
    let result = f.get(json!({"start_date": "2024-01-16", "max_results": 100})).await;
    assert_eq!(result["total_count_exact"], true, "{result}");
    assert_eq!(result["total_count"], 24 + 30, "{result}");
    assert_eq!(result["events"][0]["start"], "2024-01-16T00:00:00+00:00");
}

/// A minutely series begun years ago would walk millions of dates: the walk is bounded and the
/// listing says it is incomplete, in bounded time. The bound is per series as well as in all: the
/// weekly clinic stored after it is still listed.
#[tokio::test]
async fn a_walk_too_long_to_finish_is_bounded_and_reported() {
    let events = "BEGIN:VEVENT\r\nUID:minutely\r\nSUMMARY:Pulse\r\nDTSTART:20150101T000000Z\r\n\
DTEND:20150101T000100Z\r\nRRULE:FREQ=MINUTELY\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:weekly\r\nSUMMARY:Clinic\r\nDTSTART:20240102T090000Z\r\n\
DTEND:20240102T100000Z\r\nRRULE:FREQ=WEEKLY\r\nEND:VEVENT\r\n";
    let f = Fixture::with_file(tz("UTC"), Some(&calendar(events)));
    let started = std::time::Instant::now();
    let result = f.get(json!({"start_date": "2024-01-16"})).await;
    assert_eq!(result["total_count_exact"], false, "{result}");
    assert_eq!(result["truncated"], true);
    assert!(starts(&result).contains(&("weekly", "2024-01-16T09:00:00+00:00")), "{result}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "took {:?}", started.elapsed());
}

/// RFC 5545 §3.8.5.2: DTSTART is the first instance of a series, also when only RDATEs add the
/// others (the `rrule` crate lists only RRULE dates and RDATEs); EXDATE still removes it.
#[tokio::test]
async fn an_rdate_only_series_keeps_its_dtstart() {
    let events = "BEGIN:VEVENT\r\nUID:rdates\r\nSUMMARY:Follow-up\r\nDTSTART:20240401T100000Z\r\n\
DTEND:20240401T103000Z\r\nRDATE:20240408T100000Z,20240415T100000Z\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:moved\r\nSUMMARY:Review\r\nDTSTART:20240402T100000Z\r\nRDATE:20240409T100000Z\r\n\
EXDATE:20240402T100000Z\r\nEND:VEVENT\r\n";
    let f = Fixture::with_file(tz("UTC"), Some(&calendar(events)));
    let first = f.get(json!({"start_date": "2024-04-01"})).await;
    assert_eq!(starts(&first), [("rdates", "2024-04-01T10:00:00+00:00")], "{first}");
    assert_eq!(first["events"][0]["end"], "2024-04-01T10:30:00+00:00");
    let result = f.get(json!({"start_date": "2024-04-01", "end_date": "2024-04-30"})).await;
    assert_eq!(
        starts(&result),
        [
            ("rdates", "2024-04-01T10:00:00+00:00"),
            ("rdates", "2024-04-08T10:00:00+00:00"),
            ("moved", "2024-04-09T10:00:00+00:00"),
            ("rdates", "2024-04-15T10:00:00+00:00"),
        ]
    );
    assert_eq!(result["total_count"], 4);
}

/// An RDATE on a date the RRULE makes already (or given twice) is one instance: listed and counted
/// once.
#[tokio::test]
async fn a_date_made_twice_is_one_occurrence() {
    let events = "BEGIN:VEVENT\r\nUID:weekly\r\nSUMMARY:Clinic\r\nDTSTART:20240401T090000Z\r\nDTEND:20240401T100000Z\r\n\
RRULE:FREQ=WEEKLY;COUNT=3\r\nRDATE:20240408T090000Z\r\n\
RDATE:20240408T090000Z,20240410T090000Z\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:days\r\nSUMMARY:Rounds\r\nDTSTART;VALUE=DATE:20240401\r\nRRULE:FREQ=DAILY;COUNT=2\r\n\
RDATE;VALUE=DATE:20240402\r\nEND:VEVENT\r\n";
    let f = Fixture::with_file(tz("UTC"), Some(&calendar(events)));
    let result = f.get(json!({"start_date": "2024-04-01", "end_date": "2024-04-30"})).await;
    assert_eq!(
        starts(&result),
        [
            ("days", "2024-04-01"),
            ("weekly", "2024-04-01T09:00:00+00:00"),
            ("days", "2024-04-02"),
            ("weekly", "2024-04-08T09:00:00+00:00"),
            ("weekly", "2024-04-10T09:00:00+00:00"),
            ("weekly", "2024-04-15T09:00:00+00:00"),
        ],
        "{result}"
    );
    assert_eq!(result["total_count"], 6);
}
