//! Reading a WebDAV `207 Multi-Status` answer (RFC 4918 §14.16) into entries: href, whether it is a
//! collection, length, last-modified and content type. Elements are matched by local name, so any
//! namespace prefix the server picks (`d:`, `D:`, none) works. A content type longer than any real
//! one is dropped (the file's extension then names its type): it reaches the tools' results as is.

use chrono::{DateTime, Utc};
use quick_xml::events::Event;

use crate::tools::files::FilesError;
use crate::tools::files::extract::push_entity;

/// The longest content type kept (RFC 6838 bounds a type and a subtype at 127 characters each; a
/// charset parameter fits too). A longer one is no real type, and the tools return it as it is:
/// it would crowd the text out of the result.
const MAX_CONTENT_TYPE_BYTES: usize = 255;

/// One `<response>` of a multistatus.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DavResource {
    /// As sent: an absolute path or a full URL, percent-encoded.
    pub href: String,
    pub is_collection: bool,
    pub length: Option<u64>,
    pub modified: Option<DateTime<Utc>>,
    pub content_type: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    None,
    Href,
    Length,
    Modified,
    ContentType,
}

/// Every `<response>` in `xml`.
pub fn parse(xml: &[u8]) -> Result<Vec<DavResource>, FilesError> {
    let mut reader = quick_xml::Reader::from_reader(xml);
    let mut resources = Vec::new();
    let mut current: Option<DavResource> = None;
    let mut field = Field::None;
    let mut text = String::new();
    let mut buf = Vec::new();
    loop {
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|_| FilesError::Malformed)?;
        match event {
            Event::Start(e) => match e.local_name().as_ref() {
                "response" => current = Some(DavResource::default()),
                "collection" => set_collection(&mut current),
                name => {
                    field = field_of(name);
                    text.clear();
                }
            },
            Event::Empty(e) if e.local_name().as_ref() == "collection" => {
                set_collection(&mut current)
            }
            Event::Text(t) if field != Field::None => text.push_str(&t.xml10_content()),
            Event::GeneralRef(r) if field != Field::None => {
                push_entity(&mut text, &r).map_err(|_| FilesError::Malformed)?;
            }
            Event::CData(t) if field != Field::None => text.push_str(&t),
            Event::End(e) => {
                let name = e.local_name();
                if name.as_ref() == "response" {
                    if let Some(done) = current.take().filter(|r| !r.href.is_empty()) {
                        resources.push(done);
                    }
                } else if let Some(resource) = current.as_mut()
                    && field != Field::None
                    && field_of(name.as_ref()) == field
                {
                    store(resource, field, text.trim());
                    field = Field::None;
                }
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    Ok(resources)
}

fn field_of(local_name: &str) -> Field {
    match local_name {
        "href" => Field::Href,
        "getcontentlength" | "size" => Field::Length,
        "getlastmodified" => Field::Modified,
        "getcontenttype" => Field::ContentType,
        _ => Field::None,
    }
}

fn set_collection(current: &mut Option<DavResource>) {
    if let Some(resource) = current.as_mut() {
        resource.is_collection = true;
    }
}

fn store(resource: &mut DavResource, field: Field, value: &str) {
    match field {
        // The first href of a response is the resource's own (propstat has none).
        Field::Href if resource.href.is_empty() => resource.href = value.to_string(),
        Field::Length => resource.length = resource.length.or(value.parse().ok()),
        Field::Modified => {
            resource.modified = DateTime::parse_from_rfc2822(value)
                .ok()
                .map(|t| t.with_timezone(&Utc));
        }
        Field::ContentType if !value.is_empty() && value.len() <= MAX_CONTENT_TYPE_BYTES => {
            resource.content_type = Some(value.to_string())
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_propfind_answer_with_any_prefix() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?>
<D:multistatus xmlns:D="DAV:">
 <D:response><D:href>/dav/</D:href><D:propstat><D:prop><D:resourcetype><D:collection/></D:resourcetype></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
 <D:response><D:href>/dav/Protocols/Diabetes%20%26%20insulin.pdf</D:href><D:propstat><D:prop>
   <D:resourcetype/><D:getcontentlength>1234</D:getcontentlength>
   <D:getlastmodified>Tue, 03 Mar 2026 10:00:00 GMT</D:getlastmodified>
   <D:getcontenttype>application/pdf</D:getcontenttype></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
 <response xmlns="DAV:"><href>/dav/a&amp;b.txt</href><propstat><prop><getcontentlength>7</getcontentlength></prop></propstat></response>
</D:multistatus>"#;
        let found = parse(xml).unwrap();
        assert_eq!(found.len(), 3);
        assert!(found[0].is_collection);
        assert_eq!(found[1].href, "/dav/Protocols/Diabetes%20%26%20insulin.pdf");
        assert_eq!(found[1].length, Some(1234));
        assert_eq!(found[1].content_type.as_deref(), Some("application/pdf"));
        assert_eq!(
            found[1].modified.map(|t| t.to_rfc3339()).as_deref(),
            Some("2026-03-03T10:00:00+00:00")
        );
        assert!(!found[1].is_collection);
        assert_eq!(found[2].href, "/dav/a&b.txt");
    }

    /// A broken or hostile server's content type of 40 KiB is not one: the extension's is used.
    #[test]
    fn an_overlong_content_type_is_dropped() {
        let answer = |content_type: &str| {
            let xml = format!(
                "<D:multistatus xmlns:D=\"DAV:\"><D:response><D:href>/dav/a.txt</D:href><D:propstat><D:prop>\
                 <D:getcontenttype>{content_type}</D:getcontenttype></D:prop></D:propstat></D:response></D:multistatus>"
            );
            parse(xml.as_bytes()).unwrap().remove(0).content_type
        };
        assert!(answer(&"x".repeat(40 * 1024)).is_none());
        let longest = format!("text/{}", "x".repeat(MAX_CONTENT_TYPE_BYTES - 5));
        assert_eq!(answer(&longest), Some(longest.clone()));
        assert_eq!(answer(&format!("{longest}x")), None);
    }

    #[test]
    fn broken_xml_is_malformed_not_a_panic() {
        assert!(matches!(
            parse(b"<D:multistatus xmlns:D=\"DAV:\"><D:response></D:oops>"),
            Err(FilesError::Malformed)
        ));
    }
}
