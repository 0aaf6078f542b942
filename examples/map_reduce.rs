//! Word count as map-reduce: objects passed by reference, tasks returning
//! partial results, and a reduce task that receives the partials as nested
//! `ObjectRef`s and fetches them itself.
//!
//! The text is generated from a fixed vocabulary with a seeded RNG (skewed,
//! so some words are much more common), counted by the cluster and checked
//! against a local count; a mismatch exits non-zero.
//!
//! `cargo run --release --example map_reduce`

use std::collections::BTreeMap;

use anyhow::ensure;
use ray_core::prelude::*;

#[path = "shapes/splitmix.rs"]
mod splitmix;

use splitmix::SplitMix64;

const DOCUMENTS: usize = 32;
const WORDS_PER_DOCUMENT: usize = 20_000;
const SEED: u64 = 7;
const VOCABULARY: &[&str] = &[
    "actor",
    "archive",
    "batch",
    "buffer",
    "cluster",
    "core",
    "driver",
    "error",
    "future",
    "gcs",
    "get",
    "handle",
    "insight",
    "job",
    "lease",
    "memory",
    "node",
    "object",
    "owner",
    "put",
    "queue",
    "quic",
    "raylet",
    "reference",
    "remote",
    "resource",
    "rust",
    "schedule",
    "spill",
    "store",
    "task",
    "tokio",
    "trace",
    "wait",
    "worker",
    "zero",
];

/// Word counts as `(word, count)`, sorted by word.
type Counts = Vec<(String, u64)>;

/// Map: counts the words of one document.
#[remote]
fn count_words(document: String) -> Counts {
    count(&document).into_iter().collect()
}

/// Reduce: fetches every partial count and merges them.
#[remote]
fn merge_counts(partials: Vec<ObjectRef<Counts>>) -> Result<Counts, String> {
    let mut total = BTreeMap::new();
    for partial in &partials {
        for (word, n) in partial.get_blocking().map_err(|e| e.to_string())? {
            *total.entry(word).or_insert(0) += n;
        }
    }
    Ok(total.into_iter().collect())
}

fn count(text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for word in text.split_whitespace() {
        *counts.entry(word.to_string()).or_insert(0) += 1;
    }
    counts
}

/// One document: words drawn with a skew towards the start of the
/// vocabulary (the smaller of two uniform picks).
fn document(rng: &mut SplitMix64) -> String {
    let n = VOCABULARY.len() as u64;
    let words: Vec<&str> = (0..WORDS_PER_DOCUMENT)
        .map(|_| VOCABULARY[(rng.next_u64() % n).min(rng.next_u64() % n) as usize])
        .collect();
    words.join(" ")
}

/// The `n` most common words, most common first, ties by word.
fn top(counts: &Counts, n: usize) -> Vec<(String, u64)> {
    let mut sorted = counts.clone();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    sorted.truncate(n);
    sorted
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let ray = ray_core::init().await?;
    let mut rng = SplitMix64::new(SEED);
    let documents: Vec<String> = (0..DOCUMENTS).map(|_| document(&mut rng)).collect();

    let mut partials = Vec::with_capacity(DOCUMENTS);
    for doc in &documents {
        let doc_ref = ray.put(doc.clone()).await?;
        partials.push(count_words::remote(&ray, doc_ref)?);
    }
    let counts = merge_counts::remote(&ray, partials)?.get().await?;

    println!(
        "{DOCUMENTS} documents, {} words, {} distinct; top 10:",
        DOCUMENTS * WORDS_PER_DOCUMENT,
        counts.len()
    );
    for (word, n) in top(&counts, 10) {
        println!("  {word:<10} {n}");
    }

    let local: Counts = count(&documents.join(" ")).into_iter().collect();
    ray.shutdown();
    ensure!(
        counts == local,
        "distributed count differs from the local count"
    );
    println!("verified against a local count");
    Ok(())
}
