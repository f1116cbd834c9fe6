import ArgumentParser
import Foundation
import LMDBStore
import ObjectGraph

/// `lmdbstore import STORE ENTITY FILE`: JSON Lines or CSV rows into one entity, through the batch insert path;
/// `lmdbstore import STORE DUMP`: a JSON or CSV store (what `dump` writes) into the store, every entity.
struct Import: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Import a JSON Lines or CSV file into one entity of a store as a batch insert, or a dump into the whole store.",
        discussion: """
            With an entity, each column sets the attribute of its name (or the one --map names); a to-one column \
            holds the value of the destination's single-attribute uniqueness constraint, a to-many column (JSON \
            Lines) an array of them. A bad value or row stops the import naming the line and column; nothing is \
            written then, unless --commit-each-chunk, which keeps the chunks before it. Without an entity, the file \
            is a dump (`lmdbstore dump`'s JSON store file or CSV store folder, for the same model): its objects and \
            relationships are added to the store in one save.
            """)

    @Argument(help: "The store file.")
    var store: String

    @Argument(help: "The entity the rows become objects of; leave it out to import a dump.")
    var entity: String

    @Argument(help: "The file to import (.jsonl or .csv; --format says which for any other name).")
    var file: String?

    @Option(help: "jsonl or csv (default: from the file's extension).")
    var format: OutputFormat?

    @Option(help: ArgumentHelp("Columns that set a property of another name, comma-separated.", valueName: "column=property,…"))
    var map: String?

    @Flag(name: .customLong("ignore-unknown-columns"), help: "Skip columns that set no stored property instead of stopping.")
    var ignoresUnknownColumns = false

    @Option(name: .customLong("chunk-size"), help: "Rows written at a time (default 10000).")
    var chunkSize: Int?

    @Flag(name: .customLong("commit-each-chunk"), help: "Commit each chunk on its own (a large import should).")
    var commitsEachChunk = false

    func validate() throws {
        try OutputFormat.check(format, command: "import", verb: "reads", .jsonl, .csv)
        if let chunkSize, chunkSize < 1 { throw ValidationError("--chunk-size must be 1 or more, not \(chunkSize)") }
    }

    func run() throws {
        guard let file else { return try importDump(entity) }
        let source = try existingFile(file, "file")
        let kind: BatchImport.Format
        switch format ?? OutputFormat(rawValue: source.pathExtension.lowercased()) {
        case .jsonl?: kind = .jsonLines
        case .csv?: kind = .csv
        default: throw ToolError("cannot tell the format of \(file) from its name: give --format jsonl or --format csv")
        }
        var mapping: [String: String] = [:]
        for pair in (map ?? "").split(separator: ",") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                throw ToolError("--map takes column=property pairs, not \"\(pair)\"")
            }
            mapping[parts[0]] = parts[1]
        }
        let (_, context) = try openStore(store)
        _ = try fetchRequest(for: entity, nil, in: context.model)
        var request = BatchImport(entityName: entity, contentsOf: source, format: kind)
        request.columnMapping = mapping
        request.ignoresUnknownColumns = ignoresUnknownColumns
        if let chunkSize { request.chunkSize = chunkSize }
        request.commitsEachChunk = commitsEachChunk
        let bar = ProgressLine()
        request.progressHandler = { progress in
            bar.show("importing: \(progress.written) rows written, \(progress.committed) committed")
            return true
        }
        let result = try context.execute(request)
        bar.finish()
        emit("imported \(result.count) \(entity) row\(result.count == 1 ? "" : "s") into \(store)")
    }

    /// The objects of the dump at `path` (a JSON store file, or a CSV store folder) added to the store.
    func importDump(_ path: String) throws {
        let url = try existingFile(path, "dump")
        var isFolder: ObjCBool = false
        _ = FileManager.default.fileExists(atPath: path, isDirectory: &isFolder)
        let (_, destination) = try openStore(store)
        let coordinator = PersistentStoreCoordinator(managedObjectModel: destination.model)
        do {
            try coordinator.addPersistentStore(type: isFolder.boolValue ? CSVStore.storeType : JSONStore.storeType, at: url)
        } catch {
            throw ToolError("\(path) is not a dump of a store with this store's model: \(error)")
        }
        let count = try copyObjects(from: ManagedObjectContext(coordinator: coordinator), into: destination)
        emit("imported \(count) object\(count == 1 ? "" : "s") from \(path) into \(store)")
    }
}
