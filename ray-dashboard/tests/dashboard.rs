//! The dashboard's HTTP server against a fixed source: the token is
//! required everywhere, the API answers as documented, bad requests get
//! clear statuses, and events are pushed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use ray_dashboard::{Dashboard, DashboardConfig, ViewsSource};
use ray_insight::{Fields, Record, RecordKind, Sink, Views};
use serde_json::Value;

use ray_test_support::http::{get, post, request};

/// One finished task `m::work` called by the driver, as job `job-1`.
fn fixed() -> Arc<ViewsSource> {
    ray_test_support::http::one_task_source()
}

fn start() -> Dashboard {
    start_on(fixed())
}

/// A dashboard with token `sesame` over `source`.
fn start_on(source: Arc<ViewsSource>) -> Dashboard {
    Dashboard::start(
        DashboardConfig {
            token: Some("sesame".into()),
            ..DashboardConfig::default()
        },
        source,
    )
    .expect("the dashboard starts")
}

#[test]
fn requests_without_the_token_are_refused_everywhere() {
    let dash = start();
    for target in [
        "/",
        "/app.js",
        "/api/jobs",
        "/api/view?view=logical",
        "/api/stats",
        "/api/events",
        "/nothing",
    ] {
        assert_eq!(get(&dash, target).0, 401, "{target} without a token");
        let wrong = if target.contains('?') { "&" } else { "?" };
        assert_eq!(
            get(&dash, &format!("{target}{wrong}token=sesamf")).0,
            401,
            "{target} with a wrong token"
        );
    }
    // The bearer header works as well as the query parameter.
    let (status, _) = request(
        &dash,
        "GET /api/jobs HTTP/1.1\r\nAuthorization: Bearer sesame\r\n\r\n",
    );
    assert_eq!(status, 200);
}

#[test]
fn the_page_carries_the_token_and_loads_only_its_own_assets() {
    let dash = start();
    assert!(dash.url().starts_with("http://127.0.0.1:"));
    assert!(dash.url().ends_with("/?token=sesame"));
    let (status, page) = get(&dash, "/?token=sesame");
    assert_eq!(status, 200);
    assert!(!page.contains("__RAYRS_TOKEN__"));
    // Nothing is fetched from elsewhere (an xmlns URI is a name, not a load).
    let external = |text: &str| {
        [
            "src=\"http",
            "href=\"http",
            "src='http",
            "href='http",
            "url(http",
            "import(\"http",
            "fetch(\"http",
        ]
        .iter()
        .any(|p| text.contains(p))
    };
    assert!(!external(&page), "{page}");
    for asset in ["/app.js?token=sesame", "/app.css?token=sesame"] {
        let (status, text) = get(&dash, asset);
        assert_eq!(status, 200, "{asset}");
        assert!(!external(&text), "{asset} loads something from elsewhere");
    }
}

#[test]
fn the_api_answers_views_stats_and_jobs_and_says_what_is_wrong() {
    let dash = start();
    let (status, jobs) = get(&dash, "/api/jobs?token=sesame");
    assert_eq!(status, 200);
    let jobs: Value = serde_json::from_str(&jobs).unwrap();
    assert_eq!(jobs[0]["job"], "job-1");
    assert_eq!(jobs[0]["latest"], true);

    let (status, stats) = get(&dash, "/api/stats?token=sesame&job=job-1");
    assert_eq!(status, 200);
    let stats: Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["version"], 1);
    assert_eq!(stats["applied"], 2);

    let (status, logical) = get(&dash, "/api/view?token=sesame&view=logical&format=json");
    assert_eq!(status, 200);
    let logical: Value = serde_json::from_str(&logical).unwrap();
    assert_eq!(logical["call_edges"][0]["name"], "m::work");
    assert_eq!(logical["call_edges"][0]["count"], 1);
    let (status, folded) = get(&dash, "/api/view?token=sesame&view=flame&format=folded");
    // Folded stacks count microseconds: 4 µs.
    assert_eq!((status, folded.as_str()), (200, "driver;m::work 4\n"));
    let (status, svg) = get(&dash, "/api/view?token=sesame&view=flame&format=svg");
    assert_eq!(status, 200);
    assert!(svg.contains("<svg"));
    // A filter with an encoded `=` keeps nothing unlabelled.
    let (status, filtered) = get(
        &dash,
        "/api/view?token=sesame&view=flame&format=folded&filter=rank%3D0",
    );
    assert_eq!((status, filtered.as_str()), (200, ""));
    // The diff of the graph against itself is drawn.
    let (status, diff) = get(
        &dash,
        "/api/flamediff?token=sesame&before=driver%3Bm%3A%3Awork+2",
    );
    assert_eq!(status, 200, "{diff}");
    assert!(diff.contains("<svg"));

    for (target, want) in [
        ("/api/view?token=sesame&view=nope", 400),
        ("/api/view?token=sesame&view=logical&format=svg", 400),
        ("/api/view?token=sesame&view=logical&at=soon", 400),
        ("/api/view?token=sesame&view=logical&filter=nokey", 400),
        ("/api/view?token=sesame&view=logical&job=job-9", 404),
        ("/api/view?token=sesame&view=logical&at=5", 404),
        ("/api/stats?token=sesame&job=job-9", 404),
        ("/api/nothing?token=sesame", 404),
    ] {
        let (status, body) = get(&dash, target);
        assert_eq!(status, want, "{target}: {body}");
        assert!(!body.trim().is_empty(), "{target} says why");
    }
    let (status, _) = post(&dash, "/api/jobs?token=sesame", b"");
    assert_eq!(status, 405);
    let (status, _) = request(&dash, "garbage\r\n\r\n");
    assert_eq!(status, 400);
}

/// Two instances of `m::Worker` (`actor-1`, `actor-2`), each called once
/// by the driver (`process`, 3 µs and 5 µs), as job `job-1`.
fn two_instances() -> Arc<ViewsSource> {
    let mut records = Vec::new();
    let mut span = 0;
    let mut push = |kind, at_nanos, fields: &[(&'static str, &str)], records: &mut Vec<Record>| {
        span += u64::from(kind == RecordKind::SpanNew);
        records.push(Record {
            kind,
            span,
            parent: 0,
            name: if kind == RecordKind::SpanNew {
                "actor.call"
            } else {
                "closed"
            },
            target: "ray::actor",
            at_nanos,
            thread: 0,
            fields: Fields::from_strs(fields),
        });
    };
    for (actor, task, start, micros) in [("actor-1", "t1", 1_000, 3), ("actor-2", "t2", 2_000, 5)] {
        let call = [
            ("task_id", task),
            ("actor_id", actor),
            ("class", "m::Worker"),
            ("method", "process"),
        ];
        push(RecordKind::SpanNew, start, &call, &mut records);
        push(
            RecordKind::SpanClose,
            start + micros * 1_000,
            &[],
            &mut records,
        );
    }
    let mut views = Views::default();
    views.accept(&records);
    ViewsSource::new("job-1", views, None)
}

/// The flame graph names each actor instance unless `fold=class` folds
/// them into their class, in folded stacks and SVG alike; a bad fold is
/// a 400 that names the parameter.
#[test]
fn the_flame_graph_folds_instances_into_classes_when_asked() {
    let dash = start_on(two_instances());
    let by_instance = "driver;m::Worker[actor-1].process 3\ndriver;m::Worker[actor-2].process 5\n";
    for query in ["", "&fold=", "&fold=instance"] {
        let (status, folded) = get(
            &dash,
            &format!("/api/view?token=sesame&view=flame&format=folded{query}"),
        );
        assert_eq!((status, folded.as_str()), (200, by_instance), "{query:?}");
    }
    let (status, folded) = get(
        &dash,
        "/api/view?token=sesame&view=flame&format=folded&fold=class",
    );
    assert_eq!(
        (status, folded.as_str()),
        (200, "driver;m::Worker.process 8\n")
    );
    // Other metrics fold the same way.
    let (status, running) = get(
        &dash,
        "/api/view?token=sesame&view=flame&format=folded&fold=class&metric=running",
    );
    assert_eq!(status, 200);
    assert!(
        running.contains("driver;m::Worker.process 8\n"),
        "{running}"
    );
    assert!(!running.contains("[actor-"), "{running}");

    let frame_titles = |svg: &str| -> Vec<String> {
        svg.split("<title>")
            .skip(1)
            .filter_map(|t| t.split(" (").next())
            .map(str::to_owned)
            .collect()
    };
    let (status, svg) = get(&dash, "/api/view?token=sesame&view=flame&format=svg");
    assert_eq!(status, 200);
    let titles = frame_titles(&svg);
    assert!(
        titles.iter().any(|t| t == "m::Worker[actor-1].process")
            && titles.iter().any(|t| t == "m::Worker[actor-2].process"),
        "{titles:?}"
    );
    let (status, svg) = get(
        &dash,
        "/api/view?token=sesame&view=flame&format=svg&fold=class",
    );
    assert_eq!(status, 200);
    let titles = frame_titles(&svg);
    assert!(
        titles.iter().any(|t| t == "m::Worker.process"),
        "{titles:?}"
    );
    assert!(!titles.iter().any(|t| t.contains("[actor-")), "{titles:?}");

    // Other views take the parameter and are unchanged by it.
    let (status, _) = get(
        &dash,
        "/api/view?token=sesame&view=logical&format=json&fold=class",
    );
    assert_eq!(status, 200);
    for bad in ["Class", "classes", "1"] {
        let (status, body) = get(
            &dash,
            &format!("/api/view?token=sesame&view=flame&fold={bad}"),
        );
        assert_eq!(status, 400, "fold={bad}: {body}");
        assert_eq!(
            body.trim(),
            format!("bad fold={bad}: choose instance or class")
        );
    }
    // The diff of a flame graph against a baseline takes it too.
    let (status, diff) = get(
        &dash,
        "/api/flamediff?token=sesame&fold=class&before=driver%3Bm%3A%3AWorker.process+4",
    );
    assert_eq!(status, 200, "{diff}");
    let (status, body) = get(&dash, "/api/flamediff?token=sesame&fold=no&before=x+1");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("fold=no"), "{body}");
}

/// The logical summary carries the bottleneck summary when `top=N` asks
/// for it (the first tab's panel), and says what is wrong with a bad N.
#[test]
fn the_logical_summary_carries_the_bottlenecks_when_asked() {
    let dash = start_on(two_instances());
    let (status, plain) = get(&dash, "/api/summary?token=sesame&view=logical");
    assert_eq!(status, 200);
    let plain: Value = serde_json::from_str(&plain).unwrap();
    assert!(plain.get("bottlenecks").is_none(), "{plain}");
    let (status, top) = get(&dash, "/api/summary?token=sesame&view=logical&top=1");
    assert_eq!(status, 200, "{top}");
    let top: Value = serde_json::from_str(&top).unwrap();
    let b = &top["bottlenecks"];
    assert_eq!(b["self_time"].as_array().map(Vec::len), Some(1), "{b}");
    assert_eq!(b["self_time"][0]["frame"], "m::Worker[actor-2].process");
    assert_eq!(b["self_time"][0]["nanos"], 5_000);
    assert_eq!(b["self_time"][0]["calls"], 1);
    assert_eq!(b["waits"], serde_json::json!([]));
    assert_eq!(b["data"], serde_json::json!([]));
    assert_eq!(b["deadlocks"], serde_json::json!([]));
    for bad in ["0", "51", "many"] {
        let (status, body) = get(
            &dash,
            &format!("/api/summary?token=sesame&view=logical&top={bad}"),
        );
        assert_eq!(status, 400, "top={bad}: {body}");
        assert!(body.starts_with(&format!("bad top={bad}")), "{body}");
    }
}

#[test]
fn events_push_the_counters() {
    let dash = start();
    let mut stream = TcpStream::connect(dash.local_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET /api/events?token=sesame HTTP/1.1\r\n\r\n")
        .unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 1024];
    while seen.matches("data: ").count() < 2 {
        let n = stream.read(&mut buf).expect("events keep coming");
        assert!(n > 0, "the stream ended: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.contains("text/event-stream"), "{seen}");
    let first = seen.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
    let event: Value = serde_json::from_str(first).unwrap();
    assert_eq!(event["stats"]["version"], 1);
    // Dropping the dashboard ends the stream.
    drop(dash);
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
}
