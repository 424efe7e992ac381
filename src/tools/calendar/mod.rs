//! Calendar tools (`get_calendar_events`, `create_calendar_event`) and their backends.
