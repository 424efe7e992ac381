//! Calendar tools (`get_calendar_events`, `create_calendar_event`) and their backends.
//!
//! The tools ([`tools`](self::tools) module) read and validate arguments ([`args`]), then talk to one
//! shared [`CalendarBackend`]: today the embedded [`LocalCalendar`] (an `.ics` file), later CalDAV.
//! Nothing in this folder logs or returns event contents or file paths in an error.

mod args;
mod backend;
mod error;
mod ics;
mod local;
#[cfg(test)]
mod tests;
mod tools;

use std::sync::Arc;

use chrono_tz::Tz;

use crate::config::{CalendarBackendConfig, CalendarKind};

pub use self::backend::{
    CalendarBackend, CalendarEvent, CreateOutcome, DEFAULT_CALENDAR, EventPage, EventQuery, EventTiming,
};
pub use self::error::CalendarError;
pub use self::local::LocalCalendar;
pub use self::tools::{CreateCalendarEvent, GetCalendarEvents, event_uid};

/// Both calendar tools over one backend built from `[backends.calendar]`.
///
/// `kind = "local"` opens (or creates, with its parent directories) the `.ics` file at `path`;
/// `kind = "caldav"` is refused until that backend exists, naming the key to change.
pub fn tools(config: &CalendarBackendConfig) -> Result<Vec<Arc<dyn crate::tools::Tool>>, CalendarError> {
    let tz: Tz = config
        .timezone
        .trim()
        .parse()
        .map_err(|_| CalendarError::UnknownTimezone(config.timezone.clone()))?;
    let backend: Arc<dyn CalendarBackend> = match config.kind {
        CalendarKind::Local => Arc::new(LocalCalendar::open(&config.path, tz)?),
        CalendarKind::Caldav => return Err(CalendarError::CaldavNotBuilt),
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
