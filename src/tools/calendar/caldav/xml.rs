//! The WebDAV/CalDAV XML voxgate sends (PROPFIND and REPORT bodies) and reads (`207 Multi-Status`),
//! with quick-xml's namespace-aware reader: servers choose their own prefixes (`D:`, `d:`, a default
//! namespace), so elements are matched by namespace and local name, never by prefix.

use quick_xml::NsReader;
use quick_xml::escape::{escape, resolve_predefined_entity};
use quick_xml::events::Event;
use quick_xml::name::ResolveResult;

const DAV: &str = "DAV:";
const CALDAV: &str = "urn:ietf:params:xml:ns:caldav";

/// A `207 Multi-Status` body that is not well-formed XML (the parser's message quotes the input, so
/// only the fact is kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadXml;

/// The properties of one `<D:response>` that voxgate reads, from its `200 OK` propstats only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    pub href: String,
    pub displayname: Option<String>,
    /// `resourcetype` contains `C:calendar`.
    pub is_calendar: bool,
    /// `supported-calendar-component-set` (`VEVENT`, `VTODO`…); `None` when not reported, which
    /// RFC 4791 says means every component type.
    pub components: Option<Vec<String>>,
    pub current_user_principal: Option<String>,
    pub calendar_home_set: Option<String>,
    /// `current-user-privilege-set` grants writing (`write`, `bind`, `write-content` or `all`);
    /// `None` when not reported. Nextcloud's birthday calendar holds events but is read-only.
    pub writable: Option<bool>,
    pub calendar_data: Option<String>,
}

impl Resource {
    /// Can events be stored here?
    pub fn holds_events(&self) -> bool {
        self.is_calendar && self.components.as_ref().is_none_or(|c| c.iter().any(|n| n.eq_ignore_ascii_case("VEVENT")))
    }
}

/// PROPFIND body for discovery: everything needed to recognise a principal, a home set and calendars.
pub const PROPFIND_DISCOVERY: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<D:propfind xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">
  <D:prop>
    <D:resourcetype/>
    <D:displayname/>
    <D:current-user-principal/>
    <C:calendar-home-set/>
    <C:supported-calendar-component-set/>
    <D:current-user-privilege-set/>
  </D:prop>
</D:propfind>"#;

/// REPORT calendar-query for the VEVENTs overlapping `[start, end)` (UTC, `YYYYMMDDTHHMMSSZ`), as
/// stored: repeating events come as their series, which voxgate expands (see the module doc of
/// `caldav`).
pub fn calendar_query(start: &str, end: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="utf-8"?>
<C:calendar-query xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">
  <D:prop><D:getetag/><C:calendar-data/></D:prop>
  <C:filter><C:comp-filter name="VCALENDAR"><C:comp-filter name="VEVENT">
    <C:time-range start="{start}" end="{end}"/>
  </C:comp-filter></C:comp-filter></C:filter>
</C:calendar-query>"#
    )
}

/// REPORT calendar-query for the event with this UID.
pub fn uid_query(uid: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="utf-8"?>
<C:calendar-query xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">
  <D:prop><D:getetag/><C:calendar-data/></D:prop>
  <C:filter><C:comp-filter name="VCALENDAR"><C:comp-filter name="VEVENT">
    <C:prop-filter name="UID"><C:text-match collation="i;octet">{}</C:text-match></C:prop-filter>
  </C:comp-filter></C:comp-filter></C:filter>
</C:calendar-query>"#,
        escape(uid)
    )
}

/// Where the reader is inside the current `<D:response>`.
#[derive(Default)]
struct Current {
    resource: Resource,
    /// Properties of the propstat being read; merged when its status is 2xx.
    pending: Resource,
    propstat_ok: bool,
}

/// The responses of a `207 Multi-Status` body.
pub fn multistatus(xml: &str) -> Result<Vec<Resource>, BadXml> {
    let mut reader = NsReader::from_str(xml.trim_start_matches('\u{feff}'));
    reader.config_mut().expand_empty_elements = true;
    // (namespace is DAV:, is CalDAV, local name) of every open element.
    let mut stack: Vec<(Ns, String)> = Vec::new();
    let mut text = String::new();
    let mut current = Current::default();
    let mut found = Vec::new();
    loop {
        let (ns, event) = reader.read_resolved_event().map_err(|_| BadXml)?;
        let ns = Ns::of(&ns);
        match event {
            Event::Start(start) => {
                let name = start.local_name().as_ref().to_string();
                on_start(ns, &name, &stack, &mut current, &start);
                stack.push((ns, name));
                text.clear();
            }
            Event::Text(t) => text.push_str(&t.xml10_content()),
            Event::CData(c) => text.push_str(&c.into_inner()),
            Event::GeneralRef(r) => match r.resolve_char_ref().map_err(|_| BadXml)? {
                Some(c) => text.push(c),
                None => text.push_str(resolve_predefined_entity(&r.xml10_content()).ok_or(BadXml)?),
            },
            Event::End(_) => {
                on_end(&stack, &text, &mut current, &mut found);
                stack.pop();
                text.clear();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(found)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ns {
    Dav,
    Caldav,
    Other,
}

impl Ns {
    fn of(resolved: &ResolveResult<'_>) -> Ns {
        match resolved {
            ResolveResult::Bound(ns) if ns.as_ref() == DAV => Ns::Dav,
            ResolveResult::Bound(ns) if ns.as_ref() == CALDAV => Ns::Caldav,
            _ => Ns::Other,
        }
    }
}

fn on_start(
    ns: Ns,
    name: &str,
    stack: &[(Ns, String)],
    current: &mut Current,
    start: &quick_xml::events::BytesStart<'_>,
) {
    match (ns, name) {
        (Ns::Dav, "response") => *current = Current::default(),
        (Ns::Dav, "propstat") => {
            current.pending = Resource::default();
            current.propstat_ok = true;
        }
        (Ns::Caldav, "calendar") if parent_is(stack, Ns::Dav, "resourcetype") => current.pending.is_calendar = true,
        (Ns::Caldav, "supported-calendar-component-set") => current.pending.components = Some(Vec::new()),
        (Ns::Dav, "current-user-privilege-set") => current.pending.writable = Some(false),
        (Ns::Dav, "write" | "bind" | "write-content" | "all") if parent_is(stack, Ns::Dav, "privilege") => {
            current.pending.writable = Some(true);
        }
        (Ns::Caldav, "comp") if parent_is(stack, Ns::Caldav, "supported-calendar-component-set") => {
            let name = start
                .attributes()
                .flatten()
                .find(|a| a.key.local_name().as_ref() == "name")
                .map(|a| a.value.trim().to_string());
            if let (Some(name), Some(list)) = (name, current.pending.components.as_mut()) {
                list.push(name);
            }
        }
        _ => {}
    }
}

fn on_end(stack: &[(Ns, String)], text: &str, current: &mut Current, found: &mut Vec<Resource>) {
    let Some((ns, name)) = stack.last() else { return };
    let parent = stack.len().checked_sub(2).and_then(|i| stack.get(i));
    let parent = parent.map(|(ns, name)| (*ns, name.as_str()));
    match ((*ns, name.as_str()), parent) {
        ((Ns::Dav, "href"), Some((Ns::Dav, "response"))) => current.resource.href = text.trim().to_string(),
        ((Ns::Dav, "href"), Some((Ns::Dav, "current-user-principal"))) => {
            current.pending.current_user_principal = Some(text.trim().to_string());
        }
        ((Ns::Dav, "href"), Some((Ns::Caldav, "calendar-home-set"))) => {
            // The first home set is the one to use (servers list one).
            current.pending.calendar_home_set.get_or_insert_with(|| text.trim().to_string());
        }
        ((Ns::Dav, "displayname"), _) => {
            current.pending.displayname = Some(text.trim().to_string()).filter(|t| !t.is_empty());
        }
        ((Ns::Caldav, "calendar-data"), _) => current.pending.calendar_data = Some(text.to_string()),
        ((Ns::Dav, "status"), Some((Ns::Dav, "propstat"))) => current.propstat_ok = status_ok(text),
        ((Ns::Dav, "propstat"), _) if current.propstat_ok => {
            merge(&mut current.resource, std::mem::take(&mut current.pending))
        }
        ((Ns::Dav, "response"), _) => found.push(std::mem::take(&mut current.resource)),
        _ => {}
    }
}

fn parent_is(stack: &[(Ns, String)], ns: Ns, name: &str) -> bool {
    stack.last().is_some_and(|(n, l)| *n == ns && l == name)
}

/// `HTTP/1.1 200 OK` and the like.
fn status_ok(line: &str) -> bool {
    line.split_whitespace().nth(1).is_some_and(|code| code.starts_with('2'))
}

fn merge(into: &mut Resource, from: Resource) {
    into.displayname = into.displayname.take().or(from.displayname);
    into.is_calendar |= from.is_calendar;
    into.components = into.components.take().or(from.components);
    into.current_user_principal = into.current_user_principal.take().or(from.current_user_principal);
    into.calendar_home_set = into.calendar_home_set.take().or(from.calendar_home_set);
    into.calendar_data = into.calendar_data.take().or(from.calendar_data);
    into.writable = into.writable.or(from.writable);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_home_set_listing_with_any_prefixes() {
        let body = r#"<?xml version="1.0"?>
<multistatus xmlns="DAV:" xmlns:cal="urn:ietf:params:xml:ns:caldav">
 <response><href>/alice/</href>
  <propstat><prop><resourcetype><collection/></resourcetype></prop><status>HTTP/1.1 200 OK</status></propstat>
  <propstat><prop><displayname/></prop><status>HTTP/1.1 404 Not Found</status></propstat>
 </response>
 <response><href>/alice/clinic/</href>
  <propstat><prop><resourcetype><collection/><cal:calendar/></resourcetype><displayname>Clinic &amp; Ward</displayname>
   <cal:supported-calendar-component-set><cal:comp name="VEVENT"/><cal:comp name="VTODO"/></cal:supported-calendar-component-set>
  </prop><status>HTTP/1.1 200 OK</status></propstat>
 </response>
 <response><href>/alice/tasks/</href>
  <propstat><prop><resourcetype><collection/><cal:calendar/></resourcetype>
   <cal:supported-calendar-component-set><cal:comp name="VTODO"/></cal:supported-calendar-component-set>
  </prop><status>HTTP/1.1 200 OK</status></propstat>
 </response>
</multistatus>"#;
        let found = multistatus(body).unwrap();
        assert_eq!(found.len(), 3);
        assert!(!found[0].is_calendar);
        assert_eq!(found[1].href, "/alice/clinic/");
        assert_eq!(found[1].displayname.as_deref(), Some("Clinic & Ward"));
        assert!(found[1].holds_events());
        assert!(found[2].is_calendar && !found[2].holds_events());
    }

    #[test]
    fn reads_principal_home_set_and_calendar_data() {
        let body = "<d:multistatus xmlns:d=\"DAV:\" xmlns:c=\"urn:ietf:params:xml:ns:caldav\"><d:response><d:href>/dav/</d:href>\
            <d:propstat><d:prop><d:current-user-principal><d:href>/dav/principals/alice/</d:href></d:current-user-principal>\
            <c:calendar-home-set><d:href>/dav/calendars/alice/</d:href></c:calendar-home-set>\
            <c:calendar-data>BEGIN:VCALENDAR&#13;\nEND:VCALENDAR&#13;\n</c:calendar-data></d:prop>\
            <d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response></d:multistatus>";
        let found = multistatus(body).unwrap();
        assert_eq!(found[0].current_user_principal.as_deref(), Some("/dav/principals/alice/"));
        assert_eq!(found[0].calendar_home_set.as_deref(), Some("/dav/calendars/alice/"));
        assert_eq!(found[0].calendar_data.as_deref(), Some("BEGIN:VCALENDAR\r\nEND:VCALENDAR\r\n"));
    }

    #[test]
    fn reads_write_privileges_as_nextcloud_reports_them() {
        let body = r#"<?xml version="1.0"?>
<d:multistatus xmlns:d="DAV:" xmlns:s="http://sabredav.org/ns" xmlns:cal="urn:ietf:params:xml:ns:caldav" xmlns:nc="http://nextcloud.org/ns">
 <d:response><d:href>/remote.php/dav/calendars/alice/contact_birthdays/</d:href>
  <d:propstat><d:prop><d:resourcetype><d:collection/><cal:calendar/></d:resourcetype><d:displayname>Contact birthdays</d:displayname>
   <d:current-user-privilege-set><d:privilege><d:read/></d:privilege><d:privilege><d:read-acl/></d:privilege></d:current-user-privilege-set>
  </d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat>
 </d:response>
 <d:response><d:href>/remote.php/dav/calendars/alice/personal/</d:href>
  <d:propstat><d:prop><d:resourcetype><d:collection/><cal:calendar/></d:resourcetype><d:displayname>Personal</d:displayname>
   <d:current-user-privilege-set><d:privilege><d:write/></d:privilege><d:privilege><d:read/></d:privilege></d:current-user-privilege-set>
  </d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat>
 </d:response>
 <d:response><d:href>/remote.php/dav/calendars/alice/trashbin/</d:href>
  <d:propstat><d:prop><d:resourcetype><d:collection/><nc:trash-bin/></d:resourcetype></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat>
 </d:response>
</d:multistatus>"#;
        let found = multistatus(body).unwrap();
        assert_eq!(found.iter().map(|r| r.writable).collect::<Vec<_>>(), [Some(false), Some(true), None]);
        assert_eq!(found.iter().map(Resource::holds_events).collect::<Vec<_>>(), [true, true, false]);
    }

    #[test]
    fn broken_xml_is_an_error_and_uids_are_escaped() {
        assert!(multistatus("<a><b></a>").is_err());
        assert!(uid_query("a<b>&c").contains("a&lt;b&gt;&amp;c"));
    }
}
