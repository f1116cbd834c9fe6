import LMDB
import ObjectGraph

/// A row a plan's source yields: its key and entity tag (one of the fetched entities'). Sixteen bytes: sources
/// gather and sort them by the thousand.
struct Candidate: Hashable {
    let key: UInt64
    let tag: UInt16
}

/// A ``QueryPlan`` with its row checks (``RowFilter``), each compiled the first time a fetch needs it: what the
/// source leaves of the predicate (``filter(_:)``), and the whole predicate when the source answered it
/// (``answeredCheck(_:)``). Kept with the commit it was costed in, so that a fetch reading the same commit runs it
/// again as it is, checks included.
final class PreparedPlan: @unchecked Sendable {
    let plan: QueryPlan
    /// The commit the plan was costed in (``KeyValueTransaction/snapshotNumber``).
    let snapshot: UInt64
    private let entityName: String
    /// The request's predicate (a kept plan's holds object IDs, not objects).
    private let predicate: FetchPredicate?
    private let storeIdentifier: String
    /// Each check once compiled (`.some(nil)`: compiled to nothing). The plan is immutable otherwise; fetches on
    /// several threads may compile a check at once, and the first to finish keeps it.
    private let compiled = Locked<(filter: RowFilter??, answered: RowFilter??)>((nil, nil))
    /// Whether the request the plan was made for passed ``FetchRequest/validate(for:)``: a request of the same key
    /// then needs no check (``LMDBIncrementalStore/prepared(_:state:transaction:reusable:checking:)``).
    let isChecked: Bool

    init(_ plan: QueryPlan, entityName: String, predicate: FetchPredicate?, storeIdentifier: String, snapshot: UInt64, isChecked: Bool = false) {
        self.plan = plan
        self.isChecked = isChecked
        self.entityName = entityName
        self.predicate = predicate
        self.storeIdentifier = storeIdentifier
        self.snapshot = snapshot
    }

    /// The plan's filter compiled to run on a row's bytes (`nil` when there is none).
    func filter(_ store: LMDBIncrementalStore) -> RowFilter? {
        if let known = compiled.withLock({ $0.filter }) { return known }
        let made = plan.filter.predicate.flatMap { compile($0, store) }
        compiled.withLock { if $0.filter == nil { $0.filter = .some(made) } }
        return made
    }

    /// See ``PlanRun/answeredCheck``.
    func answeredCheck(_ store: LMDBIncrementalStore) -> RowFilter? {
        guard plan.filter.predicate == nil else { return nil }
        if let known = compiled.withLock({ $0.answered }) { return known }
        let made = predicate.flatMap { compile($0, store) }
        compiled.withLock { if $0.answered == nil { $0.answered = .some(made) } }
        return made
    }

    private func compile(_ predicate: FetchPredicate, _ store: LMDBIncrementalStore) -> RowFilter? {
        RowFilter(predicate, entity: entityName, model: store.model, layout: store.layout, storeIdentifier: storeIdentifier)
    }
}

/// One fetch running a ``QueryPlan`` in one read transaction: the store's open state, the request and the fetched
/// entities, worked out once, and the plan's row checks. The plan's nodes run themselves on it — the source yields
/// ``Candidate``s (``PlanSource``), then ``QueryPlan/Filter``, ``QueryPlan/Sort``, ``QueryPlan/Window`` and
/// ``QueryPlan/Count`` — each asked by what the result needs:
///
/// - a count: ``count()``;
/// - object IDs and loaded objects from candidates when the filter is settled without rows and the order without
///   the rows (``answersFromCandidates``): ``objectIDs()``, ``nodes()``, ``candidates()`` — no row read but the
///   window's;
/// - otherwise the matching rows, each read once, checked, sorted and windowed: ``views()``.
final class PlanRun {
    let store: LMDBIncrementalStore
    let state: LMDBIncrementalStore.OpenState
    let transaction: any KeyValueTransaction
    let plan: QueryPlan
    let request: FetchRequest
    /// The fetched entity's layout; its root's table holds every candidate's row.
    let entity: StoreLayout.EntityLayout
    let rows: RowTable
    /// The tags of the fetched entities (the entity, and its sub-entities when the request includes them).
    let family: TagSet
    /// The tags of every entity whose rows share the table: a row with any other tag is damage.
    let inTable: TagSet
    /// What the index entries check, when the plan checks the predicate on them: the key's elements and the predicate.
    let entryCheck: (elements: [QueryPlan.EntryElement], stored: [QueryPlan.EntryElement], predicate: FetchPredicate)?
    /// Whether there is an ``entryCheck`` (tested per candidate without copying it).
    let checksEntries: Bool
    /// Whether the source reads each candidate's row (a key lookup, a scan): the entry it yields is the row's own.
    let readsRows: Bool
    /// Whether the source yields its candidates in ascending row-key order, each once (``PlanSource/yieldsKeyOrder``).
    let yieldsKeyOrder: Bool
    /// The plan's source when it is one index range.
    let indexRange: QueryPlan.IndexRange?
    /// Whether ``transaction`` is a read (not a write, whose changes no other read sees): only then may a scan be
    /// read in parts on other threads (``scannedInParallel(_:)``).
    let isRead: Bool
    /// The reads of the same commit that parts of a scan were read in on other threads: their rows are borrowed
    /// until the run ends, when they end too.
    var partReads: [any KeyValueTransaction] = []

    /// The plan and its row checks, compiled once (and shared by the fetches that run a kept plan).
    private let prepared: PreparedPlan

    init(_ prepared: PreparedPlan, for request: FetchRequest, entity: StoreLayout.EntityLayout, store: LMDBIncrementalStore,
         state: LMDBIncrementalStore.OpenState, transaction: any KeyValueTransaction, isRead: Bool = false) {
        self.store = store
        self.state = state
        self.transaction = transaction
        let plan = prepared.plan
        self.plan = plan
        self.prepared = prepared
        self.request = request
        self.entity = entity
        rows = state.rows(of: entity)
        family = Self.family(of: request, in: store)
        inTable = store.layout.tags(sharingTableOf: entity)
        indexRange = plan.indexRange
        entryCheck = indexRange.flatMap { index in index.entryElements.flatMap { elements in plan.filter.predicate.map { (elements, index.stored, $0) } } }
        checksEntries = entryCheck != nil
        readsRows = plan.source.readsRows
        yieldsKeyOrder = plan.source.yieldsKeyOrder
        self.isRead = isRead
    }

    /// The tags of the entities `request` fetches: its entity, and its sub-entities when it includes them.
    static func family(of request: FetchRequest, in store: LMDBIncrementalStore) -> TagSet {
        store.layout.tags(of: Set((request.includesSubentities ? store.model.entityAndDescendants(of: request.entityName)
                                                               : [request.entityName]).compactMap { store.layout.entity($0)?.tag }))
    }

    deinit {
        for read in partReads { read.endRead() }
    }

    /// The plan's filter compiled to run on a row's bytes (`nil` when there is none).
    var filter: RowFilter? { prepared.filter(store) }

    /// When the source answered the whole predicate (an index range, a to-one's or a to-many's table, a union or an
    /// intersection of them) and rows are read anyway — loaded objects, a sort on the rows —, the predicate compiled
    /// to run on a row's bytes: a row it rejects came from a damaged entry, which stops the fetch instead of
    /// becoming a wrong answer. Only what the bytes settle is checked; a comparison they cannot settle is not
    /// evaluated. `nil` when the source left part of the predicate to the rows (they are checked then), or when
    /// there is no predicate.
    var answeredCheck: RowFilter? { prepared.answeredCheck(store) }

    // MARK: - Results

    /// Whether counts, object IDs and loaded objects come from candidates, no row read but those of the window
    /// (``QueryPlan/Sort/ordersCandidates(in:)``).
    var answersFromCandidates: Bool { plan.sort.ordersCandidates(in: self) }

    /// The number of rows that match, windowed (``QueryPlan/Count``; a plan made for another result type counts
    /// the same way).
    func count() throws -> Int {
        try (plan.count ?? QueryPlan.Count()).execute(in: self)
    }

    /// The object IDs of the window (``answersFromCandidates`` must hold).
    func objectIDs() throws -> [ManagedObjectID] {
        try plan.window.objectIDs(in: self)
    }

    /// The nodes of the window, each row read once (``answersFromCandidates`` must hold).
    func nodes() throws -> [IncrementalStoreNode] {
        try plan.window.nodes(in: self)
    }

    /// The window of the matching candidates, in order (``answersFromCandidates`` must hold).
    func candidates() throws -> ArraySlice<Candidate> {
        try plan.window.candidates(in: self)
    }

    /// The window of the rows that match, in order, each read once and checked. The views borrow the rows from the
    /// map: they must not outlive the transaction.
    func views() throws -> ArraySlice<RowView> {
        try plan.window.views(in: self)
    }

    /// `keys` in key order, each key once.
    static func sortedUnique(_ keys: [Candidate]) -> [Candidate] {
        var keys = keys
        keys.sort { $0.key < $1.key }
        var unique: [Candidate] = []
        unique.reserveCapacity(keys.count)
        for candidate in keys where candidate.key != unique.last?.key { unique.append(candidate) }
        return unique
    }

    // MARK: - Checks

    /// The row a source read a candidate from, when it reads rows (``readsRows``).
    @inline(__always)
    func rowEntry(_ entry: CursorEntry?) -> UnsafeRawBufferPointer? {
        readsRows ? entry?.value : nil
    }

    // MARK: - Rows

    /// The bytes of the row under `key` (`nil` when there is none).
    func borrowedRow(_ key: UInt64) throws -> UnsafeRawBufferPointer? {
        try rows.bytes(key: key, in: transaction)
    }

    /// The entity tag of a row of the table, from its header alone; a row too short for a header, or whose tag no
    /// entity of the table has, is an error naming the row — never a row silently left out.
    @inline(__always)
    func tag(of row: UnsafeRawBufferPointer, key: UInt64) throws -> UInt16 {
        guard let tag = RowCodec.entityTag(row), inTable.contains(tag) else { throw damagedHeader(row, key: key) }
        return tag
    }

    /// The error for a row whose header ``tag(of:key:)`` refuses.
    @inline(never)
    private func damagedHeader(_ row: UnsafeRawBufferPointer, key: UInt64) -> ManagedObjectContextError {
        guard let tag = RowCodec.entityTag(row) else {
            return corruptedRow(key, RowDecodingError(reason: "the row is \(row.count) bytes, shorter than a row header"))
        }
        return corruptedRow(key, RowDecodingError(reason: "the row names the entity tag \(tag), which no entity of this table has"))
    }

    func objectID(_ candidate: Candidate) -> ManagedObjectID {
        state.identities.objectID(entityTag: candidate.tag, key: candidate.key)
    }

    /// The error a row that cannot be decoded gives: the store file is corrupted there.
    func corruptedRow(_ key: some BinaryInteger, _ error: RowDecodingError) -> ManagedObjectContextError {
        store.corruptedRow(key, in: entity.root, error)
    }
}

/// What the row checks of one run read: the predicate left for the rows, its simple comparisons compiled to run on
/// a row's bytes (``RowFilter``), and what a view of a row holds — taken from the run once, so a row's check retains
/// only what its view keeps.
struct RowCheck {
    let predicate: FetchPredicate?
    let filter: RowFilter?
    /// The whole predicate on a row's bytes when the source answered it and nothing is left to check
    /// (``PlanRun/answeredCheck``), and the source, for the error.
    private let answered: RowFilter?
    private let source: any PlanSource
    /// Whether there is a ``predicate`` (tested per row without copying it).
    private let checksRows: Bool
    private let store: LMDBIncrementalStore
    private let state: LMDBIncrementalStore.OpenState
    private let transaction: any KeyValueTransaction
    private let layout: StoreLayout
    private let rows: RowTable
    private let root: String
    /// The rows the views reach through relationships, read once for all of them — when the predicate or a sort key
    /// names a relationship (`nil` otherwise: a view that reaches one anyway keeps its own).
    private let related: RelatedRows?

    /// The checks of `run`'s rows read in `transaction` (the run's by default; for a part of a scan read on
    /// another thread, a read of the same commit).
    init(_ run: PlanRun, transaction: (any KeyValueTransaction)? = nil) {
        // The plan's filter: what the source leaves of the predicate (nothing when index ranges answer it exactly,
        // as counts and IDs trust them; the rest of a key lookup's conjunction; else the whole predicate).
        predicate = run.plan.filter.predicate
        checksRows = predicate != nil
        filter = run.filter
        answered = run.answeredCheck
        source = run.plan.source
        store = run.store
        state = run.state
        self.transaction = transaction ?? run.transaction
        layout = run.store.layout
        rows = run.rows
        root = run.entity.root
        related = run.plan.filter.readsRelationships || run.plan.sort.descriptors.contains { $0.keyPath.utf8.contains(UInt8(ascii: ".")) }
            ? RelatedRows() : nil
    }

    /// The candidate's row as a view if it matches (``match(_:row:cursor:)``).
    func view(of candidate: Candidate, row read: UnsafeRawBufferPointer? = nil, cursor: (any KeyValueCursor)? = nil) throws -> RowView? {
        guard let (row, view) = try match(candidate, row: read, cursor: cursor) else { return nil }
        return view ?? self.view(of: candidate, row)
    }

    /// A view of a candidate's row.
    func view(of candidate: Candidate, _ row: EncodedRow) -> RowView {
        RowView(store: store, state: state, transaction: transaction,
                id: state.identities.objectID(entityTag: candidate.tag, key: candidate.key), row: row, related: related)
    }

    /// The candidate's row if it matches (`row`, when the source read it, else read with `cursor` or looked up),
    /// with the view the evaluator checked it through — `nil` when the row's bytes settled it, so a row is made a
    /// view only when something needs one. A row that cannot be decoded stops the fetch with its key. (Thrown at once
    /// rather than recorded: a flag the loops would test per row costs a runtime exclusivity check per row.)
    @inline(__always)
    func match(_ candidate: Candidate, row read: UnsafeRawBufferPointer? = nil, cursor: (any KeyValueCursor)? = nil) throws -> (EncodedRow, RowView?)? {
        let bytes: UnsafeRawBufferPointer
        if let read {
            bytes = read
        } else if let cursor {
            guard let found = try withUnsafeBytes(of: candidate.key.bigEndian, { try cursor.seek(exactly: $0) }) else { return nil }
            bytes = found.value
        } else {
            guard let found = try rows.bytes(key: candidate.key, in: transaction)
            else { return nil }
            bytes = found
        }
        let row: EncodedRow
        // The checksum is checked here; each field's extent as the filter or the evaluator walks to it.
        do { row = try EncodedRow(bytes, layout: layout, checkingFields: false) } catch { throw store.corruptedRow(candidate.key, in: root, error) }
        guard checksRows else {
            if answered?.matches(row) == false {
                throw store.entryWithoutMatchingRow(state.identities.objectID(entityTag: candidate.tag, key: candidate.key), source: source.description)
            }
            return (row, nil)
        }
        if let settled = filter?.matches(row) { return settled ? (row, nil) : nil }
        let view = view(of: candidate, row)
        let matched = try predicate?.evaluate(with: view) ?? true
        if let failure = view.failure { throw store.corruptedRow(candidate.key, in: root, failure) }
        return matched ? (row, view) : nil
    }
}

/// Something with a row key, which ``QueryPlan/Sort/putInKeyOrder(_:)`` orders.
protocol RowKeyed {
    var rowKey: UInt64 { get }
}

extension Candidate: RowKeyed {
    var rowKey: UInt64 { key }
}

extension RowView: RowKeyed {
    var rowKey: UInt64 { UInt64(bitPattern: key) }
}
