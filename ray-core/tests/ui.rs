//! Compile-time behaviour of `#[remote]`: what it rejects, where the error
//! points, and that a well-formed task and actor compile.
//!
//! Regenerate the expected output with
//! `TRYBUILD=overwrite cargo test -p ray-core --test ui`, then read every
//! `.stderr`: each error must point at the offending token.

#[test]
fn remote_rejects_unsupported_signatures_with_pointed_errors() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}

#[test]
fn remote_accepts_a_plain_task_and_actor() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui-pass/*.rs");
}
