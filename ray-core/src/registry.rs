//! The registry of remote functions and actor classes, filled at link time.
//!
//! `#[remote]` emits one [`Registration`] per function, actor class and actor
//! method into the `linkme` distributed slice `RAY_REGISTRATIONS`, under a
//! [`FunctionId`] that hashes the module path, the name and the signature. Any
//! process running the same binary builds the same registry, so a task spec
//! only needs to carry the id.
//!
//! The slice is link-section data laid out by the linker, not filled by
//! constructors, so it is complete from the first instruction: code that runs
//! before `main` (a worker's `.init_array` entry point) may read it.

use std::any::Any;
use std::sync::OnceLock;

use hashbrown::HashMap;
use ray_proto::FunctionId;
use ray_store::ObjectBuffer;

use crate::error::{Error, UserError};
use crate::object::Encoded;

/// A return value, encoded (produced by generated code).
pub struct Returned(pub(crate) Encoded);

/// Why an invocation did not produce a value (besides panicking).
pub enum InvokeError {
    /// The runtime could not run it (an argument did not decode, the actor is gone).
    Failed(Error),
    /// The user function returned `Err`.
    User(UserError),
}

/// Entry point of a remote function: decoded arguments in, encoded result out.
pub type InvokeFn = fn(&[ObjectBuffer]) -> Result<Returned, InvokeError>;

/// The state of a live actor, type-erased.
pub type ActorState = Box<dyn Any + Send + Sync>;

/// Entry point of an actor constructor.
pub type ConstructFn = fn(&[ObjectBuffer]) -> Result<ActorState, InvokeError>;

/// How an actor method reaches its state.
#[derive(Clone, Copy)]
pub enum MethodInvoke {
    /// `&self`: may run beside other `&self` calls when concurrency allows.
    Shared(fn(&(dyn Any + Send + Sync), &[ObjectBuffer]) -> Result<Returned, InvokeError>),
    /// `&mut self`: runs alone.
    Exclusive(fn(&mut (dyn Any + Send + Sync), &[ObjectBuffer]) -> Result<Returned, InvokeError>),
}

/// A `#[remote]` function.
pub struct RemoteFunction {
    /// Stable id.
    pub id: FunctionId,
    /// `module::path::name`.
    pub name: &'static str,
    /// Runs the function.
    pub invoke: InvokeFn,
}

/// A `#[remote]` actor class.
pub struct ActorClass {
    /// Stable id.
    pub id: FunctionId,
    /// `module::path::Type`.
    pub name: &'static str,
    /// Runs the constructor.
    pub construct: ConstructFn,
}

/// A method of a `#[remote]` actor class.
pub struct ActorMethod {
    /// Stable id.
    pub id: FunctionId,
    /// The class it belongs to.
    pub class: FunctionId,
    /// `module::path::Type::method`.
    pub name: &'static str,
    /// Runs the method on the actor's state.
    pub invoke: MethodInvoke,
}

/// One item of the link-time registry.
pub enum Registration {
    /// A remote function.
    Function(&'static RemoteFunction),
    /// An actor class.
    ActorClass(&'static ActorClass),
    /// An actor method.
    ActorMethod(&'static ActorMethod),
}

/// Every [`Registration`] linked into this binary, in unspecified order.
///
/// Filled by `#[remote]` at link time; readable at any time, even before
/// `main`. Prefer [`registry()`], which indexes it by id. The linker section
/// is named after this static, across every crate in the binary, hence the
/// `RAY_` prefix.
#[doc(hidden)]
#[linkme::distributed_slice]
pub static RAY_REGISTRATIONS: [Registration];

/// Everything registered in this binary, indexed by id.
pub struct Registry {
    functions: HashMap<FunctionId, &'static RemoteFunction>,
    classes: HashMap<FunctionId, &'static ActorClass>,
    methods: HashMap<FunctionId, &'static ActorMethod>,
    duplicates: Vec<&'static str>,
}

impl Registry {
    fn build() -> Self {
        let mut r = Registry {
            functions: HashMap::new(),
            classes: HashMap::new(),
            methods: HashMap::new(),
            duplicates: Vec::new(),
        };
        for item in RAY_REGISTRATIONS.iter() {
            let (dup, name) = match item {
                Registration::Function(f) => (r.functions.insert(f.id, f).is_some(), f.name),
                Registration::ActorClass(c) => (r.classes.insert(c.id, c).is_some(), c.name),
                Registration::ActorMethod(m) => (r.methods.insert(m.id, m).is_some(), m.name),
            };
            if dup {
                r.duplicates.push(name);
            }
        }
        r
    }

    /// The remote function with this id.
    pub fn function(&self, id: FunctionId) -> Option<&'static RemoteFunction> {
        self.functions.get(&id).copied()
    }

    /// The actor class with this id.
    pub fn actor_class(&self, id: FunctionId) -> Option<&'static ActorClass> {
        self.classes.get(&id).copied()
    }

    /// The actor method with this id.
    pub fn actor_method(&self, id: FunctionId) -> Option<&'static ActorMethod> {
        self.methods.get(&id).copied()
    }

    /// All remote functions, sorted by name.
    pub fn functions(&self) -> Vec<&'static RemoteFunction> {
        let mut v: Vec<_> = self.functions.values().copied().collect();
        v.sort_by_key(|f| f.name);
        v
    }

    /// All actor classes, sorted by name.
    pub fn actor_classes(&self) -> Vec<&'static ActorClass> {
        let mut v: Vec<_> = self.classes.values().copied().collect();
        v.sort_by_key(|c| c.name);
        v
    }

    /// The methods of one class, sorted by name.
    pub fn methods_of(&self, class: FunctionId) -> Vec<&'static ActorMethod> {
        let mut v: Vec<_> = self
            .methods
            .values()
            .copied()
            .filter(|m| m.class == class)
            .collect();
        v.sort_by_key(|m| m.name);
        v
    }

    /// Names registered twice under one id (a hash collision; should be empty).
    pub fn duplicates(&self) -> &[&'static str] {
        &self.duplicates
    }
}

/// The registry of this binary (built on first use).
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::build)
}
