//! The size and shape of a run, and what it came to.

/// The size of one run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Seed of everything random.
    pub seed: u64,
    /// Nodes at the start.
    pub nodes: usize,
    /// Tasks in all, placement-group tasks included.
    pub tasks: usize,
    /// Placement groups created over the run.
    pub groups: usize,
    /// Tasks submitted into each group.
    pub tasks_per_group: usize,
    /// Nodes joining mid-run (they have [`LATE`]).
    pub joins: usize,
    /// Nodes leaving mid-run.
    pub leaves: usize,
    /// Tasks submitted per tick.
    pub arrivals_per_tick: usize,
    /// A node gossips every this many ticks.
    pub gossip_every: u64,
    /// Foreign entries a gossip message carries besides the sender's own.
    pub gossip_fanout: usize,
}

impl Config {
    /// The default scale of the simulation test.
    pub fn full(seed: u64) -> Self {
        Self {
            seed,
            nodes: 1_000,
            tasks: 1_000_000,
            groups: 200,
            tasks_per_group: 40,
            joins: 5,
            leaves: 5,
            arrivals_per_tick: 400,
            gossip_every: 20,
            gossip_fanout: 3,
        }
    }
}

impl Config {
    /// A smaller cluster for checking that a seed replays identically:
    /// 100 nodes, 100,000 tasks.
    pub fn replay(seed: u64) -> Self {
        Self {
            nodes: 100,
            tasks: 100_000,
            groups: 20,
            arrivals_per_tick: 40,
            ..Self::full(seed)
        }
    }
}

/// What a run came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Hash of every action and delivery, in order.
    pub trace_hash: u64,
    /// Events processed.
    pub events: u64,
    /// Simulated time at the end.
    pub ticks: u64,
    /// Tasks run to completion.
    pub completed: u64,
    /// Spill messages sent.
    pub spills: u64,
    /// Spills refused by their target (stale views).
    pub refusals: u64,
    /// Infeasible reports.
    pub infeasible_reports: u64,
    /// Tasks reported infeasible that ran after a node joined.
    pub late_runs: u64,
    /// Tasks that never ran because no node could ever run them.
    pub never_ran: u64,
    /// Runs lost with a node that left (the task was submitted again).
    pub lost_runs: u64,
    /// Gossip updates applied.
    pub gossip_updates: u64,
    /// Placement-group reservations that failed phase two and were retried.
    pub pg_aborts: u64,
}
