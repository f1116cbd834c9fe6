import ObjectGraph

/// A checked row copied out of LMDB's map, which an object reads a value at a time (``StoredRowValues``): a fault or a
/// fetched object costs one allocation and one copy of the row's bytes, and pays for decoding only the values it
/// reads.
///
/// One allocation holds the header and the bytes (a `ManagedBuffer`). The row is immutable once made, and what it
/// refers to — its entity's layout, what makes its to-ones into the store's object IDs — is immutable too,
/// so any thread may read it (as ``StoredRowValues`` requires).
final class LoadedRow: ManagedBuffer<LoadedRow.Header, UInt8>, StoredRowValues {
    struct Header {
        let entity: StoreLayout.EntityLayout
        let identities: LMDBIncrementalStore.RowIdentities
        let shape: EncodedRow.Shape
        let count: Int
    }

    /// A copy of `row`, whose every value must have been checked (``EncodedRow/checkEveryValue()``).
    static func copy(of row: EncodedRow, identities: LMDBIncrementalStore.RowIdentities) -> LoadedRow {
        let body = row.body
        let made = create(minimumCapacity: body.count) { _ in
            Header(entity: row.entity, identities: identities, shape: row.shape, count: body.count)
        }
        made.withUnsafeMutablePointerToElements { elements in
            if let base = body.baseAddress { elements.initialize(from: base.assumingMemoryBound(to: UInt8.self), count: body.count) }
        }
        return unsafeDowncast(made, to: LoadedRow.self)
    }

    /// Reads the copy as the row it was, with what makes the store's object IDs.
    @inline(__always)
    private func withRow<Result>(_ read: (EncodedRow, LMDBIncrementalStore.RowIdentities) throws(RowDecodingError) -> Result) throws(RowDecodingError) -> Result {
        try withUnsafeMutablePointers { header, elements throws(RowDecodingError) in
            let body = UnsafeRawBufferPointer(start: elements, count: header.pointee.count)
            return try read(EncodedRow(checkedBody: body, entity: header.pointee.entity, shape: header.pointee.shape), header.pointee.identities)
        }
    }

    func attribute(at position: Int) -> AttributeValue? {
        do {
            return try withRow { row, _ throws(RowDecodingError) in
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

    func toOne(at position: Int) -> ManagedObjectID? {
        do {
            return try withRow { row, identities throws(RowDecodingError) in
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

    func decodedSlots() -> (attributes: AttributeSlots, toOne: ToOneSlots) {
        do {
            return try withRow { row, identities throws(RowDecodingError) in
                try row.decodedValues { identities.objectID(entityTag: $0.entityTag, key: $0.key) }
            }
        } catch {
            assertionFailure("a checked row failed to decode: \(error)")
            return withUnsafeMutablePointerToHeader { ($0.pointee.entity.handle.newAttributes(), $0.pointee.entity.handle.newToOne()) }
        }
    }
}
