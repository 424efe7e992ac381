//! How a phase's sessions are spread over the server's threads. voxgate places each connection on
//! the least-loaded of its session threads and exports the counts as
//! `voxgate_session_thread_connections{thread="i"}` on `/metrics` (same listener); the bare relay
//! answers its own under [`crate::relay::THREAD_SERIES`]. Before c20eab0 voxgate put most sessions
//! on thread 0 and nothing in the bench could see it (rev22): the counts are now read after the
//! sessions are open, kept in the report, and an uneven spread is a warning (a fault of placement,
//! not a timing, so it is reported, never an exit failure).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// voxgate's series.
pub const VOXGATE_SERIES: &str = "voxgate_session_thread_connections";

/// `GET /metrics` on `addr` and the per-thread counts of `series`, in thread order. The scrape's
/// own connection is counted in them, on one thread.
pub async fn scrape(addr: SocketAddr, series: &str) -> anyhow::Result<Vec<i64>> {
    let text = tokio::time::timeout(Duration::from_secs(10), get_metrics(addr)).await.context("metrics scrape timed out")??;
    let counts = parse(&text, series);
    if counts.is_empty() {
        bail!("no {series} in the metrics");
    }
    Ok(counts)
}

async fn get_metrics(addr: SocketAddr) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect(addr).await.context("metrics connect")?;
    let request = format!("GET /metrics HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.context("metrics request")?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.context("metrics answer")?;
    let answer = String::from_utf8_lossy(&answer);
    let Some((head, body)) = answer.split_once("\r\n\r\n") else { bail!("no HTTP answer") };
    if !head.starts_with("HTTP/1.1 200") {
        bail!("metrics answered {}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_string())
}

/// The values of `series{thread="i"}` lines, by index (a thread without a line counts 0).
pub fn parse(text: &str, series: &str) -> Vec<i64> {
    let mut counts: Vec<i64> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(series).and_then(|r| r.strip_prefix('{')) else { continue };
        let Some((labels, value)) = rest.split_once('}') else { continue };
        let thread = labels.split(',').find_map(|l| l.trim().strip_prefix("thread=\"")?.strip_suffix('"')?.parse::<usize>().ok());
        let value = value.split_whitespace().next().and_then(|v| v.parse::<f64>().ok());
        let (Some(thread), Some(value)) = (thread, value) else { continue };
        if counts.len() <= thread {
            counts.resize(thread + 1, 0);
        }
        counts[thread] = value as i64;
    }
    counts
}

/// The scraped counts less the scrape's own connection. Both servers place a connection on the
/// first of the least-loaded threads; after sessions spread that way, the scrape's thread is the
/// last of the largest counts (1 session on 2 threads: `[1, 0]`, then `[1, 1]`): taken off there.
/// Which thread it was cannot be known for sure, but the counts' spread, which is what is judged,
/// is the same either way.
pub fn without_scrape(scraped: &[i64]) -> Vec<i64> {
    let mut counts = scraped.to_vec();
    // `max_by_key` returns the last of equal maxima.
    if let Some(top) = counts.iter().enumerate().max_by_key(|&(_, n)| *n).map(|(i, _)| i)
        && counts[top] > 0
    {
        counts[top] -= 1;
    }
    counts
}

/// Why `counts` (the scrape's own connection taken off) is not an even spread of `sessions`
/// sessions, ±1 beyond it; `None` when it is.
pub fn imbalance(counts: &[i64], sessions: usize) -> Option<String> {
    let threads = counts.len().max(1) as i64;
    let n = sessions as i64;
    let (low, high) = (n / threads - 1, (n + threads - 1) / threads + 1);
    let total: i64 = counts.iter().sum();
    if total != n {
        return Some(format!("{total} sessions counted on the threads, {n} open ({counts:?})"));
    }
    counts
        .iter()
        .any(|&c| c < low || c > high)
        .then(|| format!("sessions per thread {counts:?}, an even spread of {n} over {threads} is {}–{} each (±1)", (n / threads).max(0), (n + threads - 1) / threads))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_per_thread_series_and_nothing_else() {
        let text = "# HELP voxgate_session_thread_connections Client connections\n\
                    # TYPE voxgate_session_thread_connections gauge\n\
                    voxgate_session_thread_connections{thread=\"1\"} 49\n\
                    voxgate_session_thread_connections{thread=\"0\"} 52\n\
                    voxgate_session_thread_connections_other{thread=\"0\"} 7\n\
                    voxgate_sessions_active 100\n";
        assert_eq!(parse(text, VOXGATE_SERIES), vec![52, 49]);
        assert_eq!(parse("voxgate_session_thread_connections{thread=\"2\"} 3\n", VOXGATE_SERIES), vec![0, 0, 3]);
        assert!(parse("voxgate_sessions_active 1\n", VOXGATE_SERIES).is_empty());
        // The relay's own answer reads the same way.
        assert_eq!(parse(&crate::relay::metrics_text(&[4, 3]), crate::relay::THREAD_SERIES), vec![4, 3]);
    }

    #[test]
    fn the_scrape_s_own_connection_is_taken_off_the_largest() {
        assert_eq!(without_scrape(&[51, 50]), vec![50, 50]);
        assert_eq!(without_scrape(&[50, 51]), vec![50, 50]);
        // One session went to thread 0, the scrape to thread 1.
        assert_eq!(without_scrape(&[1, 1]), vec![1, 0]);
        // 5 sessions on 3 threads are [2, 2, 1]; the scrape made it [2, 2, 2].
        assert_eq!(without_scrape(&[2, 2, 2]), vec![2, 2, 1]);
        assert_eq!(without_scrape(&[1]), vec![0]);
        assert_eq!(without_scrape(&[0, 0]), vec![0, 0]);
    }

    #[test]
    fn an_even_spread_within_one_passes_and_a_lopsided_one_is_named() {
        assert_eq!(imbalance(&[50, 50], 100), None);
        assert_eq!(imbalance(&[51, 49], 100), None);
        assert_eq!(imbalance(&[1, 0], 1), None);
        assert_eq!(imbalance(&[334, 333, 333], 1000), None);
        // What voxgate did before c20eab0: most sessions on thread 0.
        assert!(imbalance(&[90, 10], 100).is_some_and(|w| w.contains("[90, 10]")));
        assert!(imbalance(&[52, 48], 100).is_some());
        // Sessions missing from the counts.
        assert!(imbalance(&[40, 40], 100).is_some_and(|w| w.contains("80 sessions counted")));
    }
}
