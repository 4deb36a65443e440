//! Services by name: their ids, how their handlers run, and the registry.

use std::fmt;
use std::sync::{Arc, Weak};

use parking_lot::RwLock;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Call, RpcError};

/// A service's id: a 64-bit FNV-1a hash of its name. Calls carry its low
/// 32 bits as their tag (the [wire id](Self::wire)) and the whole of it in
/// their header, which the server checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceId(pub u64);

impl ServiceId {
    /// The id of the service named `name`.
    pub const fn of(name: &str) -> Self {
        // FNV-1a, 64 bits: stable across builds and platforms, which a
        // wire id must be, and `const`.
        let bytes = name.as_bytes();
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut i = 0;
        while i < bytes.len() {
            hash ^= bytes[i] as u64;
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            i += 1;
        }
        Self(hash)
    }

    /// The 32 bits that calls carry as their tag; two services of one node
    /// may not share them.
    pub const fn wire(self) -> u32 {
        (self.0 ^ (self.0 >> 32)) as u32
    }
}

impl fmt::Display for ServiceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#018x}", self.0)
    }
}

/// A service's name with its id computed once: what calls name the
/// service by. Cheap to clone. `&str` converts into it (hashing the name
/// and copying it each time); a name known when the program is built is
/// best made once by [`Self::from_static`], a `const`: calls naming it
/// then allocate nothing, and cloning it touches no shared counter.
#[derive(Clone, Debug)]
pub struct ServiceName {
    name: Name,
    id: ServiceId,
}

/// The text of a [`ServiceName`].
#[derive(Clone, Debug)]
enum Name {
    Static(&'static str),
    Shared(Arc<str>),
}

impl ServiceName {
    /// The service called `name`.
    pub fn new(name: &str) -> Self {
        Self {
            name: Name::Shared(name.into()),
            id: ServiceId::of(name),
        }
    }

    /// The service called `name`, a name the program holds for good: made
    /// at build time (`const`), and never counted nor copied as it is
    /// passed around (an [`Arc`]'s clone is an atomic read-modify-write,
    /// about 8 ns on every call's path).
    pub const fn from_static(name: &'static str) -> Self {
        Self {
            name: Name::Static(name),
            id: ServiceId::of(name),
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        match &self.name {
            Name::Static(name) => name,
            Name::Shared(name) => name,
        }
    }

    /// The id.
    pub fn id(&self) -> ServiceId {
        self.id
    }
}

impl PartialEq for ServiceName {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.as_str() == other.as_str()
    }
}

impl Eq for ServiceName {}

impl std::hash::Hash for ServiceName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Display for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for ServiceName {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

impl From<&Self> for ServiceName {
    fn from(name: &Self) -> Self {
        name.clone()
    }
}

/// Where a service's handler runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandlerMode {
    /// In whichever thread makes progress when the call arrives: the
    /// fastest, but the handler must not block. It may unpack its call
    /// and reply (those waits are short) and send one-way calls; it must
    /// not wait for a reply, since the thread serving it may be the one
    /// that would serve that reply's sender.
    Inline,
    /// On the node's handler threads ([`crate::Node::set_handler_threads`]):
    /// the handler may block and make calls of its own.
    Pool,
}

/// Why a handler failed: text for the caller, who gets it as
/// [`RpcError::Handler`]. Any error converts into it (`?` works on
/// navette's own calls and on the handler's), keeping its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandlerError(String);

impl HandlerError {
    /// A failure described by `message`.
    pub fn new(message: impl fmt::Display) -> Self {
        Self(message.to_string())
    }

    /// The text sent to the caller.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for HandlerError {
    fn from(err: E) -> Self {
        Self(err.to_string())
    }
}

/// What a handler returns. Returning an error without having replied sends
/// it to the caller; returning `Ok` without having replied sends the
/// caller an error saying so.
pub type HandlerResult = Result<(), HandlerError>;

/// A handler: called once per call, possibly from several threads at once.
pub(crate) type Handler = dyn Fn(Call<'_>) -> HandlerResult + Send + Sync;

/// A registered service.
pub(crate) struct Service {
    pub(crate) name: ServiceName,
    pub(crate) mode: HandlerMode,
    pub(crate) handler: Box<Handler>,
}

impl fmt::Debug for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Service")
            .field("name", &self.name)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// The services of a node, by wire id.
#[derive(Debug)]
pub(crate) struct Registry {
    services: RwLock<FxHashMap<u32, Arc<Service>>>,
    /// This registry among all a process makes (never reused): what a
    /// thread's last found service ([`LAST_SERVED`]) names.
    uid: u64,
    /// Moved by every change: a thread's last served service is this
    /// registry's while it has not moved.
    generation: AtomicU64,
}

impl Default for Registry {
    fn default() -> Self {
        static UIDS: AtomicU64 = AtomicU64::new(0);
        Self {
            services: RwLock::default(),
            uid: UIDS.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(0),
        }
    }
}

/// A service a thread served, and where it found it. Weak: a thread keeps
/// no service alive, nor what its handler holds, once its node dropped it.
struct LastServed {
    registry: u64,
    generation: u64,
    service: Weak<Service>,
}

thread_local! {
    /// The last service this thread found to serve ([`Registry::find`]): a server
    /// serves the same few services again and again, and finding one in
    /// the registry takes its read lock besides the count on the service,
    /// two more atomic read-modify-writes (about 8 ns each) on every
    /// call's path.
    static LAST_SERVED: RefCell<Option<LastServed>> = const { RefCell::new(None) };
}

impl Registry {
    /// Adds `service`; a name already registered, or another name with the
    /// same wire id, is refused.
    pub(crate) fn insert(&self, service: Service) -> Result<(), RpcError> {
        let mut services = self.services.write();
        let wire = service.name.id().wire();
        if let Some(existing) = services.get(&wire) {
            return Err(if existing.name == service.name {
                RpcError::AlreadyRegistered {
                    service: service.name.to_string(),
                }
            } else {
                RpcError::IdCollision {
                    service: service.name.to_string(),
                    existing: existing.name.to_string(),
                    wire,
                }
            });
        }
        services.insert(wire, Arc::new(service));
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Removes the service called `name`; whether it was registered.
    pub(crate) fn remove(&self, name: &ServiceName) -> bool {
        let mut services = self.services.write();
        let wire = name.id().wire();
        if services.get(&wire).is_some_and(|s| s.name == *name) {
            services.remove(&wire);
            self.generation.fetch_add(1, Ordering::Release);
            true
        } else {
            false
        }
    }

    /// The service a call's header names, if registered here.
    pub(crate) fn get(&self, id: ServiceId) -> Option<Arc<Service>> {
        self.services
            .read()
            .get(&id.wire())
            .filter(|s| s.name.id() == id)
            .cloned()
    }

    /// [`Self::get`], for serving a call: the service this thread found
    /// last is kept, with the registry's generation then, and while
    /// neither moved it is found again without the registry's lock. A
    /// service removed meanwhile may serve one more call, as one found an
    /// instant before its removal would.
    pub(crate) fn find(&self, id: ServiceId) -> Option<Arc<Service>> {
        let generation = self.generation.load(Ordering::Acquire);
        let kept = LAST_SERVED.with_borrow(|last| {
            last.as_ref()
                .filter(|l| l.registry == self.uid && l.generation == generation)
                .and_then(|l| l.service.upgrade())
                .filter(|service| service.name.id() == id)
        });
        if kept.is_some() {
            return kept;
        }
        let service = self.get(id)?;
        LAST_SERVED.set(Some(LastServed {
            registry: self.uid,
            generation,
            service: Arc::downgrade(&service),
        }));
        Some(service)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str) -> Service {
        Service {
            name: ServiceName::new(name),
            mode: HandlerMode::Inline,
            handler: Box::new(|_| Ok(())),
        }
    }

    /// Two names whose wire ids collide, found by search (about 2^16
    /// names by the birthday bound).
    fn colliding_names() -> (String, String) {
        let mut seen: FxHashMap<u32, String> = FxHashMap::default();
        for i in 0u32.. {
            let name = format!("service-{i}");
            if let Some(first) = seen.insert(ServiceId::of(&name).wire(), name.clone()) {
                return (first, name);
            }
        }
        unreachable!("2^32 names cannot all have distinct 32-bit ids")
    }

    #[test]
    fn static_and_shared_names_are_the_same_name() {
        const ECHO: ServiceName = ServiceName::from_static("echo");
        let shared = ServiceName::new("echo");
        assert_eq!(ECHO, shared);
        assert_eq!((ECHO.id(), ECHO.as_str()), (shared.id(), "echo"));
        assert_ne!(ECHO, ServiceName::new("echo2"));
        use std::hash::BuildHasher;
        let state = std::hash::RandomState::new();
        assert_eq!(state.hash_one(&ECHO), state.hash_one(&shared));
        let registry = Registry::default();
        registry.insert(service("echo")).unwrap();
        assert!(registry.get(ECHO.id()).is_some_and(|s| s.name == ECHO));
    }

    #[test]
    fn the_last_service_found_is_found_again_while_the_registry_is_unchanged() {
        let registry = Registry::default();
        let other = Registry::default();
        registry.insert(service("echo")).unwrap();
        other.insert(service("echo")).unwrap();
        let echo = ServiceId::of("echo");
        let found = |r: &Registry| Arc::as_ptr(&r.find(echo).unwrap());
        let first = found(&registry);
        assert_eq!(found(&registry), first);
        // Another node's registry has its own service of that name.
        assert_ne!(found(&other), first);
        assert_eq!(found(&registry), first);
        // Removed, then registered again: the new service.
        assert!(registry.remove(&ServiceName::new("echo")));
        assert!(registry.find(echo).is_none());
        registry.insert(service("echo")).unwrap();
        let again = found(&registry);
        assert_eq!(registry.get(echo).map(|s| Arc::as_ptr(&s)), Some(again));
        // Found while a service found before is serving (another node's
        // handler): found as usual.
        let serving = registry.find(echo).unwrap();
        assert_eq!(found(&other), Arc::as_ptr(&other.get(echo).unwrap()));
        assert_eq!(Arc::as_ptr(&serving), again);
        drop(serving);
        // A registry dropped: its services are, whatever threads found.
        let weak = Arc::downgrade(&other.get(echo).unwrap());
        drop(other);
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn ids_are_fnv1a_of_the_name() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(ServiceId::of("").0, 0xcbf2_9ce4_8422_2325);
        assert_eq!(ServiceId::of("a").0, 0xaf63_dc4c_8601_ec8c);
        assert_eq!(ServiceId::of("foobar").0, 0x8594_4171_f739_67e8);
    }

    #[test]
    fn names_registered_twice_or_colliding_are_refused() {
        let registry = Registry::default();
        registry.insert(service("echo")).unwrap();
        assert!(matches!(
            registry.insert(service("echo")),
            Err(RpcError::AlreadyRegistered { .. })
        ));
        let (first, second) = colliding_names();
        assert_ne!(ServiceId::of(&first), ServiceId::of(&second));
        registry.insert(service(&first)).unwrap();
        match registry.insert(service(&second)) {
            Err(RpcError::IdCollision {
                service, existing, ..
            }) => assert_eq!((service, existing), (second.clone(), first.clone())),
            other => panic!("expected a collision, got {other:?}"),
        }
        // A call naming the other service of the pair finds nothing.
        assert!(registry.get(ServiceId::of(&second)).is_none());
        assert!(registry.get(ServiceId::of(&first)).is_some());
        assert!(registry.remove(&ServiceName::new(&first)));
        assert!(!registry.remove(&ServiceName::new(&first)));
        registry.insert(service(&second)).unwrap();
    }
}
