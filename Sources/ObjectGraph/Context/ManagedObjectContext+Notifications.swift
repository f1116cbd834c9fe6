import Foundation

/// The objects a change or a save touched, by ID.
public struct ContextChanges: Sendable, Hashable {
    /// Inserted objects.
    public var inserted: Set<ManagedObjectID> = []
    /// Updated objects.
    public var updated: Set<ManagedObjectID> = []
    /// Deleted objects.
    public var deleted: Set<ManagedObjectID> = []

    /// Creates a change set.
    public init(inserted: Set<ManagedObjectID> = [], updated: Set<ManagedObjectID> = [], deleted: Set<ManagedObjectID> = []) {
        self.inserted = inserted
        self.updated = updated
        self.deleted = deleted
    }

    /// Whether nothing changed.
    public var isEmpty: Bool { inserted.isEmpty && updated.isEmpty && deleted.isEmpty }
}

/// What a context tells its observers (Core Data's `NSManagedObjectContextObjectsDidChange` and `DidSave`).
public enum ContextEvent: Sendable, Hashable {
    /// Pending changes were processed (at ``ManagedObjectContext/processPendingChanges()`` and at the start of a
    /// save): the objects changed since the last such event.
    case objectsDidChange(ContextChanges)
    /// A save went through: the objects it inserted (with their permanent IDs), updated and deleted.
    case didSave(ContextChanges)
}

/// Identifies an observer, to remove it.
public struct ContextObserverToken: Sendable, Hashable {
    let value: UInt64
}

extension ManagedObjectContext {
    /// Calls `callback` with every event of this context, on the thread that caused it.
    @discardableResult
    public func addObserver(_ callback: @escaping (ContextEvent) -> Void) -> ContextObserverToken {
        observerLock.withLock {
            nextObserverToken += 1
            observers[nextObserverToken] = callback
            return ContextObserverToken(value: nextObserverToken)
        }
    }

    /// Stops calling an observer.
    public func removeObserver(_ token: ContextObserverToken) {
        observerLock.withLock { _ = observers.removeValue(forKey: token.value) }
    }

    /// The context's events as an asynchronous sequence; it ends when the task iterating it is cancelled.
    public func events() -> AsyncStream<ContextEvent> {
        AsyncStream { continuation in
            let token = addObserver { continuation.yield($0) }
            continuation.onTermination = { [weak self] _ in self?.removeObserver(token) }
        }
    }

    /// Whether any observer is registered (code of the app that an event runs).
    var hasObservers: Bool { observerLock.withLock { !observers.isEmpty } }

    func post(_ event: ContextEvent) {
        let callbacks = observerLock.withLock { observers.sorted { $0.key < $1.key }.map(\.value) }
        for callback in callbacks { callback(event) }
    }

    /// Posts ``ContextEvent/objectsDidChange(_:)`` for the changes made since the last one.
    func postPendingChanges() {
        let changes = pendingNotification
        pendingNotification = ContextChanges()
        if !changes.isEmpty { post(.objectsDidChange(changes)) }
    }

    /// Brings the objects another context saved up to date here: updated objects take the saved values (keeping
    /// this context's own unsaved changes on top), deleted ones leave the context; inserted ones are found by the
    /// next fetch.
    public func mergeChanges(fromContextDidSave changes: ContextChanges) {
        for id in changes.updated {
            guard let object = registered[id] else { continue }
            if object.isFaultStorage {
                persistentStoreCoordinator.updateCache(id, node: nil)
            } else {
                refresh(object, mergeChanges: true)
                if !object.hasChanges { changedIDs.remove(id) }
            }
        }
        for id in changes.deleted {
            guard let object = registered[id] else { continue }
            insertedInOrder.removeAll { $0 === object }
            deletedIDs.removeAll { $0 == id }
            forget(object)
            object.lifecycle = .deleted
            object.managedObjectContext = nil
        }
        post(.objectsDidChange(changes))
    }
}

extension ManagedObjectContext {
    /// Re-reads every registered object that has no unsaved changes from its store (faults are simply dropped from
    /// the cache), for when another process may have changed anything.
    public func refreshAllObjects() {
        for object in registered.values where !object.hasChanges && object.lifecycle == .clean {
            refresh(object, mergeChanges: false)
        }
    }

    /// Merges what other processes saved to `store` since `token`, and moves `token` forward. When the store no longer
    /// remembers that far back, every object is refreshed instead.
    ///
    /// - Returns: The changes merged (empty after a full refresh).
    /// - Throws: The store's error.
    @discardableResult
    public func mergeRemoteChanges(from store: any ChangeTrackingStore, since token: inout UInt64) throws -> ContextChanges {
        guard let (changes, next) = try store.changes(since: token) else {
            token = try store.currentChangeToken()
            refreshAllObjects()
            return ContextChanges()
        }
        token = next
        if !changes.isEmpty { mergeChanges(fromContextDidSave: changes) }
        return changes
    }
}

extension PersistentStoreCoordinator {
    /// Contexts that merge every save made through this coordinator.
    func setMerging(_ context: ManagedObjectContext, _ merging: Bool) {
        mergingLock.withLock {
            mergingContexts.removeAll { $0.context == nil || $0.context === context }
            if merging { mergingContexts.append(WeakContext(context: context)) }
        }
    }

    /// Hands a save to every other merging context.
    func broadcast(_ changes: ContextChanges, from source: ManagedObjectContext) {
        let targets = mergingLock.withLock { mergingContexts.compactMap(\.context) }.filter { $0 !== source }
        for target in targets { target.mergeChanges(fromContextDidSave: changes) }
    }
}

struct WeakContext {
    weak var context: ManagedObjectContext?
}
