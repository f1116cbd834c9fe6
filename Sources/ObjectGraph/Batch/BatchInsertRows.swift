import Foundation

/// An object a row of a batch insert points at.
public enum BatchTarget: Sendable, Hashable {
    /// The object with this ID.
    case object(ManagedObjectID)
    /// The object of the relationship's destination entity whose uniqueness constraint on one attribute holds this
    /// value (converted to that attribute's type).
    case uniqueValue(AttributeValue)
}

/// One row of a batch insert as a store receives it: checked against the model (every value of its property's
/// type, required values present, validation rules kept), defaults applied. Its values lie in its chunk's
/// (``BatchInsertColumns``), beside the other rows'.
public struct BatchInsertRow: Sendable {
    /// The row's position in the request, from 0: what an error about the row names.
    public let position: Int
    /// The values of the row's chunk.
    package let columns: BatchInsertColumns
    /// The row's place in its chunk.
    package let index: Int

    /// The value of the persistent attribute at `position` among the entity's attributes (`nil`: NULL).
    @inline(__always)
    package func attribute(_ position: Int) -> AttributeValue? {
        columns.attributes[index &* columns.attributeCount &+ position]
    }

    /// The target of the to-one at `position` among the entity's to-ones (`nil`: none).
    @inline(__always)
    package func toOne(_ position: Int) -> BatchTarget? {
        columns.toOne[index &* columns.toOneCount &+ position]
    }

    /// The members of the to-many at `position` among the entity's to-manys; `nil` where the row gives none.
    @inline(__always)
    package func toMany(_ position: Int) -> [BatchTarget]? {
        columns.toMany[index &* columns.toManyCount &+ position]
    }

    /// The attribute values by name (absent: NULL).
    public var attributeValues: [String: AttributeValue] {
        let first = index * columns.attributeCount
        return columns.entity.attributeDictionary(AttributeSlots(columns.attributes[first..<(first + columns.attributeCount)]))
    }

    /// The to-one targets by name (absent: no object).
    public var toOneTargets: [String: BatchTarget] {
        var targets: [String: BatchTarget] = [:]
        for slot in columns.entity.toOneSlots where slot.isPersistent {
            if let target = toOne(slot.position) { targets[slot.name] = target }
        }
        return targets
    }

    /// The to-many targets by name, for the relationships the row gives.
    public var toManyTargets: [String: [BatchTarget]] {
        var targets: [String: [BatchTarget]] = [:]
        for slot in columns.entity.relationshipSlots where slot.kind == .toMany && slot.isPersistent {
            if let members = toMany(slot.position) { targets[slot.name] = members }
        }
        return targets
    }
}

/// The values of a chunk's rows, row after row in three arrays — attributes, to-one targets, to-many members —, each
/// row's in its entity's positions: a chunk of ten thousand rows is three allocations, not thirty thousand, and is let
/// go at once.
package final class BatchInsertColumns: Sendable {
    let entity: ManagedObjectModel.EntityHandle
    /// Each row's number of attributes, to-ones and to-manys: the entity's.
    let attributeCount: Int, toOneCount: Int, toManyCount: Int
    let attributes: AttributeSlots
    let toOne: ContiguousArray<BatchTarget?>
    let toMany: ContiguousArray<[BatchTarget]?>

    fileprivate init(_ builder: consuming Builder) {
        entity = builder.entity
        attributeCount = builder.defaults.count
        toOneCount = builder.toOneCount
        toManyCount = builder.toManyCount
        attributes = builder.attributes
        toOne = builder.toOne
        toMany = builder.toMany
    }

    /// A chunk's values as its rows are prepared: each new row starts at the defaults, with no targets.
    fileprivate struct Builder {
        let entity: ManagedObjectModel.EntityHandle
        let defaults: AttributeSlots
        let toOneCount: Int, toManyCount: Int
        var attributes = AttributeSlots()
        var toOne = ContiguousArray<BatchTarget?>()
        var toMany = ContiguousArray<[BatchTarget]?>()
        /// The rows added so far.
        private(set) var count = 0

        init(_ entity: ManagedObjectModel.EntityHandle, capacity: Int) {
            self.entity = entity
            defaults = entity.defaultValues
            toOneCount = entity.emptyToOne.count
            toManyCount = entity.toManyCount
            attributes.reserveCapacity(capacity * defaults.count)
            toOne.reserveCapacity(capacity * toOneCount)
            toMany.reserveCapacity(capacity * toManyCount)
        }

        /// Adds a row of defaults and no targets; returns where its values start in each array.
        mutating func addRow() -> (attributes: Int, toOne: Int, toMany: Int) {
            let starts = (attributes.count, toOne.count, toMany.count)
            for value in defaults { attributes.append(value) }
            for _ in 0..<toOneCount { toOne.append(nil) }
            for _ in 0..<toManyCount { toMany.append(nil) }
            count += 1
            return starts
        }

        /// Takes the last row out again (one whose values broke the rules).
        mutating func removeLastRow() {
            attributes.removeLast(defaults.count)
            toOne.removeLast(toOneCount)
            toMany.removeLast(toManyCount)
            count -= 1
        }
    }
}

/// The rows of a ``BatchInsertRequest`` as a store reads them: a chunk at a time, each row checked against the model
/// as it is prepared, so a request of any size holds one chunk.
///
/// A store that ``BatchInsertingStore/executeBatchInsert(_:)`` is given this reads chunks with ``nextChunk()`` and
/// tells what it wrote with ``didWrite(_:committed:objectIDs:)``: when ``commitsEachChunk``, after committing each
/// chunk in a transaction of its own; otherwise after writing each chunk in the one transaction of the whole request,
/// then ``didCommit()`` once it is committed. ``nextChunk()`` throws when the request was stopped: a store lets that
/// error end the request (and roll back the transaction it is in).
public final class BatchInsertRows {
    /// The entity the rows insert.
    public let entityName: String
    /// The most rows a chunk holds.
    public let chunkSize: Int
    /// Whether each chunk is committed on its own.
    public let commitsEachChunk: Bool
    /// What the result reports: a store hands over the new objects' IDs only for ``BatchResultType/objectIDs``.
    public let resultType: BatchResultType
    package let entity: ManagedObjectModel.EntityHandle
    private let model: ManagedObjectModel
    private var source: BatchInsertRequest.Source
    private let progressHandler: ((BatchProgress) -> Bool)?
    private let rowName: ((Int) -> String)?
    private let total: Int?
    private var nextPosition = 0
    private var exhausted = false
    /// Set when the progress handler or the task asked to stop.
    package private(set) var isStopped = false
    private var written = 0
    private var committed = 0
    private var writtenIDs: [ManagedObjectID] = []
    private var committedIDs: [ManagedObjectID] = []
    /// The dictionary a handler fills, kept between rows (its storage is reused).
    private var scratch: [String: BatchValue] = [:]
    /// A values handler's properties, looked up once: position `i` of a row sets `columns[i]`.
    private var columns: [ManagedObjectModel.Slot] = []
    /// The values a values handler fills, kept between rows.
    private var rowValues = BatchRowValues(count: 0)
    /// The stored properties whose rules a row's values may break (``check(_:)``), in the entity's order: a required
    /// value, an attribute with validation rules or of a type that holds NaN, a to-many with bounds. An optional
    /// string without rules cannot fail, and is not looked at.
    private let checkedSlots: [ManagedObjectModel.Slot]

    package init(_ request: BatchInsertRequest, model: ManagedObjectModel) throws(ManagedObjectContextError) {
        guard let entity = model.existingHandle(forEntityNamed: request.entityName) else {
            throw ManagedObjectContextError(.unknownName, message: "the model has no entity named \"\(request.entityName)\"")
        }
        guard !entity.description.isAbstract else {
            throw ManagedObjectContextError(.unknownName, message: "the entity \"\(request.entityName)\" is abstract; insert one of its sub-entities")
        }
        guard request.chunkSize > 0 else {
            throw ManagedObjectContextError(.unsupportedRequest, message: "a batch insert's chunk size must be at least 1, not \(request.chunkSize)")
        }
        self.entityName = request.entityName
        self.entity = entity
        self.model = model
        self.chunkSize = request.chunkSize
        self.commitsEachChunk = request.commitsEachChunk
        self.resultType = request.resultType
        self.source = request.source
        self.progressHandler = request.progressHandler
        self.rowName = request.rowName
        if case .rows(let rows) = request.source { total = rows.count } else { total = nil }
        checkedSlots = entity.persistentSlots.filter { slot in
            switch slot.kind {
            case .attribute: !slot.isOptional || slot.hasRules || ![.integer16, .integer32, .integer64, .string, .boolean, .binaryData, .uuid, .uri].contains(slot.type)
            case .toOne: !slot.isOptional
            case .toMany: slot.hasRules
            case .fetched: false
            }
        }
        if case .valuesHandler(let properties, _) = request.source {
            columns = try Self.columns(properties, of: entity, entityName: request.entityName)
            rowValues = BatchRowValues(count: columns.count)
        }
    }

    /// The slots of a values handler's properties, in order.
    private static func columns(_ properties: [String], of entity: ManagedObjectModel.EntityHandle, entityName: String) throws(ManagedObjectContextError) -> [ManagedObjectModel.Slot] {
        var seen = Set<String>()
        var columns: [ManagedObjectModel.Slot] = []
        for (position, name) in properties.enumerated() {
            guard let slot = entity.slot(named: name) else {
                throw ManagedObjectContextError(.unknownName, message: "property \(position) of the batch insert into \(entityName): \(entityName) has no property \"\(name)\"")
            }
            guard slot.isPersistent, slot.kind != .fetched else {
                throw ManagedObjectContextError(.unknownName, message: "property \(position) of the batch insert into \(entityName): \(entityName).\(name) is transient or fetched: a batch insert writes stored properties only")
            }
            guard seen.insert(name).inserted else {
                throw ManagedObjectContextError(.unsupportedRequest, message: "property \(position) of the batch insert into \(entityName): \"\(name)\" is listed twice")
            }
            columns.append(slot)
        }
        return columns
    }

    /// The error ``nextChunk()`` throws once the request was stopped.
    package struct Stopped: Error {}

    /// The next chunk of at most ``chunkSize`` rows, in request order; `nil` when there are none left.
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the first row that breaks the model's rules (wrong type,
    ///   unknown or transient property, required value missing, a validation rule), or an error that stops the
    ///   request when its progress handler returned `false` or its task was cancelled.
    public func nextChunk() throws -> [BatchInsertRow]? {
        try nextChunk(atMost: chunkSize)
    }

    /// The next chunk of at most `limit` rows (and at most ``chunkSize``), as ``nextChunk()`` reads it: for a store
    /// that reads a chunk in parts, to start on one part while it reads the next.
    package func nextChunk(atMost limit: Int) throws -> [BatchInsertRow]? {
        let chunkSize = max(1, min(limit, self.chunkSize))
        if isStopped || (nextPosition > 0 && Task.isCancelled) {
            isStopped = true
            throw Stopped()
        }
        // Room for a whole chunk at once — an array's rows, as many as are left; a handler's, up to 16 384 (it may
        // stop at any row) —: grown by doubling, the arrays were copied and freed a dozen times a chunk.
        let capacity: Int
        if case .rows(let rows) = source {
            capacity = min(chunkSize, max(rows.count - nextPosition, 0))
        } else {
            capacity = min(chunkSize, 16_384)
        }
        var builder = BatchInsertColumns.Builder(entity, capacity: capacity)
        let first = nextPosition
        if case .valuesHandler(_, let handler) = source {
            while builder.count < chunkSize, !exhausted {
                rowValues.clear()
                if try fill(&rowValues, with: handler) { break }
                try prepare(&rowValues, position: nextPosition, into: &builder)
                nextPosition += 1
            }
        } else {
            while builder.count < chunkSize, let values = try nextValues() {
                try prepare(values, position: nextPosition, into: &builder)
                nextPosition += 1
            }
        }
        guard builder.count > 0 else { return nil }
        let count = builder.count
        let columns = BatchInsertColumns(builder)
        return (0..<count).map { BatchInsertRow(position: first + $0, columns: columns, index: $0) }
    }

    /// The next row's values from the array or the handler; `nil` at the end. A handler's error is passed on, saying
    /// what the request committed before it.
    private func nextValues() throws -> [String: BatchValue]? {
        guard !exhausted else { return nil }
        switch source {
        case .rows(let rows):
            guard nextPosition < rows.count else {
                exhausted = true
                return nil
            }
            return rows[nextPosition]
        case .handler(let handler):
            scratch.removeAll(keepingCapacity: true)
            if handler(&scratch) {
                exhausted = true
                return nil
            }
            return scratch
        case .objectHandler:
            preconditionFailure("an object handler is turned into a row handler by the context that runs the request")
        case .valuesHandler:
            preconditionFailure("a values handler's rows are made by nextChunk()")
        case .throwingHandler(let handler):
            scratch.removeAll(keepingCapacity: true)
            return try fill(&scratch, with: handler) ? nil : scratch
        }
    }

    /// Calls a handler that may fail on `row`: `true` (and the rows exhausted) when it says there are no more. Its
    /// error is passed on, saying what the request committed before it.
    private func fill<Row>(_ row: inout Row, with handler: (inout Row) throws -> Bool) throws -> Bool {
        let done: Bool
        do {
            done = try handler(&row)
        } catch var error as ManagedObjectContextError {
            error.message += progressNote
            throw error
        }
        if done { exhausted = true }
        return done
    }

    /// Tells the request that `count` more rows were written, with their IDs for ``BatchResultType/objectIDs``
    /// (and nothing otherwise); `committed` when they are committed already (a chunk committed on its own). Calls
    /// the progress handler.
    public func didWrite(_ count: Int, committed isCommitted: Bool, objectIDs: [ManagedObjectID] = []) {
        written += count
        if resultType == .objectIDs { writtenIDs += objectIDs }
        if isCommitted { didCommit() }
        if let progressHandler, !progressHandler(BatchProgress(written: written, committed: committed, total: total)) { isStopped = true }
        if Task.isCancelled { isStopped = true }
    }

    /// Tells the request that every row written so far is committed; `objectIDs` adds the IDs of rows reported
    /// without them (for ``BatchResultType/objectIDs``), for a store that knows them only once they are committed.
    public func didCommit(objectIDs: [ManagedObjectID] = []) {
        committed = written
        if resultType == .objectIDs { committedIDs += writtenIDs + objectIDs }
        writtenIDs.removeAll()
        if exhausted, case .rows = source { source = .rows([]) }  // every row is in: the array can go
    }

    /// Goes back to the first row not committed, for a store whose transaction was rolled back and runs again (a
    /// full map grown, say): `true` when the rows can be read again — an array's can, a handler's cannot.
    public func rewindToCommitted() -> Bool {
        guard nextPosition != committed else { return true }  // nothing read since the last commit
        guard case .rows = source else { return false }
        nextPosition = committed
        written = committed
        writtenIDs.removeAll()
        exhausted = false
        return true
    }

    /// The result: the committed rows, whether the request ran to the end.
    package var result: BatchResult {
        BatchResult(isComplete: !isStopped && exhausted && written == committed, count: committed,
                    objectIDs: resultType == .objectIDs ? committedIDs : nil)
    }

    /// The error for row `position`: "row 12 of the batch insert into Employee: …" (or the request's name for the
    /// row: "line 14 of data.csv").
    package func rowError(_ code: ManagedObjectContextError.Code, _ position: Int, _ message: String) -> ManagedObjectContextError {
        ManagedObjectContextError(code, message: "\(rowName?(position) ?? "row \(position)") of the batch insert into \(entityName): \(message)\(progressNote)")
    }

    /// What an error says about the rows the request committed before it.
    private var progressNote: String {
        guard commitsEachChunk else { return "; nothing was inserted" }
        return committed == 0 ? "; nothing was inserted" : "; the \(committed) rows before its chunk were inserted and stay"
    }

    // MARK: - Checking a row

    private func prepare(_ values: [String: BatchValue], position: Int, into chunk: inout BatchInsertColumns.Builder) throws(ManagedObjectContextError) {
        let row = chunk.addRow()
        do throws(ManagedObjectContextError) {
            for (name, value) in values {
                guard let slot = entity.slot(named: name) else {
                    throw rowError(.unknownName, position, "\(entityName) has no property \"\(name)\"")
                }
                guard slot.isPersistent else {
                    throw rowError(.unknownName, position, "\(entityName).\(name) is transient or fetched: a batch insert writes stored properties only")
                }
                try set(value, of: slot, at: row, position: position, in: &chunk)
            }
            try check(row, position: position, in: chunk)
        } catch {
            chunk.removeLastRow()
            throw error
        }
    }

    /// A values handler's row: each position's value set on the property it stands for, and taken out of `values`
    /// (moved, not copied: the handler's values are let go with the chunk).
    private func prepare(_ values: inout BatchRowValues, position: Int, into chunk: inout BatchInsertColumns.Builder) throws(ManagedObjectContextError) {
        if let outside = values.outsidePosition {
            throw rowError(.unknownName, position, "a value is set at position \(outside), but the request lists \(columns.count) properties")
        }
        let row = chunk.addRow()
        do throws(ManagedObjectContextError) {
            for (index, slot) in columns.enumerated() {
                if let value = values.values[index].take() { try set(value, of: slot, at: row, position: position, in: &chunk) }
            }
            try check(row, position: position, in: chunk)
        } catch {
            chunk.removeLastRow()
            throw error
        }
    }

    /// Sets the value given for the stored property in `slot` on the row (at `position` in the request) whose values
    /// start at `row` in `chunk`, checked against its kind and converted to its type.
    private func set(_ value: BatchValue, of slot: ManagedObjectModel.Slot, at row: (attributes: Int, toOne: Int, toMany: Int), position: Int,
                     in chunk: inout BatchInsertColumns.Builder) throws(ManagedObjectContextError) {
        let name = slot.name
        switch slot.kind {
        case .attribute:
            switch value {
            case .null: chunk.attributes[row.attributes + slot.position] = nil
            case .attribute(let given):
                guard let converted = given.converted(to: slot.type) else {
                    throw rowError(.wrongValueType, position, "\(entityName).\(name) is \(slot.type.coreDataName), but the value is \(given.kindName) \(given)")
                }
                chunk.attributes[row.attributes + slot.position] = converted
            default:
                throw rowError(.wrongValueType, position, "\(entityName).\(name) is an attribute; it takes a value, not \(Self.describe(value))")
            }
        case .toOne:
            switch value {
            case .null: chunk.toOne[row.toOne + slot.position] = nil
            case .object(let id): chunk.toOne[row.toOne + slot.position] = .object(id)
            case .uniqueValue(let key): chunk.toOne[row.toOne + slot.position] = .uniqueValue(key)
            default:
                throw rowError(.wrongValueType, position,
                               "\(entityName).\(name) is a to-one relationship; it takes an object ID or a unique value, not \(Self.describe(value))")
            }
        case .toMany:
            switch value {
            case .null: chunk.toMany[row.toMany + slot.position] = []
            case .objects(let ids): chunk.toMany[row.toMany + slot.position] = ids.map(BatchTarget.object)
            case .uniqueValues(let keys): chunk.toMany[row.toMany + slot.position] = keys.map(BatchTarget.uniqueValue)
            default:
                throw rowError(.wrongValueType, position,
                               "\(entityName).\(name) is a to-many relationship; it takes object IDs or unique values, not \(Self.describe(value))")
            }
        case .fetched:
            throw rowError(.unknownName, position, "\(entityName).\(name) is a fetched property: a batch insert writes stored properties only")
        }
    }

    /// The model's rules for a prepared row (whose values start at `row` in `chunk`): required values, each
    /// attribute's rules, to-many counts.
    private func check(_ row: (attributes: Int, toOne: Int, toMany: Int), position: Int, in chunk: BatchInsertColumns.Builder) throws(ManagedObjectContextError) {
        var failures: [String] = []
        for slot in checkedSlots {
            switch slot.kind {
            case .attribute:
                guard let value = chunk.attributes[row.attributes + slot.position] else {
                    if !slot.isOptional { failures.append("\(slot.name): a value is required") }
                    continue
                }
                slot.ruleFailures(of: value) { failures.append("\(slot.name): \($0)") }
            case .toOne:
                if chunk.toOne[row.toOne + slot.position] == nil, !slot.isOptional { failures.append("\(slot.name): an object is required") }
            case .toMany:
                let relationship = slot.relationship!
                let count = chunk.toMany[row.toMany + slot.position]?.count ?? 0
                if count == 0 && relationship.isOptional { continue }
                if relationship.minimumCount > 0 && count < relationship.minimumCount {
                    failures.append("\(slot.name): holds \(count) objects, fewer than the minimum \(relationship.minimumCount)")
                }
                if relationship.maximumCount > 0 && count > relationship.maximumCount {
                    failures.append("\(slot.name): holds \(count) objects, more than the maximum \(relationship.maximumCount)")
                }
            case .fetched:
                break
            }
        }
        guard failures.isEmpty else { throw rowError(.validation, position, failures.joined(separator: "; ")) }
    }

    private static func describe(_ value: BatchValue) -> String {
        switch value {
        case .null: "nil"
        case .attribute(let value): "the \(value.kindName) \(value)"
        case .object(let id): "the object \(id)"
        case .objects(let ids): "\(ids.count) object IDs"
        case .uniqueValue(let value): "the unique value \(value)"
        case .uniqueValues(let values): "\(values.count) unique values"
        }
    }
}

extension BatchInsertRows {
    /// The slot of the destination's uniqueness constraint on one attribute that a ``BatchTarget/uniqueValue(_:)``
    /// of the relationship in `slot` is matched against, with the destination's handle.
    ///
    /// - Throws: ``ManagedObjectContextError/Code/unsupportedRequest`` when the destination has no such constraint
    ///   or more than one.
    package func uniqueKey(of slot: ManagedObjectModel.Slot) throws(ManagedObjectContextError) -> (destination: ManagedObjectModel.EntityHandle, key: ManagedObjectModel.Slot) {
        try model.batchUniqueKey(of: slot, from: entityName)
    }
}

extension ManagedObjectModel {
    /// The slot of the destination's uniqueness constraint on one attribute that a unique value given for the
    /// relationship in `slot` (of `entityName`) is matched against, with the destination's handle.
    ///
    /// - Throws: ``ManagedObjectContextError/Code/unsupportedRequest`` when the destination has no such constraint
    ///   or more than one.
    package func batchUniqueKey(of slot: Slot, from entityName: String) throws(ManagedObjectContextError) -> (destination: EntityHandle, key: Slot) {
        let destinationName = slot.destinationName!
        let destination = handle(forEntityNamed: destinationName)
        var names: [String] = []
        var entity: EntityDescription? = destination.description
        while let current = entity {
            for constraint in current.uniquenessConstraints where constraint.propertyNames.count == 1 { names.append(constraint.propertyNames[0]) }
            entity = current.parentName.flatMap { self.entity(named: $0) }
        }
        let keys = names.compactMap { destination.slot(named: $0) }.filter { $0.kind == .attribute }
        guard keys.count == 1 else {
            throw ManagedObjectContextError(.unsupportedRequest,
                message: "\(entityName).\(slot.name) is given by unique value, but \(destinationName) has \(keys.isEmpty ? "no" : "more than one") uniqueness constraint on one attribute to match it against")
        }
        return (destination, keys[0])
    }
}
