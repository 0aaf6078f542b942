//! Insight layer of ray-rs: records the runtime's tracing spans for the five views.
