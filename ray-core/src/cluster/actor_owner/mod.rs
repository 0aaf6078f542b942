//! One actor, as seen by a process holding handles to it, as a sans-IO
//! state machine: events in, [`Action`]s out. No tokio, no clock, no I/O;
//! the async shell in `cluster::core::actors` creates, finds, pushes and
//! kills, and the seeded simulation in `sim` drives it step by step
//! through workers dying during creation and during calls, restarts the
//! GCS grants or refuses, handles dropped and handles escaping into
//! values.
//!
//! What it owns, per actor and process:
//! - the actor's lives: creating one (or, for a borrowed handle, finding
//!   it), the life that serves calls, the wait for the GCS's word on a
//!   restart, and death, with its cause;
//! - the calls made through this process's handles: queued in order while
//!   no life serves them, pushed to the life that does, and the calls of a
//!   lost life: sent to the next life within `max_task_retries`, or failed
//!   with `ActorUnavailable` (it restarts without them) or `ActorDied`
//!   (it does not restart);
//! - the restart budget (`max_restarts`; the GCS keeps the count, this
//!   mirrors it, and counts alone while the GCS has no row for the actor);
//! - when the actor goes: its owner kills it once no handle is left here
//!   and, if a handle escaped into a value, once its key object is freed
//!   everywhere; either way only after every call already pushed is
//!   answered. A detached actor outlives its handles.
//!
//! Guarantees (checked by the simulation for thousands of seeds): every
//! call ends exactly once, with an answer from a life it was pushed to or
//! a typed error; each life receives its calls in the order they were
//! made; a call is pushed at most `max_task_retries + 1` times; no more
//! than `max_restarts + 1` lives are created; the actor is never killed
//! for its handles going while a call pushed to it is unanswered; once no
//! handle is left (and no escaped one), an actor that is not detached is
//! killed or dead, and the machine ends.
//!
//! It must not depend on tokio, the transport or the runtime: the shell's
//! call payload is a type parameter it carries without looking inside.

#[cfg(test)]
mod sim;

use std::collections::{BTreeMap, VecDeque};

use hashbrown::HashMap;
use ray_proto::TaskId;

use crate::options::RETRY_FOREVER;

/// Whose handles these are, and what that allows.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Role {
    /// The actor's owner: it creates the actor, restarts it, and kills it
    /// when no handle is left.
    Owner {
        /// Restarts allowed ([`RETRY_FOREVER`]: no limit).
        max_restarts: u32,
        /// How often a call lost with a life is sent to the next one
        /// ([`RETRY_FOREVER`]: no limit).
        max_task_retries: u32,
        /// It outlives its handles (killed only when asked).
        detached: bool,
    },
    /// Handles found by name or decoded from a value: each life is found
    /// (through the GCS), never created; calls lost with a life fail; the
    /// actor is never killed for these handles going.
    Borrower,
}

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CallError {
    /// The actor is dead for good; the cause.
    Died(String),
    /// The call was lost with a life of an actor that restarts, and its
    /// `max_task_retries` is spent; the cause of the loss.
    Unavailable(String),
}

/// What the shell must do, in order.
#[derive(Debug)]
pub(crate) enum Action<P> {
    /// Create life `life` (from 0) of the actor, or, for a borrower, find
    /// it (avoiding the worker of the life just lost); answer with
    /// [`ActorOwner::created`] or [`ActorOwner::create_failed`].
    Create {
        /// The life.
        life: u32,
    },
    /// Push call `task` to the current life. The payload is the shell's
    /// until the call is answered ([`ActorOwner::answered`]) or handed
    /// back lost ([`ActorOwner::call_lost`]).
    Push {
        /// The call.
        task: TaskId,
        /// How often it was pushed before, to earlier lives.
        attempt: u32,
        /// What the shell needs to push it.
        payload: P,
    },
    /// Kill the current life's actor on its worker.
    Kill,
    /// Tell the GCS the actor's life was lost (`used` restarts so far);
    /// answer with [`ActorOwner::restart_answer`].
    AskRestart {
        /// Restarts used so far.
        used: u32,
        /// Why the life was lost.
        cause: String,
    },
    /// Call `task` failed; its payload comes back.
    Fail {
        /// The call.
        task: TaskId,
        /// Why.
        error: CallError,
        /// Its payload.
        payload: P,
    },
    /// Nothing is left to do: no handle, no call, and the actor is dead
    /// or (for a borrower, or a detached actor's owner) left alone.
    Ended,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// A [`Action::Create`] is out.
    Creating,
    /// An [`Action::AskRestart`] is out.
    AskingRestart,
    /// The current life serves calls.
    Alive,
    /// Dead for good.
    Dead(String),
}

/// A call that failed, for the shell to complete at once: failures are
/// taken apart from the other actions ([`ActorOwner::take_failed`]), so
/// they need not wait behind a creation or a GCS round trip.
pub(crate) struct Failed<P> {
    /// The call.
    pub(crate) task: TaskId,
    /// Why.
    pub(crate) error: CallError,
    /// Its payload.
    pub(crate) payload: P,
}

/// A call waiting for a life.
struct Waiting<P> {
    attempt: u32,
    payload: P,
}

/// One actor's state in this process; see the module docs.
pub(crate) struct ActorOwner<P> {
    role: Role,
    phase: Phase,
    /// Lives begun (the current one is `life - 1` once one has begun).
    life: u32,
    /// Restarts used (the GCS's count, mirrored).
    used: u32,
    /// The GCS has the actor's row: it counts restarts from then on.
    known: bool,
    /// Calls waiting for a life, by id: the order they were made in.
    queue: BTreeMap<TaskId, Waiting<P>>,
    /// Calls pushed to the current life and not answered, with their
    /// attempt.
    pushed: HashMap<TaskId, u32>,
    /// Calls pushed to a lost life whose payload the shell has not handed
    /// back yet: the next life gets no call before them.
    limbo: HashMap<TaskId, u32>,
    /// Every handle here is gone.
    handles_gone: bool,
    /// A handle went into a value that may reach another process.
    escaped: bool,
    /// The actor's key object was freed: no handle is left anywhere.
    key_freed: bool,
    /// A kill was sent to the current life.
    kill_sent: bool,
    /// A [`Action::Create`] or [`Action::AskRestart`] is not answered:
    /// the machine does not end before it is (a life created meanwhile
    /// must still be killed).
    outstanding: bool,
    ended: bool,
    actions: VecDeque<Action<P>>,
    /// Calls failed, not taken yet (they come out before `actions`).
    failed: Vec<Failed<P>>,
}

/// The cause of death of an actor killed through a handle (or with its
/// placement group).
pub(crate) const KILLED: &str = crate::actor::KILLED;
/// The cause of death of an actor whose handles are all gone.
pub(crate) const HANDLES_GONE: &str = "every handle to it is gone";

impl<P> ActorOwner<P> {
    /// The machine for an actor with `role`; its first action creates
    /// (or finds) life 0.
    pub(crate) fn new(role: Role) -> Self {
        let mut me = Self {
            role,
            phase: Phase::Creating,
            life: 0,
            used: 0,
            known: false,
            queue: BTreeMap::new(),
            pushed: HashMap::new(),
            limbo: HashMap::new(),
            handles_gone: false,
            escaped: false,
            key_freed: false,
            kill_sent: false,
            outstanding: false,
            ended: false,
            actions: VecDeque::new(),
            failed: Vec::new(),
        };
        me.begin_life();
        me
    }

    /// The next thing to do, if any (the shell takes them in batches with
    /// [`Self::take_actions`]).
    #[cfg(test)]
    pub(crate) fn poll(&mut self) -> Option<Action<P>> {
        if let Some(f) = self.failed.pop() {
            return Some(Action::Fail {
                task: f.task,
                error: f.error,
                payload: f.payload,
            });
        }
        self.actions.pop_front()
    }

    /// Whether actions wait for [`Self::poll`].
    pub(crate) fn has_actions(&self) -> bool {
        !self.actions.is_empty() || !self.failed.is_empty()
    }

    /// Moves every action waiting onto the end of `out`, in order (failed
    /// calls first).
    pub(crate) fn take_actions(&mut self, out: &mut VecDeque<Action<P>>) {
        out.extend(self.failed.drain(..).map(|f| Action::Fail {
            task: f.task,
            error: f.error,
            payload: f.payload,
        }));
        out.append(&mut self.actions);
    }

    /// Moves the failed calls waiting onto `out`, leaving the other
    /// actions: the shell completes them where the event happened.
    pub(crate) fn take_failed(&mut self, out: &mut Vec<Failed<P>>) {
        out.append(&mut self.failed);
    }

    /// Why the actor is dead, if it is.
    pub(crate) fn dead(&self) -> Option<&str> {
        match &self.phase {
            Phase::Dead(cause) => Some(cause),
            _ => None,
        }
    }

    /// Whether the machine has ended ([`Action::Ended`] was given).
    pub(crate) fn is_ended(&self) -> bool {
        self.ended
    }

    /// A handle made call `task`.
    pub(crate) fn call(&mut self, task: TaskId, payload: P) {
        match &self.phase {
            Phase::Dead(cause) => {
                let error = CallError::Died(cause.clone());
                self.failed.push(Failed {
                    task,
                    error,
                    payload,
                });
            }
            Phase::Alive if self.queue.is_empty() && self.limbo.is_empty() => {
                self.pushed.insert(task, 0);
                self.actions.push_back(Action::Push {
                    task,
                    attempt: 0,
                    payload,
                });
            }
            _ => {
                self.queue.insert(
                    task,
                    Waiting {
                        attempt: 0,
                        payload,
                    },
                );
            }
        }
    }

    /// Life `life` is created (and, for an owner, registered with the
    /// GCS) or found: it serves the calls waiting.
    pub(crate) fn created(&mut self, life: u32) {
        if life + 1 != self.life || !self.outstanding {
            return;
        }
        self.outstanding = false;
        if let Phase::Dead(_) = self.phase {
            // Killed while it was being created.
            self.kill_sent = true;
            self.actions.push_back(Action::Kill);
            self.settle();
            return;
        }
        self.known |= matches!(self.role, Role::Owner { .. });
        self.phase = Phase::Alive;
        self.kill_sent = false;
        self.flush();
        self.settle();
    }

    /// Creating (or finding) life `life` failed. `system`: its worker or
    /// node died (the actor may restart); otherwise the failure is the
    /// actor's own (its constructor failed, the GCS refused it, it cannot
    /// be found) and it is dead with `cause`.
    pub(crate) fn create_failed(&mut self, life: u32, system: bool, cause: String) {
        if life + 1 != self.life || !self.outstanding {
            return;
        }
        self.outstanding = false;
        if self.phase != Phase::Creating {
            self.settle();
            return;
        }
        if system {
            self.life_lost(cause);
        } else {
            self.die(cause);
        }
    }

    /// The current life `life`'s worker was lost, with `cause`. Its calls
    /// come back through [`Self::call_lost`].
    pub(crate) fn lost(&mut self, life: u32, cause: String) {
        if self.ended || self.phase != Phase::Alive || life + 1 != self.life {
            return;
        }
        let pushed = std::mem::take(&mut self.pushed);
        self.limbo.extend(pushed);
        self.life_lost(cause);
    }

    /// Call `task`, pushed to a life whose worker was lost (`cause`), is
    /// handed back with its payload: it waits for the next life within its
    /// `max_task_retries`, or fails.
    /// Returns the payload of a call it does not know (for the shell to
    /// drop outside its locks).
    #[must_use]
    pub(crate) fn call_lost(&mut self, task: TaskId, payload: P, cause: String) -> Option<P> {
        if self.phase == Phase::Alive && self.pushed.contains_key(&task) {
            // Calls are lost only with their worker: the current life is
            // lost, though the shell has not said so yet.
            self.lost(self.life - 1, cause.clone());
        }
        let Some(attempt) = self
            .limbo
            .remove(&task)
            .or_else(|| self.pushed.remove(&task))
        else {
            return Some(payload);
        };
        let error = match (&self.phase, self.role) {
            (Phase::Dead(dead), _) => Some(CallError::Died(dead.clone())),
            (_, Role::Borrower) => Some(CallError::Died(cause)),
            (
                _,
                Role::Owner {
                    max_task_retries, ..
                },
            ) => {
                if !self.restarts_left() {
                    Some(CallError::Died(self.used_up(&cause)))
                } else if max_task_retries == RETRY_FOREVER || attempt < max_task_retries {
                    None
                } else {
                    Some(CallError::Unavailable(cause))
                }
            }
        };
        match error {
            Some(error) => self.failed.push(Failed {
                task,
                error,
                payload,
            }),
            None => {
                self.queue.insert(
                    task,
                    Waiting {
                        attempt: attempt + 1,
                        payload,
                    },
                );
            }
        }
        if self.phase == Phase::Alive {
            self.flush();
        }
        self.settle();
        None
    }

    /// Call `task` was answered (its value is here, or it failed where it
    /// ran, or the shell could not push it).
    pub(crate) fn answered(&mut self, task: TaskId) {
        if self
            .pushed
            .remove(&task)
            .or_else(|| self.limbo.remove(&task))
            .is_some()
        {
            if self.phase == Phase::Alive {
                self.flush();
            }
            self.settle();
        }
    }

    /// The GCS's word on a restart: `Some(attempt)`, the restart it counts
    /// (a new life is created); `None`, no restart.
    pub(crate) fn restart_answer(&mut self, restart: Option<u32>, cause: String) {
        if !self.outstanding {
            return;
        }
        self.outstanding = false;
        if let Phase::Dead(_) = self.phase {
            // Killed while the GCS was asked. A restart it granted is
            // created and then killed, so the GCS's row does not stay
            // "restarting" for borrowers to wait on.
            if let Some(attempt) = restart {
                self.used = self.used.max(attempt);
                self.outstanding = true;
                let life = self.life;
                self.life += 1;
                self.actions.push_back(Action::Create { life });
            } else {
                self.settle();
            }
            return;
        }
        match restart {
            Some(attempt) => {
                self.used = self.used.max(attempt);
                self.begin_life();
            }
            None => {
                let cause = self.used_up(&cause);
                self.die(cause);
            }
        }
    }

    /// Every handle here is gone.
    pub(crate) fn handles_gone(&mut self) {
        self.handles_gone = true;
        self.settle();
    }

    /// A new handle here (a handle came back in a value after the others
    /// went).
    pub(crate) fn handles_back(&mut self) {
        self.handles_gone = false;
    }

    /// A handle went into a value that may reach another process.
    pub(crate) fn escape(&mut self) {
        self.escaped = true;
    }

    /// The actor's key object was freed: no handle is left anywhere.
    pub(crate) fn key_freed(&mut self) {
        self.key_freed = true;
        self.settle();
    }

    /// Kill the actor now through a handle: waiting and later calls fail
    /// with [`KILLED`]; a life still being created is killed once it is.
    pub(crate) fn kill(&mut self) {
        self.kill_because(KILLED.to_string());
    }

    /// The actor is dead for `cause` before its first life was asked for
    /// (it was created into a placement group already removed): the
    /// [`Action::Create`] still waiting is withdrawn, so nothing is created
    /// only to be killed (a creation into a removed group would wait for
    /// good). Once the creation is under way this is [`Self::kill_because`].
    pub(crate) fn abandon(&mut self, cause: String) {
        let before_first = self.phase == Phase::Creating && self.outstanding && self.life == 1;
        let waiting = self
            .actions
            .iter()
            .any(|a| matches!(a, Action::Create { life: 0 }));
        if before_first && waiting {
            self.actions.retain(|a| !matches!(a, Action::Create { .. }));
            self.outstanding = false;
            self.die(cause);
        } else {
            self.kill_because(cause);
        }
    }

    /// [`Self::kill`], for `cause` (its placement group was removed, say).
    pub(crate) fn kill_because(&mut self, cause: String) {
        if let Phase::Dead(_) = self.phase {
            return;
        }
        if self.phase == Phase::Alive && !self.kill_sent {
            self.kill_sent = true;
            self.actions.push_back(Action::Kill);
        }
        self.die(cause);
    }

    // ---------------------------------------------------------------

    fn begin_life(&mut self) {
        self.phase = Phase::Creating;
        self.outstanding = true;
        let life = self.life;
        self.life += 1;
        self.actions.push_back(Action::Create { life });
    }

    fn restarts_left(&self) -> bool {
        match self.role {
            Role::Owner { max_restarts, .. } => {
                max_restarts == RETRY_FOREVER || self.used < max_restarts
            }
            Role::Borrower => true,
        }
    }

    fn used_up(&self, cause: &str) -> String {
        match self.role {
            Role::Owner { max_restarts, .. } if max_restarts > 0 => {
                format!("its restarts are used up ({}); last: {cause}", self.used)
            }
            _ => cause.to_string(),
        }
    }

    /// The current life (or its creation) was lost with `cause`: another
    /// life, or death.
    fn life_lost(&mut self, cause: String) {
        let idle = self.queue.is_empty() && self.pushed.is_empty() && self.limbo.is_empty();
        if idle && (self.unwanted() || (self.handles_gone && matches!(self.role, Role::Borrower))) {
            // No handle is left to use another life, and no call waits
            // for one.
            self.die(HANDLES_GONE.to_string());
            return;
        }
        match self.role {
            // A borrower finds the actor again: the GCS says where its
            // next life is, or that it is dead.
            Role::Borrower => self.begin_life(),
            Role::Owner { .. } if !self.restarts_left() => {
                let cause = self.used_up(&cause);
                self.die(cause);
            }
            // The GCS has no row yet to count on: the count is kept here
            // (the registration that follows carries the actor).
            Role::Owner { .. } if !self.known => {
                self.used += 1;
                self.begin_life();
            }
            Role::Owner { .. } => {
                self.phase = Phase::AskingRestart;
                self.outstanding = true;
                self.actions.push_back(Action::AskRestart {
                    used: self.used,
                    cause,
                });
            }
        }
        self.settle();
    }

    fn die(&mut self, cause: String) {
        if let Phase::Dead(_) = self.phase {
            return;
        }
        for (task, w) in std::mem::take(&mut self.queue) {
            self.failed.push(Failed {
                task,
                error: CallError::Died(cause.clone()),
                payload: w.payload,
            });
        }
        self.phase = Phase::Dead(cause);
        self.settle();
    }

    /// Pushes the waiting calls to the live life, in order, once no call
    /// of a lost life may still come back to go before them.
    fn flush(&mut self) {
        // (An empty queue is the common case, on every answer: taking and
        // walking an empty map is not free.)
        if self.queue.is_empty() || !self.limbo.is_empty() || self.kill_sent {
            return;
        }
        for (task, w) in std::mem::take(&mut self.queue) {
            self.pushed.insert(task, w.attempt);
            self.actions.push_back(Action::Push {
                task,
                attempt: w.attempt,
                payload: w.payload,
            });
        }
    }

    /// Whether no handle is left that could still use the actor, so its
    /// owner should let it go.
    fn unwanted(&self) -> bool {
        match self.role {
            Role::Owner { detached, .. } => {
                self.handles_gone && !detached && (!self.escaped || self.key_freed)
            }
            Role::Borrower => false,
        }
    }

    /// Kills an unwanted actor once its calls are answered, and ends the
    /// machine when nothing is left.
    fn settle(&mut self) {
        if self.ended || self.outstanding {
            return;
        }
        let quiet = self.pushed.is_empty() && self.limbo.is_empty() && self.queue.is_empty();
        if self.phase == Phase::Alive && quiet && self.unwanted() {
            if !self.kill_sent {
                self.kill_sent = true;
                self.actions.push_back(Action::Kill);
            }
            self.phase = Phase::Dead(HANDLES_GONE.to_string());
        }
        let done = match (&self.phase, self.role) {
            (Phase::Dead(_), _) => self.handles_gone,
            (Phase::Alive, Role::Borrower) => self.handles_gone,
            // A detached actor's owner, or one whose handle escaped,
            // supervises it while it lives.
            _ => false,
        };
        if done && quiet {
            self.ended = true;
            self.actions.push_back(Action::Ended);
        }
    }
}
