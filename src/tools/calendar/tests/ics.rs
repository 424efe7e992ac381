//! Parsing iCalendar text from a store: what a hostile or broken server cannot do to the process.

/// A server's answer (up to 8 MiB) nesting components many levels deep must not overflow the
/// stack of the thread that parses it: that would abort the whole process.
#[test]
fn deeply_nested_components_are_refused_not_a_stack_overflow() {
    let depth = 100_000;
    let mut text = String::from("BEGIN:VCALENDAR\r\n");
    text.push_str(&"BEGIN:X\r\n".repeat(depth));
    text.push_str(&"END:X\r\n".repeat(depth));
    text.push_str("END:VCALENDAR\r\n");
    // The stack of a tokio blocking thread (2 MiB), where the backends parse.
    let parsed = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || crate::tools::calendar::ics::parse(&text, chrono_tz::UTC).map(|p| p.events.len()))
        .unwrap()
        .join()
        .unwrap();
    assert!(matches!(parsed, Err(crate::tools::calendar::CalendarError::Malformed)), "{parsed:?}");
}

/// One UID in two calendars (an invitation copied into a second calendar): an override in one
/// moves that calendar's occurrence only.
#[test]
fn an_override_moves_its_own_calendars_occurrence_only() {
    use crate::tools::calendar::{EventQuery, ics, recur};
    let tz = chrono_tz::Europe::Berlin;
    let series = "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:board\r\nSUMMARY:Board\r\n\
DTSTART;TZID=Europe/Berlin:20240318T090000\r\nDTEND;TZID=Europe/Berlin:20240318T100000\r\n\
RRULE:FREQ=WEEKLY;COUNT=2\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n";
    let moved = "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:board\r\nSUMMARY:Board (moved)\r\n\
RECURRENCE-ID;TZID=Europe/Berlin:20240325T090000\r\n\
DTSTART;TZID=Europe/Berlin:20240326T140000\r\nDTEND;TZID=Europe/Berlin:20240326T150000\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n";
    let mut stored = Vec::new();
    for (calendar, text) in [("work", series), ("work", moved), ("shared", series)] {
        for mut event in ics::parse(text, tz).unwrap().events {
            event.event.calendar = calendar.to_string();
            stored.push(event);
        }
    }
    let query = EventQuery {
        first_day: chrono::NaiveDate::from_ymd_opt(2024, 3, 18).unwrap(),
        last_day: chrono::NaiveDate::from_ymd_opt(2024, 3, 31).unwrap(),
        calendar: None,
        max_results: 10,
    };
    let (page, _) = recur::expand(stored, &query, tz);
    let mut listed: Vec<(String, String)> =
        page.events.iter().map(|e| (e.calendar.clone(), e.title.clone())).collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            ("shared".to_string(), "Board".to_string()),
            ("shared".to_string(), "Board".to_string()),
            ("work".to_string(), "Board".to_string()),
            ("work".to_string(), "Board (moved)".to_string()),
        ]
    );
}
