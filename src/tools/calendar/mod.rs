//! Calendar tools (`get_calendar_events`, `create_calendar_event`) and their backends.
//!
//! The tools ([`tools`](self::tools) module) read and validate arguments ([`args`]), then talk to one
//! shared [`CalendarBackend`]: the embedded [`LocalCalendar`] (an `.ics` file) or [`CaldavCalendar`]
//! (the clinic's CalDAV server). Both expand repeating events with [`recur`]. Nothing in this folder
//! logs or returns event contents, URLs or file paths in an error.

mod args;
mod backend;
mod caldav;
mod error;
mod ics;
mod local;
mod recur;
#[cfg(test)]
mod tests;
mod tools;

use std::sync::Arc;

use chrono_tz::Tz;

use crate::config::{CalendarBackendConfig, CalendarKind};

pub use self::backend::{
    CalendarBackend, CalendarEvent, CreateOutcome, DEFAULT_CALENDAR, EventPage, EventQuery, EventTiming,
};
pub use self::caldav::CaldavCalendar;
pub(crate) use self::caldav::MIN_CREATE_TIMEOUT;
pub use self::error::CalendarError;
pub use self::local::LocalCalendar;
pub use self::tools::{CreateCalendarEvent, GetCalendarEvents, event_uid};

/// Both calendar tools over one backend built from `[backends.calendar]`.
///
/// `kind = "local"` opens (or creates, with its parent directories) the `.ics` file at `path`;
/// `kind = "caldav"` checks the URL and starts discovery in the background: a server that cannot be
/// reached at start makes `/readyz` report the calendar degraded, never fails the start.
pub fn tools(config: &CalendarBackendConfig) -> Result<Vec<Arc<dyn crate::tools::Tool>>, CalendarError> {
    let tz: Tz = config
        .timezone
        .trim()
        .parse()
        .map_err(|_| CalendarError::UnknownTimezone(config.timezone.clone()))?;
    let backend: Arc<dyn CalendarBackend> = match config.kind {
        CalendarKind::Local => Arc::new(LocalCalendar::open(&config.path, tz)?),
        CalendarKind::Caldav => {
            let backend = Arc::new(CaldavCalendar::new(config, tz)?);
            backend.probe_in_background();
            backend
        }
    };
    Ok(tools_with_backend(backend))
}

/// Both calendar tools over the given backend (one `Arc`, shared by the two tools).
pub fn tools_with_backend(backend: Arc<dyn CalendarBackend>) -> Vec<Arc<dyn crate::tools::Tool>> {
    vec![
        Arc::new(GetCalendarEvents::new(Arc::clone(&backend))),
        Arc::new(CreateCalendarEvent::new(backend)),
    ]
}
