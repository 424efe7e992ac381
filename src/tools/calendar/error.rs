//! `CalendarError`: why a calendar backend failed, in words that are safe to log and to show.
//!
//! No variant carries an event title, description, location, file path or hostname: the `Display`
//! text goes into logs as is, and [`From<CalendarError> for ToolError`] picks the public message.

use crate::tools::ToolError;
use crate::tools::registry::RegistryError;

/// Why a calendar backend call failed.
#[derive(Debug, thiserror::Error)]
pub enum CalendarError {
    /// Reading or writing the store failed (I/O). The `io::Error` from std file operations does not
    /// carry the path, so it is safe as a source.
    #[error("the calendar store could not be read or written")]
    Unavailable(#[source] std::io::Error),
    /// The store holds data that is not valid iCalendar (the parser's own message quotes the input,
    /// so it is dropped on purpose).
    #[error("the calendar store does not hold valid iCalendar data")]
    Malformed,
    /// The store is larger than the local backend is willing to load into memory.
    #[error("the calendar store is too large to load")]
    TooLarge,
    /// `backends.calendar.timezone` is not an IANA time-zone name (the name is configuration, not
    /// patient data, and helps the operator fix it).
    #[error(
        "backends.calendar.timezone: unknown time zone {0:?} (expected an IANA name such as \"Europe/Berlin\")"
    )]
    UnknownTimezone(String),
    /// `backends.calendar.kind = "caldav"` is configured, but that backend does not exist yet.
    #[error(
        "backends.calendar.kind = \"caldav\" is not supported by this build yet; use kind = \"local\" (an .ics file)"
    )]
    CaldavNotBuilt,
    /// The blocking worker that does the file work panicked or was cancelled.
    #[error("the calendar worker task failed")]
    Worker,
}

impl From<CalendarError> for ToolError {
    fn from(err: CalendarError) -> Self {
        match err {
            CalendarError::Unavailable(_) | CalendarError::CaldavNotBuilt => {
                ToolError::Backend("the calendar is unavailable".into())
            }
            CalendarError::Malformed | CalendarError::TooLarge => {
                ToolError::Backend("the calendar data could not be read".into())
            }
            CalendarError::UnknownTimezone(_) => {
                ToolError::Backend("the calendar is not configured correctly".into())
            }
            CalendarError::Worker => ToolError::Internal,
        }
    }
}

/// At start-up the operator needs the whole story: the reason, the OS error, and which key to check.
/// (Still no path or event text: the operator knows the path from the config.)
impl From<CalendarError> for RegistryError {
    fn from(err: CalendarError) -> Self {
        let mut reason = err.to_string();
        if let Some(source) = std::error::Error::source(&err) {
            reason.push_str(&format!(": {source}"));
        }
        if matches!(err, CalendarError::Unavailable(_) | CalendarError::Malformed | CalendarError::TooLarge) {
            reason.push_str(" (check backends.calendar.path)");
        }
        RegistryError::Backend { family: "calendar", reason }
    }
}

/// Log a backend failure (its `Display` is PHI-free) and turn it into the public tool error.
pub(super) fn to_tool_error(tool: &'static str, err: CalendarError) -> ToolError {
    tracing::warn!(tool, error = %err, source = ?std::error::Error::source(&err).map(|s| s.to_string()), "calendar backend failed");
    err.into()
}
