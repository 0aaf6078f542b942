//! The dashboard of an embedded runtime: this process's recording served
//! as ray-dashboard's [`Source`] (feature `dashboard`).

use std::sync::Arc;

use ray_dashboard::{self as dashboard, Dashboard, DashboardConfig, JobEntry, Source, ViewQuery};

use super::{Inner, Insight};
use crate::error::{Error, Result};

impl Insight {
    /// Serves the dashboard on `addr` (once per process; later calls keep
    /// the first) and prints its URL on stderr.
    pub(super) fn serve_dashboard(&self, addr: std::net::SocketAddr) -> Result<()> {
        let mut slot = self.inner.dashboard.lock();
        if slot.is_some() {
            return Ok(());
        }
        let source = Arc::new(EmbeddedSource(Arc::downgrade(&self.inner)));
        let dashboard = Dashboard::start(
            DashboardConfig {
                bind: addr,
                ..DashboardConfig::default()
            },
            source,
        )
        .map_err(|e| {
            Error::InvalidArgument(format!(
                "insight: cannot serve the dashboard on {addr}: {e}"
            ))
        })?;
        eprintln!("ray-rs insight dashboard: {}", dashboard.url());
        *slot = Some(dashboard);
        Ok(())
    }
}

/// This process's recording as the dashboard's [`Source`]: one job, the
/// embedded runtime's. Holds the recording weakly: the dashboard thread
/// never keeps it alive.
struct EmbeddedSource(std::sync::Weak<Inner>);

/// The job name the embedded dashboard shows.
const EMBEDDED_JOB: &str = "embedded";

impl EmbeddedSource {
    fn insight(&self) -> Result<Insight, dashboard::SourceError> {
        self.0
            .upgrade()
            .map(|inner| Insight { inner })
            .ok_or(dashboard::SourceError::Ended)
    }

    fn check_job(job: Option<&str>) -> Result<(), dashboard::SourceError> {
        match job {
            None | Some(EMBEDDED_JOB) => Ok(()),
            Some(other) => Err(dashboard::SourceError::UnknownJob {
                reason: format!(
                    "no job {other:?} here: an embedded runtime has one job, {EMBEDDED_JOB:?}"
                ),
            }),
        }
    }
}

impl Source for EmbeddedSource {
    fn jobs(&self) -> Vec<JobEntry> {
        vec![JobEntry {
            job: EMBEDDED_JOB.into(),
            // The program's name (the page adds the job's id).
            label: super::program_name(&std::env::args().next().unwrap_or_default()),
            latest: true,
        }]
    }

    fn stats(
        &self,
        job: Option<&str>,
    ) -> std::result::Result<serde_json::Value, dashboard::SourceError> {
        Self::check_job(job)?;
        let insight = self.insight()?;
        insight.inner.pump();
        let local = insight.inner.local.lock();
        Ok(dashboard::stats_json(
            &local.views,
            EMBEDDED_JOB,
            local.version,
        ))
    }

    fn view(&self, query: &ViewQuery) -> std::result::Result<String, dashboard::SourceError> {
        Self::check_job(query.job.as_deref())?;
        let insight = self.insight()?;
        insight.inner.pump();
        let mut local = insight.inner.local.lock();
        if let Some(log) = &mut local.log {
            // A replay reads what was written so far.
            let _ = log.flush();
        }
        dashboard::render(&local.views, local.log_path.as_deref(), query)
    }
}
