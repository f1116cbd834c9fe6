import ArgumentParser
import Foundation
import LMDB

/// `lmdbstore copy STORE DESTINATION [--compact]`: a consistent copy while the store stays in use.
struct Copy: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy a store to a new file, consistently, while it stays in use; --compact leaves free pages out.",
        discussion: "The destination must not exist.")

    @Argument(help: "The store file.")
    var store: String

    @Argument(help: "The file to write (it must not exist).")
    var destination: String

    @Flag(help: "Leave free pages out of the copy, as 'lmdbstore compact' does.")
    var compact = false

    func run() throws {
        try copyStore(store, to: destination, compacting: compact)
    }
}

/// `lmdbstore compact STORE DESTINATION`: a copy without free pages.
struct Compact: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a compacted copy of a store: free pages left out, pages renumbered.",
        discussion: """
            After a large delete or a migration the copy can be much smaller than the store; replace the store with \
            it while no process has the store open. The destination must not exist.
            """)

    @Argument(help: "The store file.")
    var store: String

    @Argument(help: "The file to write (it must not exist).")
    var destination: String

    func run() throws {
        try copyStore(store, to: destination, compacting: true)
    }
}

/// Copies the store at `store` to `destination` with LMDB's copy (`mdb_env_copy2`), in one read snapshot.
func copyStore(_ store: String, to destination: String, compacting: Bool) throws {
    let url = try existingFile(store)
    guard !FileManager.default.fileExists(atPath: destination) else {
        throw ToolError("\(destination) already exists; give a path that does not")
    }
    let environment = try Environment.open(at: url.path, options: .init { $0.isReadOnly = true })
    try environment.copy(to: destination, compacting: compacting)
    let size = { (path: String) in (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0 }
    emit("copied \(store) (\(bytes(size(environment.dataPath)))) to \(destination) (\(bytes(size(destination))))\(compacting ? ", compacted" : "")")
}
