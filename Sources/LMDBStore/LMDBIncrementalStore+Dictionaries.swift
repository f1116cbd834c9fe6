import Foundation
import LMDB
import ObjectGraph

extension LMDBIncrementalStore: DictionaryFetchingStore {
    /// Dictionary results computed in one read transaction, with no managed object made, by the plan of the rows the
    /// request reads ending in an ``QueryPlan/Aggregate``: counts per group from index keys alone, values from index
    /// entries, or the fields the request names read from the rows. When a fetched, grouped or aggregated key is not
    /// a plain attribute or to-one relationship of the entity (`SELF` for counts) — key paths through relationships,
    /// to-many values — returns `nil`, and the context computes the results from objects.
    public func executeDictionaryFetch(_ request: FetchRequest) throws -> [[String: PredicateValue]]? {
        try request.validate(for: model)
        guard let properties = QueryPlan.Aggregate.properties(answering: request, layout: layout, model: model) else { return nil }
        // Planned once, for every way the results may be computed.
        return try withRun(of: DictionaryResults.rowRequest(for: request)) { run in
            try QueryPlan.Aggregate(request, properties: properties, run: run).execute(in: run)
        }
    }
}

/// The values an index entry's key holds, by name, with the entry's row key (for dictionary results from entries).
struct EntryValues: KeyValueReadable, RowKeyed {
    let key: UInt64
    let values: [String: PredicateValue]

    var rowKey: UInt64 { key }

    func predicateValue(forKey key: String) -> PredicateValue { values[key] ?? .null }
}
