//! [`Dashboard`]: the listener, the connection cap, and the runtime the
//! server runs on; stopping it.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::conn::{self, Conn, MAX_HEAD_BYTES, READ_TIMEOUT};
use crate::{routes, Source};

/// How long requests in flight may take to finish once the dashboard
/// stops; then their connections are dropped.
const GRACE: Duration = Duration::from_secs(2);

/// How a [`Dashboard`] serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DashboardConfig {
    /// Where to listen (default `127.0.0.1:0`: loopback, a free port).
    /// Another interface is served only when set here explicitly.
    pub bind: SocketAddr,
    /// The access token (default: 128 random bits, hex).
    pub token: Option<String>,
    /// How many connections are served at once (each carries one request);
    /// more are refused with 503 (default 64).
    pub max_connections: usize,
}

impl Default for DashboardConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            max_connections: 64,
        }
    }
}

/// A running dashboard server; dropping it stops serving.
///
/// Dropping it stops accepting, ends live event streams and gives
/// requests in flight a moment to finish. When the dashboard runs its own
/// runtime ([`Dashboard::start`]) the drop waits for that (a few seconds
/// at most) and the port is closed when it returns; on the caller's
/// runtime ([`Dashboard::start_on`]) it only signals, and the server
/// finishes in the background.
pub struct Dashboard {
    addr: SocketAddr,
    token: String,
    stop: watch::Sender<bool>,
    /// The runtime thread of [`Dashboard::start`].
    thread: Option<JoinHandle<()>>,
}

/// What the server's tasks share.
pub(crate) struct Shared {
    pub(crate) source: Arc<dyn Source>,
    pub(crate) token: String,
    /// Becomes `true` when the dashboard stops.
    pub(crate) stop: watch::Receiver<bool>,
}

impl std::fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Dashboard {
    /// Starts serving `source` as `config` says, on a small tokio runtime
    /// of its own (one thread named `ray-dashboard`, and blocking-pool
    /// threads for the source while it answers): for callers that are not
    /// async. A caller with a runtime passes it to [`Dashboard::start_on`]
    /// instead.
    ///
    /// # Errors
    ///
    /// The address cannot be bound, or the runtime or its thread cannot be
    /// started.
    pub fn start(config: DashboardConfig, source: Arc<dyn Source>) -> std::io::Result<Self> {
        // The runtime is built, and dropped, on its own thread: a caller
        // inside an async context (an embedded runtime's `init`) may
        // neither block on it nor drop it.
        let (started_tx, started) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("ray-dashboard".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .enable_time()
                    .thread_name("ray-dashboard-source")
                    .build();
                let bound = runtime.and_then(|runtime| {
                    let bound = Self::bind(config, source, runtime.handle());
                    bound.map(|(dashboard, server)| (runtime, dashboard, server))
                });
                match bound {
                    Ok((runtime, dashboard, server)) => {
                        let _ = started_tx.send(Ok(dashboard));
                        runtime.block_on(server);
                        // A source call still running is left to finish on its own.
                        runtime.shutdown_timeout(GRACE);
                    }
                    Err(e) => {
                        let _ = started_tx.send(Err(e));
                    }
                }
            })?;
        match started.recv() {
            Ok(Ok(mut dashboard)) => {
                dashboard.thread = Some(thread);
                Ok(dashboard)
            }
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(std::io::Error::other(
                    "the dashboard's thread ended before it started serving",
                ))
            }
        }
    }

    /// Starts serving `source` as `config` says, on the tokio runtime of
    /// `handle` (the head's): the server is a task there, and the source is
    /// called on its blocking pool.
    ///
    /// # Errors
    ///
    /// The address cannot be bound.
    pub fn start_on(
        handle: &Handle,
        config: DashboardConfig,
        source: Arc<dyn Source>,
    ) -> std::io::Result<Self> {
        let (dashboard, server) = Self::bind(config, source, handle)?;
        handle.spawn(server);
        Ok(dashboard)
    }

    /// Binds the listener (in `handle`'s runtime) and returns the
    /// dashboard with the server's future, not yet running.
    fn bind(
        config: DashboardConfig,
        source: Arc<dyn Source>,
        handle: &Handle,
    ) -> std::io::Result<(Self, impl Future<Output = ()> + Send + 'static)> {
        let listener = std::net::TcpListener::bind(config.bind)?;
        listener.set_nonblocking(true)?;
        let listener = {
            let _runtime = handle.enter();
            TcpListener::from_std(listener)?
        };
        let addr = listener.local_addr()?;
        let token = config.token.unwrap_or_else(random_token);
        let (stop, stopped) = watch::channel(false);
        let shared = Arc::new(Shared {
            source,
            token: token.clone(),
            stop: stopped,
        });
        let server = serve(listener, shared, config.max_connections.max(1));
        let dashboard = Self {
            addr,
            token,
            stop,
            thread: None,
        };
        Ok((dashboard, server))
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The page's URL, token included: what to open in a browser.
    pub fn url(&self) -> String {
        let host = match self.addr {
            SocketAddr::V4(a) if a.ip().is_unspecified() => format!("127.0.0.1:{}", a.port()),
            SocketAddr::V6(a) if a.ip().is_unspecified() => format!("[::1]:{}", a.port()),
            addr => addr.to_string(),
        };
        format!("http://{host}/?token={}", self.token)
    }

    /// The access token.
    pub fn token(&self) -> &str {
        &self.token
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts connections until the dashboard stops, at most `max` at once,
/// then gives those still open [`GRACE`] to finish.
async fn serve(listener: TcpListener, shared: Arc<Shared>, max: usize) {
    let permits = Arc::new(Semaphore::new(max));
    // As many again may be in the middle of being refused.
    let refusals = Arc::new(Semaphore::new(max));
    let mut connections = JoinSet::new();
    let stop = stopped(shared.stop.clone());
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            // Reap finished connections as they end.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    if let Ok(permit) = permits.clone().try_acquire_owned() {
                        connections.spawn(connection(stream, shared.clone(), permit));
                    } else if let Ok(permit) = refusals.clone().try_acquire_owned() {
                        connections.spawn(refuse_busy(stream, permit));
                    }
                    // Else: closed at once, unanswered.
                }
                // Out of file descriptors, say: wait for some to close.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
        }
    }
    drop(listener);
    let finished = tokio::time::timeout(GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        connections.shutdown().await;
    }
}

/// Resolves once the dashboard stops (`stop` becomes `true`, or its
/// sender is gone).
pub(crate) async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// Answers a connection over the cap with 503, without reading its request.
async fn refuse_busy(mut stream: TcpStream, _permit: OwnedSemaphorePermit) {
    let busy = conn::plain_response("503 Service Unavailable", "too many connections\n");
    conn::refuse(&mut stream, &busy).await;
}

/// Serves one connection: its head read within bounds, then hyper.
async fn connection(mut stream: TcpStream, shared: Arc<Shared>, _permit: OwnedSemaphorePermit) {
    let Some(read) = conn::read_head(&mut stream).await else {
        return;
    };
    let service = service_fn(move |request| routes::handle(request, shared.clone()));
    let _ = http1::Builder::new()
        .keep_alive(false)
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES + 8 * 1024)
        .serve_connection(TokioIo::new(Conn::new(read, stream)), service)
        .await;
}

/// 128 random bits from the OS, as hex; a time-and-pid hash if the OS has
/// no random source to read (never on Linux).
fn random_token() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            ^ (u128::from(std::process::id()) << 64);
        bytes = seed.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
