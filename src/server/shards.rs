//! Client connections run on pinned threads: one single-threaded tokio runtime per shard, each
//! connection (its HTTP handshake, its session, the session's upstream socket and inline tools)
//! on one shard for its whole life. This is the shape of a bare relay and of pingora without work
//! stealing: a frame read from the client is forwarded, written and flushed by the thread that read
//! it, with no wake-up of another worker. On the shared multi-thread runtime every frame could
//! wake the other worker (a futex call and a context switch each time) — the largest item left
//! in the profile of issue 17 (docs/performance.md).
//!
//! The accept loop stays on the main runtime and hands each accepted socket to the shard with the
//! fewest connections and sessions. A connection counts while hyper serves it; a WebSocket session
//! outlives that (hyper's connection future ends at the upgrade), so the session task holds its
//! own count through the [`ShardLoad`] its request carries. Everything shared (audit writer, Redis, the MCP hub, HTTP clients) keeps
//! working from a shard: those are channels and atomics, woken across threads only when used.
//!
//! Lifecycle: [`Shards::stop`] (called after the drain) closes the queues and lets each thread
//! drop what it still runs within a bound, so a stuck task cannot keep the process alive.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;

use crate::telemetry::metrics::Metrics;

/// Work handed to a shard: built on the shard's thread, inside its runtime, so that the sockets
/// it registers belong to that shard's reactor. It is given its shard's load, for what it leaves
/// running after its own future ends.
pub(crate) type Job = Box<dyn FnOnce(ShardLoad) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// How long a stopping shard waits for its blocking work (file reads, document extraction) before
/// the thread ends anyway.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Why the shards could not start.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("cannot start session thread {index}: {source}")]
    Spawn { index: usize, source: std::io::Error },
    #[error("cannot build the runtime of session thread {index}: {source}")]
    Runtime { index: usize, source: std::io::Error },
}

struct Shard {
    queue: mpsc::UnboundedSender<Job>,
    /// Connections and sessions on this shard, for least-loaded placement (also exported as
    /// `voxgate_session_thread_connections`).
    load: Gauge,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The pinned session threads.
pub(crate) struct Shards {
    shards: Vec<Shard>,
}

/// A shard's count of what runs on it, for least-loaded placement.
#[derive(Clone)]
pub(crate) struct ShardLoad(Gauge);

impl ShardLoad {
    /// Count one more on this shard until the guard is dropped (a session, for its whole life).
    pub(crate) fn hold(&self) -> Placed {
        self.0.inc();
        Placed(self.0.clone())
    }
}

/// Decrements its shard's load when dropped: when the connection's future or the session ends.
pub(crate) struct Placed(Gauge);

impl Drop for Placed {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Shards {
    /// `count` threads (0 = one per CPU the process may use); each counts its load in `metrics`.
    pub(crate) fn start(count: usize, metrics: &Metrics) -> Result<Self, ShardError> {
        let count = match count {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        };
        let mut shards = Vec::with_capacity(count);
        for index in 0..count {
            let (queue, jobs) = mpsc::unbounded_channel();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|source| ShardError::Runtime { index, source })?;
            let load = metrics.session_thread_load(index);
            let shard_load = ShardLoad(load.clone());
            let thread = std::thread::Builder::new()
                .name(format!("voxgate-session-{index}"))
                .spawn(move || run(runtime, jobs, shard_load))
                .map_err(|source| ShardError::Spawn { index, source })?;
            shards.push(Shard { queue, load, thread: Some(thread) });
        }
        Ok(Self { shards })
    }

    /// Run `job` on the least-loaded shard; its future counts as one connection there until it
    /// ends. Returns the job when no thread is left to take it.
    pub(crate) fn place(&self, job: Job) -> Result<(), Job> {
        // A thread that is gone (it could only panic outside any task) is never chosen again.
        let open = self.shards.iter().filter(|s| !s.queue.is_closed());
        let Some(shard) = open.min_by_key(|s| s.load.get()) else {
            return Err(job);
        };
        // Counted now, before the job starts, so the next placement sees it.
        let placed = ShardLoad(shard.load.clone()).hold();
        let counted: Job = Box::new(move |load| {
            let future = job(load);
            Box::pin(async move {
                let _placed = placed;
                future.await;
            })
        });
        shard.queue.send(counted).map_err(|returned| returned.0)
    }

    /// Connections on each shard, in shard order.
    #[cfg(test)]
    pub(crate) fn loads(&self) -> Vec<i64> {
        self.shards.iter().map(|s| s.load.get()).collect()
    }

    /// Close the queues and wait (off the runtime, bounded) for the threads: each drops whatever
    /// still runs on it. Called after the drain, so what is left is what outlived it.
    pub(crate) async fn stop(mut self) {
        let threads: Vec<_> = self.shards.iter_mut().filter_map(|s| s.thread.take()).collect();
        self.shards.clear();
        let joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                if thread.join().is_err() {
                    tracing::error!("a session thread panicked");
                }
            }
        });
        if tokio::time::timeout(STOP_GRACE + Duration::from_secs(1), joined).await.is_err() {
            tracing::warn!("session threads did not stop in time");
        }
    }
}

/// One shard's thread: spawn each job on this thread's runtime until the queue closes, then drop
/// what is left.
fn run(runtime: tokio::runtime::Runtime, mut jobs: mpsc::UnboundedReceiver<Job>, load: ShardLoad) {
    runtime.block_on(async {
        while let Some(job) = jobs.recv().await {
            tokio::spawn(job(load.clone()));
        }
    });
    runtime.shutdown_timeout(STOP_GRACE);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    fn job(f: impl Future<Output = ()> + Send + 'static) -> Job {
        Box::new(move |_| Box::pin(f))
    }

    #[tokio::test]
    async fn what_a_job_leaves_running_with_a_hold_still_counts() {
        // A WebSocket session outlives its connection's future (hyper's ends at the upgrade): it
        // must still count, or every session after it lands on the same thread.
        let shards = Shards::start(2, &Metrics::new()).unwrap();
        let (held_tx, held_rx) = oneshot::channel::<()>();
        let (name_tx, name_rx) = oneshot::channel();
        let (left_tx, left_rx) = oneshot::channel::<()>();
        shards
            .place(Box::new(move |load: ShardLoad| {
                Box::pin(async move {
                    let session = load.hold();
                    tokio::spawn(async move {
                        let _session = session;
                        let _ = name_tx.send(std::thread::current().name().map(str::to_owned));
                        let _ = held_rx.await;
                    });
                    let _ = left_tx.send(());
                })
            }))
            .unwrap_or_else(|_| panic!("placed"));
        left_rx.await.unwrap();
        let first = name_rx.await.unwrap().unwrap();
        // The job's own future has ended; the session it left is still counted.
        let mut loads = shards.loads();
        for _ in 0..200 {
            if loads.iter().sum::<i64>() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            loads = shards.loads();
        }
        assert_eq!(loads.iter().sum::<i64>(), 1, "{loads:?}");
        let (name_tx, name_rx) = oneshot::channel();
        shards
            .place(job(async move {
                let _ = name_tx.send(std::thread::current().name().map(str::to_owned));
            }))
            .unwrap_or_else(|_| panic!("placed"));
        assert_ne!(first, name_rx.await.unwrap().unwrap(), "the second connection went to the session's shard");
        drop(held_tx);
        shards.stop().await;
    }

    #[tokio::test]
    async fn jobs_go_to_the_least_loaded_shard_and_run_on_its_thread() {
        let shards = Shards::start(2, &Metrics::new()).unwrap();
        let (held_tx, held_rx) = oneshot::channel::<()>();
        let (name_tx, name_rx) = oneshot::channel();
        // The first connection stays open: the second must go to the other shard.
        shards
            .place(job(async move {
                let _ = name_tx.send(std::thread::current().name().map(str::to_owned));
                let _ = held_rx.await;
            }))
            .unwrap_or_else(|_| panic!("placed"));
        let first = name_rx.await.unwrap().unwrap();
        assert_eq!(shards.loads().iter().sum::<i64>(), 1);
        let (name_tx, name_rx) = oneshot::channel();
        shards
            .place(job(async move {
                let _ = name_tx.send(std::thread::current().name().map(str::to_owned));
            }))
            .unwrap_or_else(|_| panic!("placed"));
        let second = name_rx.await.unwrap().unwrap();
        assert!(first.starts_with("voxgate-session-") && second.starts_with("voxgate-session-"));
        assert_ne!(first, second, "the second connection went to the busy shard");
        drop(held_tx);
        // Loads return to zero once the futures end.
        for _ in 0..200 {
            if shards.loads().iter().all(|&n| n == 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(shards.loads(), vec![0, 0]);
        shards.stop().await;
    }

    #[tokio::test]
    async fn a_thread_that_is_gone_is_passed_over() {
        let mut shards = Shards::start(1, &Metrics::new()).unwrap();
        // A shard whose thread has ended: its queue is closed, and its load is the lowest.
        let (queue, jobs) = mpsc::unbounded_channel();
        drop(jobs);
        shards.shards.insert(0, Shard { queue, load: Gauge::default(), thread: None });
        shards.shards[1].load.set(5);
        let (ran_tx, ran_rx) = oneshot::channel();
        shards
            .place(job(async move {
                let _ = ran_tx.send(());
            }))
            .unwrap_or_else(|_| panic!("placed on the live thread"));
        ran_rx.await.unwrap();
        shards.stop().await;
    }

    #[tokio::test]
    async fn stop_drops_what_still_runs_and_returns() {
        let shards = Shards::start(1, &Metrics::new()).unwrap();
        let (dropped_tx, dropped_rx) = oneshot::channel::<()>();
        shards
            .place(job(async move {
                let _guard = dropped_tx;
                std::future::pending::<()>().await;
            }))
            .unwrap_or_else(|_| panic!("placed"));
        tokio::time::timeout(Duration::from_secs(5), shards.stop()).await.unwrap();
        // The sender was dropped with the task, not sent on.
        assert!(dropped_rx.await.is_err());
    }
}
