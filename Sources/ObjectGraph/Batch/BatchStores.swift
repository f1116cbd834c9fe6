/// A store that inserts the rows of a ``BatchInsertRequest`` itself, without managed objects — an optional
/// capability of an ``IncrementalStore`` (a context asked to run a batch insert on a store without it fails, or goes
/// through objects when asked to: ``BatchFallback``).
public protocol BatchInsertingStore: IncrementalStore {
    /// Inserts every row `rows` hands out, reading them a chunk at a time (``BatchInsertRows/nextChunk()``), and
    /// reports each chunk written (``BatchInsertRows/didWrite(_:committed:objectIDs:)``).
    ///
    /// As for a save, nothing a failed transaction held may stay: a row the store refuses (a uniqueness constraint
    /// broken, a related object missing) is an error naming the row's ``BatchInsertRow/position``, and the
    /// transaction it is in writes nothing. When ``BatchInsertRows/commitsEachChunk`` is `false` the whole request
    /// is one transaction.
    ///
    /// - Throws: The error that stopped the request; the error of ``BatchInsertRows/nextChunk()`` unchanged.
    func executeBatchInsert(_ rows: BatchInsertRows) throws
}

/// A store that runs a ``BatchUpdateRequest`` itself, in one transaction, without managed objects.
public protocol BatchUpdatingStore: IncrementalStore {
    /// Sets the request's attributes on every object of its entity (and sub-entities, if it says so) that its
    /// predicate matches, each value the request's expression evaluated on the object's stored values; checks the
    /// results as a save does. All objects or none.
    ///
    /// - Throws: An error naming the object and attribute whose new value breaks a rule; nothing is written then.
    func executeBatchUpdate(_ request: BatchUpdateRequest) throws -> BatchResult
}

/// A store that runs a ``BatchDeleteRequest`` itself, in one transaction, without managed objects, honouring delete
/// rules.
public protocol BatchDeletingStore: IncrementalStore {
    /// Deletes the objects the request names (those of them this store holds) and what their cascade rules delete
    /// with them; takes them out of the relationships that point at them. All or none. The result counts and lists
    /// every object deleted, the named ones first.
    ///
    /// - Throws: An error naming the object when a deny rule forbids its deletion; nothing is written then.
    func executeBatchDelete(_ request: BatchDeleteRequest) throws -> BatchResult
}
