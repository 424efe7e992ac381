//! One task per MCP server: connect, list the allowed tools, follow `tools/list_changed`, and when
//! the connection ends (a stdio child that exits or crashes, an HTTP server that goes away) take the
//! server's tools out of the catalogue and reconnect with exponential back-off and jitter
//! ([`backoff`](super::backoff): it starts over only after a connection proved healthy, never
//! merely because `initialize` succeeded).
//!
//! A stdio server is a child process in a process group of its own ([`stdio`](super::stdio)): its
//! transport kills the group when the connection ends, before it reaps the server, so neither the
//! server nor what its wrapper started outlives its connection or voxgate. A connected server that
//! stops answering `ping` ([`liveness`](super::liveness)) counts as lost.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rand::Rng;
use rmcp::ServiceExt;
use rmcp::model::{ClientRequest, ListToolsRequest, PaginatedRequestParams, ServerResult};
use rmcp::service::{PeerRequestOptions, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::McpHub;
use super::adapter;
use super::backoff::Backoff;
use super::link::{Connection, LinkHandler, LinkState, ServerLink};
use super::liveness::{Answers, Liveness};
use super::observed::Observed;
use super::progress::ProgressRoutes;
use super::stdio;

/// Bound on connecting (spawn or HTTP, plus the MCP `initialize` exchange) and on the first page
/// of a tool listing.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Time spent reading the pages of a tool listing after its first: within [`MAX_LIST_PAGES`], a
/// slow server would otherwise keep voxgate listing for minutes. Real servers answer a page in
/// milliseconds.
const LIST_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait of rmcp's HTTP client between attempts to reopen a server's event stream (its
/// default doubles without bound). Whether the server is there at all is [`Liveness`]'s call.
const HTTP_RETRY_MAX: Duration = Duration::from_secs(30);
/// Pages of `tools/list` followed at most: real servers list their tools in one page or a few, and
/// a server that keeps answering with a `nextCursor` must not keep voxgate listing.
const MAX_LIST_PAGES: usize = 64;
/// Tools listed at most, over all pages, allowed or not.
const MAX_LISTED_TOOLS: usize = 4096;
/// Bound on the end of a connection when voxgate stops: a stdio server's close takes at most a
/// few seconds (stdio.rs); an HTTP server's goodbye is not worth holding the shutdown for.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

type Client = RunningService<RoleClient, LinkHandler>;

/// Why a connection attempt failed, in terms safe for logs and `/admin/tools` (no paths, hosts or
/// server output).
#[derive(Debug, Clone, Copy, thiserror::Error)]
enum ConnectError {
    #[error("the server process could not be started")]
    Spawn,
    #[error("the server could not be reached")]
    Unreachable,
    #[error("the MCP handshake failed")]
    Handshake,
    #[error("the server did not answer in time")]
    Timeout,
    #[error("listing the server's tools failed")]
    ListTools,
    #[error("the connection ended")]
    Ended,
    #[error("the server stopped answering")]
    Unresponsive,
}

/// Run `link`'s server until `stop` is cancelled or the hub is gone.
pub(super) async fn supervise(link: Arc<ServerLink>, hub: Weak<McpHub>, stop: CancellationToken, liveness: Liveness) {
    let mut backoff = Backoff::default();
    loop {
        let (list_changed, mut changes) = mpsc::channel(1);
        // This connection's own: its progress tokens mean nothing on any other.
        let progress = Arc::new(ProgressRoutes::default());
        let handler = LinkHandler { list_changed };
        let answers = Answers::default();
        // Cancelling it ends this connection (and kills a stdio child).
        let closed = stop.child_token();
        let attempt = tokio::select! {
            _ = stop.cancelled() => return,
            attempt = tokio::time::timeout(CONNECT_TIMEOUT, connect(&link, handler, closed.clone(), &answers, &progress)) => attempt.unwrap_or(Err(ConnectError::Timeout)),
        };
        match attempt {
            // A stdio server's group is killed by its transport when the connection ends.
            Ok(client) => {
                tracing::info!(server = %link.name, "MCP server connected");
                let peer = client.peer().clone();
                let mut running = std::pin::pin!(client.waiting());
                let mut listed = refresh(&link, &hub, &peer).await;
                link.peer.send_replace(Some(Connection { peer: peer.clone(), progress: progress.clone() }));
                link.health.send_modify(|h| {
                    h.state = LinkState::Up;
                    h.last_error = None;
                });
                let start = tokio::time::Instant::now() + liveness.every;
                let mut pings = tokio::time::interval_at(start, liveness.every);
                let mut missed = 0;
                pings.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let lost = loop {
                    match std::mem::replace(&mut listed, Ok(())) {
                        Ok(()) => backoff.listed(tokio::time::Instant::now()),
                        Err(err) => {
                            tracing::warn!(server = %link.name, error = %err, "MCP server tools could not be listed; reconnecting");
                            closed.cancel();
                        }
                    }
                    tokio::select! {
                        _ = stop.cancelled() => {
                            closed.cancel();
                            if tokio::time::timeout(STOP_TIMEOUT, running).await.is_err() {
                                tracing::warn!(server = %link.name, "MCP connection did not end in time at shutdown");
                            }
                            return;
                        }
                        Some(()) = changes.recv() => listed = refresh(&link, &hub, &peer).await,
                        _ = pings.tick() => {
                            let ping = tokio::select! {
                                _ = stop.cancelled() => continue,
                                ping = liveness.ping(&peer, &answers) => ping,
                            };
                            missed = ping.missed_after(missed, progress.calls_running());
                            if missed >= super::liveness::MISSES {
                                // Not waited for: a dead HTTP server would hold up the ending
                                // connection's goodbye; it winds down on its own once dropped.
                                closed.cancel();
                                break ConnectError::Unresponsive;
                            }
                        }
                        _ = &mut running => break ConnectError::Ended,
                    }
                };
                link.peer.send_replace(None);
                publish(&link, &hub, Vec::new());
                link.health.send_modify(|h| {
                    h.state = LinkState::Down;
                    h.restarts += 1;
                    h.last_error = Some(lost.to_string());
                });
                tracing::warn!(server = %link.name, error = %lost, "MCP server connection lost; restarting");
            }
            Err(err) => {
                tracing::warn!(server = %link.name, error = %err, "MCP server connection failed; retrying");
                link.health.send_modify(|h| {
                    h.state = LinkState::Down;
                    h.last_error = Some(err.to_string());
                });
            }
        }
        if hub.strong_count() == 0 {
            return;
        }
        let wait = backoff.next_wait(tokio::time::Instant::now());
        let jitter = rand::rng().random_range(0..=wait.as_millis() as u64 / 4);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait + Duration::from_millis(jitter)) => {}
        }
    }
}

/// A connection to `link`'s server; the server's answers are counted in `answers`, its progress
/// goes to `progress`.
async fn connect(
    link: &ServerLink,
    handler: LinkHandler,
    closed: CancellationToken,
    answers: &Answers,
    progress: &Arc<ProgressRoutes>,
) -> Result<Client, ConnectError> {
    let config = &link.config;
    match &config.url {
        Some(url) => {
            let headers: HashMap<http::HeaderName, http::HeaderValue> = config
                .headers
                .iter()
                .filter_map(|(name, value)| {
                    // Both were checked when the config was loaded.
                    Some((
                        http::HeaderName::from_bytes(name.as_bytes()).ok()?,
                        http::HeaderValue::from_str(value.expose()).ok()?,
                    ))
                })
                .collect();
            let http = reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .build()
                .map_err(|_| ConnectError::Unreachable)?;
            let mut retry = ExponentialBackoff::default();
            retry.max_delay = Some(HTTP_RETRY_MAX);
            let mut transport_config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(headers);
            transport_config.retry_config = Arc::new(retry);
            let transport = StreamableHttpClientTransport::with_client(http, transport_config);
            let client = handler
                .serve_with_ct(Observed::new(transport, answers.clone(), progress.clone()), closed)
                .await
                .map_err(|_| ConnectError::Handshake)?;
            Ok(client)
        }
        None => {
            // Should the handshake fail or this future be dropped (timeout, stop), the transport
            // is dropped and kills the group.
            let transport = stdio::spawn(config).map_err(|_| ConnectError::Spawn)?;
            handler.serve_with_ct(Observed::new(transport, answers.clone(), progress.clone()), closed).await.map_err(|_| ConnectError::Handshake)
        }
    }
}

/// List the server's tools and publish the allowed ones.
async fn refresh(
    link: &Arc<ServerLink>,
    hub: &Weak<McpHub>,
    peer: &rmcp::service::Peer<RoleClient>,
) -> Result<(), ConnectError> {
    let listed = list_allowed(link, peer).await?;
    let tools: Vec<_> = listed.tools.iter().filter_map(|tool| adapter::register(link, tool)).collect();
    for allowed in link.names.keys() {
        if listed.tools.iter().any(|t| t.name.as_ref() == allowed.as_str()) {
            continue;
        }
        if listed.cut_off {
            tracing::info!(
                server = %link.name,
                tool = %allowed,
                "allowed MCP tool is not among the tools listed within voxgate's bounds"
            );
        } else {
            tracing::info!(server = %link.name, tool = %allowed, "allowed MCP tool is not offered by the server");
        }
    }
    publish(link, hub, tools);
    Ok(())
}

/// What one listing found.
struct Listed {
    /// The allowed tools listed (the first of a name).
    tools: Vec<rmcp::model::Tool>,
    /// The listing went on past [`MAX_LIST_PAGES`], [`MAX_LISTED_TOOLS`] or [`LIST_TIMEOUT`] and was
    /// cut off there.
    cut_off: bool,
}

/// The allowed tools the server lists, paging through `tools/list` until every allowed tool has
/// been seen or the listing ends, within [`MAX_LIST_PAGES`], [`MAX_LISTED_TOOLS`] and, after the
/// first page, [`LIST_TIMEOUT`]. A listing that goes on longer is cut off at the bound, with a
/// warning, and what was found within it stands: restarting the server would list the same again.
/// A server that does not answer the first page within [`CONNECT_TIMEOUT`] has not listed
/// anything, and fails like one that cannot be reached. Only allowed tools are kept, so what is
/// held while listing stays small however much the server lists.
async fn list_allowed(
    link: &ServerLink,
    peer: &rmcp::service::Peer<RoleClient>,
) -> Result<Listed, ConnectError> {
    let mut allowed: Vec<rmcp::model::Tool> = Vec::new();
    let mut listed = 0;
    let mut cursor = None;
    let mut pages = 0;
    let mut deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
    let bound = loop {
        if pages == MAX_LIST_PAGES {
            break "pages";
        }
        pages += 1;
        let params = cursor.take().map(|cursor| PaginatedRequestParams::default().with_cursor(Some(cursor)));
        // Sent as a plain request: `Peer::list_tools` keeps pages a server marks cacheable in
        // rmcp's response cache, outside these bounds.
        let request = ClientRequest::ListToolsRequest(ListToolsRequest { params, ..Default::default() });
        let page = match tokio::time::timeout_at(deadline, request_page(peer, request)).await {
            Ok(Ok(ServerResult::ListToolsResult(page))) => page,
            Ok(_) => return Err(ConnectError::ListTools),
            Err(_) if pages == 1 => return Err(ConnectError::Timeout),
            // Given up unanswered: the page is cancelled at the server (`request_page`).
            Err(_) => break "time",
        };
        if pages == 1 {
            deadline = tokio::time::Instant::now() + LIST_TIMEOUT;
        }
        let room = MAX_LISTED_TOOLS - listed;
        let over = page.tools.len() > room;
        listed += page.tools.len().min(room);
        for tool in page.tools.into_iter().take(room) {
            if link.names.contains_key(tool.name.as_ref()) && !allowed.iter().any(|t| t.name == tool.name) {
                allowed.push(tool);
            }
        }
        // `allowed` holds each allowed name once: once all are there, later pages cannot matter.
        if allowed.len() == link.names.len() {
            return Ok(Listed { tools: allowed, cut_off: false });
        }
        if over {
            break "tools";
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(Listed { tools: allowed, cut_off: false }),
        }
    };
    // Once per listing, and counts only: nothing the server sent is logged.
    tracing::warn!(
        server = %link.name,
        bound,
        max_pages = MAX_LIST_PAGES,
        max_tools = MAX_LISTED_TOOLS,
        max_secs = LIST_TIMEOUT.as_secs(),
        allowed_found = allowed.len(),
        allowed = link.names.len(),
        "MCP server's tool list is longer than voxgate reads; only the allowed tools found within the bound are offered"
    );
    Ok(Listed { tools: allowed, cut_off: true })
}

/// One page of a listing. A page the listing stops waiting for (its time bound) is cancelled at the
/// server: dropped unannounced, it would stay among rmcp's pending requests until the server
/// answered, one more at each listing cut off while the connection lasts, and the server would
/// keep working on it.
async fn request_page(
    peer: &rmcp::service::Peer<RoleClient>,
    request: ClientRequest,
) -> Result<ServerResult, rmcp::ServiceError> {
    let handle = peer.send_request_with_option(request, PeerRequestOptions::no_options()).await?;
    let mut cancel = adapter::CancelOnDrop::new(peer, handle.id.clone());
    let answer = handle.await_response().await;
    cancel.disarm();
    answer
}

fn publish(link: &ServerLink, hub: &Weak<McpHub>, tools: Vec<Arc<crate::tools::registry::RegisteredTool>>) {
    let count = match hub.upgrade() {
        Some(hub) => hub.set_server_tools(&link.name, tools),
        None => tools.len(),
    };
    link.health.send_modify(|h| h.tools = count);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::mcp::{McpConfig, McpServerConfig};
    use crate::tools::registry::ToolRegistry;

    /// A stdio "server" that completes the MCP handshake and then exits: it echoes the id of
    /// `initialize`, reads `notifications/initialized` and is gone before `tools/list`.
    const DIES_AFTER_INITIALIZE: &str = r#"read -r line
id=$(printf '%s' "$line" | sed 's/.*"id":\([0-9]*\).*/\1/')
printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-03-26","capabilities":{"tools":{}},"serverInfo":{"name":"dies","version":"1"}}}\n' "$id"
read -r line"#;

    /// Real processes and real time: the bug was in the wiring, which a test of [`Backoff`]
    /// alone cannot see. Before the fix the back-off started over on every successful
    /// `initialize`, so this server was restarted every ~0.3 s (about 10 times in 3 s).
    #[tokio::test]
    async fn a_server_that_dies_after_initialize_is_restarted_with_growing_waits() {
        let server = McpServerConfig {
            command: vec!["sh".into(), "-c".into(), DIES_AFTER_INITIALIZE.into()],
            ..Default::default()
        };
        let config = McpConfig { connect_timeout_ms: 10_000, servers: BTreeMap::from([("dies".to_string(), server)]) };
        let hub = McpHub::start(&config, &crate::mcp::intern_names(&config), Arc::new(ToolRegistry::default())).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let restarts = hub.health()[0].restarts;
        // Waits of 250, 500, 1000, 2000 ms (+ up to 25 % jitter): at most 4 lost connections
        // within 3 s, one more allowed for a slow machine.
        assert!((2..=5).contains(&restarts), "{restarts} restarts in 3 s");
    }
}
