//! Property tests of the scheduler's invariants: exact accounting, no
//! overcommit, every feasible request eventually runs.

use std::collections::BTreeSet;

use proptest::prelude::*;
use ray_sched::{Admission, LocalQueue, NodeResources, Quantity, ResourceSet, CPU, GPU, MEMORY};

/// splitmix64: a tiny seeded generator, so one proptest case can drive
/// hundreds of thousands of operations without building them as a strategy.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A fractional amount as a user would write it: tenths, thirds, or an
    /// arbitrary float below 4.
    fn amount(&mut self) -> Quantity {
        let x = match self.below(4) {
            0 => self.below(40) as f64 * 0.1,
            1 => self.below(12) as f64 / 3.0,
            2 => (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 4.0,
            _ => 0.0001 * self.below(100) as f64,
        };
        Quantity::from_f64(x).expect("0 <= x < 4 is valid")
    }
}

const OPS_PER_CASE: usize = 125_000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    #[test]
    fn fractional_acquire_release_never_drifts(seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let huge = Quantity::from_units(1_000_000_000);
        let names = [CPU, GPU, MEMORY, "tpu"];
        let total: ResourceSet = names.iter().map(|n| (*n, huge)).collect();
        let mut node = NodeResources::new(total.clone());
        let mut held: Vec<ResourceSet> = Vec::new();
        for step in 0..OPS_PER_CASE {
            if held.is_empty() || (held.len() < 1_000 && rng.below(2) == 0) {
                let req: ResourceSet = names.iter().map(|n| (*n, rng.amount())).collect();
                prop_assert!(node.try_acquire(&req));
                held.push(req);
            } else {
                let i = rng.below(held.len() as u64) as usize;
                node.release(&held.swap_remove(i));
            }
            if step % 10_000 == 0 {
                // The exact sum of what is held, in raw units.
                for name in names {
                    let sum: u64 = held.iter().map(|r| r.get(name).raw()).sum();
                    prop_assert_eq!(node.used().get(name).raw(), sum);
                }
            }
        }
        for req in held.drain(..) {
            node.release(&req);
        }
        prop_assert!(node.used().is_empty(), "used drifted to {}", node.used());
        prop_assert_eq!(node.available(), total);
    }

    #[test]
    fn quantity_f64_round_trip_is_within_a_ten_thousandth(x in 0.0f64..1e6) {
        let q = Quantity::from_f64(x).unwrap();
        prop_assert!((q.to_f64() - x).abs() <= 1e-4, "{x} -> {q}");
    }

    #[test]
    fn quantity_display_parses_back_to_the_same_amount(raw in 0u64..10_000_000_000) {
        let q = Quantity::from_raw(raw);
        let parsed: f64 = q.to_string().parse().unwrap();
        prop_assert_eq!(Quantity::from_f64(parsed).unwrap(), q);
    }
}

/// Requests the queue property draws from; the last two are infeasible on
/// [`queue_total`].
fn palette() -> Vec<ResourceSet> {
    let q = |x: f64| Quantity::from_f64(x).unwrap();
    vec![
        ResourceSet::cpu(q(1.0)),
        ResourceSet::cpu(q(0.5)),
        ResourceSet::cpu(q(2.0)),
        ResourceSet::cpu(q(0.3)).with(GPU, q(0.25)),
        ResourceSet::new().with(GPU, q(1.0)),
        ResourceSet::cpu(q(0.1)).with("tpu", q(1.0)),
        ResourceSet::new(),
        ResourceSet::cpu(q(5.0)),
        ResourceSet::new().with("other", q(1.0)),
    ]
}

fn queue_total() -> ResourceSet {
    ResourceSet::cpu(Quantity::from_units(4))
        .with(GPU, Quantity::ONE)
        .with("tpu", Quantity::from_units(2))
}

#[derive(Clone, Debug)]
enum Op {
    /// Submit a request from the palette.
    Submit(usize),
    /// A running item finishes; optionally the caller then drains the queue.
    Finish { pick: usize, drain: bool },
    /// A running item blocks in get() and lends its resources back.
    Block(usize),
    /// A blocked item resumes, taking its resources back unchecked.
    Resume(usize),
    /// Hand out one queued item, if any fits.
    Pop,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..palette().len()).prop_map(Op::Submit),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(pick, drain)| Op::Finish { pick, drain }),
        1 => any::<usize>().prop_map(Op::Block),
        1 => any::<usize>().prop_map(Op::Resume),
        1 => Just(Op::Pop),
    ]
}

/// What the test knows about the queue from outside.
struct Model {
    queue: LocalQueue<u32>,
    total: ResourceSet,
    running: Vec<(ResourceSet, u32)>,
    blocked: Vec<(ResourceSet, u32)>,
    handed_out: BTreeSet<u32>,
    feasible: BTreeSet<u32>,
    /// Last id handed out per palette entry, to check FIFO within a class.
    last_of_class: Vec<Option<u32>>,
}

impl Model {
    fn hand_out(&mut self, req: ResourceSet, id: u32) -> Result<(), TestCaseError> {
        // Only acquire_forced may push `used` past `total`, and it may leave
        // an unrelated resource overcommitted; what a hand-out acquired must
        // still be within the total.
        let used = self.queue.resources().used();
        for (name, _) in req.iter() {
            prop_assert!(
                used.get(name) <= self.total.get(name),
                "handing out {} overcommitted {}: used {} > total {}",
                req,
                name,
                used,
                self.total
            );
        }
        prop_assert!(self.handed_out.insert(id), "item {} handed out twice", id);
        let class = palette()
            .iter()
            .position(|r| *r == req)
            .expect("palette request");
        if let Some(last) = self.last_of_class[class] {
            prop_assert!(last < id, "class {} ran {} after {}", class, id, last);
        }
        self.last_of_class[class] = Some(id);
        self.running.push((req, id));
        Ok(())
    }

    fn drain(&mut self) -> Result<(), TestCaseError> {
        while let Some((req, id)) = self.queue.pop_runnable() {
            self.hand_out(req, id)?;
        }
        Ok(())
    }

    fn expected_used(&self) -> ResourceSet {
        let mut used = ResourceSet::new();
        for (req, _) in &self.running {
            used.add_assign(req);
        }
        used
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn local_queue_never_overcommits_and_eventually_runs_every_feasible_item(
        ops in prop::collection::vec(op(), 0..300)
    ) {
        let total = queue_total();
        let palette = palette();
        let mut m = Model {
            queue: LocalQueue::new(total.clone()),
            total,
            running: Vec::new(),
            blocked: Vec::new(),
            handed_out: BTreeSet::new(),
            feasible: BTreeSet::new(),
            last_of_class: vec![None; palette.len()],
        };
        let mut next_id = 0u32;
        for op in ops {
            match op {
                Op::Submit(i) => {
                    let id = next_id;
                    next_id += 1;
                    let req = palette[i].clone();
                    let feasible = req.is_subset_of(&m.total);
                    match m.queue.submit(req.clone(), id) {
                        Admission::Run(got) => {
                            prop_assert_eq!(got, id);
                            m.hand_out(req, id)?;
                        }
                        Admission::Queued => {}
                        Admission::Infeasible(got, why) => {
                            prop_assert_eq!(got, id);
                            prop_assert!(!feasible);
                            prop_assert_eq!(&why.request, &req);
                            prop_assert_eq!(&why.total, &m.total);
                        }
                    }
                    if feasible {
                        m.feasible.insert(id);
                    }
                }
                Op::Finish { pick, drain } if !m.running.is_empty() => {
                    let (req, _) = m.running.swap_remove(pick % m.running.len());
                    m.queue.release(&req);
                    if drain {
                        m.drain()?;
                    }
                }
                Op::Block(pick) if !m.running.is_empty() => {
                    let item = m.running.swap_remove(pick % m.running.len());
                    m.queue.release(&item.0);
                    m.blocked.push(item);
                }
                Op::Resume(pick) if !m.blocked.is_empty() => {
                    let item = m.blocked.swap_remove(pick % m.blocked.len());
                    m.queue.acquire_forced(&item.0);
                    m.running.push(item);
                }
                Op::Pop => {
                    if let Some((req, id)) = m.queue.pop_runnable() {
                        m.hand_out(req, id)?;
                    }
                }
                _ => {}
            }
            prop_assert_eq!(m.queue.resources().used(), &m.expected_used());
        }

        // Everything resumes and finishes; the queue must then hand out
        // every feasible item that has not run yet.
        for (req, _) in m.blocked.drain(..).collect::<Vec<_>>() {
            m.queue.acquire_forced(&req);
            m.queue.release(&req);
        }
        loop {
            for (req, _) in std::mem::take(&mut m.running) {
                m.queue.release(&req);
            }
            m.drain()?;
            if m.running.is_empty() {
                break;
            }
        }
        prop_assert_eq!(m.queue.queued_len(), 0);
        prop_assert!(m.queue.resources().used().is_empty());
        prop_assert_eq!(&m.handed_out, &m.feasible);
    }
}
