import Foundation
import LMDB
import ObjectGraph

extension LMDBIncrementalStore {
    /// What a migration of a store file would do: the mapping, and how many stored rows each entity of the old model
    /// has (a dry run; nothing is written).
    public struct MigrationReport: Sendable, CustomStringConvertible {
        /// The mapping from the model the store was written with to the one asked for.
        public let mapping: MappingModel
        /// The rows each entity of the old model holds (its subentities' counted under them), by entity name.
        public let rowCounts: [String: Int]
        /// The tables of the new model's layout the migration writes (`Docs/FORMAT.md` names them), in name order.
        public let writtenTables: [String]
        /// The tables it keeps as they are: their entries are already the new model's (an attribute, index or
        /// constraint added to one entity leaves the other entities' tables alone), in name order.
        public let keptTables: [String]

        /// The mapping's changes, each entity's line followed by how many of its rows it holds, then the tables
        /// written and kept.
        public var description: String {
            guard !mapping.isIdentity else { return "no change" }
            var lines: [String] = []
            for line in mapping.description.split(separator: "\n").map(String.init) {
                let entity = String(line.prefix { $0 != ":" && $0 != " " })
                let source = mapping.entityMappings.first { $0.destinationEntityName == entity }?.sourceEntityName ?? entity
                lines.append(rowCounts[source].map { "\(line) [\($0) row\($0 == 1 ? "" : "s")]" } ?? line)
            }
            lines.append("tables written: \(writtenTables.isEmpty ? "none" : writtenTables.joined(separator: ", "))")
            lines.append("tables kept: \(keptTables.isEmpty ? "none" : keptTables.joined(separator: ", "))")
            return lines.joined(separator: "\n")
        }
    }

    /// Reports what migrating the store at `url` to `model` would change, and how many rows, without writing
    /// anything (a dry run).
    ///
    /// - Throws: ``ManagedObjectContextError``: ``ManagedObjectContextError/Code/storeUnusable`` naming the file when
    ///   it is missing, not an LMDBStore store, or keeps no model (written before format 3 and not opened since);
    ///   ``ManagedObjectContextError/Code/migrationFailed`` naming the entity and property a mapping cannot carry.
    public static func migrationReport(at url: URL, to model: ManagedObjectModel, customMappings: [CustomEntityMapping] = []) throws -> MigrationReport {
        let (environment, stored) = try openedForReading(at: url)
        guard let old = try keptModel(stored, path: url.path) else {
            throw ManagedObjectContextError(.storeUnusable, message: "\(url.path) keeps no model (it was written before format 3); open it once with its model first")
        }
        let mapping = try MigrationStage.custom(model, customMappings).mapping(from: old)
        let layout = StoreLayout(model: old), new = StoreLayout(model: model)
        let migration = StoreMigration(environment: environment, path: url.path, storeIdentifier: stored[MetaKey.uuid] ?? "", old: layout, new: new,
                                       mapping: mapping, customMappings: customMappings, rowsPerTransaction: 1)
        let kept = migration.unchangedTables(migration.plans())
        var own: [String: Int] = [:]
        for root in Set(layout.entities.values.map(\.root)).sorted() {
            guard let rows = try? environment.openDatabase(named: StoreLayout.rowsDatabase(root: root), create: false) else { continue }
            try environment.read { try countRows(in: rows, layout: layout, $0, into: &own) }
        }
        var counts: [String: Int] = [:]
        for (entity, count) in own {
            for name in old.ancestry(of: entity) { counts[name, default: 0] += count }
        }
        return MigrationReport(mapping: mapping, rowCounts: counts, writtenTables: StoreMigration.staged(new).filter { !kept.contains($0) },
                               keptTables: kept.sorted())
    }

    /// Migrates the store at `url` in place through `stages`, in order: from the stage whose model the store was
    /// written with (or, when it is none of them, from the model the file keeps) to the last stage's model. Each
    /// step runs in write transactions of ``Options/migrationBatchSize`` rows with its progress recorded, so a kill
    /// at any moment leaves the store as it was before the step or resumable: the next migration (or an open with
    /// the new model and automatic migration) finishes it. The store must not be open in another process, nor in another
    /// store of this one (which would go on reading the old layout).
    ///
    /// ```swift
    /// let stages = try MigrationStage.stages(ofCoreDataModel: URL(fileURLWithPath: "Library.xcdatamodeld"))
    /// try LMDBIncrementalStore.migrateStore(at: storeURL, through: stages)
    /// ```
    ///
    /// - Parameter progress: Told after each write transaction which phase of which step the migration is in.
    /// - Returns: The mapping of each step taken (none when the store already has the last stage's model).
    /// - Throws: ``ManagedObjectContextError``: ``ManagedObjectContextError/Code/migrationFailed`` naming what a
    ///   step cannot carry (the store keeps the model of the steps before); ``ManagedObjectContextError/Code/storeUnusable``
    ///   when the file is not a store, keeps no model and matches no stage, or is open in another process or another
    ///   store of this one.
    @discardableResult
    public static func migrateStore(at url: URL, through stages: [MigrationStage], options: Options = Options(),
                                    progress: ((_ step: Int, _ steps: Int, _ progress: MigrationProgress) -> Void)? = nil) throws -> [MappingModel] {
        guard let last = stages.last else { return [] }
        let path = url.path
        let databases = stages.map { StoreLayout(model: $0.model).tables.count }.max() ?? 0
        let environment: any KeyValueEngine
        do {
            environment = try KeyValueEngines.open(at: path, options: options.environmentOptions(databases: databases))
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "cannot open \(path) to migrate it", underlying: error)
        }
        var stored = try readMetadata(environment: environment, path: path)
        guard !stored.isEmpty else { throw ManagedObjectContextError(.storeUnusable, message: "\(path) is an LMDB file but not an LMDBStore store") }
        // A store already at the last version, with no migration under way, is left alone (whoever has it open).
        if stored[MetaKey.modelHash] == last.model.versionHashString && stored[StoreMigration.recordKey] == nil { return [] }
        var applied: [MappingModel] = []
        try exclusively(environment, path: path) {
            if let pending = try StoreMigration.record(in: stored, path: path), pending.phase == .install {
                try finishInstall(pending, environment, stored, path: path, rowsPerTransaction: options.rowsPerMigrationTransaction)
                stored = try readMetadata(environment: environment, path: path)
            }
            guard stored[MetaKey.modelHash] != last.model.versionHashString else {
                if try StoreMigration.record(in: stored, path: path) != nil { try StoreMigration.discard(environment, path: path) }
                return
            }
            try checkMigratable(stored, path: path)
            let start = stages.lastIndex { $0.model.versionHashString == stored[MetaKey.modelHash] }.map { $0 + 1 } ?? 0
            var current: ManagedObjectModel
            if start > 0 {
                current = stages[start - 1].model
            } else if let kept = try keptModel(stored, path: path) {
                current = kept
            } else {
                throw ManagedObjectContextError(.storeUnusable,
                    message: "\(path) was written with model version \(stored[MetaKey.modelHash] ?? "?"), which is none of the \(stages.count) stages', and keeps no model to migrate from; add a stage with that model")
            }
            for (number, stage) in stages[start...].enumerated() {
                let mapping = try stage.mapping(from: current)
                let pending = try StoreMigration.record(in: stored, path: path)
                let steps = stages.count - start
                try StoreMigration(environment: environment, path: path, storeIdentifier: stored[MetaKey.uuid] ?? "", old: StoreLayout(model: current),
                                   new: StoreLayout(model: stage.model), mapping: mapping, customMappings: stage.customMappings,
                                   rowsPerTransaction: options.rowsPerMigrationTransaction,
                                   progress: progress.map { report in { report(number + 1, steps, $0) } }).run(resuming: pending)
                applied.append(mapping)
                current = stage.model
                stored = try readMetadata(environment: environment, path: path)
            }
            try dropLeftoverTables(environment, keeping: StoreLayout(model: current), path: path)
        }
        return applied
    }

    /// Runs `body` with the store file to this process alone; another process holding it open is an error that
    /// says so.
    private static func exclusively(_ environment: any KeyValueEngine, path: String, _ body: () throws -> Void) throws {
        let users = storesByEngine.withLock { $0[ObjectIdentifier(environment)] ?? 0 }
        guard users == 0 else {
            throw ManagedObjectContextError(.storeUnusable,
                message: "\(path) cannot be migrated while \(users) other store\(users == 1 ? "" : "s") of this process \(users == 1 ? "has" : "have") it open (a coordinator with the old model would read and write the old layout); release \(users == 1 ? "it" : "them") first")
        }
        do {
            try environment.runExclusively(body)
        } catch let error as LMDBError where error == .busy {
            throw ManagedObjectContextError(.storeUnusable,
                message: "\(path) cannot be migrated while another process has it open; close it there and try again", underlying: error)
        }
    }

    /// A store of an older file format is upgraded by opening it with the model it was written with first.
    private static func checkMigratable(_ stored: [String: String], path: String) throws {
        guard let format = stored[MetaKey.format].flatMap(Int.init), format == formatVersion else {
            throw ManagedObjectContextError(.storeUnusable,
                message: "\(path) has format version \(stored[MetaKey.format] ?? "?"); open it once with the model it was written with (which upgrades it to format \(formatVersion)), then migrate it")
        }
    }

    /// Finishes the install phase of a migration a kill interrupted: the layout is the model `meta` now keeps.
    private static func finishInstall(_ record: StoreMigration.Record, _ environment: any KeyValueEngine, _ stored: [String: String], path: String,
                                      rowsPerTransaction: Int) throws {
        guard let model = try keptModel(stored, path: path) else {
            throw ManagedObjectContextError(.storeUnusable, message: "\(path) is being migrated but keeps no model; its meta table is damaged")
        }
        try StoreMigration.install(environment, layout: StoreLayout(model: model), record: record, path: path, rowsPerTransaction: rowsPerTransaction)
    }

    /// Settles a migration in progress when the store opens: an install is finished (whatever model opens it); a
    /// staged copy is dropped — the store is as it was — unless this store's model is its target and migrates
    /// automatically (``migrateOnOpen(_:_:path:)`` resumes it then).
    func settleMigration(_ pending: StoreMigration.Record, _ environment: any KeyValueEngine, _ stored: [String: String], path: String) throws {
        try Self.exclusively(environment, path: path) {
            switch pending.phase {
            case .install:
                try Self.finishInstall(pending, environment, stored, path: path, rowsPerTransaction: storeOptions.rowsPerMigrationTransaction)
            case .stage where pending.to == model.versionHashString && storeOptions.migratesAutomatically:
                return
            case .stage:
                try StoreMigration.discard(environment, path: path)
            }
        }
    }

    /// Migrates the store to this store's model by the inferred mapping (the store options asked for it), resuming a
    /// staged copy made for it.
    func migrateOnOpen(_ environment: any KeyValueEngine, _ stored: [String: String], path: String) throws {
        guard storeOptions.infersMappingModel else {
            throw ManagedObjectContextError(.storeUnusable,
                message: "\(path) was written with another model version and \(Options.migrateAutomaticallyKey) is set, but \(Options.inferMappingModelKey) is not: this store reads no mapping model files — set it too, or migrate with custom mappings through LMDBIncrementalStore.migrateStore(at:through:options:)")
        }
        try Self.checkMigratable(stored, path: path)
        guard let old = try Self.keptModel(stored, path: path) else {
            throw ManagedObjectContextError(.storeUnusable,
                message: "\(path) keeps no model to migrate from (it was written before format 3); migrate it with LMDBIncrementalStore.migrateStore(at:through:options:) and a stage for the model it was written with")
        }
        let mapping = try MappingModel.inferred(from: old, to: model)
        let pending = try StoreMigration.record(in: stored, path: path)
        try Self.exclusively(environment, path: path) {
            try StoreMigration(environment: environment, path: path, storeIdentifier: stored[MetaKey.uuid] ?? "", old: StoreLayout(model: old), new: layout,
                               mapping: mapping, customMappings: [], rowsPerTransaction: storeOptions.rowsPerMigrationTransaction).run(resuming: pending)
        }
    }
}

/// How far one step of a migration has come, as ``LMDBIncrementalStore/migrateStore(at:through:options:progress:)``
/// reports it after each write transaction.
public struct MigrationProgress: Sendable, Hashable {
    /// The two phases of a step: writing the new layout's tables beside the old ones, then putting them in place.
    public enum Phase: Sendable, Hashable {
        /// Reading the old rows and writing the staged copies: one part per entity hierarchy, and one for the links.
        case staging
        /// Copying each staged table into place: one part per table.
        case installing
    }

    /// The phase under way.
    public var phase: Phase
    /// The part of the phase under way (1-based), of ``partCount``.
    public var part: Int
    /// How many parts the phase has.
    public var partCount: Int
    /// The table being installed (``Phase/installing`` only).
    public var table: String?

    /// Progress at `part` of `partCount` in `phase`.
    public init(phase: Phase, part: Int, partCount: Int, table: String?) {
        self.phase = phase
        self.part = part
        self.partCount = partCount
        self.table = table
    }
}
