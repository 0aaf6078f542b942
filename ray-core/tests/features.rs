//! What a build without ray-core's optional features says when a program
//! asks for one of them: a typed error naming the feature, never a silent
//! embedded run. These tests run in the `--no-default-features` build
//! (`.ci/run` runs it); with every feature on there is nothing to refuse.

#[cfg(not(feature = "cluster"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_address_without_the_cluster_feature_is_refused_by_name() {
    let err = ray_core::init_with(ray_core::Config {
        address: Some("127.0.0.1:6379".into()),
        ..Default::default()
    })
    .await
    .err()
    .expect("a build without the cluster feature cannot join a cluster");
    assert!(
        matches!(&err, ray_core::Error::InvalidArgument(m) if m.contains("`cluster` feature")),
        "{err}"
    );
}

#[cfg(not(feature = "insight"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insight_without_the_insight_feature_is_refused_by_name() {
    let err = ray_core::init_with(ray_core::Config {
        insight: Some(ray_core::insight::InsightOptions::default()),
        ..Default::default()
    })
    .await
    .err()
    .expect("a build without the insight feature cannot record");
    assert!(
        matches!(&err, ray_core::Error::InvalidArgument(m) if m.contains("`insight` feature")),
        "{err}"
    );
}
