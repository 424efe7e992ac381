//! Calendar requests: reading a day or week ("what is on my calendar tomorrow") and booking
//! ("book a meeting with Dr. Smith at 2pm tomorrow", "create an event called Review at 14:00 on
//! 2026-12-01 for 30 minutes"). Dates count from `today` (UTC); times are wall-clock, no zone.

use std::sync::LazyLock;

use chrono::{Datelike, Days, Duration, NaiveDate, NaiveDateTime, NaiveTime, Weekday};
use regex::Regex;
use serde_json::{Map, Value, json};

use super::{Pattern, Understood, affirmed, captures, clip, group, is_match};

const GET_EVENTS: &str = "get_calendar_events";
const CREATE_EVENT: &str = "create_calendar_event";
/// Longest title or location taken from the request.
const MAX_TEXT: usize = 120;

static BOOKING: Pattern = LazyLock::new(|| {
    Regex::new(
        r"(?i)\bbook\b|\b(?:schedule|create|add|set\s+up|arrange|make|put\s+in|plan)\s+(?:a|an|the|one)?\s*(?:new\s+)?(?:meeting|event|appointment|call|calendar\s+event)\b",
    )
    .ok()
});
static CALENDAR_WORDS: Pattern =
    LazyLock::new(|| Regex::new(r"(?i)\b(?:calendar|schedule|appointments?|agenda|meetings|events|diary)\b").ok());
static AT_TIME: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:at|from)\s+(\d{1,2})(?:[:.h](\d{2}))?\s*(a\.?m\.?|p\.?m\.?|o'?clock)?(?:\s|$|[,.?!])").ok()
});
static BARE_TIME: Pattern =
    LazyLock::new(|| Regex::new(r"(?i)\b(\d{1,2})(?::(\d{2}))?\s*(a\.?m\.?|p\.?m\.?)(?:\s|$|[,.?!])").ok());
static ISO_DATE: Pattern = LazyLock::new(|| Regex::new(r"\b(\d{4})-(\d{2})-(\d{2})\b").ok());
static WEEKDAY: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:on|next|this)\s+(monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b").ok()
});
static LENGTH: Pattern =
    LazyLock::new(|| Regex::new(r"(?i)\bfor\s+(\d{1,3}|an?|half\s+an)\s*(minutes?|mins?|hours?|hrs?)\b").ok());
/// Text after "called"/"titled"/"named", up to the next time/date words or the end.
static TITLE: Pattern = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b(?:called|titled|named|title)\s+["'“‘]?(.+?)["'”’]?(?:\s+(?:at|on|for|from|tomorrow|today|with|in|about)\b|[?!,;]|\.?\s*$)"#,
    )
    .ok()
});
static WITH: Pattern = LazyLock::new(|| {
    Regex::new(
        r"(?i)\bwith\s+(.+?)(?:\s+(?:at|on|for|from|tomorrow|today|called|titled|named|in|about)\b|[?!,;]|\.?\s*$)",
    )
    .ok()
});
static ROOM: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:in|at)\s+((?:room|ward|clinic|office)\s+[\w-]+)|\blocation\s+([\w -]+?)(?:[?!,;.]|$)").ok()
});
static ABOUT: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\babout\s+(.+?)(?:\s+(?:at|on|for|from|tomorrow|today|with|called|titled|in)\b|[?!,;]|\.?\s*$)")
        .ok()
});

/// "What is on my calendar tomorrow?" → `get_calendar_events {start_date, end_date}`.
pub(super) fn understand_query(_text: &str, lower: &str, today: NaiveDate) -> Option<Understood> {
    let asks_about_day =
        lower.contains("what do i have") || lower.contains("what's on") || lower.contains("what is on");
    let about_calendar = is_match(&CALENDAR_WORDS, lower) || (asks_about_day && mentions_day(lower));
    if !about_calendar {
        return None;
    }
    let (start, end) = date_range(lower, today);
    Some(Understood::Call { tool: GET_EVENTS, arguments: json!({ "start_date": iso(start), "end_date": iso(end) }) })
}

/// "Book a meeting ... at 2pm tomorrow" → `create_calendar_event`, one hour unless "for N minutes".
pub(super) fn understand_booking(text: &str, lower: &str, today: NaiveDate) -> Option<Understood> {
    if !is_match(&BOOKING, lower) {
        return None;
    }
    let Some(time) = time_of_day(text) else {
        return Some(Understood::NeedMore {
            tool: CREATE_EVENT,
            ask: "At what time should I book it? For example: at 2pm tomorrow.".into(),
        });
    };
    let start = day(lower, today).and_time(time);
    let end = start + length(lower);
    let mut arguments = Map::new();
    arguments.insert("title".into(), json!(title(text)));
    arguments.insert("start_datetime".into(), json!(stamp(start)));
    arguments.insert("end_datetime".into(), json!(stamp(end)));
    if let Some(caps) = captures(&ROOM, text)
        && let Some(location) = group(&caps, 1).or_else(|| group(&caps, 2))
    {
        arguments.insert("location".into(), json!(clip(location, MAX_TEXT)));
    }
    if let Some(about) = captures(&ABOUT, text).as_ref().and_then(|caps| group(caps, 1)) {
        arguments.insert("description".into(), json!(clip(about, MAX_TEXT)));
    }
    Some(Understood::Call { tool: CREATE_EVENT, arguments: Value::Object(arguments) })
}

fn mentions_day(lower: &str) -> bool {
    ["today", "tomorrow", "this week", "next week"].iter().any(|word| lower.contains(word))
        || is_match(&ISO_DATE, lower)
}

/// The days a query covers: a day, this week or next week (Monday to Sunday); default today.
fn date_range(lower: &str, today: NaiveDate) -> (NaiveDate, NaiveDate) {
    let monday = today - Days::new(u64::from(today.weekday().num_days_from_monday()));
    if lower.contains("next week") {
        let next = monday + Days::new(7);
        return (next, next + Days::new(6));
    }
    if lower.contains("this week") || lower.contains("the week") {
        return (monday, monday + Days::new(6));
    }
    let day = day(lower, today);
    (day, day)
}

/// The day named in the request: an ISO date, today/tomorrow/the day after tomorrow, or a weekday
/// (its next occurrence after today); default today.
fn day(lower: &str, today: NaiveDate) -> NaiveDate {
    if let Some(caps) = captures(&ISO_DATE, lower) {
        let number = |i: usize| caps.get(i).and_then(|m| m.as_str().parse::<u32>().ok());
        if let (Some(y), Some(m), Some(d)) = (number(1), number(2), number(3))
            && let Some(date) = i32::try_from(y).ok().and_then(|y| NaiveDate::from_ymd_opt(y, m, d))
        {
            return date;
        }
    }
    if lower.contains("day after tomorrow") {
        return today + Days::new(2);
    }
    if affirmed(lower, &["tomorrow"]) {
        return today + Days::new(1);
    }
    if let Some(weekday) = captures(&WEEKDAY, lower).and_then(|caps| group(&caps, 1).and_then(parse_weekday)) {
        let ahead = (7 + weekday.num_days_from_monday() - today.weekday().num_days_from_monday()) % 7;
        return today + Days::new(u64::from(if ahead == 0 { 7 } else { ahead }));
    }
    today
}

fn parse_weekday(name: &str) -> Option<Weekday> {
    name.parse().ok()
}

/// "at 2pm", "at 2:30 pm", "at 14:00", "3 p.m.", "noon". A bare hour from 1 to 7 is taken
/// as afternoon (nobody books 3 am by saying "at 3").
fn time_of_day(text: &str) -> Option<NaiveTime> {
    let lower = text.to_lowercase();
    if lower.split(|c: char| !c.is_alphanumeric()).any(|word| word == "noon" || word == "midday") {
        return NaiveTime::from_hms_opt(12, 0, 0);
    }
    let caps = captures(&AT_TIME, text).or_else(|| captures(&BARE_TIME, text))?;
    let mut hour: u32 = caps.get(1)?.as_str().parse().ok()?;
    let minute: u32 = caps.get(2).map_or(Some(0), |m| m.as_str().parse().ok())?;
    let suffix = caps.get(3).map(|m| m.as_str().to_lowercase().replace('.', "")).unwrap_or_default();
    match suffix.as_str() {
        "pm" if hour < 12 => hour += 12,
        "am" if hour == 12 => hour = 0,
        "am" | "pm" => {}
        _ if (1..=7).contains(&hour) && caps.get(2).is_none() => hour += 12,
        _ => {}
    }
    NaiveTime::from_hms_opt(hour, minute, 0)
}

/// "for 30 minutes", "for 2 hours", "for an hour", "for half an hour"; default one hour.
fn length(lower: &str) -> Duration {
    let Some(caps) = captures(&LENGTH, lower) else { return Duration::hours(1) };
    let amount = group(&caps, 1).unwrap_or("1");
    let unit = group(&caps, 2).unwrap_or("hour");
    let minutes: i64 = match amount {
        "a" | "an" => 60,
        _ if amount.starts_with("half") => return Duration::minutes(30),
        _ => amount.parse::<i64>().unwrap_or(1) * if unit.starts_with('h') { 60 } else { 1 },
    };
    Duration::minutes(minutes.clamp(5, 24 * 60))
}

/// "called X"/"titled X"/quoted → X; "with X" → "Meeting with X"; else "Meeting".
fn title(text: &str) -> String {
    if let Some(title) = captures(&TITLE, text).as_ref().and_then(|caps| group(caps, 1)) {
        return clip(title, MAX_TEXT);
    }
    if let Some(with) = captures(&WITH, text).as_ref().and_then(|caps| group(caps, 1)) {
        return clip(&format!("Meeting with {with}"), MAX_TEXT);
    }
    "Meeting".into()
}

fn iso(date: NaiveDate) -> String {
    date.format("%Y-%m-%d").to_string()
}

fn stamp(at: NaiveDateTime) -> String {
    at.format("%Y-%m-%dT%H:%M:%S").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Tuesday.
    fn today() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 3, 10).expect("date")
    }

    fn query(text: &str) -> Option<Understood> {
        understand_query(text, &text.to_lowercase(), today())
    }

    fn booking(text: &str) -> Value {
        match understand_booking(text, &text.to_lowercase(), today()) {
            Some(Understood::Call { tool, arguments }) => {
                assert_eq!(tool, CREATE_EVENT);
                arguments
            }
            other => panic!("not a booking call: {other:?}"),
        }
    }

    fn range(text: &str) -> (String, String) {
        match query(text) {
            Some(Understood::Call { arguments, .. }) => (
                arguments["start_date"].as_str().expect("start").to_string(),
                arguments["end_date"].as_str().expect("end").to_string(),
            ),
            other => panic!("not a query: {other:?}"),
        }
    }

    #[test]
    fn all_patterns_compile() {
        for pattern in [
            &BOOKING,
            &CALENDAR_WORDS,
            &AT_TIME,
            &BARE_TIME,
            &ISO_DATE,
            &WEEKDAY,
            &LENGTH,
            &TITLE,
            &WITH,
            &ROOM,
            &ABOUT,
        ] {
            assert!(pattern.is_some());
        }
    }

    #[test]
    fn queries_cover_today_tomorrow_and_weeks() {
        assert_eq!(range("What's on my calendar today?"), ("2026-03-10".into(), "2026-03-10".into()));
        assert_eq!(range("what is on my CALENDAR tomorrow"), ("2026-03-11".into(), "2026-03-11".into()));
        assert_eq!(range("Show my appointments this week"), ("2026-03-09".into(), "2026-03-15".into()));
        assert_eq!(range("my schedule next week please"), ("2026-03-16".into(), "2026-03-22".into()));
        assert_eq!(range("What do I have tomorrow?"), ("2026-03-11".into(), "2026-03-11".into()));
        assert_eq!(range("Any meetings on 2026-04-02?"), ("2026-04-02".into(), "2026-04-02".into()));
        assert_eq!(range("Check my calendar"), ("2026-03-10".into(), "2026-03-10".into()));
        assert!(query("How are you today?").is_none());
    }

    #[test]
    fn booking_at_2pm_tomorrow_with_a_person() {
        let arguments = booking("Book a meeting with Dr. Smith at 2pm tomorrow");
        assert_eq!(arguments["title"], "Meeting with Dr. Smith");
        assert_eq!(arguments["start_datetime"], "2026-03-11T14:00:00");
        assert_eq!(arguments["end_datetime"], "2026-03-11T15:00:00");
        assert!(arguments.get("location").is_none());
    }

    #[test]
    fn booking_with_title_iso_date_24h_time_and_length() {
        let arguments = booking("Create an event called Budget review at 14:00 on 2026-12-01 for 30 minutes");
        assert_eq!(arguments["title"], "Budget review");
        assert_eq!(arguments["start_datetime"], "2026-12-01T14:00:00");
        assert_eq!(arguments["end_datetime"], "2026-12-01T14:30:00");
    }

    #[test]
    fn booking_variants() {
        let arguments =
            booking("schedule a meeting titled \"Ward round\" at 9:30 am on friday in room 4B about discharge plans");
        assert_eq!(arguments["title"], "Ward round");
        assert_eq!(arguments["start_datetime"], "2026-03-13T09:30:00");
        assert_eq!(arguments["location"], "room 4B");
        assert_eq!(arguments["description"], "discharge plans");
        let arguments = booking("Book the team sync at 3 for 2 hours");
        assert_eq!(arguments["title"], "Meeting");
        assert_eq!(arguments["start_datetime"], "2026-03-10T15:00:00");
        assert_eq!(arguments["end_datetime"], "2026-03-10T17:00:00");
        let arguments = booking("please book lunch at noon tomorrow for an hour");
        assert_eq!(arguments["start_datetime"], "2026-03-11T12:00:00");
        let arguments = booking("Add an event at 12am tomorrow");
        assert_eq!(arguments["start_datetime"], "2026-03-11T00:00:00");
    }

    #[test]
    fn booking_without_a_time_asks_for_one() {
        let found = understand_booking("Book a meeting tomorrow", "book a meeting tomorrow", today());
        assert!(matches!(found, Some(Understood::NeedMore { tool: CREATE_EVENT, .. })), "{found:?}");
        assert!(understand_booking("what a nice day", "what a nice day", today()).is_none());
    }
}
