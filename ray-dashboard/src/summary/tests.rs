//! Unit tests of the summaries, deltas and patches.

use super::*;
use proptest::prelude::*;

/// A scalar field's value, `null` included.
fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..3).prop_map(Value::from),
        "[a-c]{0,2}".prop_map(Value::from),
    ]
}

/// An array of items with distinct keys: `ids` string ids (`k3`) or
/// numeric ones, or, like the Gantt chart's flow events, a distinct
/// `key` beside an `id` two items share.
fn keyed_array(style: u8) -> impl Strategy<Value = Value> {
    prop::collection::btree_map(0u8..12, (scalar(), 0u8..3), 0..8).prop_map(move |items| {
        Value::Array(
            items
                .into_iter()
                .map(|(n, (v, w))| match style {
                    0 => json!({"id": format!("k{n}"), "v": v, "w": w}),
                    1 => json!({"id": n, "v": v}),
                    _ => json!({"key": format!("s{n}"), "id": n / 2, "v": v}),
                })
                .collect(),
        )
    })
}

/// A summary-like object: some scalar fields and some keyed arrays, any
/// of them absent; a field may also hold an unkeyed array or an object.
fn summary_like() -> impl Strategy<Value = Value> {
    (
        prop::collection::btree_map(
            prop::sample::select(vec!["a", "b", "c", "nested"]),
            scalar(),
            0..4,
        ),
        // `xs` is sometimes a scalar: a field that changes type.
        prop::option::of(prop_oneof![keyed_array(0), scalar()]),
        prop::option::of(keyed_array(1)),
        prop::option::of(keyed_array(2)),
        prop::option::of(prop::collection::vec(scalar(), 0..3)),
    )
        .prop_map(|(scalars, xs, ys, zs, loose)| {
            let mut out = Map::new();
            for (name, value) in scalars {
                let value = if name == "nested" {
                    json!({"inner": value})
                } else {
                    value
                };
                out.insert(name.to_owned(), value);
            }
            for (name, array) in [
                ("xs", xs),
                ("ys", ys),
                ("zs", zs),
                ("loose", loose.map(Value::Array)),
            ] {
                if let Some(array) = array {
                    out.insert(name.to_owned(), array);
                }
            }
            Value::Object(out)
        })
}

/// `value` with each keyed array turned into a map by key, so two
/// summaries compare equal whatever the order of their items.
fn by_key(value: &Value) -> Value {
    let Some(fields) = value.as_object() else {
        return value.clone();
    };
    let mut out = Map::new();
    for (name, v) in fields {
        let v = match v.as_array() {
            Some(items) if !items.is_empty() && keyed(items) => {
                let map: Map<String, Value> = items
                    .iter()
                    .map(|i| (item_key(i).unwrap(), i.clone()))
                    .collect();
                assert_eq!(map.len(), items.len(), "keys are distinct in {name}");
                Value::Object(map)
            }
            _ => v.clone(),
        };
        out.insert(name.clone(), v);
    }
    Value::Object(out)
}

proptest! {
    /// Patching `old` with `diff(old, new)` gives `new` (arrays compared
    /// as maps by key), and an unchanged summary has no delta.
    #[test]
    fn patching_with_the_diff_gives_the_new_summary(
        old in summary_like(),
        new in summary_like(),
    ) {
        prop_assert_eq!(diff(&old, &old), None);
        prop_assert_eq!(diff(&new, &new), None);
        let mut patched = old.clone();
        match diff(&old, &new) {
            Some(delta) => patch(&mut patched, &delta),
            None => prop_assert_eq!(&old, &new),
        }
        prop_assert_eq!(by_key(&patched), by_key(&new));
    }
}

/// A delta sends only the items that changed and the keys removed.
#[test]
fn a_delta_carries_only_what_changed() {
    let old = json!({
        "n": 1,
        "same": "x",
        "xs": [{"id": "a", "v": 1}, {"id": "b", "v": 2}, {"id": "c", "v": 3}],
    });
    let new = json!({
        "n": 2,
        "same": "x",
        "xs": [{"id": "a", "v": 1}, {"id": "b", "v": 20}, {"id": "d", "v": 4}],
    });
    let delta = diff(&old, &new).expect("something changed");
    assert_eq!(delta["fields"], json!({"n": 2}));
    assert_eq!(delta["arrays"]["xs"]["remove"], json!(["c"]));
    assert_eq!(
        delta["arrays"]["xs"]["upsert"],
        json!([{"id": "b", "v": 20}, {"id": "d", "v": 4}])
    );
    let mut patched = old.clone();
    patch(&mut patched, &delta);
    assert_eq!(patched, new);
}

/// Items are keyed as the page keys them: `key`, else `id`, a null one
/// being none; a field that becomes null is sent as a whole summary.
#[test]
fn keys_and_nulls_read_as_the_page_reads_them() {
    assert_eq!(
        item_key(&json!({"key": "s1", "id": 1})).as_deref(),
        Some("s1")
    );
    assert_eq!(
        item_key(&json!({"key": null, "id": "a"})).as_deref(),
        Some("a")
    );
    assert_eq!(item_key(&json!({"id": 7})).as_deref(), Some("7"));
    assert_eq!(item_key(&json!({"id": null})), None);
    let old = json!({"expanded": "A", "n": 1});
    let new = json!({"expanded": null, "n": 1});
    assert_eq!(diff(&old, &new), Some(json!({"replace": new})));
    let gone = json!({"n": 1});
    let delta = diff(&old, &gone).unwrap();
    assert_eq!(delta["fields"], json!({"expanded": null}));
    let mut patched = old.clone();
    patch(&mut patched, &delta);
    assert_eq!(patched, gone);
}

/// Items sharing a key cannot be patched one by one: such an array is
/// sent whole, and the patch still gives the new summary.
#[test]
fn an_array_with_repeated_keys_is_sent_whole() {
    let old = json!({"a": [{"id": "x", "v": 1}, {"id": "x", "v": 2}]});
    let new = json!({"a": [{"id": "x", "v": 1}, {"id": "x", "v": 3}]});
    let delta = diff(&old, &new).expect("changed");
    assert_eq!(delta["fields"]["a"], new["a"], "{delta}");
    let mut patched = old.clone();
    patch(&mut patched, &delta);
    assert_eq!(patched, new);
}
