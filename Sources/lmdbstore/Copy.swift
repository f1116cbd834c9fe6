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

/// `lmdbstore compact STORE [DESTINATION]`: the store rewritten in place without its free pages, or a compacted copy.
struct Compact: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Rewrite a store without its free pages, in place, or write a compacted copy.",
        discussion: """
            Without a destination the store file is replaced by a compacted copy written beside it (as SQLite's \
            VACUUM); no process may have the store open, and one that opens it meanwhile waits. With a destination, \
            which must not exist, a compacted copy is written while the store stays in use.
            """)

    @Argument(help: "The store file.")
    var store: String

    @Argument(help: "The file to write (it must not exist); none to compact the store in place.")
    var destination: String?

    func run() throws {
        guard let destination else {
            let url = try existingFile(store)
            let compaction = try Environment.compact(at: url.path)
            emit("compacted \(store) in place: \(bytes(compaction.bytesBefore)) → \(bytes(compaction.bytesAfter))")
            return
        }
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
