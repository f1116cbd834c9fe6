import Foundation
import LMDB
import ObjectGraph

/// How a fetch reads the store — an access path, what it still checks on each row, whether the path already yields
/// the requested order, whether a count or a list of IDs needs rows at all — as chosen by ``QueryPlanner``.
struct QueryPlan: CustomStringConvertible {
    struct IndexRange {
        let database: String
        let label: String
        let keyPath: String
        /// Disjoint ranges in ascending key order (several for `IN` and ORed equalities).
        let ranges: [KeyRange]
        let bounds: String
        /// `==` and `IN` ranges, which hold a small share of the index when they hold more than a probe counts.
        var isEquality = false
        /// The index's elements, in key order.
        var elements: [FetchIndexElementDescription] = []
        /// The range holds one key of the index — an equality on a one-element index of a fixed-size type, or on a
        /// to-one — so its entries come in row-key order (LMDB keeps one key's values sorted). Not so for text: an
        /// equality's range also holds the keys of longer values it begins (`"a\0b"` for `"a"`), checked on the rows.
        var holdsOneKey = false
    }

    /// One element of an index key, as the predicate reads it back from an entry.
    struct EntryElement {
        let name: String
        let type: AttributeType
        /// A descending element: its bytes are stored inverted.
        let inverted: Bool
    }

    /// A comparison through a to-one (`department.name == "R&D"`): a range of the destination's index gives the
    /// destination keys, and the relationship's `toone/…` table the rows pointing at each.
    struct Join {
        let destination: IndexRange
        let toOneDatabase: String
        let label: String
    }

    /// `ANY toMany.attr op constant` (`ANY employees.salary > 100`): a range of the destination's index gives the
    /// destinations, and each destination's owners come from the inverse's link table (many-to-many) or from the
    /// destination row's inverse to-one field (one-to-many). Owners without a matching destination are never met.
    struct ToManyJoin {
        enum Owners {
            /// `link/<Destination>/<inverse>`: a prefix of destination key, values of owner key + tag.
            case link(database: String)
            /// The inverse to-one, read from each destination row of this root table.
            case toOneField(name: String, rows: String)
        }
        let destination: IndexRange
        let owners: Owners
        let label: String
    }

    /// Where the candidate rows come from.
    enum Access {
        /// Every row of the entity's root table.
        case scan
        /// Nothing: the predicate is false whatever the row (`FALSEPREDICATE`, `x AND FALSEPREDICATE`).
        case empty
        /// `SELF == %@` / `SELF IN %@`: the objects to read by primary key.
        case keys([ManagedObjectID])
        /// The entries of one index range.
        case index(IndexRange)
        /// An OR of terms on different attributes: the rows in any of the ranges, each once, in key order.
        case union([IndexRange])
        /// An AND of terms on two indexed attributes: the rows in both ranges, in key order.
        case intersection([IndexRange])
        case join(Join)
        /// The owners of the destinations in a range, each once, in key order.
        case toManyJoin(ToManyJoin)
    }

    var access: Access = .scan
    /// The index order is the requested order (walked this way), so the fetch stops after offset + limit matches.
    var streamsInSortOrder = false
    /// The streamed keys are text, whose values too long for a key are cut: runs of keys sharing the cut prefix
    /// are sorted by the rows' values before they are handed on.
    var resortsLongKeys = false
    var direction: ScanDirection = .forward
    /// Every term of the predicate is answered exactly by the index ranges: counts and object IDs read no row (a
    /// fetch of values still reads, and checks, the rows the ranges yield).
    var coveredByIndex = false
    /// Every value the predicate reads is an element of the index range's keys (these, decoded in order): it is
    /// checked on each entry before any row is read, and counts and object IDs read no row.
    var entryElements: [EntryElement]?
    var entityName: String
    /// What is still checked on each row the access path yields (`nil`: nothing).
    var predicate: FetchPredicate?
    var sort: [FetchSortDescriptor]
    var limit: Int
    var offset: Int

    var description: String {
        func text(_ index: IndexRange, _ direction: ScanDirection = .forward) -> String {
            "IndexRange(\(index.label) \(index.bounds)\(direction == .reverse ? " reverse" : ""))"
        }
        var steps: [String] = []
        switch access {
        case .keys(let objectIDs):
            // The first keys only: a lookup of 12 000 objects prints as 20 keys and a count.
            let shown = objectIDs.prefix(20).map { id in if case .integer(let key) = id.referenceObject { String(key) } else { id.description } }
            let more = objectIDs.count > shown.count ? ", … \(objectIDs.count - shown.count) more" : ""
            steps.append("KeyLookup(\(entityName) {\(shown.joined(separator: ", "))\(more)})")
        case .index(let index): steps.append(text(index, direction))
        case .union(let indexes): steps.append("Union(\(indexes.map { text($0) }.joined(separator: ", ")))")
        case .intersection(let indexes): steps.append("Intersection(\(indexes.map { text($0) }.joined(separator: ", ")))")
        case .join(let join): steps.append("Join(\(text(join.destination)) → \(join.label))")
        case .toManyJoin(let join): steps.append("AnyJoin(\(text(join.destination)) → \(join.label))")
        case .scan: steps.append("Scan(\(entityName))")
        case .empty: steps.append("Empty(\(entityName))")
        }
        if let predicate, !coveredByIndex {
            steps.append("Filter(\(predicate.predicateFormat))" + (entryElements != nil ? " on index entries" : ""))
        }
        if !sort.isEmpty && !streamsInSortOrder { steps.append("Sort(\(sort.map(\.description).joined(separator: ", ")))") }
        if offset > 0 { steps.append("Offset(\(offset))") }
        if limit > 0 { steps.append("Limit(\(limit))") }
        return steps.joined(separator: " → ")
    }
}
