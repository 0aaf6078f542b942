//! A request's target, decoded: its path and query parameters, and the
//! view queries they ask for.

use std::num::ParseIntError;

use ray_insight::export::{parse_metric, ExportError, ViewKind};
use ray_insight::views::FlameMetric;

use crate::{FlameFold, SummaryParams, ViewQuery};

/// A request's path and query parameters, percent-decoded.
#[derive(Debug, Clone, Default)]
pub(crate) struct Target {
    /// The path (`/api/view`).
    pub(crate) path: String,
    /// The query's `name=value` pairs, in order.
    pub(crate) query: Vec<(String, String)>,
}

impl Target {
    /// Decodes a request target's `path` and `query` (without the `?`).
    pub(crate) fn parse(path: &str, query: Option<&str>) -> Self {
        Self {
            path: decode(path),
            query: query
                .unwrap_or("")
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        }
    }

    /// The first value of parameter `name`.
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The job asked for (`None`: the latest).
    pub(crate) fn job(&self) -> Option<&str> {
        self.param("job").filter(|j| !j.is_empty())
    }
}

/// Why a request's parameters do not make a view query (answered 400).
#[derive(Debug, thiserror::Error)]
pub(crate) enum QueryError {
    /// No `view=`.
    #[error("view= is missing")]
    NoView,
    /// An unknown view, format or metric, or a format the view lacks.
    #[error(transparent)]
    Export(#[from] ExportError),
    /// A time that is not a number of nanoseconds.
    #[error("bad {name}={value}: nanoseconds")]
    Nanos {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: String,
        /// Why it does not parse.
        source: ParseIntError,
    },
    /// A filter that is not `key=value`.
    #[error("bad filter {filter:?}: key=value, or several joined by ','")]
    Filter {
        /// The filter.
        filter: String,
    },
    /// A window that ends before it begins.
    #[error("bad window from={from} to={to}: from must be before to")]
    Window {
        /// Its start.
        from: u64,
        /// Its end.
        to: u64,
    },
    /// A flame fold that is neither `instance` nor `class`.
    #[error("bad fold={value}: choose instance or class")]
    Fold {
        /// Its value.
        value: String,
    },
    /// A bottleneck count that is not a number from 1 to [`MAX_TOP`].
    #[error("bad top={value}: a number of rows from 1 to {MAX_TOP}")]
    Top {
        /// Its value.
        value: String,
    },
    /// A summary of the flame graph, which has none.
    #[error("the flame graph has no summary: ask /api/view for its svg")]
    FlameSummary,
}

/// The most rows of each kind a bottleneck summary (`top=N`) has.
pub(crate) const MAX_TOP: usize = 50;

/// `value` of parameter `name` as nanoseconds.
fn nanos(name: &'static str, value: &str) -> Result<u64, QueryError> {
    value.parse::<u64>().map_err(|source| QueryError::Nanos {
        name,
        value: value.to_owned(),
        source,
    })
}

/// The view query of `/api/view` (and the base of the others).
pub(crate) fn view_query(target: &Target) -> Result<ViewQuery, QueryError> {
    let view: ViewKind = target.param("view").ok_or(QueryError::NoView)?.parse()?;
    let format = match target.param("format") {
        Some(f) => view.check(f.parse()?)?,
        None => view.default_format(),
    };
    let at_nanos = match target.param("at").filter(|a| !a.is_empty()) {
        Some(a) => Some(nanos("at", a)?),
        None => None,
    };
    let filter = match target.param("filter").filter(|f| !f.is_empty()) {
        Some(f) => parse_filter(f).ok_or_else(|| QueryError::Filter {
            filter: f.to_owned(),
        })?,
        None => Vec::new(),
    };
    let metric = match target.param("metric").filter(|m| !m.is_empty()) {
        Some(m) => parse_metric(m)?,
        None => FlameMetric::SelfTime,
    };
    let fold = match target.param("fold").filter(|f| !f.is_empty()) {
        Some(f) => FlameFold::from_name(f).ok_or_else(|| QueryError::Fold {
            value: f.to_owned(),
        })?,
        None => FlameFold::Instance,
    };
    Ok(ViewQuery {
        job: target.job().map(str::to_owned),
        view,
        format,
        at_nanos,
        filter,
        metric,
        fold,
        summary: None,
    })
}

/// A summary query (`/api/summary`, `/api/events`): a view query (its
/// format is ignored) with the summary's own parameters.
pub(crate) fn summary_query(target: &Target) -> Result<ViewQuery, QueryError> {
    let nanos = |name: &'static str| -> Result<Option<u64>, QueryError> {
        match target.param(name).filter(|v| !v.is_empty()) {
            Some(v) => nanos(name, v).map(Some),
            None => Ok(None),
        }
    };
    let params = SummaryParams {
        expand: target
            .param("expand")
            .filter(|c| !c.is_empty())
            .map(str::to_owned),
        from_nanos: nanos("from")?,
        to_nanos: nanos("to")?,
        top: match target.param("top").filter(|t| !t.is_empty()) {
            Some(t) => Some(
                t.parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_TOP).contains(n))
                    .ok_or_else(|| QueryError::Top {
                        value: t.to_owned(),
                    })?,
            ),
            None => None,
        },
    };
    if let (Some(from), Some(to)) = (params.from_nanos, params.to_nanos) {
        if from >= to {
            return Err(QueryError::Window { from, to });
        }
    }
    let mut query = view_query(target)?;
    if query.view == ViewKind::Flame {
        return Err(QueryError::FlameSummary);
    }
    query.summary = Some(params);
    Ok(query)
}

/// A label filter: `key=value`, or several joined by `,` (a task must
/// have them all); `None` when a part is not `key=value`.
pub fn parse_filter(filter: &str) -> Option<Vec<(String, String)>> {
    filter
        .split(',')
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

/// The flame query of a diff request (`/api/flamediff` names no view or
/// format: always the folded flame graph).
pub(crate) fn flame_query(target: &Target) -> Result<ViewQuery, QueryError> {
    let mut flame = target.clone();
    flame.query.retain(|(k, _)| k != "view" && k != "format");
    flame.query.push(("view".into(), "flame".into()));
    flame.query.push(("format".into(), "folded".into()));
    view_query(&flame)
}

/// Percent-decoding, with `+` as a space; invalid escapes are kept as they are.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let pair = &bytes[i + 1..i + 3];
                // Two hex digits exactly (from_str_radix would take "+1").
                let hex = pair
                    .iter()
                    .all(u8::is_ascii_hexdigit)
                    .then(|| std::str::from_utf8(pair).ok())
                    .flatten()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_handles_escapes_plus_and_bad_escapes() {
        assert_eq!(decode("dp_rank%3D0"), "dp_rank=0");
        assert_eq!(decode("a+b"), "a b");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz%4"), "%zz%4");
        assert_eq!(decode("%E2%9C%93"), "✓");
        // A sign is not a hex digit: `%` stays, `+` is a space as ever.
        assert_eq!(decode("%+1x"), "% 1x");
    }

    #[test]
    fn a_target_decodes_its_path_and_parameters() {
        let target = Target::parse("/api/view", Some("view=flame&filter=rank%3D0&job=&flag"));
        assert_eq!(target.path, "/api/view");
        assert_eq!(target.param("filter"), Some("rank=0"));
        assert_eq!(target.param("flag"), Some(""));
        assert_eq!(target.job(), None);
        let flame = flame_query(&target).unwrap();
        assert_eq!(flame.view, ViewKind::Flame);
        assert_eq!(flame.filter, vec![("rank".into(), "0".into())]);
    }
}
