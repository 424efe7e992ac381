//! The two tools end to end: specs and schemas, create-then-list, idempotent replay, argument
//! errors, and the confirmation prompt.

use serde_json::{Value, json};

use super::{Fixture, tz, vevent_count};
use crate::tools::calendar::event_uid;
use crate::tools::calendar::tools::confirmation_prompt;
use crate::tools::{Category, Risk, ToolError};

const GET: &str = "get_calendar_events";
const CREATE: &str = "create_calendar_event";

fn berlin() -> Fixture {
    Fixture::new(tz("Europe/Berlin"))
}

fn invalid_message(result: Result<Value, ToolError>) -> String {
    match result {
        Err(ToolError::InvalidArguments(message)) => message,
        other => panic!("expected invalid_arguments, got {other:?}"),
    }
}

/// Every string, number and list in a schema is bounded and every object closed.
fn assert_bounded(schema: &Value, at: &str) {
    match schema["type"].as_str() {
        Some("object") => {
            assert_eq!(schema["additionalProperties"], false, "{at}");
            for (name, property) in schema["properties"].as_object().unwrap() {
                assert!(property["description"].is_string(), "{at}/{name} has no description");
                assert_bounded(property, &format!("{at}/{name}"));
            }
        }
        Some("string") => assert!(schema["maxLength"].is_u64(), "{at}"),
        Some("integer" | "number") => assert!(schema["minimum"].is_number() && schema["maximum"].is_number(), "{at}"),
        Some("array") => assert!(schema["maxItems"].is_u64(), "{at}"),
        Some("boolean") => {}
        other => panic!("{at}: unexpected type {other:?}"),
    }
}

#[test]
fn specs_follow_the_tools_table() {
    let f = berlin();
    for (name, risk, confirm) in [(GET, Risk::Low, false), (CREATE, Risk::Medium, true)] {
        let tool = f.tool(name);
        let spec = tool.spec();
        assert_eq!((spec.category, spec.phi, spec.risk, spec.third_party), (Category::Calendar, true, risk, false));
        assert_eq!((spec.requires_confirmation, spec.rate_limit_per_minute), (confirm, 10));
        assert_eq!(tool.policy.requires_confirmation, confirm);
        assert_bounded(&spec.parameters, name);
        assert_eq!(tool.definition()["name"], name);
        assert!(spec.description.contains("Europe/Berlin"));
    }
}

#[test]
fn event_uids_are_stable_per_session_and_call() {
    let uid = event_uid("session-1", "call-1");
    assert_eq!(uid, event_uid("session-1", "call-1"));
    assert!(uid.ends_with("@voxgate") && uid.len() == 32 + "@voxgate".len(), "{uid}");
    assert!(uid[..32].chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(uid, event_uid("session-1", "call-2"));
    assert_ne!(uid, event_uid("session-2", "call-1"));
    assert_ne!(event_uid("ab", "c"), event_uid("a", "bc"));
}

#[tokio::test]
async fn a_created_event_is_listed_in_the_calendar_zone() {
    let f = berlin();
    let args = json!({
        "title": "Follow-up Zebulon", "start_datetime": "2024-01-16T14:00",
        "location": "Room 3", "description": "Bring the\nlab results",
    });
    let created = f.create(args, "s1", "c1").await;
    assert_eq!(created["created"], true);
    assert_eq!(created["message"], "Event created successfully");
    assert_eq!(created["event_id"], event_uid("s1", "c1"));
    assert_eq!(created["start"], "2024-01-16T14:00:00+01:00");
    assert_eq!(created["end"], "2024-01-16T15:00:00+01:00", "the default duration is 60 minutes");
    assert_eq!(created["calendar_name"], "Default");
    assert!(f.text().contains("DTSTART:20240116T130000Z"), "stored in UTC");

    let listed = f.get(json!({"start_date": "2024-01-15", "end_date": "2024-01-17"})).await;
    assert_eq!(listed["count"], 1);
    let event = &listed["events"][0];
    assert_eq!(event["id"], created["event_id"]);
    assert_eq!(event["title"], "Follow-up Zebulon");
    assert_eq!((event["start"].clone(), event["end"].clone()), (created["start"].clone(), created["end"].clone()));
    assert_eq!(event["location"], "Room 3");
    assert_eq!(event["description"], "Bring the\nlab results");
    assert_eq!(event["all_day"], false);
}

#[tokio::test]
async fn a_replayed_call_creates_nothing_new() {
    let f = berlin();
    let args = json!({"title": "Team meeting", "start_datetime": "2024-02-01T09:00", "duration_minutes": 30});
    let first = f.create(args.clone(), "s1", "call-7").await;
    let again = f.create(args, "s1", "call-7").await;
    assert_eq!((first["created"].as_bool(), again["created"].as_bool()), (Some(true), Some(false)));
    for field in ["event_id", "title", "start", "end", "calendar_name"] {
        assert_eq!(first[field], again[field], "{field}");
    }
    assert_eq!(again["end"], "2024-02-01T09:30:00+01:00");
    assert_eq!(vevent_count(&f.text()), 1);
    // 30.0 passes the schema's "integer": it is 30 minutes, not an invalid argument.
    let as_float = json!({"title": "Ward round", "start_datetime": "2024-02-01T11:00", "duration_minutes": 30.0});
    assert_eq!(f.create(as_float, "s1", "call-9").await["end"], "2024-02-01T11:30:00+01:00");

    // Another call (or the same call id in another session) is another event.
    f.create(json!({"title": "Team meeting", "start_datetime": "2024-02-01T09:00"}), "s1", "call-8").await;
    f.create(json!({"title": "Team meeting", "start_datetime": "2024-02-01T09:00"}), "s2", "call-7").await;
    assert_eq!(vevent_count(&f.text()), 4);
    let listed = f.get(json!({"start_date": "2024-02-01"})).await;
    assert_eq!(listed["total_count"], 4);
}

#[tokio::test]
async fn all_day_events_store_dates_and_list_inclusive_ends() {
    let f = berlin();
    let leave = json!({"title": "Leave", "start_datetime": "2024-01-20", "end_datetime": "2024-01-21", "all_day": true});
    let created = f.create(leave, "s", "c1").await;
    assert_eq!((created["start"].as_str(), created["end"].as_str()), (Some("2024-01-20"), Some("2024-01-21")));
    assert_eq!(created["all_day"], true);
    let text = f.text();
    assert!(text.contains("DTSTART;VALUE=DATE:20240120") && text.contains("DTEND;VALUE=DATE:20240122"), "{text}");
    // An end at midnight is the exclusive iCalendar style: through the day before.
    let course = json!({"title": "Course", "start_datetime": "2024-01-25T00:00", "end_datetime": "2024-01-27T00:00", "all_day": true});
    assert_eq!(f.create(course, "s", "c2").await["end"], "2024-01-26");
    let single = json!({"title": "Audit day", "start_datetime": "2024-01-30", "all_day": true});
    assert_eq!(f.create(single, "s", "c3").await["end"], "2024-01-30");

    let on_21st = f.get(json!({"start_date": "2024-01-21"})).await;
    assert_eq!(on_21st["events"][0]["title"], "Leave");
    let on_22nd = f.get(json!({"start_date": "2024-01-22"})).await;
    assert_eq!(on_22nd["count"], 0);
}

#[tokio::test]
async fn explicit_offsets_are_shown_in_the_calendar_zone() {
    let f = berlin();
    let args = json!({"title": "Call", "start_datetime": "2024-07-01T08:00:00Z", "end_datetime": "2024-07-01T10:30-04:00"});
    let created = f.create(args, "s", "c").await;
    assert_eq!(created["start"], "2024-07-01T10:00:00+02:00");
    assert_eq!(created["end"], "2024-07-01T16:30:00+02:00");
}

#[tokio::test]
async fn the_schema_rejects_malformed_arguments_without_echoing_them() {
    let f = berlin();
    let long = "Zebulon ".repeat(40);
    let cases = [
        (GET, json!({}), "start_date"),
        (GET, json!({"start_date": "16.01.2024"}), "/start_date"),
        (GET, json!({"start_date": "2024-01-16", "patient": "Zebulon"}), "patient"),
        (GET, json!({"start_date": "2024-01-16", "max_results": 0}), "/max_results"),
        (GET, json!({"start_date": "2024-01-16", "max_results": 101}), "/max_results"),
        (GET, json!({"start_date": "2024-01-16", "calendar_name": long}), "/calendar_name"),
        (CREATE, json!({"start_datetime": "2024-01-16T10:00"}), "title"),
        (CREATE, json!({"title": long, "start_datetime": "2024-01-16T10:00"}), "/title"),
        (CREATE, json!({"title": "Zebulon", "start_datetime": "tomorrow at 2pm"}), "/start_datetime"),
        (CREATE, json!({"title": "Zebulon", "start_datetime": "2024-01-16T10:00", "duration_minutes": 0}), "/duration_minutes"),
        (CREATE, json!({"title": "Zebulon", "start_datetime": "2024-01-16T10:00", "all_day": "yes"}), "/all_day"),
        (CREATE, json!({"title": "Zebulon", "start_datetime": "2024-01-16T10:00", "attendees": []}), "attendees"),
        (CREATE, json!({"title": "Zebulon", "start_datetime": "2024-01-16T10:00", "description": "x".repeat(2001)}), "/description"),
    ];
    for (tool, args, field) in cases {
        let err = f.tool(tool).validate(&args).unwrap_err();
        let ToolError::InvalidArguments(message) = &err else { panic!("{tool} {args}: {err:?}") };
        assert!(message.contains(field), "{tool} {args}: {message}");
        assert!(!message.contains("Zebulon") && !message.contains("tomorrow"), "{message}");
    }
}

#[tokio::test]
async fn impossible_dates_and_times_are_invalid_arguments_naming_the_field() {
    let f = berlin();
    let cases = [
        (GET, json!({"start_date": "2024-02-30"}), "`/start_date`: must be a real calendar date"),
        (GET, json!({"start_date": "2024-01-16", "end_date": "2024-01-15"}), "`/end_date`: must not be before"),
        (GET, json!({"start_date": "2024-01-01", "end_date": "2024-02-01"}), "`/end_date`: the range may cover at most 31 days"),
        (CREATE, json!({"title": "T", "start_datetime": "2024-01-16T15:00", "end_datetime": "2024-01-16T14:00"}), "`/end_datetime`: must be after"),
        (CREATE, json!({"title": "T", "start_datetime": "2024-01-16T15:00", "end_datetime": "2024-01-16T15:00"}), "`/end_datetime`: must be after"),
        (CREATE, json!({"title": "T", "start_datetime": "2024-01-16", "all_day": true, "end_datetime": "2024-01-15"}), "`/end_datetime`: must not be before"),
        (CREATE, json!({"title": "T", "start_datetime": "2024-01-16"}), "`/start_datetime`: needs a time of day"),
        (CREATE, json!({"title": "T", "start_datetime": "2024-01-16T25:00"}), "`/start_datetime`: must be an ISO 8601"),
        (CREATE, json!({"title": "T", "start_datetime": "2024-10-27T02:30"}), "`/start_datetime`: this local time occurs twice"),
        (CREATE, json!({"title": "T", "start_datetime": "2024-03-31T02:30"}), "`/start_datetime`: this local time does not exist"),
        (CREATE, json!({"title": "T", "start_datetime": "2024-01-16T10:00", "end_datetime": "2024-01-16T11:00", "duration_minutes": 30}), "`/duration_minutes`: disagrees"),
        (CREATE, json!({"title": "T", "start_datetime": "2024-01-01T10:00", "end_datetime": "2024-03-01T10:00"}), "`/end_datetime`: an event may last at most 31 days"),
        (CREATE, json!({"title": "   ", "start_datetime": "2024-01-16T10:00"}), "`/title`: is required and must not be blank"),
    ];
    for (tool, args, expected) in cases {
        let message = invalid_message(f.call(tool, args.clone(), "s", "c").await);
        assert!(message.starts_with(expected), "{tool} {args}: {message}");
    }
    assert_eq!(vevent_count(&f.text()), 0, "nothing was written");
}

#[test]
fn the_confirmation_prompt_follows_the_seed() {
    let f = berlin();
    let tool = &f.tool(CREATE).tool;
    let meeting = json!({
        "title": "Meeting with Dr. Smith", "start_datetime": "2024-01-16T14:00",
        "end_datetime": "2024-01-16T15:00", "location": "Room 3",
    });
    assert_eq!(
        tool.confirmation_prompt(&meeting),
        "I'd like to create a calendar event:\n- Title: Meeting with Dr. Smith\n\
         - Start: Tuesday, 16 January 2024 at 14:00 CET\n- End: Tuesday, 16 January 2024 at 15:00 CET\n\
         - Location: Room 3\n\nShould I proceed?"
    );
    let summer = json!({
        "title": "Tumour board", "start_datetime": "2024-07-01T08:00:00Z",
        "description": "Cases:\n two", "calendar_name": "Oncology",
    });
    assert_eq!(
        tool.confirmation_prompt(&summer),
        "I'd like to create a calendar event:\n- Title: Tumour board\n\
         - Start: Monday, 1 July 2024 at 10:00 CEST\n- End: Monday, 1 July 2024 at 11:00 CEST\n\
         - Description: Cases: two\n- Calendar: Oncology\n\nShould I proceed?"
    );
    let leave = json!({"title": "Leave", "start_datetime": "2024-01-20", "end_datetime": "2024-01-21", "all_day": true});
    assert_eq!(
        tool.confirmation_prompt(&leave),
        "I'd like to create a calendar event:\n- Title: Leave\n- Start: Saturday, 20 January 2024 (all day)\n\
         - End: Sunday, 21 January 2024 (all day)\n\nShould I proceed?"
    );
    // Arguments that will fail on call are still shown, as given.
    let backwards = json!({"title": "T", "start_datetime": "2024-01-16T15:00", "end_datetime": "2024-01-16T14:00"});
    assert_eq!(
        confirmation_prompt(&backwards, tz("UTC")),
        "I'd like to create a calendar event:\n- Title: T\n- Start: Tuesday, 16 January 2024 at 15:00 (UTC)\n\
         - End: Tuesday, 16 January 2024 at 14:00 (UTC)\n\nShould I proceed?"
    );
}

/// As with CalDAV: a replay that meets its UID with another title or other times is a conflict, not
/// a silent success that reports details the calendar does not hold.
#[tokio::test]
async fn a_replay_with_other_details_is_a_conflict() {
    let f = berlin();
    let args = json!({"title": "Team meeting", "start_datetime": "2024-02-01T09:00:00.250", "duration_minutes": 30});
    f.create(args.clone(), "s1", "call-7").await;
    assert_eq!(f.create(args, "s1", "call-7").await["created"], false, "a fraction of a second is not a change");
    let conflict = "an event with this call's id already exists with different details";
    for other in [
        json!({"title": "Other meeting", "start_datetime": "2024-02-01T09:00", "duration_minutes": 30}),
        json!({"title": "Team meeting", "start_datetime": "2024-02-01T10:00", "duration_minutes": 30}),
    ] {
        let err = f.call("create_calendar_event", other, "s1", "call-7").await.unwrap_err();
        assert_eq!(err, ToolError::Backend(conflict.into()));
    }
    assert_eq!(vevent_count(&f.text()), 1);
}
