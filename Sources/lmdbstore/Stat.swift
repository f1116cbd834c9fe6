import ArgumentParser
import Foundation
import LMDBStore
import ObjectGraph

/// `lmdbstore stat STORE`: what the file holds and the room it takes.
struct Stat: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a store's format, UUID, model, rows per entity, tables, file and map size, free pages and readers.",
        discussion: "Reads one snapshot without writing; the store may be open in other processes meanwhile.")

    @Argument(help: "The store file.")
    var store: String

    @Option(help: "text or json (default: text on a terminal, json otherwise).")
    var format: OutputFormat?

    func validate() throws {
        try OutputFormat.check(format, command: "stat", .text, .json)
    }

    func run() throws {
        let statistics = try LMDBIncrementalStore.statistics(at: try existingFile(store))
        if (format ?? (outputIsTerminal ? .text : .json)) == .json {
            emit(try json(statistics))
        } else {
            emit(text(statistics))
        }
    }

    func json(_ statistics: StoreStatistics) throws -> String {
        let object: [String: Any] = [
            "path": statistics.path, "format": statistics.format.map { $0 as Any } ?? NSNull(), "uuid": statistics.uuid,
            "modelHash": statistics.modelHash, "entities": statistics.model.map { $0.entities.count as Any } ?? NSNull(),
            "rows": statistics.rowCounts,
            "tables": statistics.tables.map { ["name": $0.name, "entries": $0.entries, "pages": $0.pages, "depth": $0.depth] as [String: Any] },
            "fileSize": statistics.fileSize, "mapSize": statistics.mapSize, "pageSize": statistics.pageSize,
            "usedPages": statistics.usedPages, "freePages": statistics.freePages,
            "readers": statistics.readers, "mostReaders": statistics.mostReaders,
        ]
        return String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
    }

    func text(_ statistics: StoreStatistics) -> String {
        let pageBytes = { (pages: Int) in bytes(pages * statistics.pageSize) }
        var lines = [
            "store    \(statistics.path)",
            "format   \(statistics.format.map(String.init) ?? "?")",
            "uuid     \(statistics.uuid)",
            "model    \(statistics.modelHash)" + (statistics.model.map { " (\($0.entities.count) entities)" } ?? " (not kept: format < 3)"),
            "file     \(bytes(statistics.fileSize)) of a \(bytes(statistics.mapSize)) map; \(statistics.usedPages) pages of \(statistics.pageSize) B used (\(pageBytes(statistics.usedPages))), \(statistics.freePages) free (\(pageBytes(statistics.freePages)))",
            "readers  \(statistics.readers) now, \(statistics.mostReaders) at most",
        ]
        // A quarter of the file free: a compaction would give it back (LMDB reuses free pages but never shrinks).
        if statistics.freePages * statistics.pageSize * 4 >= statistics.fileSize, statistics.freePages > 0 {
            lines.append("         \(pageBytes(statistics.freePages)) of the file is free pages: `lmdbstore compact \(statistics.path)` gives it back (with the store closed everywhere)")
        }
        lines.append("")
        lines += TextTable(header: ["entity", "rows"], alignRight: [false, true],
                           rows: statistics.rowCounts.sorted { $0.key < $1.key }.map { [$0.key, String($0.value)] }).lines
        lines.append("")
        lines += TextTable(header: ["table", "entries", "pages", "size", "depth"], alignRight: [false, true, true, true, true],
                           rows: statistics.tables.map { [$0.name, String($0.entries), String($0.pages), pageBytes($0.pages), String($0.depth)] }).lines
        return lines.joined(separator: "\n")
    }
}

/// `count` bytes in the largest unit that keeps a digit before the point: `4.0 KiB`, `595.3 MiB`.
func bytes(_ count: Int) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"]
    var value = Double(count), unit = 0
    while value >= 1024 && unit < units.count - 1 {
        value /= 1024
        unit += 1
    }
    return unit == 0 ? "\(count) B" : String(format: "%.1f", value) + " " + units[unit]
}
