import ObjectGraph

/// Checked rows copied out of LMDB's map, several to one allocation, which objects read a value at a time
/// (``StoredRowValues``): a batch of faults costs one allocation per block of rows (``LoadedRowWriter``), not one per
/// row, and an object pays for decoding only the values it reads.
///
/// A block is a `ManagedBuffer`: its header, then each row as a ``Record`` followed by the row's bytes, 8-byte
/// aligned; a row's place (``SharedRow/place``) is the offset of its record. A row's bytes never change once it is
/// handed over: the one read that fills a block writes each later row after it, into bytes no row handed over
/// covers. What the rows refer to — their entities' layouts, what makes their to-ones into the store's object IDs —
/// is immutable too, so any thread may read them (as ``StoredRowValues`` requires).
///
/// An object keeps its whole block alive while it reads its row, so blocks are small (``blockSize``): a row kept
/// alone keeps at most a few kilobytes.
final class LoadedRows: ManagedBuffer<LoadedRows.Header, UInt8>, StoredRowValues {
    struct Header {
        let identities: LMDBIncrementalStore.RowIdentities
        /// The store's entity layouts by tag: kept here so the unretained entity of each record stays valid.
        let entities: [StoreLayout.EntityLayout?]
    }

    /// What precedes a row's bytes in a block.
    struct Record {
        /// Unretained: the block's header keeps it alive.
        let entity: Unmanaged<StoreLayout.EntityLayout>
        let shape: EncodedRow.Shape
        let count: Int
    }

    /// The bytes a block is made with (unless one row needs more): about twenty rows of a typical entity.
    static let blockSize = 4096

    /// The bytes a row of `count` bytes takes in a block, its record included.
    @inline(__always)
    static func footprint(ofRowOf count: Int) -> Int {
        (MemoryLayout<Record>.stride + count + 7) & ~7
    }

    /// A block with room for at least `capacity` bytes of records and rows.
    static func make(capacity: Int, identities: LMDBIncrementalStore.RowIdentities, entities: [StoreLayout.EntityLayout?]) -> LoadedRows {
        unsafeDowncast(create(minimumCapacity: capacity) { _ in Header(identities: identities, entities: entities) }, to: LoadedRows.self)
    }

    /// A block holding a copy of `row` alone, made to its size: a lone fault's. The row's every value must have
    /// been checked (``EncodedRow/checkEveryValue()``).
    static func single(_ row: EncodedRow, identities: LMDBIncrementalStore.RowIdentities, entities: [StoreLayout.EntityLayout?]) -> SharedRow {
        let block = make(capacity: footprint(ofRowOf: row.body.count), identities: identities, entities: entities)
        block.write(row, at: 0)
        return SharedRow(block, place: 0)
    }

    /// Copies `row` (every value of which must have been checked, ``EncodedRow/checkEveryValue()``) to `place`,
    /// where ``footprint(ofRowOf:)`` bytes must be free and not yet handed over.
    func write(_ row: EncodedRow, at place: Int) {
        let body = row.body
        let record = Record(entity: Unmanaged.passUnretained(row.entity), shape: row.shape, count: body.count)
        withUnsafeMutablePointerToElements { elements in
            let start = UnsafeMutableRawPointer(elements) + place
            start.storeBytes(of: record, as: Record.self)
            if let base = body.baseAddress { (start + MemoryLayout<Record>.stride).copyMemory(from: base, byteCount: body.count) }
        }
    }

    /// Reads the row at `place` as the row it was, with what makes the store's object IDs.
    @inline(__always)
    private func withRow<Result>(_ place: Int,
                                 _ read: (EncodedRow, LMDBIncrementalStore.RowIdentities) throws(RowDecodingError) -> Result) throws(RowDecodingError) -> Result {
        try withUnsafeMutablePointers { header, elements throws(RowDecodingError) in
            let start = UnsafeRawPointer(elements) + place
            let record = start.loadUnaligned(as: Record.self)
            let body = UnsafeRawBufferPointer(start: start + MemoryLayout<Record>.stride, count: record.count)
            return try read(EncodedRow(checkedBody: body, entity: record.entity.takeUnretainedValue(), shape: record.shape),
                            header.pointee.identities)
        }
    }

    func attribute(at position: Int, row place: Int) -> AttributeValue? {
        do {
            return try withRow(place) { row, _ throws(RowDecodingError) in
                let fields = row.entity.fieldOfAttribute
                guard UInt(bitPattern: position) < UInt(fields.count), fields[position] >= 0 else { return nil }
                return try row.attributeValue(fields[position])
            }
        } catch {
            // Every value was checked before the row was copied, and the copy does not change.
            assertionFailure("a checked row failed to decode: \(error)")
            return nil
        }
    }

    func toOne(at position: Int, row place: Int) -> ManagedObjectID? {
        do {
            return try withRow(place) { row, identities throws(RowDecodingError) in
                let fields = row.entity.fieldOfToOne
                guard UInt(bitPattern: position) < UInt(fields.count), fields[position] >= 0,
                      let reference = try row.reference(fields[position]) else { return nil }
                return identities.objectID(entityTag: reference.entityTag, key: reference.key)
            }
        } catch {
            assertionFailure("a checked row failed to decode: \(error)")
            return nil
        }
    }

    func holdsAttribute(at position: Int, row place: Int) -> Bool {
        do {
            return try withRow(place) { row, _ throws(RowDecodingError) in
                let fields = row.entity.fieldOfAttribute
                guard UInt(bitPattern: position) < UInt(fields.count), fields[position] >= 0 else { return false }
                return try row.holdsField(fields[position])
            }
        } catch {
            assertionFailure("a checked row failed to decode: \(error)")
            return false
        }
    }

    func decodedSlots(row place: Int) -> (attributes: AttributeSlots, toOne: ToOneSlots) {
        do {
            return try withRow(place) { row, identities throws(RowDecodingError) in
                try row.decodedValues { identities.objectID(entityTag: $0.entityTag, key: $0.key) }
            }
        } catch {
            assertionFailure("a checked row failed to decode: \(error)")
            return (try? withRow(place) { row, _ in (row.entity.handle.newAttributes(), row.entity.handle.newToOne()) }) ?? ([], [])
        }
    }
}

/// Copies the checked rows one read hands over into blocks (``LoadedRows``), starting a block when a row does not
/// fit in the one being filled. One writer per read: a block is filled by one writer only.
struct LoadedRowWriter {
    private let identities: LMDBIncrementalStore.RowIdentities
    private let entities: [StoreLayout.EntityLayout?]
    private var block: LoadedRows?
    private var used = 0
    private var capacity = 0

    /// A writer for rows whose to-ones `identities` makes into object IDs, of the entities `entities` (the store
    /// layout's, by tag).
    init(identities: LMDBIncrementalStore.RowIdentities, entities: [StoreLayout.EntityLayout?]) {
        self.identities = identities
        self.entities = entities
    }

    /// A copy of `row`, whose every value must have been checked (``EncodedRow/checkEveryValue()``).
    mutating func copy(_ row: EncodedRow) -> SharedRow {
        let footprint = LoadedRows.footprint(ofRowOf: row.body.count)
        if block == nil || capacity - used < footprint {
            // A block of the standard size, or one row's if it needs more.
            capacity = max(LoadedRows.blockSize, footprint)
            block = LoadedRows.make(capacity: capacity, identities: identities, entities: entities)
            used = 0
        }
        let place = used
        block.unsafelyUnwrapped.write(row, at: place)
        used += footprint
        return SharedRow(block.unsafelyUnwrapped, place: place)
    }
}
