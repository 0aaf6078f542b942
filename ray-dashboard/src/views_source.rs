//! [`ViewsSource`]: the simplest [`Source`], views held in memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ray_insight::{Record, Sink, Views};
use serde_json::Value;

use crate::{render, stats_json, JobEntry, Source, SourceError, ViewQuery};

/// The simplest [`Source`]: one job's [`Views`] held here, with
/// the version bumped by every [`ViewsSource::accept`] — what serves a
/// replayed event log (`rayrs insight serve`), or views a program builds
/// itself.
pub struct ViewsSource {
    job: String,
    views: Mutex<Views>,
    log: Option<std::path::PathBuf>,
    version: AtomicU64,
}

impl ViewsSource {
    /// Serves `views` as job `job`; `log`, when given, is the event log that
    /// times are replayed from.
    pub fn new(job: &str, views: Views, log: Option<std::path::PathBuf>) -> Arc<Self> {
        Arc::new(Self {
            job: job.to_owned(),
            views: Mutex::new(views),
            log,
            version: AtomicU64::new(1),
        })
    }

    /// Applies `records` to the views; the page's live tabs receive what
    /// changed.
    pub fn accept(&self, records: &[Record]) {
        Sink::accept(&mut *self.views(), records);
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// The views, locked (the server waits while they are held).
    pub fn views(&self) -> MutexGuard<'_, Views> {
        // A panic elsewhere while holding the views leaves them usable.
        self.views.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn check(&self, job: Option<&str>) -> Result<(), SourceError> {
        match job {
            None => Ok(()),
            Some(j) if j == self.job => Ok(()),
            Some(other) => Err(SourceError::UnknownJob {
                reason: format!("no job {other} here (only {})", self.job),
            }),
        }
    }
}

impl Source for ViewsSource {
    fn jobs(&self) -> Vec<JobEntry> {
        vec![JobEntry {
            job: self.job.clone(),
            label: self.job.clone(),
            latest: true,
        }]
    }

    fn stats(&self, job: Option<&str>) -> Result<Value, SourceError> {
        self.check(job)?;
        let version = self.version.load(Ordering::Acquire);
        Ok(stats_json(&self.views(), &self.job, version))
    }

    fn view(&self, query: &ViewQuery) -> Result<String, SourceError> {
        self.check(query.job.as_deref())?;
        render(&self.views(), self.log.as_deref(), query)
    }
}
