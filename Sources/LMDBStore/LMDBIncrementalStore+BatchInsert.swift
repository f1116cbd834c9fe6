import Foundation
import LMDB
import ObjectGraph

extension LMDBIncrementalStore: BatchInsertingStore {
    /// Inserts a batch's rows without managed objects: keys allocated in one step per transaction, rows appended in
    /// key order, the index entries a uniqueness constraint checks put as each row is (so a uniqueness constraint
    /// and a row pointing at an object by unique value see the rows before it) and the others at the end of each
    /// chunk, each table's in key order; to-one targets and link-table members checked once per target, the save
    /// recorded in the change log. One write transaction for the whole request, or one per chunk
    /// when the request commits each chunk. A chunk whose transaction fills the map is written again once the map
    /// has grown, and so is a whole request whose rows are an array; one whose rows a handler makes cannot read them
    /// again and stops with ``ManagedObjectContextError/Code/storeUnusable``, having written nothing (the map has
    /// grown by then): imports larger than the map's room should commit each chunk.
    ///
    /// A request in one transaction loads the index and link tables that were empty when it began as a bulk load:
    /// their entries wait, sorted a chunk at a time (in memory up to 256 MiB, then in a file beside the store that
    /// is removed from its folder at once), and are appended merged at the end, which fills their pages. With more
    /// than one processor, a second thread makes, sorts and keeps each full chunk's entries for those tables and
    /// encodes its rows while this one reads the next chunk, then puts them; it never touches the transaction.
    ///
    /// A to-one or a to-many member given by unique value may point at a row later in the same batch (an employee's
    /// manager, listed after the employee; a person's friends): the row is written without it, and the reference is
    /// filled in once the rows are written — at the end of the request, or of each chunk when each chunk commits; a
    /// value no row gives by then stops the request with an error naming the row. Each such reference is remembered
    /// until then (its row's key and target, not the row).
    ///
    /// Relationships a row gives are written on its side: a to-one whose inverse is an unordered to-many (or that has
    /// none), and a many-to-many (both link tables). A relationship whose other side lives in another row — a to-one
    /// with a to-one or ordered inverse, a to-many whose inverse is a to-one — is refused with an error that says to
    /// give it on the other side or to go through objects.
    public func executeBatchInsert(_ rows: BatchInsertRows) throws {
        let state = try open
        guard let entity = layout.entity(rows.entityName) else {
            throw ManagedObjectContextError(.unknownName, message: "the LMDB store holds no entity named \(rows.entityName)")
        }
        let plan = try BatchInsertPlan(entity, rows: rows, store: self, state: state)
        do {
            if rows.commitsEachChunk {
                while let chunk = try rows.nextChunk() {
                    let ids = try state.environment.write { transaction in
                        try insert(chunk, full: rows.chunkSize, plan: plan, rows: rows, state: state, transaction: transaction)
                    }
                    rows.didWrite(chunk.count, committed: true, objectIDs: ids)
                }
            } else {
                try state.environment.write { transaction in
                    // The engine runs the body again when the map filled and had to grow: an array's rows are read
                    // again from the first; a handler's are gone by then, so the request stops instead of losing them.
                    guard rows.rewindToCommitted() else {
                        throw ManagedObjectContextError(.storeUnusable,
                            message: "the batch insert into \(rows.entityName) filled the store's map, which has grown since; nothing was inserted. Run it again, or set `commitsEachChunk` so the map grows between chunks")
                    }
                    plan.deferred = []
                    // Tables empty at the start get their entries at the end, merged and appended.
                    let runs = AppendRuns(memoryBudget: Self.appendRunsMemoryBudget, spillFolder: spillFolder(state))
                    try plan.startBulkLoad(runs, maintainers: state.maintainers(of: entity), usingLane: Self.bulkLoadUsesLane, in: transaction)
                    // However the request ends, the lane's last job is over before the runs and the transaction go.
                    defer { plan.endBulkLoad() }
                    // Progress is reported a whole chunk at a time, however many reads the chunk took.
                    var unreported = (count: 0, ids: [ManagedObjectID]())
                    var size = plan.nextReadSize(chunkSize: rows.chunkSize)
                    while let chunk = try rows.nextChunk(atMost: size) {
                        unreported.ids += try insert(chunk, full: size, plan: plan, rows: rows, state: state, transaction: transaction)
                        unreported.count += chunk.count
                        if plan.readsAWholeChunk {
                            rows.didWrite(unreported.count, committed: false, objectIDs: unreported.ids)
                            unreported = (0, [])
                        }
                        size = plan.nextReadSize(chunkSize: rows.chunkSize)
                    }
                    if unreported.count > 0 { rows.didWrite(unreported.count, committed: false, objectIDs: unreported.ids) }
                    try putLeftovers(plan: plan, rows: rows, state: state, transaction: transaction)
                    try runs.appendAll(in: transaction, mergingAhead: plan.usesLane)
                    plan.endBulkLoad()
                    try fillDeferred(plan: plan, rows: rows, state: state, transaction: transaction)
                }
                rows.didCommit()
            }
        } catch let error as ManagedObjectContextError {
            throw error
        } catch let stop as BatchInsertRows.Stopped {
            throw stop
        } catch {
            throw storeError(error, "the batch insert into \(rows.entityName) failed; its transaction wrote nothing")
        }
    }

    /// The most bytes of index and link entries a one-transaction batch insert holds in memory to append at its end
    /// (``AppendRuns``): about 10 million entries of 26 bytes. Past it, they go to a file beside the store. Bound to
    /// less in a task, it makes a test's small import go through the file.
    @TaskLocal static var appendRunsMemoryBudget = 256 << 20

    /// Whether a one-transaction batch insert makes, sorts and keeps the entries of the tables it bulk-loads on a
    /// second thread (``BulkLoadLane``) while this one reads rows and writes them: when the machine has more than one
    /// processor. Bound in a task, it lets a test or a benchmark compare the two ways.
    @_spi(Benchmarks) @TaskLocal public static var bulkLoadUsesLane = ProcessInfo.processInfo.activeProcessorCount > 1

    /// Puts what the lane's last job made for the transaction's thread, after waiting for it: its chunk's rows,
    /// encoded there (when it encoded them), then the entries of tables no longer held.
    private func putLeftovers(plan: BatchInsertPlan, rows: BatchInsertRows, state: OpenState, transaction: any KeyValueTransaction) throws {
        guard var output = try plan.lane?.finish() else { return }
        if let encoded = output.encoded {
            let table = state.rows(of: plan.entity)
            try encoded.withRows { offset, key, bytes in
                guard try table.insert(encoded: bytes, key: key, in: transaction) else {
                    throw rows.rowError(.constraintViolation, output.rows[offset].position,
                                        "the key \(key) its sequence gave is taken: the store's \(plan.entity.root) sequence is behind its rows")
                }
            }
            plan.spareRows = encoded
            plan.unputFrom = nil
        }
        try output.entries.putPending(in: transaction) { position, _ in
            rows.rowError(.constraintViolation, position, "an index entry of the row is already in the store")
        }
        // The rows the lane read are let go here, on the thread that made them: memory freed on another thread than
        // the one that allocated it waits for the allocator's lock.
    }

    /// The folder a batch insert's entries go to past ``appendRunsMemoryBudget``: the data file's.
    private func spillFolder(_ state: OpenState) -> URL {
        if let environment = state.environment as? Environment { return URL(fileURLWithPath: environment.dataPath).deletingLastPathComponent() }
        return url.map { $0.deletingLastPathComponent() } ?? FileManager.default.temporaryDirectory
    }

    /// Writes one chunk in `transaction` — `full` rows were asked for, fewer at the end —: returns the new objects'
    /// IDs when the request wants them.
    private func insert(_ chunk: [BatchInsertRow], full: Int, plan: BatchInsertPlan, rows: BatchInsertRows, state: OpenState,
                        transaction: any KeyValueTransaction) throws -> [ManagedObjectID] {
        let entity = plan.entity
        let table = state.rows(of: entity), maintainers = plan.staying ?? state.maintainers(of: entity)
        // Keys for the whole chunk in one step.
        let first = try state.sequences.counter(entity.root, in: transaction) + 1
        try state.sequences.setCounter(entity.root, to: first + UInt64(chunk.count) - 1, in: transaction)
        // Entries a uniqueness constraint checks are put as each row is (the rows after it see them); the others are
        // put at the end of the chunk, each table's in key order.
        var indexes = IndexUpdates(sortingEntries: true, runs: plan.runs)
        // With a lane: the entries it makes, sorts and keeps for this chunk — the links of held tables, given here,
        // and the moving maintainers', made there from the chunk and each row's to-one references, in field order.
        var moved = plan.usesLane ? IndexUpdates(sortingEntries: true, runs: plan.runs) : nil
        // A full chunk's rows are encoded there too, and put here when its job is taken, after this thread has read
        // the next chunk. Rows written here follow those, in key order.
        let rowsOnLane = moved != nil && chunk.count == full
        if moved != nil && !rowsOnLane { try putLeftovers(plan: plan, rows: rows, state: state, transaction: transaction) }
        // Sized as the last chunk's were: growing by doubling, a chunk's arrays were copied and freed several times
        // (each free of a large block makes the allocator sweep its small free blocks).
        // Scaled to this chunk's rows: the first chunks are read in quarters.
        let waiting = plan.lastWaiting.scaled(to: chunk.count)
        indexes.reserve(entries: waiting.indexes.entries, bytes: waiting.indexes.bytes)
        moved?.reserve(entries: waiting.moved.entries, bytes: waiting.moved.bytes)
        var references: [StoredRow.Reference?] = []
        if moved != nil { references.reserveCapacity(chunk.count * plan.referenceFields.count) }
        // The targets found are kept for the next chunks (and for the deferred ones below).
        var resolver = plan.resolver
        var ids: [ManagedObjectID] = []
        if rows.resultType == .objectIDs { ids.reserveCapacity(chunk.count) }
        // One row's fields, every one of them set again for each row: no allocation a row. Not needed here when the
        // lane writes the rows and no entry of them is made here: only their to-ones are found.
        let placesRows = !rowsOnLane || !maintainers.isEmpty
        var row = StoredRow(entityTag: entity.tag, version: 1, fields: placesRows ? entity.newFields() : [])
        // The first of the batch's rows not put yet, when the lane puts this chunk's.
        let unputFrom = plan.unputFrom ?? first
        for (offset, input) in chunk.enumerated() {
            let key = first + UInt64(offset)
            try plan.checkRelationships(of: input)
            // The rows before this one that the lane has yet to encode are the batch's all the same.
            if rowsOnLane { resolver.unput = unputFrom..<key }
            var unfilled: [BatchInsertPlan.Unfilled] = [], unfilledMembers: [BatchInsertPlan.UnfilledMember] = []
            func target(_ field: Int, _ slot: Int) throws -> StoredRow.Reference? {
                guard let target = input.toOne(slot) else { return nil }
                let (relationship, check) = plan.toOneSlots[slot]!
                if let reference = try resolver.reference(target, relationship, check, row: input.position, rows: rows, transaction: transaction,
                                                          deferringBatchRows: true) {
                    return reference
                }
                unfilled.append(BatchInsertPlan.Unfilled(field: field, target: target, slot: relationship, check: check))
                return nil
            }
            if placesRows {
                try BatchInsertPlan.place(input, in: &row, of: entity, reference: target)
                if !maintainers.isEmpty {
                    try indexes.insertSorted(maintainers, row: row, key: key, position: input.position, in: transaction) { position, constraint in
                        rows.rowError(.constraintViolation, position, "\(takenValues(entity, constraint: constraint, row)) is already taken")
                    }
                }
                if !rowsOnLane {
                    guard try table.write(row, key: key, inserting: true, in: transaction) else {
                        throw rows.rowError(.constraintViolation, input.position, "the key \(key) its sequence gave is taken: the store's \(entity.root) sequence is behind its rows")
                    }
                }
                if moved != nil { for field in plan.referenceFields { references.append(row.reference(field)) } }
            } else {
                for field in plan.referenceFields { references.append(try target(field, entity.slotPositions[field])) }
            }
            // Links wait with the index entries: the row's own go after every other (its key is new), and the
            // inverse's after each member's others.
            for (index, link) in plan.links.enumerated() {
                guard let members = input.toMany(link.slot.position) else { continue }
                for (position, target) in members.enumerated() {
                    if let member = try resolver.reference(target, link.slot, link.check, row: input.position, rows: rows, transaction: transaction,
                                                           deferringBatchRows: true) {
                        try plan.putLink(index, table: link.table, member: member, at: position, of: key, row: input.position, into: &indexes,
                                         moving: &moved, in: transaction)
                    } else {
                        unfilledMembers.append(BatchInsertPlan.UnfilledMember(link: index, target: target, position: position))
                    }
                }
            }
            if !unfilled.isEmpty || !unfilledMembers.isEmpty {
                plan.deferred.append(BatchInsertPlan.Deferred(key: key, position: input.position, unfilled: unfilled, members: unfilledMembers))
            }
            if rows.resultType == .objectIDs { ids.append(objectID(entityTag: entity.tag, key: key, in: state)) }
        }
        resolver.unput = nil
        plan.lastWaiting = BatchInsertPlan.Waiting(rows: chunk.count, indexes: indexes.waiting, moved: moved?.waiting ?? (0, 0))
        try indexes.putPending(in: transaction) { position, _ in
            rows.rowError(.constraintViolation, position, "an index entry of the row is already in the store")
        }
        if let moved, let moving = plan.moving {
            if rowsOnLane {
                // A full chunk may have more after it: the lane works on it while this thread reads the next. The
                // last chunk's job is over before this one's starts (one at a time), and what it left (its rows,
                // then entries) is put here first; its rows' memory is this job's.
                try putLeftovers(plan: plan, rows: rows, state: state, transaction: transaction)
                plan.startedLane().submit(plan.laneJob(chunk, firstKey: first, references: references, entries: moved, moving: moving,
                                                       encodingRows: true))
                if plan.unputFrom == nil { plan.unputFrom = first }
            } else {
                // The last chunk (a request of one short chunk starts no thread): nothing to overlap.
                var output = try plan.laneJob(chunk, firstKey: first, references: references, entries: moved, moving: moving,
                                              encodingRows: false)()
                try output.entries.putPending(in: transaction) { position, _ in
                    rows.rowError(.constraintViolation, position, "an index entry of the row is already in the store")
                }
            }
        }
        plan.resolver = resolver
        if rows.commitsEachChunk { try fillDeferred(plan: plan, rows: rows, state: state, transaction: transaction) }
        try recordBatch(inserted: (entity.tag, first..<(first + UInt64(chunk.count))), state: state, transaction: transaction)
        return ids
    }

    /// Fills in the to-ones and to-many members rows of the batch point at rows written after them
    /// (``BatchInsertPlan/deferred``), now that every row they may name is written: a row with such to-ones read
    /// again, its to-ones set, and written back with its index entries; a member's link entries put as a written
    /// member's are. A value no row gave stops the request with the error a missing target gives, naming the row.
    private func fillDeferred(plan: BatchInsertPlan, rows: BatchInsertRows, state: OpenState, transaction: any KeyValueTransaction) throws {
        guard !plan.deferred.isEmpty else { return }
        let entity = plan.entity
        let table = state.rows(of: entity), maintainers = state.maintainers(of: entity)
        var indexes = IndexUpdates(sortingEntries: true)
        for item in plan.deferred {
            for member in item.members {
                let link = plan.links[member.link]
                let reference = try plan.resolver.reference(member.target, link.slot, link.check, row: item.position, rows: rows, transaction: transaction)
                var none: IndexUpdates?
                try plan.putLink(member.link, table: link.table, member: reference, at: member.position, of: item.key, row: item.position, into: &indexes,
                                 moving: &none, in: transaction)
            }
            guard !item.unfilled.isEmpty else { continue }
            let id = objectID(entityTag: entity.tag, key: item.key, in: state)
            guard let old = try withRow(key: item.key, in: table, of: id, transaction: transaction, { bytes throws(RowDecodingError) in
                try RowCodec.decode(bytes, layout: layout)
            }) else {
                throw ManagedObjectContextError(.storeUnusable, message: "the row of \(id), written by this batch insert, is not in the store")
            }
            var row = old
            for target in item.unfilled {
                row.fields[target.field] = .reference(try plan.resolver.reference(target.target, target.slot, target.check, row: item.position, rows: rows,
                                                                                  transaction: transaction))
            }
            try indexes.update(maintainers, old: old, new: row, key: item.key, row: item.position, in: transaction)
            _ = try table.write(row, key: item.key, inserting: false, in: transaction)
        }
        try indexes.putPending(in: transaction) { position, _ in
            rows.rowError(.constraintViolation, position, "an index entry of the row is already in the store")
        }
        plan.deferred = []
    }
}

/// What a batch insert into one entity works out once: the relationships it writes and how, and the targets it has
/// found so far (kept across chunks and transactions: a row found stays while the batch runs, since nothing but the
/// batch writes meanwhile — LMDB has one writer, and each chunk's transaction follows the last).
private final class BatchInsertPlan {
    let entity: StoreLayout.EntityLayout
    /// The relationship of each to-one position of the entity's handle and its check (`nil`: not stored).
    let toOneSlots: [(slot: ManagedObjectModel.Slot, check: RelationshipCheck)?]
    /// The link tables a row's to-many values go to, with the relationship's check, and for a many-to-many the
    /// inverse's table by the member's tag.
    let links: [(slot: ManagedObjectModel.Slot, check: RelationshipCheck, table: ToManyTable, inverse: ((UInt16) throws -> ToManyTable)?)]
    /// Relationships kept in other rows (see ``LMDBIncrementalStore/executeBatchInsert(_:)``), by kind and position:
    /// a row that gives one is refused with the error.
    let refusals: [(kind: ManagedObjectModel.Slot.Kind, position: Int, error: ManagedObjectContextError)]
    var resolver: TargetResolver

    /// A to-one of a written row left empty, its target to be found among the batch's later rows.
    struct Unfilled {
        let field: Int
        let target: BatchTarget
        let slot: ManagedObjectModel.Slot
        let check: RelationshipCheck
    }

    /// A member of a to-many (link `link`, at `position` among the row's members) whose link entries wait for its
    /// target, a row later in the batch.
    struct UnfilledMember {
        let link: Int
        let target: BatchTarget
        let position: Int
    }

    /// A row written with to-ones or to-many members left out (``Unfilled``, ``UnfilledMember``): its key and its
    /// position in the batch.
    struct Deferred {
        let key: UInt64
        let position: Int
        let unfilled: [Unfilled]
        let members: [UnfilledMember]
    }

    /// The rows whose to-ones or to-many members point at rows the batch had not written yet: filled in at the end
    /// of the request (or of each chunk, when chunks commit).
    var deferred: [Deferred] = []

    /// Where the entries of tables empty when the request's one transaction began wait to be appended at its end
    /// (`nil` when each chunk commits, and once they are put).
    var runs: AppendRuns?
    /// Whether the bulk load makes, sorts and keeps the entries of held tables apart from the rows, on a second
    /// thread for each full chunk (``lane``), with the maintainers whose entries it makes there (`moving`) and those
    /// the transaction's thread keeps (`staying`).
    private(set) var usesLane = false
    private(set) var moving: EntityMaintainers?
    private(set) var staying: EntityMaintainers?
    /// The second thread, once a full chunk was handed to it (``startedLane()``).
    private(set) var lane: BulkLoadLane<LaneOutput>?
    /// By table handle: whether its entries go to the lane (a table the runs hold at first sight). A few tables,
    /// looked up for each link entry: a scan of them costs less than hashing.
    private var movingTables: [(handle: UInt32, moves: Bool)] = []
    /// The entity's to-one fields, in field order.
    let referenceFields: [Int]
    /// The entries (and their bytes) the last chunk kept for the end of the chunk, and for the lane: what the next
    /// chunk makes room for at once.
    var lastWaiting = Waiting(rows: 0, indexes: (0, 0), moved: (0, 0))

    /// The entries (and their bytes) a chunk of `rows` rows kept for its end and for the lane.
    struct Waiting {
        var rows: Int
        var indexes: (entries: Int, bytes: Int)
        var moved: (entries: Int, bytes: Int)

        /// As many for a chunk of `count` rows.
        func scaled(to count: Int) -> Waiting {
            guard rows > 0, rows != count else { return self }
            func scale(_ kept: (entries: Int, bytes: Int)) -> (entries: Int, bytes: Int) { (kept.entries * count / rows, kept.bytes * count / rows) }
            return Waiting(rows: count, indexes: scale(indexes), moved: scale(moved))
        }
    }

    /// Starts a one-transaction request's bulk load into `runs`; with `usingLane`, the entries of the tables `runs`
    /// holds that no uniqueness constraint checks go to a ``BulkLoadLane``.
    func startBulkLoad(_ runs: AppendRuns, maintainers: EntityMaintainers, usingLane: Bool, in transaction: any KeyValueTransaction) throws {
        endBulkLoad()
        self.runs = runs
        guard usingLane else { return }
        let (staying, moving) = try maintainers.split { try runs.holds($0, in: transaction) }
        self.staying = staying
        self.moving = moving
        usesLane = true
    }

    /// The bulk load's second thread, started on first use.
    func startedLane() -> BulkLoadLane<LaneOutput> {
        if let lane { return lane }
        let lane = BulkLoadLane<LaneOutput>()
        self.lane = lane
        return lane
    }

    /// What a lane's job hands back: the entries it could not keep in the runs, the rows it read (let go by the
    /// thread that made them) and, for a full chunk, those rows encoded.
    struct LaneOutput {
        var entries: IndexUpdates
        let rows: [BatchInsertRow]
        var encoded: EncodedRows?
    }

    /// How many of the request's first chunks a bulk load with a lane reads in parts, and in how many: a request of a
    /// chunk or a few would otherwise have the lane wait while this thread reads a whole chunk, then wait for the
    /// lane. Later chunks are read whole (each part is a run of its own to merge at the end).
    static let chunksInParts = 4, partsOfAChunk = 4
    /// The parts read so far, and whether the last read ends a chunk.
    private var partsRead = 0
    private(set) var readsAWholeChunk = true

    /// How many rows to read next.
    func nextReadSize(chunkSize: Int) -> Int {
        let parts = Self.partsOfAChunk
        guard usesLane, chunkSize >= parts, partsRead < Self.chunksInParts * parts else {
            readsAWholeChunk = true
            return chunkSize
        }
        let part = partsRead % parts
        partsRead += 1
        readsAWholeChunk = part == parts - 1
        return chunkSize * (part + 1) / parts - chunkSize * part / parts
    }

    /// The lane's work on `rows` (keys from `firstKey` on), whose to-one `references` this thread found, in field
    /// order: each row placed again, the moving maintainers' entries made into `entries` (holding the links already
    /// given), sorted and kept in the runs, and — with `encodingRows` — the rows encoded, in the memory the last
    /// job's used. It never touches the transaction.
    func laneJob(_ rows: [BatchInsertRow], firstKey: UInt64, references: [StoredRow.Reference?], entries: IndexUpdates,
                 moving: EntityMaintainers, encodingRows: Bool) -> () throws -> LaneOutput {
        let entity = entity, referenceFields = referenceFields
        let encoded: EncodedRows? = encodingRows ? takeSpareRows(firstKey: firstKey) : nil
        return {
            var entries = entries, encoded = encoded
            var row = StoredRow(entityTag: entity.tag, version: 1, fields: entity.newFields())
            for (offset, input) in rows.enumerated() {
                var next = offset * referenceFields.count
                BatchInsertPlan.place(input, in: &row, of: entity) { _, _ in
                    defer { next += 1 }
                    return references[next]
                }
                entries.keepEntries(moving, row: row, key: firstKey + UInt64(offset), position: input.position)
                encoded?.append(row)
            }
            try entries.keepHeldInRuns()
            return LaneOutput(entries: entries, rows: rows, encoded: encoded)
        }
    }

    /// The key of the first row a lane's job encoded and the transaction's thread has not put yet (`nil`: none).
    var unputFrom: UInt64?
    /// The memory of the last rows the lane encoded, once they are put: the next job's.
    var spareRows: EncodedRows?

    /// Rows to encode from `firstKey` on, in the memory the last job's used.
    func takeSpareRows(firstKey: UInt64) -> EncodedRows {
        // Taken out, so that emptying it keeps its memory rather than copying what the plan still held.
        guard var rows = spareRows.take() else { return EncodedRows(firstKey: firstKey) }
        rows.restart(at: firstKey)
        return rows
    }

    /// Sets `row`'s fields from `input`: each attribute as given, each to-one from `reference` (given the field and
    /// the to-one's position; `nil` for none). The transaction's thread finds the references; the lane reads back
    /// those it found.
    @inline(__always)
    static func place(_ input: BatchInsertRow, in row: inout StoredRow, of entity: StoreLayout.EntityLayout,
                      reference: (_ field: Int, _ slot: Int) throws -> StoredRow.Reference?) rethrows {
        for field in entity.fields.indices {
            let slot = entity.slotPositions[field]
            guard entity.referenceFields[field] else {
                row.fields[field] = input.attribute(slot).map(RowField.attribute)
                continue
            }
            row.fields[field] = try reference(field, slot).map(RowField.reference)
        }
    }

    /// Ends the bulk load: waits for the lane's last job (its output dropped: after ``LMDBIncrementalStore``'s
    /// `putLeftovers` took it, or when the request failed) and lets the runs, lane and maintainers go.
    func endBulkLoad() {
        lane?.close()
        lane = nil
        partsRead = 0
        readsAWholeChunk = true
        unputFrom = nil
        spareRows = nil
        usesLane = false
        runs = nil
        staying = nil
        moving = nil
        movingTables = []
    }

    /// Whether `table`'s new entries go to the lane: it has one, and the runs hold the table at first sight.
    private func moves(_ table: Database, in transaction: any KeyValueTransaction) throws -> Bool {
        guard usesLane, let runs else { return false }
        for known in movingTables where known.handle == table.handle { return known.moves }
        let held = try runs.holds(table, in: transaction)
        movingTables.append((table.handle, held))
        return held
    }

    /// Puts the link entries of `member` at `position` among the to-many of link `index` (whose `table` the caller
    /// holds) of the row `key` (and, for a many-to-many, the row among the member's inverse), each table's in key
    /// order when `indexes` puts its pending entries — or, with `moving`, those of tables the lane keeps there.
    @inline(__always)
    func putLink(_ index: Int, table: ToManyTable, member: StoredRow.Reference, at position: Int, of key: UInt64, row: Int,
                 into indexes: inout IndexUpdates, moving: inout IndexUpdates?, in transaction: any KeyValueTransaction) throws {
        if moving != nil, try moves(table.database, in: transaction) {
            table.withNewEntry(member, of: key, at: position) { moving!.putSorted($1, forKey: $0, into: table.database, row: row) }
        } else {
            table.withNewEntry(member, of: key, at: position) { indexes.putSorted($1, forKey: $0, into: table.database, row: row) }
        }
        guard links[index].inverse != nil else { return }
        let inverse = try inverseTable(index, tag: member.entityTag)
        let inverseKey = StoredRow.Reference(entityTag: entity.tag, key: key)
        if moving != nil, try moves(inverse.database, in: transaction) {
            inverse.withNewEntry(inverseKey, of: member.key, at: 0) { moving!.putSorted($1, forKey: $0, into: inverse.database, row: row) }
        } else {
            inverse.withNewEntry(inverseKey, of: member.key, at: 0) { indexes.putSorted($1, forKey: $0, into: inverse.database, row: row) }
        }
    }

    /// The last inverse link table each link found, with the member tag it was found for (members of one
    /// relationship usually share their entity).
    private var inverseTables: [(tag: UInt16, table: ToManyTable)?]

    /// The link table of link `index`'s inverse in the entity tagged `tag`.
    func inverseTable(_ index: Int, tag: UInt16) throws -> ToManyTable {
        if let found = inverseTables[index], found.tag == tag { return found.table }
        let table = try links[index].inverse!(tag)
        inverseTables[index] = (tag, table)
        return table
    }

    /// Throws the refusal of a relationship `row` gives that the batch cannot write.
    func checkRelationships(of row: BatchInsertRow) throws {
        for refusal in refusals where refusal.kind == .toOne ? row.toOne(refusal.position) != nil : row.toMany(refusal.position)?.isEmpty == false {
            throw refusal.error
        }
    }

    init(_ entity: StoreLayout.EntityLayout, rows: BatchInsertRows, store: LMDBIncrementalStore, state: LMDBIncrementalStore.OpenState) throws {
        self.entity = entity
        referenceFields = entity.fields.indices.filter { entity.referenceFields[$0] }
        let handle = entity.handle
        let model = store.model
        func refuse(_ slot: ManagedObjectModel.Slot, _ why: String) -> ManagedObjectContextError {
            ManagedObjectContextError(.unsupportedRequest,
                message: "a batch insert into \(entity.name) cannot set \(slot.name): \(why); set it on the other side, or give the rows as an array and run the request with `fallback: .throughObjects`")
        }
        // Relationships a row may not give here: refused when a row gives one, with what to do instead.
        var refusals: [(kind: ManagedObjectModel.Slot.Kind, position: Int, error: ManagedObjectContextError)] = []
        var toOneSlots = [(slot: ManagedObjectModel.Slot, check: RelationshipCheck)?](repeating: nil, count: handle.emptyToOne.count)
        for slot in handle.toOneSlots where slot.isPersistent {
            guard let position = entity.toOneRelationships.firstIndex(where: { $0.name == slot.name }) else { continue }
            toOneSlots[slot.position] = (slot, entity.toOneChecks[position])
            guard let relationship = slot.relationship, let inverse = model.inverse(of: relationship) else { continue }
            if !inverse.isToMany {
                refusals.append((.toOne, slot.position, refuse(slot, "its inverse \(inverse.name) is a to-one, kept in the other object's row")))
            } else if inverse.isOrdered {
                refusals.append((.toOne, slot.position, refuse(slot, "its inverse \(inverse.name) is ordered, and a new member's place in it is not the row's to give")))
            }
        }
        self.toOneSlots = toOneSlots
        var links: [(slot: ManagedObjectModel.Slot, check: RelationshipCheck, table: ToManyTable, inverse: ((UInt16) throws -> ToManyTable)?)] = []
        for slot in handle.relationshipSlots where slot.kind == .toMany && slot.isPersistent {
            guard let relationship = slot.relationship else { continue }
            guard let link = entity.linkSlots.firstIndex(where: { $0 === slot }) else {
                // Kept through its inverse's to-ones: the members' rows would change.
                refusals.append((.toMany, slot.position,
                                 refuse(slot, "it is kept through \(relationship.destinationEntityName).\(relationship.inverseName ?? "?"), a to-one in each member's row")))
                continue
            }
            let table = state.linkTables[Int(entity.tag)][link]
            var inverseTable: ((UInt16) throws -> ToManyTable)?
            if let inverse = model.inverse(of: relationship) {
                guard inverse.isToMany else {
                    refusals.append((.toMany, slot.position, refuse(slot, "its inverse \(inverse.name) is a to-one, kept in each member's row")))
                    continue
                }
                guard !inverse.isOrdered else {
                    refusals.append((.toMany, slot.position, refuse(slot, "its inverse \(inverse.name) is ordered, and the row's place among each member's \(inverse.name) is not the row's to give")))
                    continue
                }
                let inverseName = inverse.name
                inverseTable = { tag in
                    guard let name = store.layout.entityNamesByTag[tag], let destination = store.layout.entity(name),
                          let position = destination.linkRelationships.firstIndex(where: { $0.name == inverseName }) else {
                        throw ManagedObjectContextError(.storeUnusable, message: "the link table of \(inverseName) for entity tag \(tag) is not in the store's layout")
                    }
                    return state.linkTables[Int(tag)][position]
                }
            }
            links.append((slot, entity.linkChecks[link], table, inverseTable))
        }
        self.refusals = refusals
        self.links = links
        inverseTables = Array(repeating: nil, count: links.count)
        resolver = TargetResolver(store: store, state: state, entity: entity)
    }
}

/// Finds the rows a batch's relationships point at — by object ID (checked to exist, as a save checks a target)
/// or by the value of the destination's uniqueness constraint on one attribute (looked up in the table that keeps
/// it) — and remembers each found, so a thousand rows pointing at one department look it up once.
private struct TargetResolver {
    let store: LMDBIncrementalStore
    let state: LMDBIncrementalStore.OpenState
    let entity: StoreLayout.EntityLayout
    var references = LMDBIncrementalStore.References(known: [:], deleted: [])
    /// By relationship name, then value: the rows found by unique value.
    var byUniqueValue: [String: [AttributeValue: StoredRow.Reference]] = [:]
    /// By relationship name: where its unique values are looked up.
    var lookups: [String: UniqueLookup] = [:]
    /// The keys of the batch's rows written but not yet put (a bulk load's lane encodes them): a row pointing at one
    /// by object ID finds it here, not in the store.
    var unput: Range<UInt64>?
    private var scratch = EntryScratch()

    init(store: LMDBIncrementalStore, state: LMDBIncrementalStore.OpenState, entity: StoreLayout.EntityLayout) {
        self.store = store
        self.state = state
        self.entity = entity
    }

    /// How a relationship's unique values are found: the destination's layout, its key attribute's field and
    /// type, and the maintainer of the table that keeps the constraint.
    struct UniqueLookup {
        let destination: StoreLayout.EntityLayout
        let field: Int
        let type: AttributeType
        let maintainer: any IndexMaintainer
    }

    /// The row `target` names; an error naming the batch's row `row` when there is none.
    mutating func reference(_ target: BatchTarget, _ slot: ManagedObjectModel.Slot, _ check: RelationshipCheck, row: Int, rows: BatchInsertRows,
                            transaction: any KeyValueTransaction) throws -> StoredRow.Reference {
        try reference(target, slot, check, row: row, rows: rows, transaction: transaction, deferringBatchRows: false)!
    }

    /// The row `target` names, or `nil` when `deferringBatchRows` and it names by unique value a row of the
    /// batch's own entity family that is not written yet (it may come later in the batch).
    mutating func reference(_ target: BatchTarget, _ slot: ManagedObjectModel.Slot, _ check: RelationshipCheck, row: Int, rows: BatchInsertRows,
                            transaction: any KeyValueTransaction, deferringBatchRows deferring: Bool) throws -> StoredRow.Reference? {
        switch target {
        case .object(let id):
            // A target found before costs a lookup (the save's check, without naming an owner for its errors).
            if let tag = references.known[id], check.accepts(tag) {
                return StoredRow.Reference(entityTag: tag, key: try store.key(of: id))
            }
            if let unput, id.storeIdentifier == state.storeIdentifier, state.entity(of: id)?.tag == entity.tag,
               let key = try? store.key(of: id), unput.contains(key) {
                // A row of this batch, named as its entity: found without reading it.
                guard check.accepts(entity.tag) else {
                    throw rows.rowError(.wrongValueType, row, "\(entity.name).\(slot.name) points at \(id), which is not a \(check.destinationEntityName)")
                }
                return StoredRow.Reference(entityTag: entity.tag, key: key)
            }
            let owner = ManagedObjectID(entityName: entity.name, storeIdentifier: state.storeIdentifier, referenceObject: .string("batch row \(row)"))
            do {
                let tag = try store.checkTarget(id, of: check, owner: owner, &references, state: state, transaction: transaction)
                return StoredRow.Reference(entityTag: tag, key: try store.key(of: id))
            } catch let error as ManagedObjectContextError {
                throw rows.rowError(error.code, row, "\(entity.name).\(slot.name) points at \(id), \(error.code == .objectNotFound ? "which is not in the store" : "which is not a \(check.destinationEntityName)")")
            }
        case .uniqueValue(let value):
            if let found = byUniqueValue[slot.name]?[value] { return found }
            let lookup = try uniqueLookup(slot, rows: rows)
            guard let converted = value.converted(to: lookup.type) else {
                throw rows.rowError(.wrongValueType, row,
                    "\(entity.name).\(slot.name) is matched on \(lookup.destination.name).\(lookup.destination.fields[lookup.field].name), which is \(lookup.type.coreDataName), not \(value.kindName) \(value)")
            }
            var probe = StoredRow(entityTag: lookup.destination.tag, version: 1, fields: lookup.destination.newFields())
            probe.fields[lookup.field] = .attribute(converted)
            scratch.startRow(reference: 0, tag: lookup.destination.tag)
            let found: StoredRow.Reference? = try lookup.maintainer.withEntry(of: probe, scratch: &scratch) { key, _, _ in
                try lookup.maintainer.table.withValue(forKey: key, in: transaction) { entry in
                    entry.count >= IndexEntries.referenceSize
                        ? StoredRow.Reference(entityTag: UInt16(entry[8]) << 8 | UInt16(entry[9]), key: entry.loadUnaligned(as: UInt64.self).bigEndian)
                        : nil
                } ?? nil
            } ?? nil
            guard let found else {
                let fromBatch = lookup.destination.root == entity.root
                if deferring && fromBatch { return nil }
                throw rows.rowError(.objectNotFound, row,
                    "\(entity.name).\(slot.name) points at the \(lookup.destination.name) whose \(lookup.destination.fields[lookup.field].name) is \(converted), and there is none\(fromBatch ? " in the store or among the batch's rows\(rows.commitsEachChunk ? " up to the end of its chunk" : "")" : "")")
            }
            byUniqueValue[slot.name, default: [:]][value] = found
            return found
        }
    }

    private mutating func uniqueLookup(_ slot: ManagedObjectModel.Slot, rows: BatchInsertRows) throws -> UniqueLookup {
        if let known = lookups[slot.name] { return known }
        let (destinationHandle, key) = try rows.uniqueKey(of: slot)
        guard let destination = store.layout.entity(destinationHandle.name), let field = destination.fieldIndex[key.name],
              let constraint = destination.uniques.firstIndex(where: { $0.constraint.propertyNames == [key.name] }) else {
            throw ManagedObjectContextError(.unsupportedRequest, message: "the store keeps no uniqueness constraint on \(destinationHandle.name).\(key.name)")
        }
        let maintainers = state.maintainers(of: destination)
        let maintainer: (any IndexMaintainer)? = maintainers.fetchIndexes.first { $0.constraint == constraint } ?? maintainers.uniqueness.first { $0.constraint == constraint }
        guard let maintainer else {
            throw ManagedObjectContextError(.storeUnusable, message: "the table of the uniqueness constraint on \(destinationHandle.name).\(key.name) is not open")
        }
        let lookup = UniqueLookup(destination: destination, field: field, type: key.type, maintainer: maintainer)
        lookups[slot.name] = lookup
        return lookup
    }
}

/// Rows encoded one after the other (``RowCodec``'s bytes) under keys that follow one another: a bulk load's lane
/// encodes a chunk's rows into it, and the transaction's thread puts them.
struct EncodedRows {
    private(set) var firstKey: UInt64
    private let bytes: PendingBytes
    /// Where each row's bytes end.
    private var ends: [Int]

    /// No rows yet, from `firstKey` on.
    init(firstKey: UInt64) {
        self.firstKey = firstKey
        bytes = PendingBytes()
        ends = []
    }

    /// Forgets every row, keeping the memory, for rows from `firstKey` on.
    mutating func restart(at firstKey: UInt64) {
        self.firstKey = firstKey
        bytes.removeAll()
        ends.removeAll(keepingCapacity: true)
    }

    /// Encodes `row` after the others, under the next key.
    mutating func append(_ row: StoredRow) {
        let size = RowCodec.encodedSize(row)
        ends.append(bytes.append(count: size.bytes) { RowCodec.write(row, size: size, into: $0) }.upperBound)
    }

    /// Lends `body` each row in turn: its offset among the rows, its key and its bytes.
    func withRows(_ body: (_ offset: Int, _ key: UInt64, _ bytes: UnsafeRawBufferPointer) throws -> Void) rethrows {
        try bytes.withUnsafeBytes { all in
            var start = 0
            for (offset, end) in ends.enumerated() {
                try body(offset, firstKey + UInt64(offset), UnsafeRawBufferPointer(rebasing: all[start..<end]))
                start = end
            }
        }
    }
}
