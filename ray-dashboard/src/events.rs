//! `/api/events`: server-sent events every [`EVENT_EVERY`] until the
//! browser goes away or the dashboard stops.
//!
//! Each message is `{"stats": COUNTERS}`, and, when a view is asked for
//! (the parameters of `/api/summary`), its summary once (`"full"`) and
//! then, whenever records arrived, only what changed (`"delta"`, see
//! [`summary::diff`]). A view that cannot be summarized is said once
//! (`"error"`) and the counters go on.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::server::{stopped, Shared};
use crate::{summary, Source, ViewQuery};

/// How often `/api/events` pushes the counters.
pub const EVENT_EVERY: Duration = Duration::from_secs(1);

/// A live summary is rebuilt no sooner than this many times its last build
/// time (and at most every [`EVENT_EVERY`]).
const VIEW_COST_SHARE: u32 = 4;

/// The body of an event stream: messages as the producer task sends them;
/// it ends when the producer does.
pub(crate) struct EventBody(mpsc::Receiver<Bytes>);

impl Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.get_mut()
            .0
            .poll_recv(cx)
            .map(|message| message.map(|m| Ok(Frame::data(m))))
    }
}

/// Starts the events of `job` (and of `view`, when given) on the current
/// runtime: a task that sends a message every [`EVENT_EVERY`] into the
/// returned body, until the body is dropped (the client went away) or the
/// dashboard stops (then the body ends, and so does the response).
pub(crate) fn start(
    shared: &Arc<Shared>,
    job: Option<String>,
    view: Option<ViewQuery>,
) -> EventBody {
    // One message waits at most: a client that stops reading stops the
    // producer too, until the write times out and the connection goes.
    let (tx, rx) = mpsc::channel(1);
    let source = shared.source.clone();
    let stop = shared.stop.clone();
    let mut state = Subscription {
        job,
        view,
        shown: None,
        shown_version: None,
        failed: false,
        next_view: Instant::now(),
    };
    tokio::spawn(async move {
        let stop = stopped(stop);
        tokio::pin!(stop);
        loop {
            let source = source.clone();
            // Counters, a view's summary and its diff may all take a while.
            let built = tokio::task::spawn_blocking(move || {
                let message = state.next(&*source);
                (state, message)
            });
            let message;
            (state, message) = tokio::select! {
                built = built => match built {
                    Ok(built) => built,
                    // The source panicked: the stream ends, the server goes on.
                    Err(_) => return,
                },
                () = &mut stop => return,
            };
            tokio::select! {
                sent = tx.send(Bytes::from(format!("data: {message}\n\n"))) => {
                    if sent.is_err() {
                        return;
                    }
                }
                () = &mut stop => return,
            }
            tokio::select! {
                () = tokio::time::sleep(EVENT_EVERY) => {}
                () = tx.closed() => return,
                () = &mut stop => return,
            }
        }
    });
    EventBody(rx)
}

/// What one event stream has shown so far.
struct Subscription {
    job: Option<String>,
    view: Option<ViewQuery>,
    /// The summary the client holds.
    shown: Option<Value>,
    /// The version of the recording it was built from.
    shown_version: Option<Value>,
    /// The view could not be summarized (said once).
    failed: bool,
    /// No rebuild of the summary before this.
    next_view: Instant,
}

impl Subscription {
    /// The next message: the counters, and the view's summary or what
    /// changed in it since the last message that carried one.
    fn next(&mut self, source: &dyn Source) -> Value {
        let mut message = match source.stats(self.job.as_deref()) {
            Ok(stats) => json!({ "stats": stats }),
            Err(e) => json!({ "error": e.to_string() }),
        };
        let version = message["stats"].get("version").cloned();
        let (Some(query), Some(version)) = (&self.view, version) else {
            return message;
        };
        if self.shown_version.as_ref() == Some(&version)
            || self.failed
            || Instant::now() < self.next_view
        {
            return message;
        }
        // A summary that is slow to build (a large job's logical graph)
        // is rebuilt at most every fourth of the time, so an open tab
        // keeps at most a quarter of a core busy.
        let began = Instant::now();
        let summary = match source.view(query) {
            Ok(text) => serde_json::from_str::<Value>(&text).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        self.next_view = Instant::now() + (began.elapsed() * VIEW_COST_SHARE).max(EVENT_EVERY);
        match summary {
            Ok(now) => {
                match &self.shown {
                    None => message["full"] = now.clone(),
                    Some(before) => {
                        if let Some(delta) = summary::diff(before, &now) {
                            message["delta"] = delta;
                        }
                    }
                }
                self.shown = Some(now);
                self.shown_version = Some(version);
            }
            Err(e) => {
                self.failed = true;
                message["error"] = json!(e);
            }
        }
        message
    }
}
