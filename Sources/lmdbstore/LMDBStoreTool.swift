import ArgumentParser
import Foundation
import LMDBStore
import ObjectGraph

/// `lmdbstore`: inspect, query, verify, import into, export from, migrate and copy an LMDBStore store file from the shell
/// (`Docs/CLI.md`).
@main
struct LMDBStoreTool: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lmdbstore",
        abstract: "Inspect, query, verify, import into, export from, migrate and copy an LMDBStore store.",
        discussion: """
            Every command reads the model the store file keeps, so none needs the program that wrote it. Output is \
            for people on a terminal and machine-readable (JSON, JSON Lines) when piped; --format chooses.
            """,
        subcommands: [Stat.self, Model.self, Query.self, Verify.self, Import.self, Export.self, Dump.self, Migrate.self, Upgrade.self, Copy.self, Compact.self])
}

/// The output formats of the commands; each command takes those it can write.
enum OutputFormat: String, ExpressibleByArgument, CaseIterable {
    case text, json, table, jsonl, csv

    /// Refuses a `--format` the command cannot use: "`command` `verb` a, b or c, not d".
    static func check(_ format: OutputFormat?, command: String, verb: String = "writes", _ allowed: OutputFormat...) throws {
        guard let format, !allowed.contains(format) else { return }
        let names = allowed.map(\.rawValue)
        let list = names.dropLast().joined(separator: ", ") + " or " + names.last!
        throw ValidationError("\(command) \(verb) \(list), not \(format.rawValue)")
    }
}

/// Whether standard output is a terminal: a person reads it, rather than a program.
var outputIsTerminal: Bool { isatty(STDOUT_FILENO) != 0 }

/// An error the tool reports as it is: what went wrong and what to do, without a stack of causes.
struct ToolError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The file at `path`, checked to exist (a missing file is named as such, not as an LMDB or parser error);
/// `kind` is what the error calls it: "store", "model", "file".
func existingFile(_ path: String, _ kind: String = "store") throws -> URL {
    guard FileManager.default.fileExists(atPath: path) else { throw ToolError("there is no \(kind) at \(path)") }
    return URL(fileURLWithPath: path)
}

/// The model in the file at `path`: a Core Data `.xcdatamodeld` (its current version) or `.xcdatamodel`, or the
/// JSON form of `Docs/MODEL-JSON.md`.
func modelFile(_ path: String) throws -> ManagedObjectModel {
    let url = try existingFile(path, "model")
    switch url.pathExtension {
    case "xcdatamodeld", "xcdatamodel": return try ManagedObjectModel(contentsOfCoreDataModel: url)
    case "json": return try ManagedObjectModel(contentsOfJSON: url)
    default: throw ToolError("\(path) is not a model file: give an .xcdatamodeld, an .xcdatamodel or a .json model")
    }
}

/// The store at `path` opened with the model it keeps, and a context on it. A file of an older format is refused
/// rather than upgraded by the open: that is `upgrade`'s to do, asked for.
func openStore(_ path: String) throws -> (store: LMDBIncrementalStore, context: ManagedObjectContext) {
    let url = try existingFile(path)
    let format = try LMDBIncrementalStore.readMetadata(at: url)[LMDBIncrementalStore.formatVersionKey].flatMap { Int($0) }
    if let format, format < LMDBIncrementalStore.formatVersion {
        throw ToolError("\(path) is in file format \(format), and opening it would upgrade it to format \(LMDBIncrementalStore.formatVersion): run `lmdbstore upgrade \(path)` first (an older LMDBStore cannot read it afterwards)")
    }
    guard let model = try LMDBIncrementalStore.storedModel(at: url) else {
        throw ToolError("\(path) keeps no model (it was written before format 3): run `lmdbstore upgrade \(path) --model MODEL` with the model it was written with")
    }
    LMDBIncrementalStore.register()
    let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
    let store = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: url, options: [:])
    guard let store = store as? LMDBIncrementalStore else { throw ToolError("\(path) did not open as an LMDBStore store") }
    return (store, ManagedObjectContext(coordinator: coordinator))
}

/// A fetch request for `entity`'s objects matching `predicate` (NSPredicate's format), checked against `model`: an
/// entity it lacks, or a predicate that does not parse, is an error saying so.
func fetchRequest(for entity: String, _ predicate: String?, in model: ManagedObjectModel) throws -> FetchRequest {
    guard model.entity(named: entity) != nil else {
        throw ToolError("the store's model has no entity \(entity); it has \(model.entityNames.sorted().joined(separator: ", "))")
    }
    var request = FetchRequest(entityName: entity)
    guard let predicate else { return request }
    do {
        request.predicate = try FetchPredicate(format: predicate)
    } catch {
        throw ToolError("the predicate does not parse: \(error)")
    }
    return request
}

/// Writes `text` and a newline to standard output.
func emit(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

/// A line of progress on standard error, rewritten in place — only when standard error is a terminal, so piped and
/// logged runs stay clean.
final class ProgressLine {
    private let isShown = isatty(STDERR_FILENO) != 0
    private var hasWritten = false

    func show(_ text: String) {
        guard isShown else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K\(text)".utf8))
        hasWritten = true
    }

    /// Ends the line, if one was written.
    func finish() {
        if hasWritten { FileHandle.standardError.write(Data("\n".utf8)) }
        hasWritten = false
    }
}
