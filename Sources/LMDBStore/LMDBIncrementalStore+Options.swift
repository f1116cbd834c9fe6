import Foundation
import LMDB
import ObjectGraph

extension LMDBIncrementalStore {
    /// The LMDB store's options, typed. A coordinator takes store options as strings (Core Data's shape):
    /// ``dictionary`` writes these for `addPersistentStore(type:at:options:)`, and ``init(_:)`` reads them back,
    /// refusing a known option with a value it cannot take. Keys it does not know (another store's, Core Data's) are
    /// left alone.
    ///
    /// ```swift
    /// let options = LMDBIncrementalStore.Options(maxMapSize: 8 << 30, durability: .noSync)
    /// try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: url, options: options.dictionary)
    /// ```
    public struct Options: Sendable, Hashable {
        /// When a save is on disk.
        public enum Durability: String, Sendable, Hashable, CaseIterable {
            /// A save returns once the file is flushed (LMDB's default).
            case full
            /// The data is flushed, the meta page is not: a crash may lose the last save, never corrupt the file.
            case skipMetaSync
            /// Nothing is flushed by a save (the OS writes back later): a system crash may lose recent saves or, on
            /// some file systems, damage the file; a process crash loses nothing.
            case noSync
        }

        /// The map to start with, in bytes (`"mapSize"`); it grows as the store does. `nil`: LMDB's default.
        public var mapSize: Int?
        /// The size in bytes the map, and so the file, may grow to (`"maxMapSize"`); a save that needs more fails
        /// whole, its error's ``ManagedObjectContextError/cause`` being `LMDBError.mapFull`. `nil`: 1 TiB.
        public var maxMapSize: Int?
        /// When a save is on disk (`"durability"`).
        public var durability: Durability
        /// Whether the kernel reads ahead of the pages asked for (`"readAhead"`); `false` for random access to a
        /// store much larger than memory.
        public var readsAhead: Bool
        /// Whether the store may add its tables to an LMDB file that already holds another program's data
        /// (`"createInForeignFile"`); such a file is refused otherwise.
        public var createsInForeignFile: Bool
        /// Whether a store written with another version of the model is migrated to this one when it opens
        /// (Core Data's `NSMigratePersistentStoresAutomaticallyOption`, ``migrateAutomaticallyKey``); it is refused
        /// otherwise. Takes effect with ``infersMappingModel``: this store reads no mapping model files, so a mapping
        /// that cannot be inferred is given to ``LMDBIncrementalStore/migrateStore(at:through:options:progress:)``.
        public var migratesAutomatically: Bool
        /// Whether the mapping of an automatic migration is inferred (Core Data's
        /// `NSInferMappingModelAutomaticallyOption`, ``inferMappingModelKey``).
        public var infersMappingModel: Bool
        /// How many rows (or entries) a migration writes per transaction (`"migrationBatchSize"`); its progress is
        /// recorded after each. `nil`: 50 000.
        public var migrationBatchSize: Int?
        /// How many threads read a scan of a large table (`"scanThreads"`): its rows are split into that many key
        /// ranges, each read in a read transaction of its own that sees the same commit, and the matches handed on
        /// in key order. 1 reads every scan on the calling thread — for a server whose cores are busy with other
        /// requests. `nil`: the machine's active processors, at most 4.
        public var scanThreads: Int?
        /// Whether the file is rewritten without its free pages as the store opens (`"compactOnOpen"`; what Core
        /// Data's `NSSQLiteManualVacuumOption` asks of SQLite): see ``LMDBIncrementalStore/compactStore(at:)``. It
        /// copies every live page, so it is for an occasional open (after a large import or delete), not every one.
        /// A store open elsewhere — in another process, or in another store of this one — is opened as it is.
        public var compactsOnOpen: Bool

        /// The threads a scan may read with: ``scanThreads``, or the active processors, at most 4.
        var threadsPerScan: Int { scanThreads ?? min(4, ProcessInfo.processInfo.activeProcessorCount) }

        /// The rows a migration writes per transaction: ``migrationBatchSize``, or 50 000.
        var rowsPerMigrationTransaction: Int { migrationBatchSize ?? 50_000 }

        /// Core Data's option key asking for automatic migration.
        public static let migrateAutomaticallyKey = "NSMigratePersistentStoresAutomaticallyOption"
        /// Core Data's option key asking for the mapping to be inferred.
        public static let inferMappingModelKey = "NSInferMappingModelAutomaticallyOption"

        /// Options with the given values (the defaults: LMDB's map sizes, full durability, read-ahead, no foreign
        /// files, no automatic migration, no compaction).
        public init(mapSize: Int? = nil, maxMapSize: Int? = nil, durability: Durability = .full, readsAhead: Bool = true,
                    createsInForeignFile: Bool = false, migratesAutomatically: Bool = false, infersMappingModel: Bool = false,
                    migrationBatchSize: Int? = nil, scanThreads: Int? = nil, compactsOnOpen: Bool = false) {
            self.mapSize = mapSize
            self.maxMapSize = maxMapSize
            self.durability = durability
            self.readsAhead = readsAhead
            self.createsInForeignFile = createsInForeignFile
            self.migratesAutomatically = migratesAutomatically
            self.infersMappingModel = infersMappingModel
            self.migrationBatchSize = migrationBatchSize
            self.scanThreads = scanThreads
            self.compactsOnOpen = compactsOnOpen
        }

        /// Reads the options from a coordinator's string options.
        ///
        /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/wrongValueType`` naming the
        ///   first known option whose value it cannot take, and what it takes.
        public init(_ options: [String: String]) throws(ManagedObjectContextError) {
            func refuse(_ key: String, _ expected: String) -> ManagedObjectContextError {
                ManagedObjectContextError(.wrongValueType, message: "the store option \"\(key)\" is \"\(options[key]!)\"; it must be \(expected)")
            }
            func bytes(_ key: String) throws(ManagedObjectContextError) -> Int? {
                guard let text = options[key] else { return nil }
                guard let value = Int(text), value > 0 else { throw refuse(key, "a positive number of bytes") }
                return value
            }
            func flag(_ key: String, default value: Bool) throws(ManagedObjectContextError) -> Bool {
                switch options[key] {
                case nil: return value
                case "true": return true
                case "false": return false
                default: throw refuse(key, "true or false")
                }
            }
            // Core Data's own keys take a Boolean NSNumber there; here also its usual spellings as text.
            func coreDataFlag(_ key: String) throws(ManagedObjectContextError) -> Bool {
                switch options[key] {
                case nil, "false", "0", "NO": return false
                case "true", "1", "YES": return true
                default: throw refuse(key, "true or false")
                }
            }
            self.init(mapSize: try bytes("mapSize"), maxMapSize: try bytes("maxMapSize"))
            if let text = options["durability"] {
                guard let durability = Durability(rawValue: text) else { throw refuse("durability", "full, skipMetaSync or noSync") }
                self.durability = durability
            }
            readsAhead = try flag("readAhead", default: true)
            createsInForeignFile = try flag("createInForeignFile", default: false)
            compactsOnOpen = try flag("compactOnOpen", default: false)
            migratesAutomatically = try coreDataFlag(Self.migrateAutomaticallyKey)
            infersMappingModel = try coreDataFlag(Self.inferMappingModelKey)
            if let text = options["migrationBatchSize"] {
                guard let value = Int(text), value > 0 else { throw refuse("migrationBatchSize", "a positive number of rows") }
                migrationBatchSize = value
            }
            if let text = options["scanThreads"] {
                guard let value = Int(text), value > 0 else { throw refuse("scanThreads", "a positive number of threads") }
                scanThreads = value
            }
        }

        /// The options as a coordinator's string options; defaults are left out.
        public var dictionary: [String: String] {
            var options: [String: String] = [:]
            if let mapSize { options["mapSize"] = String(mapSize) }
            if let maxMapSize { options["maxMapSize"] = String(maxMapSize) }
            if durability != .full { options["durability"] = durability.rawValue }
            if !readsAhead { options["readAhead"] = "false" }
            if createsInForeignFile { options["createInForeignFile"] = "true" }
            if migratesAutomatically { options[Self.migrateAutomaticallyKey] = "true" }
            if infersMappingModel { options[Self.inferMappingModelKey] = "true" }
            if let migrationBatchSize { options["migrationBatchSize"] = String(migrationBatchSize) }
            if let scanThreads { options["scanThreads"] = String(scanThreads) }
            if compactsOnOpen { options["compactOnOpen"] = "true" }
            return options
        }

        /// The LMDB environment's options these give, for a store of `databases` tables.
        func environmentOptions(databases: Int) -> Environment.Options {
            var environment = Environment.Options()
            if let maxMapSize { environment.maxMapSize = maxMapSize }
            if let mapSize { environment.mapSize = mapSize }
            environment.mapSize = min(environment.mapSize, environment.maxMapSize)
            switch durability {
            case .full: break
            case .skipMetaSync: environment.durability = .skipMetaSync
            case .noSync: environment.durability = .noSync
            }
            environment.readsAhead = readsAhead
            // A migration opens the old model's tables, the new one's and their staged copies at once.
            environment.maxDatabases = max(128, 3 * databases + 16)
            return environment
        }
    }
}
