//! Who is calling, for the audit log (HIPAA §164.312(b) access reviews): the client's address and
//! user agent. The address is the TCP peer's, unless that peer is in `server.trusted_proxies`
//! (addresses or networks): then `X-Forwarded-For` is read from the right, skipping trusted
//! proxies, and the first other address is the client. A header from anyone else is ignored, so a
//! client cannot forge it.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use axum::extract::ConnectInfo;
use axum::http::{Extensions, HeaderMap, header};

use crate::audit::Origin;

/// The client's address, as the audit log records it.
pub fn client_addr(
    trusted: &[IpNet],
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
) -> Option<String> {
    let peer = peer?.ip().to_canonical();
    let is_trusted = |ip: &IpAddr| is_trusted(trusted, ip);
    if !is_trusted(&peer) {
        return Some(peer.to_string());
    }
    let forwarded = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect::<Vec<_>>();
    let client = forwarded
        .iter()
        .rev()
        .map(|hop| hop.parse::<IpAddr>())
        .find(|hop| hop.as_ref().map_or(true, |ip| !is_trusted(ip)));
    match client {
        Some(Ok(ip)) => Some(ip.to_string()),
        // A hop that is not an address: the chain cannot be trusted past it; record the proxy.
        Some(Err(_)) | None => Some(peer.to_string()),
    }
}

/// Whether `ip` is in `server.trusted_proxies` (the listener lets these hold more connections).
pub(crate) fn is_trusted(trusted: &[IpNet], ip: &IpAddr) -> bool {
    // An IPv4 peer on a dual-stack listener arrives as `::ffff:a.b.c.d`.
    let ip = ip.to_canonical();
    trusted.iter().any(|net| net.contains(&ip))
}

/// Who and from where, for a request's records (`admin` for the admin API).
pub fn origin(
    trusted: &[IpNet],
    extensions: &Extensions,
    headers: &HeaderMap,
    admin: bool,
) -> Origin {
    let peer = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| *addr);
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    Origin::new(client_addr(trusted, peer, headers), user_agent, admin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(xff: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", xff.parse().unwrap());
        h
    }

    #[test]
    fn forwarded_for_counts_only_behind_a_trusted_proxy() {
        let proxy: IpNet = "10.0.0.1/32".parse().unwrap();
        let peer = Some(SocketAddr::new(proxy.addr(), 4000));
        let stranger = Some("192.0.2.9:4000".parse().unwrap());
        assert_eq!(
            client_addr(&[proxy], peer, &headers("203.0.113.5")).as_deref(),
            Some("203.0.113.5")
        );
        // A client-supplied first hop is skipped: the rightmost untrusted hop is the client.
        assert_eq!(
            client_addr(&[proxy], peer, &headers("1.1.1.1, 203.0.113.5, 10.0.0.1")).as_deref(),
            Some("203.0.113.5")
        );
        assert_eq!(
            client_addr(&[], peer, &headers("203.0.113.5")).as_deref(),
            Some("10.0.0.1")
        );
        assert_eq!(
            client_addr(&[proxy], stranger, &headers("203.0.113.5")).as_deref(),
            Some("192.0.2.9")
        );
        assert_eq!(
            client_addr(&[proxy], peer, &headers("not-an-ip")).as_deref(),
            Some("10.0.0.1")
        );
        assert_eq!(
            client_addr(&[proxy], peer, &HeaderMap::new()).as_deref(),
            Some("10.0.0.1")
        );
        assert_eq!(client_addr(&[proxy], None, &HeaderMap::new()), None);
    }

    /// An ingress controller's pods change addresses within their network: a network is trusted
    /// as a whole, and so is an IPv4 peer seen on a dual-stack listener as `::ffff:a.b.c.d`.
    #[test]
    fn a_trusted_network_covers_every_proxy_in_it() {
        let pods: IpNet = "10.42.0.0/16".parse().unwrap();
        let forwarded = headers("203.0.113.5, 10.42.7.3");
        for peer in ["10.42.9.1:4000", "[::ffff:10.42.9.1]:4000"] {
            let peer = Some(peer.parse().unwrap());
            assert_eq!(client_addr(&[pods], peer, &forwarded).as_deref(), Some("203.0.113.5"), "{peer:?}");
        }
        let outside = Some("10.43.0.1:4000".parse().unwrap());
        assert_eq!(client_addr(&[pods], outside, &forwarded).as_deref(), Some("10.43.0.1"));
    }
}
