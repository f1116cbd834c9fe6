import ArgumentParser
import Foundation
import LMDBStore
import ObjectGraph

/// `lmdbstore verify STORE`: every invariant of the store checked, each problem named.
struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check a store: LMDB's pages, then every row's checksum, every index entry against the rows, links, sequences.",
        discussion: """
            The pages are checked first, without trusting them, and the rows only when the pages are sound (reading \
            through damaged pages could stop the process). Exits with status 0 when the store is sound, 1 when it \
            found problems (each printed on a line of its own).
            """)

    @Argument(help: "The store file.")
    var store: String

    @Flag(help: "Check LMDB's pages only (about as long as reading the file), not the rows and entries.")
    var quick = false

    @Option(help: "text or json (default: text on a terminal, json otherwise).")
    var format: OutputFormat?

    func validate() throws {
        try OutputFormat.check(format, command: "verify", .text, .json)
    }

    func run() throws {
        // The pages before anything reads the file through LMDB, opening the store included.
        var problems = try LMDBIncrementalStore.checkPages(at: try existingFile(store))
        if !problems.isEmpty {
            problems.append("the rows and entries were not checked: reading them through damaged pages could stop the process")
        } else if !quick {
            let (opened, _) = try openStore(store)
            let bar = ProgressLine()
            problems = try opened.verify(.full) { checked, total in bar.show("verifying: \(checked) of \(total) rows") }
            bar.finish()
        }
        if (format ?? (outputIsTerminal ? .text : .json)) == .json {
            emit("{\"path\":\(jsonString(store)),\"problems\":[" + problems.map(jsonString).joined(separator: ",") + "]}")
        } else {
            problems.forEach(emit)
            emit(problems.isEmpty ? "\(store): sound" : "\(store): \(problems.count) problem\(problems.count == 1 ? "" : "s")")
        }
        if !problems.isEmpty { throw ExitCode(1) }
    }
}
