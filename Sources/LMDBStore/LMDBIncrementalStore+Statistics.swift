import Foundation
import LMDB
import ObjectGraph

/// What a store file holds and the room it takes, read without writing (``LMDBIncrementalStore/statistics(at:)``;
/// the `lmdbstore stat` command prints it).
public struct StoreStatistics: Sendable {
    /// One table of the file (`Docs/FORMAT.md` names them).
    public struct Table: Sendable, Hashable {
        /// The table's name, such as `rows/Employee` or `index/Employee/byName`.
        public var name: String
        /// Its entries (an index's or a to-many's: each row's entry, duplicate values counted one by one).
        public var entries: Int
        /// The pages its B-tree takes, branch, leaf and overflow.
        public var pages: Int
        /// The height of its B-tree.
        public var depth: Int
    }

    /// The store file's path.
    public var path: String
    /// The file format version (`Docs/FORMAT.md`), `nil` when the file does not say.
    public var format: Int?
    /// The store's UUID (`NSStoreUUID`).
    public var uuid: String
    /// The version hash of the model the store was written with, 64 hexadecimal digits.
    public var modelHash: String
    /// That model, as the file keeps it (format 3 and later; `nil` for an older file).
    public var model: ManagedObjectModel?
    /// The rows of each entity, its own only (a subentity's rows are counted under it), by entity name; empty when
    /// the file keeps no model.
    public var rowCounts: [String: Int]
    /// Every table, in name order.
    public var tables: [Table]
    /// The size of the file in bytes, and of the memory map it is opened with.
    public var fileSize: Int
    public var mapSize: Int
    /// The size of a page, the pages in use (up to the last one written) and those of them on the free list,
    /// which later writes reuse before the file grows.
    public var pageSize: Int
    public var usedPages: Int
    public var freePages: Int
    /// The reader slots other processes hold now (open read transactions and slots kept for reuse), and the most
    /// taken at once, by every process, since the lock file was made.
    public var readers: Int
    public var mostReaders: Int
}

extension LMDBIncrementalStore {
    /// The statistics of the store file at `url`, read in one snapshot without writing anything (the store may be
    /// open in other processes meanwhile).
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/storeUnusable`` naming the file
    ///   when it is missing, not an LMDBStore store, or keeps a model that does not load.
    public static func statistics(at url: URL) throws -> StoreStatistics {
        let (engine, stored) = try openedForReading(at: url)
        guard let environment = engine as? Environment else {
            throw ManagedObjectContextError(.storeUnusable, message: "\(url.path) is not kept by LMDB; its statistics are LMDB's")
        }
        let model = try keptModel(stored, path: url.path)
        let layout = model.map { StoreLayout(model: $0) }
        do {
            // Tables are opened outside a read transaction: LMDB opens a table in a transaction of its own.
            let opened = try environment.tableNames().compactMap { name in try environment.openExistingDatabase(named: name).map { (name, $0) } }
            var counts: [String: Int] = Dictionary(uniqueKeysWithValues: (layout?.entities.keys).map { $0.map { ($0, 0) } } ?? [])
            let (tables, info) = try environment.read { transaction in
                let tables = try opened.map { name, table in
                    let sizes = try table.statistics(in: transaction)
                    if let layout, case .rows? = layout.tables[name] { try countRows(in: table, layout: layout, transaction, into: &counts) }
                    return StoreStatistics.Table(name: name, entries: sizes.entries, pages: sizes.pages, depth: sizes.depth)
                }
                return (tables, try environment.info())
            }
            return StoreStatistics(
                path: url.path, format: stored[MetaKey.format].flatMap { Int($0) }, uuid: stored[MetaKey.uuid] ?? "",
                modelHash: stored[MetaKey.modelHash] ?? "", model: model, rowCounts: counts, tables: tables,
                fileSize: (try? FileManager.default.attributesOfItem(atPath: environment.dataPath)[.size] as? Int) ?? 0,
                mapSize: info.mapSize, pageSize: try environment.statistics().pageSize, usedPages: info.lastPageNumber + 1,
                freePages: try environment.freePageCount(), readers: environment.readerSlots().filter { $0.processID != getpid() }.count,
                mostReaders: info.readersInUse)
        } catch let error as ManagedObjectContextError {
            throw error
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "cannot read the statistics of \(url.path)", underlying: error)
        }
    }

    /// Adds each entity's own rows in `rows` (one hierarchy's table, read in `transaction`) to `counts`, by the entity
    /// tag of each row — without decoding the rest of it.
    static func countRows(in rows: Database, layout: StoreLayout, _ transaction: any KeyValueTransaction, into counts: inout [String: Int]) throws {
        try rows.withCursor(in: transaction) { cursor in
            try cursor.forEach { entry in
                if let tag = RowCodec.entityTag(entry.value), let entity = layout.entity(tag: tag) { counts[entity.name, default: 0] += 1 }
                return true
            }
        }
    }
}
