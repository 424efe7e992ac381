//! The whole instrument in miniature, in-process: echo and bare relay (two threads) on loopback,
//! three sessions for half a second, then three tool calls answered by the client. Cheap enough
//! for the test suite; the real measurement is `bench run`. Like `bench run --quick` it judges
//! behaviour only (sessions alive, every frame back, calls answered), never a timing: two loaded
//! CPUs can stall the generator for tens of milliseconds at any edge of the window.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::clock::Clock;
use crate::frames::AppendTemplate;
use crate::load::{self, PhasePlan, Probe};
use crate::{client, echo, relay, tools};

async fn bind() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/v1/realtime", listener.local_addr().unwrap());
    (listener, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_come_back_through_the_relay_and_tool_calls_are_timed() {
    let (echo_listener, echo_url) = bind().await;
    tokio::spawn(echo::serve(echo_listener));
    let (relay_listener, relay_url) = bind().await;
    tokio::spawn(relay::serve(relay_listener, echo_url.clone(), 2));

    let plan = PhasePlan {
        warmup: Duration::from_millis(100),
        measure: Duration::from_millis(400),
        template: Arc::new(AppendTemplate::new(1920)),
        epoch: std::time::Instant::now(),
        clock: Clock::Spread,
    };
    let sessions = client::open_many(&relay_url, 3, 3).await.unwrap();
    let probe = Probe { name: "load generator".into(), pid: std::process::id() };
    let result = load::run(sessions, &plan, &[probe]).await.unwrap();
    assert_eq!(result.failed_sessions, 0);
    // How many frames fall in the window depends on when the generator got the CPU: only that
    // some did, and that every one came back (late or not, within load.rs's 30 s).
    assert!(result.sent > 0);
    assert_eq!(result.received + result.late, result.sent);
    assert_eq!(result.rtt_us.len() as u64, result.received + result.late);
    assert!(result.probes[0].rss_end > 0);

    let ws = client::open(&echo_url, Duration::from_secs(5)).await.unwrap();
    let times = tools::run(ws, 3, true, Duration::from_millis(1)).await.unwrap();
    assert_eq!(times.us.len(), 3);
    assert_eq!(times.not_ok, 0);
}
