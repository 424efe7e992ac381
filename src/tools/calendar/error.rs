//! `CalendarError`: why a calendar backend failed, in words that are safe to log and to show.
//!
//! No variant carries an event title, description, location, file path, URL or hostname: the `Display`
//! text goes into logs as is, and [`From<CalendarError> for ToolError`] picks the public message.

use crate::tools::ToolError;
use crate::tools::http::Failure;
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
    /// Another process holds the lock file next to the local calendar: two processes writing one
    /// file would overwrite each other's events.
    #[error("another process is using the calendar file (one voxgate process owns it)")]
    InUse,
    /// The store is larger than the local backend is willing to load into memory.
    #[error("the calendar store is too large to load")]
    TooLarge,
    /// `backends.calendar.timezone` is not an IANA time-zone name (the name is configuration, not
    /// patient data, and helps the operator fix it).
    #[error(
        "backends.calendar.timezone: unknown time zone {0:?} (expected an IANA name such as \"Europe/Berlin\")"
    )]
    UnknownTimezone(String),
    /// `backends.calendar.url` is not an http(s) URL, or the HTTP client cannot be built.
    #[error("backends.calendar.url: {0}")]
    BadUrl(&'static str),
    /// The CalDAV server answered 401 or 403: the credentials (or their rights) were refused.
    #[error("the calendar server refused the credentials")]
    Refused,
    /// The CalDAV server could not be reached, or kept failing after the retries.
    #[error("the calendar server could not be reached: {0}")]
    Unreachable(Failure),
    /// The CalDAV server answered, but with more than voxgate reads (8 MiB): the server is up, so
    /// this is not [`CalendarError::Unreachable`] and does not mark it so for `/readyz`.
    #[error("the calendar server's answer is larger than allowed")]
    AnswerTooLarge,
    /// Too little of the call's timeout was left to send the event: a `PUT` cut off in flight may
    /// still be stored while the call reports a failure, so it is not started. Nothing was stored.
    #[error("too little of the call's time was left to send the event")]
    OutOfTime,
    /// A `PUT` some attempt of which may have reached the server got no answer (cut off at the
    /// call's time, connection lost, a gateway's 502/504), and the server could not show the event
    /// afterwards (a `404` too: it may still be storing it); or a `412`'s event could not be read.
    #[error("the calendar server did not confirm whether the event was stored")]
    Unconfirmed,
    /// The local calendar's write had not committed (the rename over the file) when too little of
    /// the call's time was left: it was given up, and nothing was stored.
    #[error("the calendar file could not be written within the call's time")]
    WriteTooSlow,
    /// The local calendar's write had committed (renamed over the file), but did not finish within
    /// the call's time, or its directory could not be synced after the rename: the event is most
    /// likely stored, and a retry could book it twice.
    #[error("the calendar file was replaced, but the write was not confirmed (unfinished in time, or not synced)")]
    WriteUnconfirmed,
    /// The CalDAV server answered with a status voxgate cannot act on.
    #[error("the calendar server answered HTTP {0}")]
    Status(u16),
    /// The CalDAV server's answer is not the WebDAV/CalDAV it should be.
    #[error("the calendar server's answer could not be read")]
    BadAnswer,
    /// Discovery found no calendar collection that holds events.
    #[error("no calendar that holds events was found on the calendar server (check backends.calendar.url)")]
    NoCalendar,
    /// No calendar has the requested name (or the configured `backends.calendar.calendar`).
    #[error("no calendar with the requested name exists")]
    UnknownCalendar,
    /// `calendar_name` is the default calendar, but the configured `backends.calendar.calendar` is
    /// not on the server (deleted or unshared since it was configured).
    #[error("the configured default calendar is not on the calendar server (check backends.calendar.calendar)")]
    NoDefaultCalendar,
    /// The server said this user may not write to the calendar (a shared read-only calendar,
    /// Nextcloud's birthdays): no request is sent.
    #[error("the requested calendar is read-only")]
    ReadOnlyCalendar,
    /// An event with the UID of this call exists, but differs from what this call would write.
    #[error("an event with this call's id exists with different details")]
    Conflict,
    /// The blocking worker that does the file work panicked or was cancelled.
    #[error("the calendar worker task failed")]
    Worker,
}

impl From<CalendarError> for ToolError {
    fn from(err: CalendarError) -> Self {
        match err {
            CalendarError::Unavailable(_)
            | CalendarError::InUse
            | CalendarError::Unreachable(_)
            | CalendarError::Status(_) => {
                ToolError::Backend("the calendar is unavailable; try again later".into())
            }
            CalendarError::Refused => ToolError::Backend(
                "the calendar server refused the credentials voxgate is configured with; ask an administrator".into(),
            ),
            CalendarError::BadAnswer => ToolError::Backend("the calendar server's answer could not be read".into()),
            CalendarError::AnswerTooLarge => ToolError::Backend(
                "the calendar server's answer was too large to read; ask for fewer days or one calendar".into(),
            ),
            CalendarError::Unconfirmed => ToolError::Backend(
                "the calendar server did not confirm the event; it may have been created; list that day before booking again"
                    .into(),
            ),
            CalendarError::OutOfTime => ToolError::Backend(
                "the calendar server answered too slowly; the event was not created; try again".into(),
            ),
            CalendarError::WriteTooSlow => {
                ToolError::Backend("the calendar answered too slowly; the event was not created; try again".into())
            }
            CalendarError::WriteUnconfirmed => ToolError::Backend(
                "the calendar did not confirm the event; it may have been created; list that day before booking again"
                    .into(),
            ),
            CalendarError::NoCalendar => ToolError::Backend("no calendar was found on the calendar server".into()),
            CalendarError::UnknownCalendar => {
                ToolError::InvalidArguments("`/calendar_name`: no calendar with this name exists".into())
            }
            CalendarError::NoDefaultCalendar => ToolError::Backend(
                "the default calendar was not found on the calendar server; name another calendar or ask an administrator"
                    .into(),
            ),
            CalendarError::ReadOnlyCalendar => ToolError::InvalidArguments(
                "`/calendar_name`: this calendar is read-only; choose another calendar".into(),
            ),
            CalendarError::Conflict => {
                ToolError::Backend("an event with this call's id already exists with different details".into())
            }
            CalendarError::Malformed | CalendarError::TooLarge => {
                ToolError::Backend("the calendar data could not be read".into())
            }
            CalendarError::UnknownTimezone(_) | CalendarError::BadUrl(_) => {
                ToolError::Backend("the calendar is not configured correctly".into())
            }
            CalendarError::Worker => ToolError::Internal,
        }
    }
}

/// A failed CalDAV request: an answer over the cap still came from the server
/// ([`CalendarError::AnswerTooLarge`]); anything else means it could not be used.
impl From<Failure> for CalendarError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::TooLarge => CalendarError::AnswerTooLarge,
            failure => CalendarError::Unreachable(failure),
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
        if matches!(
            err,
            CalendarError::Unavailable(_) | CalendarError::InUse | CalendarError::Malformed | CalendarError::TooLarge
        ) {
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
