//! CalDAV discovery (RFC 4791 §6, RFC 6764): from whatever URL the operator configured — a server
//! root, `/.well-known/caldav`, Nextcloud's `/remote.php/dav`, a principal or a calendar collection —
//! to the user's calendars: `current-user-principal` → `calendar-home-set` → the collections in it
//! that hold events. Every href the server returns must stay on the configured server.

use url::Url;

use super::http::Dav;
use super::xml::{self, Resource};
use crate::tools::calendar::CalendarError;

/// Calendars listed at most (a home set with more is cut, in the server's order).
const MAX_CALENDARS: usize = 50;

/// One calendar collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collection {
    pub url: Url,
    /// The display name, or the last path segment when the server has none.
    pub name: String,
    /// The server said this user may not write here (`current-user-privilege-set`).
    pub read_only: bool,
}

/// The user's event calendars and which one is the default.
#[derive(Debug, Clone)]
pub struct Calendars {
    pub all: Vec<Collection>,
    /// Index into `all`: the configured `backends.calendar.calendar`, else the first one the user may
    /// write to (Nextcloud may list its read-only birthday calendar first), else the first. `None`
    /// when the configured calendar is not (or no longer) on the server: the other calendars are
    /// still listed, but nothing is created in another calendar than the one the operator chose.
    pub default: Option<usize>,
}

impl Calendars {
    /// The calendar with this display name or path (case-insensitive).
    pub fn named(&self, wanted: &str) -> Option<&Collection> {
        let wanted = wanted.trim();
        let path = wanted.trim_matches('/');
        self.all.iter().find(|c| c.name.eq_ignore_ascii_case(wanted)).or_else(|| {
            // A path: the collection's own segment ("clinic") or its whole path ("alice/clinic").
            (!path.is_empty()).then(|| {
                self.all.iter().find(|c| {
                    let own = c.url.path().trim_matches('/');
                    own == path || own.ends_with(&format!("/{path}"))
                })
            })?
        })
    }

    pub fn default_calendar(&self) -> Option<&Collection> {
        self.all.get(self.default?)
    }
}

/// Find the calendars reachable from `start`; `wanted` is `backends.calendar.calendar`.
pub async fn discover(dav: &Dav, start: &Url, wanted: Option<&str>) -> Result<Calendars, CalendarError> {
    let all = match propfind(dav, start, "0").await? {
        Some(found) if found.is_calendar => {
            // The URL is a calendar collection itself: that is the one calendar.
            vec![collection(start, &found)].into_iter().filter(|_| found.holds_events()).collect()
        }
        found => {
            let home = match home_set(dav, start, found).await? {
                Some(home) => home,
                None => well_known_home(dav, start).await?.ok_or(CalendarError::NoCalendar)?,
            };
            list_home(dav, &home).await?
        }
    };
    if all.is_empty() {
        return Err(CalendarError::NoCalendar);
    }
    let writable = all.iter().position(|c| !c.read_only).unwrap_or(0);
    let mut calendars = Calendars { all, default: Some(writable) };
    if let Some(wanted) = wanted.map(str::trim).filter(|w| !w.is_empty()) {
        let chosen = calendars.named(wanted).cloned();
        calendars.default = chosen.and_then(|chosen| calendars.all.iter().position(|c| *c == chosen));
        if calendars.default.is_none() {
            // Configuration, not patient data: the operator needs to know which key to fix.
            tracing::warn!(
                "backends.calendar.calendar names no calendar on the server; creating in the default calendar fails"
            );
        }
    }
    Ok(calendars)
}

/// The home set named by a resource (directly, or through its principal).
async fn home_set(dav: &Dav, base: &Url, found: Option<Resource>) -> Result<Option<Url>, CalendarError> {
    let Some(found) = found else { return Ok(None) };
    if let Some(home) = &found.calendar_home_set {
        return Ok(Some(resolve(dav, base, home)?));
    }
    let Some(principal) = &found.current_user_principal else { return Ok(None) };
    let principal = resolve(dav, base, principal)?;
    let home = propfind(dav, &principal, "0").await?.and_then(|p| p.calendar_home_set);
    home.map(|home| resolve(dav, &principal, &home)).transpose()
}

/// RFC 6764: `/.well-known/caldav` on the server, following one redirect to the context path.
async fn well_known_home(dav: &Dav, start: &Url) -> Result<Option<Url>, CalendarError> {
    let well_known = start.join("/.well-known/caldav").map_err(|_| CalendarError::BadAnswer)?;
    let answer = dav
        .send("PROPFIND", &well_known, &[("Depth", "0")], Some((XML, xml::PROPFIND_DISCOVERY.to_string())))
        .await
        .map_err(CalendarError::from)?;
    let context = match answer.status.as_u16() {
        301 | 302 | 303 | 307 | 308 => match &answer.location {
            Some(location) => resolve(dav, &well_known, location)?,
            None => return Ok(None),
        },
        207 => well_known.clone(),
        401 | 403 => return Err(CalendarError::Refused),
        _ => return Ok(None),
    };
    let found = propfind(dav, &context, "0").await?;
    home_set(dav, &context, found).await
}

/// The event calendars inside a home set.
async fn list_home(dav: &Dav, home: &Url) -> Result<Vec<Collection>, CalendarError> {
    let answer = dav
        .send("PROPFIND", home, &[("Depth", "1")], Some((XML, xml::PROPFIND_DISCOVERY.to_string())))
        .await
        .map_err(CalendarError::from)?;
    expect_multistatus(answer.status.as_u16())?;
    let listed = xml::multistatus(&answer.body).map_err(|_| CalendarError::BadAnswer)?;
    let mut calendars = Vec::new();
    for resource in listed.iter().filter(|r| r.holds_events()) {
        let url = resolve(dav, home, &resource.href)?;
        if url.path().trim_end_matches('/') != home.path().trim_end_matches('/') {
            calendars.push(collection(&url, resource));
        }
    }
    calendars.truncate(MAX_CALENDARS);
    Ok(calendars)
}

pub(super) const XML: &str = "application/xml; charset=utf-8";

/// PROPFIND one resource: its properties, or `None` when the server has no DAV resource there.
async fn propfind(dav: &Dav, url: &Url, depth: &str) -> Result<Option<Resource>, CalendarError> {
    let answer = dav
        .send("PROPFIND", url, &[("Depth", depth)], Some((XML, xml::PROPFIND_DISCOVERY.to_string())))
        .await
        .map_err(CalendarError::from)?;
    match answer.status.as_u16() {
        207 => {
            let mut found = xml::multistatus(&answer.body).map_err(|_| CalendarError::BadAnswer)?;
            // Depth 0 answers describe one resource; take the first if the href is spelled otherwise.
            let at = found.iter().position(|r| same_path(dav, url, &r.href)).unwrap_or(0);
            Ok((!found.is_empty()).then(|| found.swap_remove(at)))
        }
        401 | 403 => Err(CalendarError::Refused),
        // Not a DAV resource here (a bare web server root, a redirect to a login page…).
        300..=499 => Ok(None),
        status => Err(CalendarError::Status(status)),
    }
}

/// 207, or the error a non-DAV answer means.
pub(super) fn expect_multistatus(status: u16) -> Result<(), CalendarError> {
    match status {
        207 => Ok(()),
        401 | 403 => Err(CalendarError::Refused),
        status => Err(CalendarError::Status(status)),
    }
}

/// An href from the server as a URL on the configured server.
pub(super) fn resolve(dav: &Dav, base: &Url, href: &str) -> Result<Url, CalendarError> {
    let url = base.join(href.trim()).map_err(|_| CalendarError::BadAnswer)?;
    if dav.owns(&url) { Ok(url) } else { Err(CalendarError::BadAnswer) }
}

fn same_path(dav: &Dav, url: &Url, href: &str) -> bool {
    resolve(dav, url, href).is_ok_and(|h| h.path().trim_end_matches('/') == url.path().trim_end_matches('/'))
}

fn collection(url: &Url, resource: &Resource) -> Collection {
    let segment = url.path_segments().and_then(|mut s| s.rfind(|p| !p.is_empty())).unwrap_or_default();
    let fallback = percent_decode(segment);
    Collection {
        url: with_trailing_slash(url),
        name: resource.displayname.clone().unwrap_or(fallback),
        read_only: resource.writable == Some(false),
    }
}

/// Collection URLs end in `/`, so that `join("event.ics")` lands inside them.
fn with_trailing_slash(url: &Url) -> Url {
    let mut url = url.clone();
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    url
}

fn percent_decode(segment: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", segment.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| segment.to_string())
}
