import Foundation
@testable import LMDBStore
import ObjectGraph

/// A fresh folder for one test's stores, removed afterwards.
final class StoreFolder {
    let url: URL

    init() {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("lmdbstore-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        LMDBIncrementalStore.register()
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    func file(_ name: String = "store.lmdb") -> URL { url.appendingPathComponent(name) }

    /// A coordinator over `model` with an LMDB store at `name`.
    func coordinator(_ model: ManagedObjectModel, _ name: String = "store.lmdb") throws -> (PersistentStoreCoordinator, LMDBIncrementalStore) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        let store = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: file(name)) as! LMDBIncrementalStore
        return (coordinator, store)
    }
}

extension StoreFolder {
    /// An LMDB store over `model` in this folder and an in-memory store beside it, both filled by `load` — the two
    /// sides of a differential test.
    func twinStores(_ model: ManagedObjectModel, _ load: (PersistentStoreCoordinator) throws -> Void) throws
        -> (lmdb: PersistentStoreCoordinator, store: LMDBIncrementalStore, memory: PersistentStoreCoordinator)
    {
        let (lmdb, store) = try coordinator(model)
        let memory = PersistentStoreCoordinator(managedObjectModel: model)
        try memory.addPersistentStore(type: InMemoryStore.storeType)
        try load(lmdb)
        try load(memory)
        return (lmdb, store, memory)
    }
}

/// Inserts an object per row — of the entity its `"entity"` value names, with its other values by key — and saves.
func insertRows(into coordinator: PersistentStoreCoordinator, _ rows: [[String: Any]]) throws {
    let context = ManagedObjectContext(coordinator: coordinator)
    for row in rows {
        let object = try context.insertNewObject(forEntityName: row["entity"] as! String)
        for (key, value) in row where key != "entity" { try object.setValue(value, forKey: key) }
    }
    try context.save()
}

/// Flips the last byte (part of the checksum) of every row in `root`'s table: any read of a row now fails, so a
/// fetch that still answers has read none.
func breakEveryRow(of root: String, in store: LMDBIncrementalStore) throws {
    let state = try store.open
    let rows = store.database("rows/" + root, in: state)
    try state.environment.write { transaction in
        var keys: [[UInt8]] = []
        try rows.withCursor(in: transaction) { cursor in try cursor.forEach { keys.append($0.keyBytes); return true } }
        for key in keys {
            var blob = try rows.value(forKey: key, in: transaction)!
            blob[blob.count - 1] ^= 0xFF
            try rows.put(blob, forKey: key, in: transaction)
        }
    }
}

/// Rewrites the stored bytes of `objectID`'s row in `root`'s table with `change` applied (checksum left as it was,
/// unless `change` fixes it), as damage on disk would.
func damageRow(of objectID: ManagedObjectID, in root: String, of store: LMDBIncrementalStore, _ change: (inout [UInt8]) -> Void) throws {
    let state = try store.open
    let rows = store.database("rows/" + root, in: state)
    try state.environment.write { transaction in
        let key = LMDBIncrementalStore.keyBytes(try store.key(of: objectID))
        var blob = try rows.value(forKey: key, in: transaction)!
        change(&blob)
        try rows.put(blob, forKey: key, in: transaction)
    }
}

/// Sets the value type of `field` in `objectID`'s row (row format 2 or 3) to `type` and makes the checksum match
/// again: damage a checksum cannot see, a value of a type the field's property is never written as.
func damageFieldType(of objectID: ManagedObjectID, in root: String, field: Int, to type: UInt8, of store: LMDBIncrementalStore) throws {
    try damageRow(of: objectID, in: root, of: store) { row in
        let body = row.count - 4
        row[RowHeader(row).types + field] = type
        let checksum = row[..<body].withUnsafeBytes { CRC32C.checksum($0) }
        withUnsafeBytes(of: checksum.bigEndian) { row.replaceSubrange(body..., with: $0) }
    }
}

/// A row's header read as `Docs/FORMAT.md` specifies it for row formats 2 and 3, written from the page and not
/// from the codec: where the field table starts, how many field numbers it covers and how wide its offsets are.
struct RowHeader {
    let format: UInt8
    let version: UInt64
    /// Field numbers the table covers.
    let fields: Int
    /// Where the type bytes start.
    let types: Int
    let offsetWidth: Int
    /// Where the offsets start.
    var offsets: Int { types + fields }
    /// Where the values start.
    var values: Int { offsets + fields * offsetWidth }

    init(_ row: [UInt8]) {
        format = row[0]
        if format == 3 {
            // Format, flags (the offsets' width: 0 one byte, 1 two, 2 four), tag, then the version and the field
            // count as unsigned LEB128 varints.
            var at = 4
            func varint() -> UInt64 {
                var value: UInt64 = 0, shift: UInt64 = 0
                while true {
                    let byte = row[at]
                    at += 1
                    value |= UInt64(byte & 0x7F) << shift
                    if byte < 0x80 { return value }
                    shift += 7
                }
            }
            version = varint()
            fields = Int(varint())
            types = at
            offsetWidth = [1, 2, 4][Int(row[1])]
        } else {
            // Format, flags (bit 0: four-byte offsets), tag, u64 version, the model hash's 8 bytes, u16 field count.
            version = row[4..<12].reduce(0) { $0 << 8 | UInt64($1) }
            fields = Int(row[20]) << 8 | Int(row[21])
            types = 22
            offsetWidth = row[1] & 1 != 0 ? 4 : 2
        }
    }
}

extension StoredRow {
    /// A row of `entity` from values by name (names it does not store are left out): rows for codec tests.
    init(entity: StoreLayout.EntityLayout, version: UInt64, attributes: [String: AttributeValue], toOne: [String: Reference] = [:]) {
        var fields = ContiguousArray<RowField?>(repeating: nil, count: entity.fields.count)
        for (name, value) in attributes { if let id = entity.fieldIndex[name] { fields[id] = .attribute(value) } }
        for (name, reference) in toOne { if let id = entity.fieldIndex[name] { fields[id] = .reference(reference) } }
        self.init(entityTag: entity.tag, version: version, fields: fields)
    }
}
