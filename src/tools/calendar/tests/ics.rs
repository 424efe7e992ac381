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
