import Foundation
import LMDB
import ObjectGraph

extension LMDBIncrementalStore {
    /// Metadata keys in the `meta` database; every value is UTF-8 text.
    enum MetaKey {
        static let format = "format"
        static let uuid = "uuid"
        static let storeType = "storeType"
        static let modelHash = "modelHash"
        static let entities = "entities"
        static let model = "model"
        /// Tables an upgrade replaced and has yet to drop, as JSON: an array of names (`Docs/FORMAT.md`).
        static let leftoverTables = "leftoverTables"
        static func fields(_ entity: String) -> String { "fields/" + entity }
    }

    /// Opens (or creates) the store file and checks it: a new file gets a UUID, the store type, the format version,
    /// the model's version hash and the layout tables; an existing one must be an LMDB store of this type, of a
    /// format this code reads, written with this model. Nothing is written when a check fails.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/storeUnusable`` naming the file
    ///   and both sides of a mismatch.
    public func loadMetadata() throws {
        let path = url!.path
        let environmentOptions = storeOptions.environmentOptions(databases: layout.databaseNames.count)
        if storeOptions.compactsOnOpen {
            do {
                _ = try KeyValueEngines.compact(at: path, options: environmentOptions)
            } catch let error as LMDBError where error == .busy || error == .noSuchFile {
                // Open elsewhere, or a store about to be made: opened as it is.
            } catch let error as LMDBError where error == .invalid || error == .corrupted || error == .versionMismatch {
                // Not a sound LMDB file: the open below says so, as it would without the option.
            } catch {
                throw storeError(error, "cannot compact the store as it opens")
            }
        }
        let environment: any KeyValueEngine
        do {
            environment = try KeyValueEngines.open(at: path, options: environmentOptions)
        } catch let error as LMDBError where error == .invalid || error == .corrupted || error == .versionMismatch {
            throw ManagedObjectContextError(.storeUnusable, message: "\(path) is not a usable LMDB store: \(error)", underlying: error)
        } catch {
            throw storeError(error, "cannot open the store")
        }
        let existing = try Self.readMetadata(environment: environment, path: path)
        var stored = existing
        if existing.isEmpty {
            // An LMDB file that holds data but no store metadata is another program's: never written into unless
            // the caller asks for the store's tables beside it.
            if !storeOptions.createsInForeignFile, let foreign = try foreignContents(of: environment) {
                throw ManagedObjectContextError(.storeUnusable,
                    message: "\(path) is an LMDB file of another program (it holds \(foreign) and no LMDBStore metadata); it was left untouched — pass the store option createInForeignFile=true to add a store's tables to it")
            }
            stored = [
                MetaKey.format: String(Self.formatVersion), MetaKey.uuid: UUID().uuidString, MetaKey.storeType: type,
                MetaKey.modelHash: model.versionHashString,
            ]
            try create(environment, stored)
        } else {
            if let pending = try StoreMigration.record(in: stored, path: path) {
                try settleMigration(pending, environment, stored, path: path)
                stored = try Self.readMetadata(environment: environment, path: path)
            }
            if stored[MetaKey.modelHash] != model.versionHashString && storeOptions.migratesAutomatically && stored[MetaKey.storeType] == type {
                try migrateOnOpen(environment, stored, path: path)
                stored = try Self.readMetadata(environment: environment, path: path)
            }
            try check(stored, path: path)
            if let format = stored[MetaKey.format].flatMap(Int.init), format < Self.formatVersion {
                try upgrade(environment, from: format, path: path)
                stored[MetaKey.format] = String(Self.formatVersion)
                try dropLeftoverTables(environment, path: path)
            } else if stored[MetaKey.leftoverTables] != nil {
                try dropLeftoverTables(environment, path: path)
            }
        }
        var databases: [String: Database] = [:]
        do {
            for (name, kind) in layout.tables {
                databases[name] = try environment.openDatabase(named: name, options: kind.options, create: false)
            }
        } catch {
            throw storeError(error, "the store lacks a table its model needs")
        }
        let uuid = stored[MetaKey.uuid] ?? ""  // checked above, or just written
        let state = OpenState(environment: environment, databases: databases, storeIdentifier: uuid, layout: layout)
        let engine = ObjectIdentifier(environment)
        Self.storesByEngine.withLock { $0[engine, default: 0] += 1 }
        lock.withLock {
            // Loaded again: the claim moves to the engine opened now.
            if let claimedEngine { Self.release(claimedEngine) }
            claimedEngine = engine
            publish(state)
            metadataStorage = [
                PersistentStoreMetadataKey.uuid: uuid, PersistentStoreMetadataKey.storeType: type,
                PersistentStoreMetadataKey.modelVersionHash: stored[MetaKey.modelHash] ?? "", Self.formatVersionKey: stored[MetaKey.format] ?? "",
            ]
        }
    }

    /// What an LMDB file without store metadata holds that is not an interrupted creation of this store (the
    /// layout's tables, empty): a phrase naming it, or `nil` when there is nothing else.
    private func foreignContents(of environment: any KeyValueEngine) throws -> String? {
        let main = try environment.openDatabase(named: nil, options: [], create: false)
        guard try environment.read({ try main.entryCount(in: $0) }) > 0 else { return nil }
        let names = try environment.tableNames()
        let others = names.filter { layout.tables[$0] == nil }
        if !others.isEmpty {
            return "\(others.count) other key\(others.count == 1 ? "" : "s") or database\(others.count == 1 ? "" : "s") such as \(others.prefix(3).map { "\"\($0)\"" }.joined(separator: ", "))"
        }
        for name in names {
            guard let kind = layout.tables[name], let table = try? environment.openDatabase(named: name, options: kind.options, create: false) else {
                return "a table \"\(name)\" of another kind"
            }
            if try environment.read({ try table.entryCount(in: $0) }) > 0 { return "data in its table \"\(name)\"" }
        }
        return nil
    }

    private func check(_ stored: [String: String], path: String) throws {
        guard let format = stored[MetaKey.format].flatMap(Int.init), format >= 1 else {
            throw ManagedObjectContextError(.storeUnusable, message: "\(path) is an LMDB file but not an LMDBStore store (no format version)")
        }
        guard format <= Self.formatVersion else {
            throw ManagedObjectContextError(.storeUnusable, message: "\(path) has format version \(format); this LMDBStore reads up to \(Self.formatVersion)")
        }
        guard let uuid = stored[MetaKey.uuid], UUID(uuidString: uuid) != nil else {
            throw ManagedObjectContextError(.storeUnusable,
                message: "\(path) has no valid store UUID in its metadata (\(stored[MetaKey.uuid].map { "\"\($0)\"" } ?? "none")); its meta table is damaged")
        }
        guard stored[MetaKey.storeType] == type else {
            throw ManagedObjectContextError(.storeUnusable, message: "\(path) is a \(stored[MetaKey.storeType] ?? "?") store, not a \(type) store")
        }
        guard stored[MetaKey.modelHash] == model.versionHashString else {
            throw ManagedObjectContextError(.storeUnusable,
                message: "\(path) was written with model version \(stored[MetaKey.modelHash] ?? "?"), not this model's \(model.versionHashString)\(changes(since: stored, path: path))")
        }
    }

    /// What changed since the model a store file keeps (format 3 and later), as an error's second sentence: the
    /// changes a lightweight migration would make, or the one it cannot; and what to do.
    private func changes(since stored: [String: String], path: String) -> String {
        guard let old = try? Self.keptModel(stored, path: path) else {
            return ". Open it with the model it was written with"
        }
        let changes: String
        do {
            changes = "the changes since the model it was written with:\n" + (try MappingModel.inferred(from: old, to: model)).description
        } catch {
            changes = "the model it was written with does not map to this one: \(error.message)"
        }
        return ". \(changes)\nTo migrate it, open it with the store options \(Options.migrateAutomaticallyKey) and \(Options.inferMappingModelKey) set to true (or call LMDBIncrementalStore.migrateStore(at:through:options:)); or open it with the model it was written with (LMDBIncrementalStore.storedModel(at:) reads it from the file)"
    }

    /// Upgrades a file of an older format to the current one, rebuilding from the rows (which every format shares
    /// and which are not touched) the secondary tables whose layout changed:
    ///
    /// - from format 1, every `index/…` and `toone/…` table: format 1 kept each indexed row under its own key
    ///   (tuple + row key → entity tag), format 2 keeps a key's rows as its duplicate values (tuple → row key +
    ///   entity tag);
    /// - from format 2, the `index/…` tables of indexes with a case- or diacritic-insensitive element: format 3
    ///   folds strings by its own stated rule (``StringFolding``) instead of Foundation's.
    ///
    /// Format 3 also keeps the model in `meta`; format 4 writes rows in row format 2 (with a field table) and reads
    /// both row formats, so a format-3 file needs only the new format recorded. Format 5 keeps an unordered to-many's
    /// members as the duplicate values of its owner's key in a `members/…` table, where formats 1–4 kept a `link/…`
    /// table keyed by owner and member: those are copied (one write transaction per table), and dropped once the new
    /// format is recorded (``dropLeftoverTables(_:path:)``), as are the `unique/…` tables of constraints that an index
    /// now keeps (``StoreLayout/EntityLayout/indexOfConstraint``). Rows are re-indexed
    /// `rowsPerTransaction` to a write transaction (so a large store never needs one enormous transaction); the new
    /// format and the model are recorded once every entry is written. Interrupted, the file keeps its old format (its
    /// rebuilt tables gone or partly filled) and the next open starts over.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/storeUnusable`` naming a row
    ///   that cannot be decoded (nothing is recorded; the rows stay as they were).
    func upgrade(_ environment: any KeyValueEngine, from format: Int, path: String, rowsPerTransaction: Int = 50_000) throws {
        let folded = Set(layout.entities.values.flatMap(\.indexes).filter { entry in
            entry.index.elements.contains { $0.collation == .caseInsensitive || $0.collation == .caseAndDiacriticInsensitive }
        }.map { StoreLayout.indexDatabase(entity: $0.owner, index: $0.index.name) })
        let rebuilt = layout.databaseNames.filter { name in
            switch format {
            case 1: layout.tables[name] == .fetchIndex || layout.tables[name] == .toOneIndex
            case 2: folded.contains(name)
            default: false
            }
        }
        do {
            // 1. Drop the old tables, whichever flags an interrupted upgrade left them with.
            try environment.drop(try rebuilt.compactMap { try environment.openExistingDatabase(named: $0) })
            // 2. Create them with their flags, then fill them from every row, a batch of rows at a time.
            var tables: [String: Database] = [:]
            for name in rebuilt { tables[name] = try environment.openDatabase(named: name, options: layout.tables[name]?.options ?? []) }
            let roots = Set(layout.entities.values.map(\.root)).sorted()
            let rowTables = try roots.map { try environment.openDatabase(named: StoreLayout.rowsDatabase(root: $0)) }
            let meta = try environment.openDatabase(named: StoreLayout.metadataDatabase)
            // The maintainers of the rebuilt tables alone: each row gives them their entries.
            let maintainers = layout.entitiesByTag.map { entity in entity.map { EntityMaintainers($0) { tables[$0] } } }
            var scratch = EntryScratch()
            for (root, rows) in zip(roots, rowTables) where !rebuilt.isEmpty {
                var resume: [UInt8]? = []
                while let start = resume {
                    resume = nil
                    try environment.write { transaction in
                        try rows.withCursor(in: transaction) { cursor in
                            var done = 0
                            try cursor.forEach(in: start.isEmpty ? .all : KeyRange(lower: .inclusive(start))) { entry in
                                guard done < rowsPerTransaction else {
                                    resume = entry.keyBytes
                                    return false
                                }
                                done += 1
                                let key = try rows.rowKey(in: entry)
                                let row: StoredRow
                                do {
                                    row = try RowCodec.decode(entry.value, layout: layout)
                                } catch let error as RowDecodingError {
                                    throw ManagedObjectContextError(.storeUnusable, message: "\(path): the row with key \(key) in \(root)'s table cannot be read while upgrading the file from format \(format): \(error.reason)")
                                }
                                guard Int(row.entityTag) < maintainers.count, let entity = maintainers[Int(row.entityTag)] else { return true }
                                try entity.forEachEntry(of: row, key: key, scratch: &scratch) { table, _, key, value, _ in
                                    try table.put(value, forKey: key, in: transaction)
                                }
                                return true
                            }
                        }
                    }
                }
            }
            // 3. Unordered to-manys move from `link/…` tables (owner + member → member) to `members/…` tables (owner →
            // members), each in one write that starts by emptying what an interrupted upgrade left in it.
            var replaced: [String] = []
            if format < 5 {
                for name in layout.databaseNames {
                    guard let kind = layout.tables[name], case .toMany(let owner, let relationship, isOrdered: false) = kind else { continue }
                    let oldName = "link/\(owner)/\(relationship)"
                    let old: Database
                    do {
                        old = try environment.openDatabase(named: oldName, create: false)
                    } catch LMDBError.notFound {
                        continue
                    }
                    let new = try environment.openDatabase(named: name, options: kind.options)
                    try environment.write { transaction in
                        try new.clear(in: transaction)
                        try old.withCursor(in: transaction) { cursor in
                            try cursor.forEach { entry in
                                guard entry.key.count == 16, entry.value.count == 10 else {
                                    throw ManagedObjectContextError(.storeUnusable,
                                        message: "\(path): an entry of \"\(oldName)\" has a \(entry.key.count)-byte key and a \(entry.value.count)-byte value, not an owner and member key and a 10-byte reference, while upgrading the file from format \(format); nothing was changed")
                                }
                                // Entries come in owner, then member order: each owner's members are appended.
                                try new.put(entry.value, forKey: UnsafeRawBufferPointer(rebasing: entry.key[0..<8]), in: transaction,
                                            options: .appendDuplicate)
                                return true
                            }
                        }
                    }
                    replaced.append(oldName)
                }
                // A uniqueness constraint that an index keeps has no `unique/…` table of its own any more.
                var kept = Set<String>()
                for entity in layout.entities.values {
                    for (constraint, entry) in entity.uniques.enumerated() where entity.indexOfConstraint[constraint] >= 0 {
                        kept.insert(StoreLayout.uniqueDatabase(entity: entry.owner, number: entry.number))
                    }
                }
                for name in kept.sorted() {
                    do {
                        _ = try environment.openDatabase(named: name, create: false)
                        replaced.append(name)
                    } catch LMDBError.notFound {
                        continue
                    }
                }
            }
            // 4. Record the model and the new format (and the tables to drop).
            try environment.write { transaction in
                try meta.put(Array(model.jsonData()), forKey: Array(MetaKey.model.utf8), in: transaction)
                if !replaced.isEmpty {
                    try meta.put(Array(try JSONSerialization.data(withJSONObject: replaced)), forKey: Array(MetaKey.leftoverTables.utf8), in: transaction)
                }
                try meta.put(Array(String(Self.formatVersion).utf8), forKey: Array(MetaKey.format.utf8), in: transaction)
            }
        } catch let error as ManagedObjectContextError {
            throw error
        } catch {
            throw storeError(error, "cannot upgrade \(path) from format \(format)")
        }
    }

    /// Drops the tables `meta` lists as replaced by an upgrade or a migration (one interrupted after recording its
    /// format or model leaves them for the next open), each emptied in a write of its own first, then forgets the
    /// list.
    func dropLeftoverTables(_ environment: any KeyValueEngine, path: String) throws {
        try Self.dropLeftoverTables(environment, keeping: layout, path: path)
    }

    /// Drops the leftover tables `meta` lists, except `layout`'s.
    static func dropLeftoverTables(_ environment: any KeyValueEngine, keeping layout: StoreLayout, path: String) throws {
        do {
            let meta = try environment.openDatabase(named: StoreLayout.metadataDatabase)
            let key = Array(MetaKey.leftoverTables.utf8)
            guard let json = try environment.read({ try meta.value(forKey: key, in: $0) }) else { return }
            let names = (try? JSONSerialization.jsonObject(with: Data(json))) as? [String] ?? []
            let tables = try names.filter { layout.tables[$0] == nil }.compactMap { try environment.openExistingDatabase(named: $0) }
            try environment.drop(tables) { _ = try meta.delete(key: key, in: $0) }
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "cannot drop the tables \(path)'s upgrade or migration replaced", underlying: error)
        }
    }

    private func create(_ environment: any KeyValueEngine, _ stored: [String: String]) throws {
        do {
            var databases: [String: Database] = [:]
            for (name, kind) in layout.tables { databases[name] = try environment.openDatabase(named: name, options: kind.options) }
            let meta = databases[StoreLayout.metadataDatabase]!
            let values = stored.merging(try Self.layoutMetadata(layout)) { _, layout in layout }
            try environment.write { transaction in
                for (key, value) in values { try meta.put(Array(value.utf8), forKey: Array(key.utf8), in: transaction) }
            }
        } catch {
            throw storeError(error, "cannot create the store")
        }
    }

    /// The `meta` entries that describe a layout: its entity tags, each entity's field names and the model.
    static func layoutMetadata(_ layout: StoreLayout) throws -> [String: String] {
        var values: [String: String] = [:]
        let tags = Dictionary(uniqueKeysWithValues: layout.entityNamesByTag.map { (String($0.key), $0.value) })
        values[MetaKey.entities] = String(decoding: try JSONSerialization.data(withJSONObject: tags, options: [.sortedKeys]), as: UTF8.self)
        for (name, entity) in layout.entities {
            values[MetaKey.fields(name)] = String(decoding: try JSONSerialization.data(withJSONObject: entity.fields.map(\.name)), as: UTF8.self)
        }
        values[MetaKey.model] = String(decoding: layout.model.jsonData(), as: UTF8.self)
        return values
    }

    /// Reads a store file's metadata without opening it for writing.
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the file when it is missing or not an LMDBStore store.
    public static func readMetadata(at url: URL) throws -> [String: String] {
        let stored = try storedMetadata(at: url)
        return [PersistentStoreMetadataKey.uuid: stored[MetaKey.uuid] ?? "", PersistentStoreMetadataKey.storeType: stored[MetaKey.storeType] ?? "",
                PersistentStoreMetadataKey.modelVersionHash: stored[MetaKey.modelHash] ?? "", Self.formatVersionKey: stored[MetaKey.format] ?? ""]
    }

    /// The model a store file was written with, as its `meta` table keeps it (format 3 and later, in the JSON form
    /// of `Docs/MODEL-JSON.md`); `nil` for an older file not opened for writing since (opening upgrades it).
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/storeUnusable`` naming the file
    ///   when it is missing, not an LMDBStore store, or keeps a model that does not load (the model's problems are
    ///   in the message).
    public static func storedModel(at url: URL) throws -> ManagedObjectModel? {
        try keptModel(try storedMetadata(at: url), path: url.path)
    }

    /// The model `stored` (a file's `meta` entries) keeps, `nil` when it keeps none.
    static func keptModel(_ stored: [String: String], path: String) throws -> ManagedObjectModel? {
        guard let json = stored[MetaKey.model] else { return nil }
        do {
            return try ManagedObjectModel(json: Data(json.utf8), file: path + " (meta/model)")
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "\(path) keeps a model that does not load: \(error)", underlying: error)
        }
    }

    /// Every `meta` entry of a store file, read without opening it for writing.
    static func storedMetadata(at url: URL) throws -> [String: String] {
        try openedForReading(at: url).stored
    }

    /// A store file's engine, opened read-only, and its `meta` entries.
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the file when it is missing or not an LMDBStore store.
    static func openedForReading(at url: URL) throws -> (environment: any KeyValueEngine, stored: [String: String]) {
        let environment: any KeyValueEngine
        do {
            environment = try KeyValueEngines.open(at: url.path, options: .init { $0.isReadOnly = true })
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "cannot read the metadata of \(url.path)", underlying: error)
        }
        let stored = try readMetadata(environment: environment, path: url.path)
        guard !stored.isEmpty else {
            throw ManagedObjectContextError(.storeUnusable, message: "\(url.path) is an LMDB file but not an LMDBStore store")
        }
        return (environment, stored)
    }

    static func readMetadata(environment: any KeyValueEngine, path: String) throws -> [String: String] {
        let meta: Database
        do {
            meta = try environment.openDatabase(named: StoreLayout.metadataDatabase, create: false)
        } catch LMDBError.notFound {
            return [:]
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "cannot read the metadata of \(path)", underlying: error)
        }
        do {
            return try environment.read { transaction in
                var values: [String: String] = [:]
                try meta.withCursor(in: transaction) { cursor in
                    try cursor.forEach { entry in
                        values[String(decoding: entry.key, as: UTF8.self)] = String(decoding: entry.value, as: UTF8.self)
                        return true
                    }
                }
                return values
            }
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "cannot read the metadata of \(path)", underlying: error)
        }
    }
}
