import ArgumentParser
import Foundation
import LMDB

/// `lmdbstore copy STORE DESTINATION [--compact]`: a consistent copy while the store stays in use.
struct Copy: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy a store to a new file, consistently, while it stays in use; --compact leaves free pages out.",
        discussion: """
            A compacting copy renumbers pages and leaves the free list out, so after a large delete or a migration \
            the copy can be much smaller than the store. The destination must not exist.
            """,
        aliases: ["compact"])

    @Argument(help: "The store file.")
    var store: String

    @Argument(help: "The file to write (it must not exist).")
    var destination: String

    @Flag(help: "Leave free pages out of the copy (always on when called as 'compact').")
    var compact = false

    func run() throws {
        let url = try storeURL(store)
        guard !FileManager.default.fileExists(atPath: destination) else {
            throw ToolError("\(destination) already exists; give a path that does not")
        }
        let compacting = compact || CommandLine.arguments.dropFirst().first == "compact"
        let environment = try Environment.open(at: url.path, options: .init { $0.isReadOnly = true })
        try environment.copy(to: destination, compacting: compacting)
        let size = { (path: String) in (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0 }
        emit("copied \(store) (\(bytes(size(environment.dataPath)))) to \(destination) (\(bytes(size(destination))))\(compacting ? ", compacted" : "")")
    }
}
