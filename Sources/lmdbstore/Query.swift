import ArgumentParser
import Foundation
import LMDBStore
import ObjectGraph

/// `lmdbstore query STORE ENTITY [PREDICATE]`: a fetch request from the shell.
struct Query: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fetch an entity's objects, optionally matching a predicate, sorted, windowed, counted or grouped.",
        discussion: """
            The predicate is in NSPredicate's format language: 'salary > 50000 AND name BEGINSWITH[c] "a"', \
            'department.name == "Sales"', 'ANY tags.name IN {"x", "y"}'. Each row shows the entity's attributes and \
            to-ones (to-ones as object URIs), or the key paths --keys names.
            """)

    @Argument(help: "The store file.")
    var store: String

    @Argument(help: "The entity to fetch (its subentities' objects included).")
    var entity: String

    @Argument(help: "A predicate in NSPredicate's format language.")
    var predicate: String?

    @Option(parsing: .unconditionalSingleValue, help: ArgumentHelp("Sort keys, comma-separated or repeated; a leading '-' sorts descending.", valueName: "key,-key"))
    var sort: [String] = []

    @Option(help: "Return at most this many rows.")
    var limit: Int?

    @Option(help: "Skip this many rows first.")
    var offset: Int?

    @Flag(help: "Print the number of matching objects only.")
    var count = false

    @Option(help: ArgumentHelp("The key paths to show, comma-separated or repeated (default: every attribute and to-one).", valueName: "a,b.c"))
    var keys: [String] = []

    @Option(name: .customLong("group-by"), help: ArgumentHelp("Group by these key paths, comma-separated or repeated, with each group's count.", valueName: "a,b"))
    var groupBy: [String] = []

    @Flag(help: "Print the plan the store would run instead of running it.")
    var explain = false

    @Option(help: "table, jsonl or csv (default: table on a terminal, jsonl otherwise).")
    var format: OutputFormat?

    func validate() throws {
        try OutputFormat.check(format, command: "query", .table, .jsonl, .csv)
        if let limit, limit < 0 { throw ValidationError("--limit must be 0 or more, not \(limit)") }
        if let offset, offset < 0 { throw ValidationError("--offset must be 0 or more, not \(offset)") }
        if count && !groupBy.isEmpty { throw ValidationError("--count and --group-by cannot be used together: --group-by counts each group") }
    }

    func run() throws {
        let (store, context) = try openStore(self.store)
        let model = context.model
        var request = try fetchRequest(for: entity, predicate, in: model)
        request.sortDescriptors = list(sort).map { key in
            key.hasPrefix("-") ? FetchSortDescriptor(keyPath: String(key.dropFirst()), ascending: false) : FetchSortDescriptor(keyPath: key)
        }
        request.fetchLimit = limit ?? 0
        request.fetchOffset = offset ?? 0
        let groups = list(groupBy)
        var columns = list(keys)
        if !groups.isEmpty {
            columns = groups + ["count"]
            request.propertiesToGroupBy = groups
            request.propertiesToFetch = groups.map { FetchedProperty.keyPath($0) } + [.aggregate(.count, of: "SELF", as: "count")]
        } else {
            if columns.isEmpty {
                columns = model.allProperties(of: entity).compactMap { property in
                    switch property {
                    case .attribute(let attribute): attribute.isTransient ? nil : attribute.name
                    case .relationship(let relationship): relationship.isToMany ? nil : relationship.name
                    case .fetchedProperty: nil
                    }
                }
            }
            request.propertiesToFetch = columns.map { FetchedProperty.keyPath($0) }
        }
        request.resultType = count ? .count : .dictionary
        if explain {
            emit(store.explain(request))
            return
        }
        if count {
            emit(String(try context.count(for: request)))
            return
        }
        let rows = try context.fetchDictionaries(request)
        writeRows(rows, columns: columns, format: format ?? (outputIsTerminal ? .table : .jsonl))
    }

    /// The comma-separated items of each of `texts` (an option given once or repeated: `--sort age --sort name`
    /// sorts by both, as `--sort age,name` does), in order, trimmed, empty ones left out.
    func list(_ texts: [String]) -> [String] {
        texts.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}
