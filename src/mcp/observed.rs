//! What one connection's transport sees on its way through: the messages a server sends are read
//! here, one at a time and in the order the server sent them, before rmcp acts on them.
//!
//! Two things must be learnt at that point and not later:
//! - **Progress** ([`ProgressRoutes`]): rmcp hands each notification to a task of its own but a
//!   call's answer straight to its caller, so a caller can have its answer, and end its progress
//!   route, before the tasks that carry the server's earlier progress have run. CI saw it: a
//!   server's last two progress reports and its answer read in one go, the call ended first, and
//!   the page never got the last progress voxgate promises. Delivered as it is read, a
//!   notification reaches its call's route before the answer that followed it is even read.
//! - **Answers** ([`Answers`]): the liveness check counts every answer the server gives.

use std::sync::Arc;

use rmcp::model::{JsonRpcMessage, ServerNotification};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use super::liveness::Answers;
use super::progress::ProgressRoutes;

/// A connection's transport that tells its [`Answers`] and its [`ProgressRoutes`] what passes.
pub(super) struct Observed<T> {
    inner: T,
    answers: Answers,
    progress: Arc<ProgressRoutes>,
}

impl<T> Observed<T> {
    pub fn new(inner: T, answers: Answers, progress: Arc<ProgressRoutes>) -> Self {
        Self { inner, answers, progress }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Observed<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.answers.sent(&item);
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        self.answers.received(&message);
        if let JsonRpcMessage::Notification(notification) = &message
            && let ServerNotification::ProgressNotification(progress) = &notification.notification
        {
            // rmcp's own handling of the notification goes on (its progress timeouts use it);
            // the client handler leaves progress alone.
            self.progress.deliver(progress.params.clone());
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use rmcp::ServiceExt;
    use rmcp::model::{CallToolRequestParams, ClientRequest, Request};
    use rmcp::service::PeerRequestOptions;
    use rmcp::transport::IntoTransport;
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::sync::mpsc;

    use super::*;
    use crate::mcp::link::LinkHandler;
    use crate::mcp::progress::tests::recording_sink;

    /// A server on the other end of `stream` that answers the handshake, and answers each
    /// `tools/call` with three progress notifications and its result in one write: what a client
    /// reads in one go when it was busy while the server worked.
    async fn burst_server(stream: tokio::io::DuplexStream) {
        let (read, mut write) = tokio::io::split(stream);
        let mut lines = BufReader::new(read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let request: Value = serde_json::from_str(&line).unwrap();
            let id = &request["id"];
            let reply = match request["method"].as_str() {
                Some("initialize") => json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": request["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "burst", "version": "1"}}})
                .to_string(),
                Some("tools/call") => {
                    let token = &request["params"]["_meta"]["progressToken"];
                    let mut burst: Vec<String> = (1..=3)
                        .map(|step| {
                            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                                "params": {"progressToken": token, "progress": step, "total": 3}})
                            .to_string()
                        })
                        .collect();
                    burst.push(json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}}).to_string());
                    burst.join("\n")
                }
                _ => continue,
            };
            write.write_all(format!("{reply}\n").as_bytes()).await.unwrap();
        }
    }

    /// On a multi-threaded runtime the caller woken by its answer runs before the tasks rmcp
    /// spawned for the notifications read just before it; each call here checks that its route
    /// had every progress the server sent before the answer when the call ended.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn progress_read_with_the_answer_reaches_the_call_before_it_ends() {
        let (client_end, server_end) = tokio::io::duplex(1 << 16);
        tokio::spawn(burst_server(server_end));
        let progress = Arc::new(ProgressRoutes::default());
        let (list_changed, _changes) = mpsc::channel(1);
        let handler = LinkHandler { list_changed };
        let transport = IntoTransport::<RoleClient, std::io::Error, _>::into_transport(client_end);
        let client = handler.serve(Observed::new(transport, Answers::default(), progress.clone())).await.unwrap();
        for _ in 0..20 {
            let request = ClientRequest::CallToolRequest(Request::new(CallToolRequestParams::new("count")));
            // As `adapter` calls a tool: send, route the request's token, wait, end the route.
            let handle = client.peer().send_request_with_option(request, PeerRequestOptions::no_options()).await.unwrap();
            let (sink, seen) = recording_sink();
            let route = progress.route(handle.progress_token.clone(), Some(sink));
            handle.await_response().await.unwrap();
            drop(route);
            // The first at once, the last when the call ends, in order (the second is coalesced
            // away unless the machine took longer than a slot between the two).
            let seen = seen.lock().unwrap().clone();
            assert_eq!((seen.first(), seen.last()), (Some(&1.0), Some(&3.0)), "{seen:?}");
            assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
        }
    }
}
