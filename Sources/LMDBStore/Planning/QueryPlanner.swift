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
            let keys = objectIDs.map { id in if case .integer(let key) = id.referenceObject { String(key) } else { id.description } }
            steps.append("KeyLookup(\(entityName) {\(keys.joined(separator: ", "))})")
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

    /// The index ranges the access path reads (none for a scan or key lookups).
    var indexRanges: [IndexRange] {
        switch access {
        case .index(let index): [index]
        case .union(let indexes), .intersection(let indexes): indexes
        case .join(let join): [join.destination]
        case .toManyJoin(let join): [join.destination]
        case .scan, .keys, .empty: []
        }
    }
}

/// Turns a fetch request into a ``QueryPlan``. Comparisons of indexed attributes with constants (`==`, `<`, `<=`,
/// `>`, `>=`, `BETWEEN`, `BEGINSWITH`, `IN`, `[c]`/`[cd]` on folded indexes) become index ranges; the candidate
/// access paths — a compound index range, a range per indexed attribute, the intersection of the two smallest, a
/// union for an OR of indexed terms, a join through a to-one, a scan — are costed with ``PlanStatistics`` (bounded
/// probes of each range, LMDB's table sizes) and the cheapest is chosen; on equal cost, the first in that order.
/// The whole predicate is still evaluated on every row an access path yields, so a path only has to give a superset
/// of the matches.
enum QueryPlanner {
    /// A comparison the planner can turn into a key range.
    struct Term {
        let keyPath: String
        let op: ComparisonOperator
        /// The constants, folded as `collation` folds (for `[c]` and `[cd]` comparisons).
        let values: [AttributeValue]
        /// The index collation the term can use: binary, or a folded one for `[c]` / `[cd]` string comparisons.
        var collation: FetchIndexElementDescription.Collation = .binary
        /// Collations that fold more whose index still holds every match (for `==` and `IN` only: folding keeps
        /// equal values equal, not ordered values ordered), its constants folded the same way — a superset range.
        var fallbacks: [FetchIndexElementDescription.Collation] = []
    }

    /// One way to read the rows, with its estimated cost; `rank` breaks ties (lower first).
    struct Candidate {
        var access: QueryPlan.Access
        var rank: Int
        /// Estimated entries the access path yields.
        var entries: Double = 0
        /// The estimate was counted, not guessed.
        var counted = true
        var streams = false
        var direction: ScanDirection = .forward
        var covered = false
        var cost: Double = 0
    }

    /// What a request's shape — entity, sub-entities, predicate, sort — tells the planner before any data is
    /// consulted: the candidate access paths and what each answers. The store caches it per shape; the costs, which
    /// depend on the data, are worked out for every fetch (``plan(_:layout:model:statistics:analysis:)``).
    struct Analysis {
        struct Single {
            let range: QueryPlan.IndexRange
            let streams: Bool
            let direction: ScanDirection
            let covered: Bool
            /// The range's attribute when the range answers every term on it (and all terms are usable), else empty.
            let exactPath: String
            let checkedOnEntries: Bool
        }
        /// `SELF == x` / `SELF IN xs`: the rows to read by key, and whether that answers the whole predicate.
        var keys: (ids: [ManagedObjectID], answersAll: Bool)?
        var compound: (index: QueryPlan.IndexRange, streams: Bool, direction: ScanDirection, checkedOnEntries: Bool)?
        var singles: [Single] = []
        var join: QueryPlan.Join?
        var toMany: QueryPlan.ToManyJoin?
        var unions: [(ranges: [QueryPlan.IndexRange], exact: Bool)] = []
        var terms: [Term] = []
        var conjunctCount = 0
        /// The predicate is false for every row.
        var matchesNothing = false
    }

    /// The candidate access paths for `request`'s shape (`nil` without a predicate or for an unknown entity).
    static func analyze(_ request: FetchRequest, layout: StoreLayout, model: ManagedObjectModel) -> Analysis? {
        guard let predicate = request.predicate, let entity = layout.entity(request.entityName) else { return nil }
        var analysis = Analysis()
        let conjuncts: [PredicateNode]
        switch normalized(predicate.node, entity: request.entityName, model: model) {
        case .constant(false):
            analysis.matchesNothing = true
            return analysis
        case .constant(true): conjuncts = []
        case .and(let operands): conjuncts = operands
        case let node: conjuncts = [node]
        }
        analysis.conjunctCount = conjuncts.count
        // `SELF == object` or `SELF IN objects`: read those rows by key, nothing else.
        for conjunct in conjuncts {
            if let ids = selfObjects(conjunct) {
                analysis.keys = (Array(Set(ids)).sorted(), conjuncts.count == 1)
                return analysis
            }
        }
        var allUsable = true
        for conjunct in conjuncts {
            if let term = term(conjunct, entity: request.entityName, model: model) { analysis.terms.append(term) } else { allUsable = false }
        }
        let terms = analysis.terms
        func checkedOnEntries(_ range: QueryPlan.IndexRange) -> Bool {
            entryElements(range, predicate: predicate.node, entity: request.entityName, model: model) != nil
        }
        if let compound = compoundPlan(terms, entity: entity, request: request, model: model) {
            analysis.compound = (compound.index, compound.streams, compound.direction, checkedOnEntries(compound.index))
        }
        // One range per indexed attribute (and collation) the terms compare.
        var attributes: [(String, FetchIndexElementDescription.Collation)] = []
        for term in terms where !attributes.contains(where: { $0 == (term.keyPath, term.collation) }) {
            attributes.append((term.keyPath, term.collation))
        }
        for (keyPath, collation) in attributes {
            let own = terms.filter { $0.keyPath == keyPath && $0.collation == collation }
            guard let single = singleIndexRange(own, entity: entity) else { continue }
            let exact = isExact(single, request: request, model: model)
            let covered = exact && allUsable && terms.allSatisfy { $0.keyPath == keyPath && $0.collation == collation }
            // Index order is the value order only for values whose keys are never cut (a string, URI or data value
            // over the key limit is stored as a prefix and a digest), and ties are in row-key order (as a sorted
            // scan gives them) only in an index of that one attribute.
            // Text streams too (bytes of NFC UTF-8 order as Swift orders strings), its cut values re-sorted by run.
            var streams = false
            var direction = ScanDirection.forward
            let type = model.attribute(named: keyPath, in: request.entityName)?.type
            if let sort = request.sortDescriptors.first, request.sortDescriptors.count == 1, sort.keyPath == keyPath,
               sort.comparison == .default, single.elementCount == 1, collation == .binary,
               keysAreNeverCut(type) || type == .string {
                streams = true
                direction = sort.ascending ? .forward : .reverse
            }
            analysis.singles.append(Analysis.Single(range: single.range, streams: streams, direction: direction, covered: covered,
                                                    exactPath: exact && allUsable ? keyPath : "",
                                                    checkedOnEntries: !covered && checkedOnEntries(single.range)))
        }
        analysis.join = join(conjuncts, entity: request.entityName, layout: layout, model: model)
        analysis.unions = conjuncts.compactMap { union($0, entity: entity, request: request, model: model) }
        analysis.toMany = toManyJoin(conjuncts, entity: request.entityName, layout: layout, model: model)
        return analysis
    }

    /// The plan for `request`: its shape's candidate paths (`analysis`, or analysed now), costed with `statistics`,
    /// the cheapest chosen.
    static func plan(_ request: FetchRequest, layout: StoreLayout, model: ManagedObjectModel,
                     statistics: PlanStatistics = .unknown, analysis given: Analysis? = nil) -> QueryPlan {
        var plan = QueryPlan(entityName: request.entityName, predicate: request.predicate, sort: request.sortDescriptors,
                             limit: request.fetchLimit, offset: request.fetchOffset)
        guard let predicate = request.predicate, let entity = layout.entity(request.entityName),
              let analysis = given ?? analyze(request, layout: layout, model: model) else { return plan }
        if analysis.matchesNothing {
            plan.access = .empty
            plan.predicate = nil
            return plan
        }
        if let keys = analysis.keys {
            plan.access = .keys(keys.ids)
            // The lookup alone answers `SELF == x` / `SELF IN xs`: nothing is left to check on the rows.
            if keys.answersAll { plan.predicate = nil }
            return plan
        }
        var estimator = CostEstimator(request: request, statistics: statistics, rows: statistics.entries(StoreLayout.rowsDatabase(root: entity.root)))
        estimator.residual = relationshipReads(predicate.node, entity: entity, layout: layout, model: model, statistics: statistics)
        func chosen(_ best: Candidate) -> QueryPlan {
            plan.access = best.access
            plan.streamsInSortOrder = best.streams
            plan.direction = best.direction
            plan.coveredByIndex = best.covered
            if case .index(let range) = best.access, best.streams,
               let element = range.elements.first, model.attribute(named: element.propertyName, in: request.entityName)?.type == .string {
                plan.resortsLongKeys = true
            }
            if case .index(let range) = best.access, !best.covered {
                plan.entryElements = entryElements(range, predicate: predicate.node, entity: request.entityName, model: model)
            }
            return plan
        }
        // A lone range that answers the request from its entries beats a scan whatever its size: nothing to probe.
        if analysis.compound == nil, analysis.join == nil, analysis.unions.isEmpty, analysis.toMany == nil, analysis.singles.count == 1,
           let only = analysis.singles.first, estimator.answeredByEntries(covered: only.covered, streams: only.streams) {
            return chosen(Candidate(access: .index(only.range), rank: 1, counted: false, streams: only.streams, direction: only.direction, covered: true))
        }
        var candidates: [Candidate] = []
        if let compound = analysis.compound {
            candidates.append(estimator.index(compound.index, rank: 0, streams: compound.streams, direction: compound.direction, covered: false,
                                              entryChecked: compound.checkedOnEntries))
        }
        let sized = analysis.singles.map { single in
            (candidate: estimator.index(single.range, rank: single.range.isEquality ? 1 : 2, streams: single.streams,
                                        direction: single.direction, covered: single.covered, entryChecked: single.checkedOnEntries),
             exactPath: single.exactPath)
        }
        candidates += sized.map(\.candidate)
        // The two smallest ranges on different attributes, intersected by row key — when both were counted (past a
        // probe's cap, a range's size is a guess, and so would be the intersection's).
        let bySize = sized.sorted { $0.candidate.entries < $1.candidate.entries }
        if bySize.count >= 2, bySize[0].candidate.counted, bySize[1].candidate.counted,
           case .index(let first) = bySize[0].candidate.access, case .index(let second) = bySize[1].candidate.access {
            // It answers the predicate when each range answers every term on its attribute and there are no others.
            let exactPaths = [bySize[0].exactPath, bySize[1].exactPath]
            let covered = !exactPaths.contains("") && analysis.terms.allSatisfy { exactPaths.contains($0.keyPath) }
            candidates.append(estimator.intersection([first, second], sizes: (bySize[0].candidate, bySize[1].candidate), rank: 3, covered: covered))
        }
        if let joined = analysis.join { candidates.append(estimator.join(joined, rank: 4)) }
        if let toMany = analysis.toMany { candidates.append(estimator.toManyJoin(toMany, rank: 5)) }
        for union in analysis.unions {
            candidates.append(estimator.union(union.ranges, rank: 6, covered: union.exact && analysis.conjunctCount == 1))
        }
        candidates.append(estimator.scan(rank: 7))
        return chosen(candidates.min { ($0.cost, $0.rank) < ($1.cost, $1.rank) }!)
    }

    /// How to read back, from an entry of `range`'s index, every value `node` reads — the elements up to the last
    /// one it names, each a plain attribute of a type the key decoder reads, held unfolded — or `nil` when the
    /// predicate reads anything else (a key path through a relationship, `SELF`, a variable, a subquery) or an
    /// element it needs cannot be read back.
    static func entryElements(_ range: QueryPlan.IndexRange, predicate node: PredicateNode, entity: String, model: ManagedObjectModel)
        -> [QueryPlan.EntryElement]?
    {
        var names = Set<String>()
        var plain = true
        forEachExpression(in: node) { expression in
            switch expression {
            case .keyPath(let path): if path.contains(".") { plain = false } else { names.insert(path) }
            case .evaluatedObject, .variable, .subquery, .assignment: plain = false
            default: break
            }
        }
        guard plain, !names.isEmpty else { return nil }
        let decodable: Set<AttributeType> = [.integer16, .integer32, .integer64, .double, .float, .date, .boolean, .uuid, .string]
        var elements: [QueryPlan.EntryElement] = []
        for element in range.elements where !names.isEmpty {
            guard element.collation == .binary, let attribute = model.attribute(named: element.propertyName, in: entity),
                  !attribute.isTransient, decodable.contains(attribute.type) else { return nil }
            elements.append(QueryPlan.EntryElement(name: element.propertyName, type: attribute.type, inverted: !element.isAscending))
            names.remove(element.propertyName)
        }
        return names.isEmpty ? elements : nil
    }

    /// Calls `body` with every expression of `node`, nested ones included (a subquery's collection, not its own
    /// predicate, whose key paths start at its variable).
    static func forEachExpression(in node: PredicateNode, _ body: (ExpressionNode) -> Void) {
        func visit(_ expression: ExpressionNode) {
            body(expression)
            switch expression {
            case .member(let base, _), .negate(let base), .index(let base, _), .subquery(let base, _, _), .assignment(_, let base): visit(base)
            case .aggregate(let items), .function(_, let items): items.forEach(visit)
            case .method(let base, _, let arguments): visit(base); arguments.forEach(visit)
            case .arithmetic(_, let left, let right): visit(left); visit(right)
            case .ternary(let condition, let yes, let no): visit(condition); visit(yes); visit(no)
            case .constant, .evaluatedObject, .variable, .keyPath: break
            }
        }
        func visit(_ node: PredicateNode) {
            switch node {
            case .comparison(let comparison): visit(comparison.lhs); visit(comparison.rhs)
            case .and(let operands), .or(let operands): operands.forEach(visit)
            case .not(let operand): visit(operand)
            case .constant: break
            }
        }
        visit(node)
    }

    /// Whether a request's analysis may be kept: not when its predicate holds objects (a cache must not keep
    /// managed objects, and their contexts, alive).
    static func isCacheable(_ predicate: FetchPredicate?) -> Bool {
        guard let predicate else { return true }
        func holdsObjects(_ value: PredicateValue) -> Bool {
            switch value {
            case .object: true
            case .array(let items): items.contains(where: holdsObjects)
            case .dictionary(let items): items.values.contains(where: holdsObjects)
            default: false
            }
        }
        var cacheable = true
        forEachExpression(in: predicate.node) { expression in
            if case .constant(let value) = expression, holdsObjects(value) { cacheable = false }
        }
        return cacheable
    }

    /// The rows evaluating `node` reads per row, in ``CostEstimator/rowRead`` units: one per to-one it follows,
    /// and for each to-many the relationship's average size (its link or to-one table's entries per row).
    static func relationshipReads(_ node: PredicateNode, entity: StoreLayout.EntityLayout, layout: StoreLayout, model: ManagedObjectModel,
                                  statistics: PlanStatistics) -> Double {
        var names = Set<String>()
        forEachExpression(in: node) { expression in
            if case .keyPath(let path) = expression { names.insert(String(path.prefix { $0 != "." })) }
        }
        let rows = Double(max(1, statistics.entries(StoreLayout.rowsDatabase(root: entity.root))))
        var reads = 0.0
        for name in names {
            guard let relationship = model.relationship(named: name, in: entity.name) else { continue }
            guard relationship.isToMany else { reads += 1; continue }
            let table: String
            if StoreLayout.needsLinkTable(relationship, model) {
                table = StoreLayout.linkDatabase(entity: layout.declaringEntity(of: name, in: entity.name), relationship: name)
            } else if let inverse = model.inverse(of: relationship) {
                table = StoreLayout.toOneDatabase(entity: layout.declaringEntity(of: inverse.name, in: relationship.destinationEntityName),
                                                  relationship: inverse.name)
            } else {
                continue
            }
            reads += Double(statistics.entries(table)) / rows
        }
        return reads * CostEstimator.rowRead
    }

    /// Whether a single-attribute range answers every term on its attribute exactly: no term was left out of the
    /// range, no string (whose long keys are cut) and no index shared with other entities' rows.
    static func isExact(_ single: SingleRange, request: FetchRequest, model: ManagedObjectModel) -> Bool {
        let isString = model.attribute(named: single.terms[0].keyPath, in: request.entityName)?.type == .string
        return !isString && single.chosen.count == single.terms.count && request.entityName == single.owner
            && (request.includesSubentities || model.directSubentities(of: single.owner).isEmpty)
    }

    /// A union for an OR whose operands each have an index range (an OR on one attribute is an `IN` range, not a
    /// union): the operands' ranges, and whether each answers its operand exactly.
    static func union(_ conjunct: PredicateNode, entity: StoreLayout.EntityLayout, request: FetchRequest, model: ManagedObjectModel)
        -> (ranges: [QueryPlan.IndexRange], exact: Bool)?
    {
        guard case .or(let operands) = conjunct, term(conjunct, entity: request.entityName, model: model) == nil else { return nil }
        var unsorted = request
        unsorted.sortDescriptors = []
        var ranges: [QueryPlan.IndexRange] = []
        var exact = true
        for operand in operands {
            let parts: [PredicateNode]
            if case .and(let nested) = operand { parts = nested } else { parts = [operand] }
            let terms = parts.compactMap { term($0, entity: request.entityName, model: model) }
            if let compound = compoundPlan(terms, entity: entity, request: unsorted, model: model) {
                ranges.append(compound.index)
                exact = false
            } else if let single = singleIndexRange(terms, entity: entity) {
                ranges.append(single.range)
                exact = exact && terms.count == parts.count && terms.allSatisfy { $0.keyPath == single.terms[0].keyPath }
                    && isExact(single, request: request, model: model)
            } else {
                return nil
            }
        }
        return (ranges, exact)
    }

    /// A range of one index over one attribute: the range, the entity declaring the index, the terms the range was
    /// built from, every term on that attribute, and how many elements the index has.
    typealias SingleRange = (range: QueryPlan.IndexRange, owner: String, chosen: [Term], terms: [Term], elementCount: Int)

    /// The best range of an index whose first element is an attribute with a usable term (equality first, then the
    /// index with fewest elements). A set of values (IN, ORed equalities) is used alone; other terms on the
    /// attribute stay in the filter.
    static func singleIndexRange(_ terms: [Term], entity: StoreLayout.EntityLayout) -> SingleRange? {
        var best: (owner: String, index: FetchIndexDescription, terms: [Term], equality: Bool, exact: Bool)?
        for (owner, index) in entity.indexes {
            guard let first = index.elements.first, first.isAscending else { continue }
            let collation = first.collation == .rTree ? .binary : first.collation
            // Keys over the limit are cut per element at this share: a value that long cannot be matched exactly.
            let share = IndexEntries.maxTupleBytes / index.elements.count
            // Terms of the index's own collation, or — as a superset — of one that folds less.
            let matching = terms.compactMap { term -> Term? in
                guard term.keyPath == first.propertyName, term.collation == collation || term.fallbacks.contains(collation) else { return nil }
                let adapted = term.collation == collation ? term
                    : Term(keyPath: term.keyPath, op: term.op, values: term.values.map { IndexEntries.folded($0, collation) ?? $0 }, collation: collation)
                let fits = adapted.values.allSatisfy { value in
                    var bytes: [UInt8] = []
                    TupleEncoding.append(value, to: &bytes)
                    return bytes.count + 1 < share
                }
                return fits ? adapted : nil
            }
            guard !matching.isEmpty else { continue }
            let equality = matching.contains { $0.op == .equal }
            let exact = terms.contains { $0.keyPath == first.propertyName && $0.collation == collation }
            if let current = best {
                // Equality first, then an index of the terms' own collation, then the one with fewest elements.
                let better = equality != current.equality ? equality
                    : exact != current.exact ? exact : index.elements.count < current.index.elements.count
                guard better else { continue }
            }
            best = (owner, index, matching, equality, exact)
        }
        guard let best else { return nil }
        let chosen = best.terms.first { $0.op == .in }.map { [$0] } ?? best.terms
        guard let range = range(for: chosen) else { return nil }
        var indexRange = QueryPlan.IndexRange(database: StoreLayout.indexDatabase(entity: best.owner, index: best.index.name),
                                              label: "\(best.owner).\(best.index.name)", keyPath: best.terms[0].keyPath,
                                              ranges: range.ranges, bounds: range.text)
        indexRange.isEquality = chosen.contains { $0.op == .equal || $0.op == .in }
        indexRange.elements = best.index.elements
        return (indexRange, best.owner, chosen, best.terms, best.index.elements.count)
    }

    /// A join for the first AND-term that compares an indexed attribute of a to-one's destination with a constant
    /// (`department.name == "R&D"`, `team.size > 3`): such a term is false for rows without a destination, so the rows
    /// pointing at the destinations in the range are a superset of the matches.
    static func join(_ conjuncts: [PredicateNode], entity: String, layout: StoreLayout, model: ManagedObjectModel) -> QueryPlan.Join? {
        for conjunct in conjuncts {
            guard case .comparison(var comparison) = conjunct else { continue }
            let path: String
            switch (comparison.lhs, comparison.rhs) {
            case (.keyPath(let key), .constant): path = key
            case (.constant, .keyPath(let key)): path = key
            default: continue
            }
            let parts = path.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 2, let relationship = model.relationship(named: parts[0], in: entity), !relationship.isToMany,
                  let destination = layout.entity(relationship.destinationEntityName) else { continue }
            if case .keyPath = comparison.lhs { comparison.lhs = .keyPath(parts[1]) } else { comparison.rhs = .keyPath(parts[1]) }
            guard let term = term(.comparison(comparison), entity: destination.name, model: model),
                  let choice = singleIndexRange([term], entity: destination) else { continue }
            return QueryPlan.Join(destination: choice.range,
                                  toOneDatabase: StoreLayout.toOneDatabase(entity: layout.declaringEntity(of: relationship.name, in: entity),
                                                                          relationship: relationship.name),
                                  label: "\(entity).\(relationship.name)")
        }
        return nil
    }

    /// A join for the first AND-term `ANY toMany.attr op constant` whose destination attribute has an index and
    /// whose relationship has an inverse (its link table, or its to-one field, leads back to the owners): an
    /// owner matches only through a destination in the range, so their owners are a superset of the matches.
    static func toManyJoin(_ conjuncts: [PredicateNode], entity: String, layout: StoreLayout, model: ManagedObjectModel) -> QueryPlan.ToManyJoin? {
        for conjunct in conjuncts {
            guard case .comparison(var comparison) = conjunct, comparison.modifier == .any else { continue }
            let path: String
            switch (comparison.lhs, comparison.rhs) {
            case (.keyPath(let key), .constant): path = key
            case (.constant, .keyPath(let key)): path = key
            default: continue
            }
            let parts = path.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 2, let relationship = model.relationship(named: parts[0], in: entity), relationship.isToMany,
                  let inverse = model.inverse(of: relationship), let destination = layout.entity(relationship.destinationEntityName)
            else { continue }
            comparison.modifier = .direct
            if case .keyPath = comparison.lhs { comparison.lhs = .keyPath(parts[1]) } else { comparison.rhs = .keyPath(parts[1]) }
            guard let term = term(.comparison(comparison), entity: destination.name, model: model),
                  let choice = singleIndexRange([term], entity: destination) else { continue }
            let owners: QueryPlan.ToManyJoin.Owners = inverse.isToMany
                ? .link(database: StoreLayout.linkDatabase(entity: layout.declaringEntity(of: inverse.name, in: destination.name), relationship: inverse.name))
                : .toOneField(name: inverse.name, rows: StoreLayout.rowsDatabase(root: destination.root))
            return QueryPlan.ToManyJoin(destination: choice.range, owners: owners, label: "\(entity).\(relationship.name)")
        }
        return nil
    }

    /// A range over a compound index that constrains two or more of its elements: equalities on a prefix of its
    /// elements, then (optionally) a range on the next one — the index with the most constrained elements wins. The
    /// whole predicate is still checked on each row.
    static func compoundPlan(_ terms: [Term], entity: StoreLayout.EntityLayout, request: FetchRequest, model: ManagedObjectModel)
        -> (index: QueryPlan.IndexRange, streams: Bool, direction: ScanDirection)?
    {
        var best: (score: Int, plan: QueryPlan.IndexRange, streams: Bool, direction: ScanDirection)?
        for (owner, index) in entity.indexes where index.elements.count >= 2 {
            // Keys longer than the limit are cut per element at this share: only shorter values can be matched exactly.
            let share = IndexEntries.maxTupleBytes / index.elements.count
            var prefix: [UInt8] = []
            var texts: [String] = []
            var position = 0
            while position < index.elements.count {
                let element = index.elements[position]
                guard element.collation == .binary,
                      let equality = terms.first(where: { $0.keyPath == element.propertyName && $0.op == .equal && $0.collation == .binary })
                else { break }
                var bytes: [UInt8] = []
                TupleEncoding.append(equality.values[0], to: &bytes)
                guard bytes.count < share else { break }
                prefix += element.isAscending ? bytes : bytes.map { ~$0 }
                texts.append(PredicateValue(equality.values[0]).format)
                position += 1
            }
            guard position >= 1 else { continue }
            var range = KeyRange.prefix(prefix)
            var bounds = texts.joined(separator: ", ")
            var constrained = position
            var next: FetchIndexElementDescription?
            if position < index.elements.count {
                let element = index.elements[position]
                next = element
                let rangeTerms = terms.filter { $0.keyPath == element.propertyName && $0.op != .in && $0.collation == .binary }
                if element.isAscending, element.collation == .binary, !rangeTerms.isEmpty,
                   let single = singleRange(for: rangeTerms), let lower = single.range.lower, let upper = single.range.upper,
                   lower.key.count < share, upper.key.count < share {
                    range = KeyRange(lower: .inclusive(prefix + lower.key), upper: .exclusive(prefix + upper.key))
                    bounds += " × " + single.text
                    constrained += 1
                }
            }
            // The order after the equalities is the next element's (walked backwards for the other direction), when
            // its keys are never cut and it is the last element, so ties are in row-key order as a sorted scan gives.
            var streams = false
            var direction = ScanDirection.forward
            if let next, position + 1 == index.elements.count, next.collation == .binary,
               let sort = request.sortDescriptors.first, request.sortDescriptors.count == 1, sort.keyPath == next.propertyName,
               sort.comparison == .default,
               keysAreNeverCut(model.attribute(named: next.propertyName, in: request.entityName)?.type) {
                streams = true
                direction = next.isAscending == sort.ascending ? .forward : .reverse
            }
            // Worth more than the one-attribute plans only when it constrains two elements or yields the sort order.
            guard constrained >= 2 || streams else { continue }
            let score = constrained * 2 + (constrained > position ? 0 : 1) + (streams ? 1 : 0)
            if best == nil || score > best!.score {
                var indexRange = QueryPlan.IndexRange(database: StoreLayout.indexDatabase(entity: owner, index: index.name),
                                                      label: "\(owner).\(index.name)", keyPath: index.elements[0].propertyName,
                                                      ranges: [range], bounds: "[" + bounds + "]")
                indexRange.isEquality = constrained == position
                indexRange.elements = index.elements
                best = (score, indexRange, streams, direction)
            }
        }
        return best.map { ($0.plan, $0.streams, $0.direction) }
    }

    /// The predicate with NOT moved inward as far as the answers stay the same, and ANDs flattened — only for
    /// choosing access paths (rows are still checked against the request's own predicate). De Morgan's laws;
    /// `NOT NOT x` is `x`; `NOT a == v` is `a != v` and `NOT a != v` is `a == v` (NULL included); `NOT a < v` is
    /// `a >= v` (and so on) only for an attribute that cannot be NULL compared with a non-NULL constant, since NULL
    /// orders against nothing. Any other negation stays as it is.
    static func normalized(_ node: PredicateNode, entity: String, model: ManagedObjectModel, negated: Bool = false) -> PredicateNode {
        switch node {
        case .constant(let value):
            return .constant(value != negated)
        case .not(let operand):
            return normalized(operand, entity: entity, model: model, negated: !negated)
        case .and(let operands), .or(let operands):
            let isAnd: Bool
            if case .and = node { isAnd = !negated } else { isAnd = negated }
            // Constants fold: TRUE drops out of an AND and decides an OR, FALSE the other way round.
            var flat: [PredicateNode] = []
            for operand in operands {
                let inner = normalized(operand, entity: entity, model: model, negated: negated)
                switch (inner, isAnd) {
                case (.constant(let value), _):
                    if value != isAnd { return .constant(value) }
                case (.and(let nested), true), (.or(let nested), false): flat += nested
                default: flat.append(inner)
                }
            }
            if flat.count == 1 { return flat[0] }
            return flat.isEmpty ? .constant(isAnd) : isAnd ? .and(flat) : .or(flat)
        case .comparison(let comparison):
            guard negated else { return node }
            return negation(of: comparison, entity: entity, model: model).map(PredicateNode.comparison) ?? .not(node)
        }
    }

    /// The comparison that is true exactly when `comparison` is false, when there is a simple one.
    private static func negation(of comparison: ComparisonNode, entity: String, model: ManagedObjectModel) -> ComparisonNode? {
        guard comparison.modifier == .direct, comparison.options.isEmpty else { return nil }
        var negated = comparison
        switch comparison.op {
        case .equal: negated.op = .notEqual
        case .notEqual: negated.op = .equal
        case .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual:
            let path: String, constant: PredicateValue
            switch (comparison.lhs, comparison.rhs) {
            case (.keyPath(let key), .constant(let value)), (.constant(let value), .keyPath(let key)):
                path = key
                constant = value
            default:
                return nil
            }
            guard !constant.isNull, !path.contains("."), let attribute = model.attribute(named: path, in: entity),
                  !attribute.isOptional, !attribute.isTransient else { return nil }
            switch comparison.op {
            case .lessThan: negated.op = .greaterThanOrEqual
            case .lessThanOrEqual: negated.op = .greaterThan
            case .greaterThan: negated.op = .lessThanOrEqual
            default: negated.op = .lessThan
            }
        default:
            return nil
        }
        return negated
    }

    /// Whether an index key of this type always holds the whole value (fixed-size encodings), so index order is the
    /// value order; strings, URIs and bytes over the key limit are cut and digested.
    static func keysAreNeverCut(_ type: AttributeType?) -> Bool {
        guard let type else { return false }
        return ![.string, .uri, .binaryData, .transformable, .objectID].contains(type)
    }

    /// The object IDs of `SELF == x` / `x == SELF` / `SELF IN {…}` when every `x` is a managed object or an object ID.
    static func selfObjects(_ node: PredicateNode) -> [ManagedObjectID]? {
        guard case .comparison(let comparison) = node, comparison.modifier == .direct, comparison.options.isEmpty else { return nil }
        let constant: PredicateValue
        switch (comparison.lhs, comparison.op, comparison.rhs) {
        case (.evaluatedObject, .equal, .constant(let value)), (.constant(let value), .equal, .evaluatedObject),
             (.evaluatedObject, .in, .constant(let value)):
            constant = value
        default:
            return nil
        }
        func id(_ value: PredicateValue) -> ManagedObjectID? {
            guard case .object(let object) = value else { return nil }
            return (object.base as? ManagedObjectID) ?? (object.base as? ManagedObject)?.objectID
        }
        switch constant {
        case .array(let elements) where comparison.op == .in:
            let ids = elements.compactMap(id)
            return ids.count == elements.count && ids.count <= 10_000 ? ids : nil
        case let single where comparison.op == .equal:
            return id(single).map { [$0] }
        default:
            return nil
        }
    }

    /// A comparison `attribute op constant` (or `constant op attribute`) on a plain attribute of the entity.
    static func term(_ node: PredicateNode, entity: String, model: ManagedObjectModel) -> Term? {
        if case .or(let operands) = node {
            // `a == 1 OR a == 2` is `a IN {1, 2}`.
            let terms = operands.compactMap { term($0, entity: entity, model: model) }
            guard terms.count == operands.count, let first = terms.first,
                  terms.allSatisfy({ $0.keyPath == first.keyPath && $0.collation == first.collation && ($0.op == .equal || $0.op == .in) })
            else { return nil }
            return Term(keyPath: first.keyPath, op: .in, values: terms.flatMap(\.values), collation: first.collation, fallbacks: first.fallbacks)
        }
        guard case .comparison(let comparison) = node, comparison.modifier == .direct else { return nil }
        // `[c]` and `[cd]` can use an index folded the same way (its keys are the folded strings); `[d]` alone only
        // a `[cd]` one, for `==` and `IN`, as a superset.
        let collation: FetchIndexElementDescription.Collation
        switch comparison.options {
        case []: collation = .binary
        case [.caseInsensitive]: collation = .caseInsensitive
        case [.caseInsensitive, .diacriticInsensitive], [.diacriticInsensitive]: collation = .caseAndDiacriticInsensitive
        default: return nil
        }
        if comparison.options == [.diacriticInsensitive], comparison.op != .equal, comparison.op != .in { return nil }
        var op = comparison.op
        let keyPath: String
        let constant: PredicateValue
        switch (comparison.lhs, comparison.rhs) {
        case (.keyPath(let path), .constant(let value)):
            keyPath = path
            constant = value
        case (.constant(let value), .keyPath(let path)):
            keyPath = path
            constant = value
            switch op {
            case .lessThan: op = .greaterThan
            case .lessThanOrEqual: op = .greaterThanOrEqual
            case .greaterThan: op = .lessThan
            case .greaterThanOrEqual: op = .lessThanOrEqual
            case .equal: break
            default: return nil
            }
        default:
            return nil
        }
        guard !keyPath.contains("."), let attribute = model.attribute(named: keyPath, in: entity), !attribute.isTransient,
              collation == .binary || attribute.type == .string else { return nil }
        guard var term = binaryTerm(keyPath, op, constant, attribute) else { return nil }
        let equalities = term.op == .equal || term.op == .in
        if collation != .binary {
            term = Term(keyPath: keyPath, op: term.op, values: term.values.map { IndexEntries.folded($0, collation) ?? $0 }, collation: collation)
        }
        if attribute.type == .string, equalities {
            switch collation {
            case .binary: term.fallbacks = [.caseInsensitive, .caseAndDiacriticInsensitive]
            case .caseInsensitive: term.fallbacks = [.caseAndDiacriticInsensitive]
            default: break
            }
        }
        return term
    }

    /// The term for `keyPath op constant` when the constant converts exactly to the attribute's stored type.
    private static func binaryTerm(_ keyPath: String, _ op: ComparisonOperator, _ constant: PredicateValue, _ attribute: AttributeDescription) -> Term? {
        switch op {
        case .equal, .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual:
            guard let value = indexValue(constant, attribute.type) else { return nil }
            return Term(keyPath: keyPath, op: op, values: [value])
        case .between:
            guard case .array(let bounds) = constant, bounds.count == 2,
                  let low = indexValue(bounds[0], attribute.type), let high = indexValue(bounds[1], attribute.type) else { return nil }
            return Term(keyPath: keyPath, op: op, values: [low, high])
        case .in:
            guard case .array(let elements) = constant, !elements.isEmpty, elements.count <= 1000 else { return nil }
            let values = elements.compactMap { indexValue($0, attribute.type) }
            guard values.count == elements.count else { return nil }
            return Term(keyPath: keyPath, op: .in, values: values)
        case .beginsWith:
            guard attribute.type == .string, case .string(let prefix) = constant, !prefix.isEmpty, prefix.utf8.count < 200 else { return nil }
            return Term(keyPath: keyPath, op: op, values: [.string(prefix)])
        default:
            return nil
        }
    }

    /// A constant as the attribute type's stored value, when it converts exactly (else the index cannot be used).
    static func indexValue(_ value: PredicateValue, _ type: AttributeType) -> AttributeValue? {
        switch (value, type) {
        case (.integer(let v), _) where type.isInteger: return .integer(v)
        case (.boolean(let v), _) where type.isInteger: return .integer(v ? 1 : 0)
        case (.double(let v), _) where type.isInteger: return Int64(exactly: v).map(AttributeValue.integer)
        case (.integer(let v), .double), (.integer(let v), .float): return Double(exactly: v).map(AttributeValue.double)
        case (.double(let v), .double), (.double(let v), .float): return v.isNaN ? nil : .double(v)
        case (.boolean(let v), .boolean): return .boolean(v)
        case (.integer(let v), .boolean) where v == 0 || v == 1: return .boolean(v == 1)
        case (.string(let v), .string) where v.utf8.count < 200: return .string(v)
        case (.date(let v), .date): return .date(v)
        case (.uuid(let v), .uuid): return .uuid(v)
        case (.decimal(let v), .decimal): return .decimal(v)
        case (.integer(let v), .decimal): return .decimal(Decimal(v))
        default: return nil
        }
    }

    /// The key range all terms on one attribute allow, intersected; `nil` when a term cannot be expressed.
    static func range(for terms: [Term]) -> (ranges: [KeyRange], text: String)? {
        if terms.count == 1, terms[0].op == .in {
            // One exact range per distinct value, in key order.
            var distinct = Set<[UInt8]>()
            for value in terms[0].values {
                var key: [UInt8] = []
                TupleEncoding.append(value, to: &key)
                distinct.insert(key)
            }
            let keys = distinct.sorted { $0.lexicographicallyPrecedes($1) }
            let values = terms[0].values.map { PredicateValue($0).format }
            return (keys.map { KeyRange.prefix($0) }, "{" + values.joined(separator: ", ") + "}")
        }
        guard let single = singleRange(for: terms) else { return nil }
        return ([single.range], single.text)
    }

    static func singleRange(for terms: [Term]) -> (range: KeyRange, text: String)? {
        var lower: [UInt8]?      // inclusive
        var upper: [UInt8]?      // exclusive
        var lowText = "-inf", highText = "+inf", lowBracket = "(", highBracket = ")"
        func encoded(_ value: AttributeValue) -> [UInt8] {
            var bytes: [UInt8] = []
            TupleEncoding.append(value, to: &bytes)
            return bytes
        }
        func successor(_ bytes: [UInt8]) -> [UInt8]? {
            if case .exclusive(let key)? = KeyRange.prefix(bytes).upper { return key }
            return nil
        }
        func raise(_ candidate: [UInt8], _ text: String, _ bracket: String) {
            if lower == nil || lower!.lexicographicallyPrecedes(candidate) { lower = candidate; lowText = text; lowBracket = bracket }
        }
        func reduce(_ candidate: [UInt8], _ text: String, _ bracket: String) {
            if upper == nil || candidate.lexicographicallyPrecedes(upper!) { upper = candidate; highText = text; highBracket = bracket }
        }
        for term in terms {
            let first = encoded(term.values[0])
            let tag = [first[0]]
            let text = PredicateValue(term.values[0]).format
            // Every bound stays within the attribute's type tag, so NULL (tag 0x00) never enters a range.
            raise(tag, "-inf", "(")
            if let next = successor(tag) { reduce(next, "+inf", ")") }
            switch term.op {
            case .equal:
                raise(first, text, "[")
                guard let next = successor(first) else { return nil }
                reduce(next, text, "]")
            case .greaterThanOrEqual: raise(first, text, "[")
            case .greaterThan:
                if case .string = term.values[0] {
                    // A longer string that continues with a NUL ("Ann\0x", NUL escaped as 0x00 0xFF) sorts between the
                    // value's own keys and their successor: start at the value; the row check drops equal ones.
                    raise(first, text, "(")
                } else {
                    guard let next = successor(first) else { return nil }
                    raise(next, text, "(")
                }
            case .lessThan: reduce(first, text, ")")
            case .lessThanOrEqual:
                guard let next = successor(first) else { return nil }
                reduce(next, text, "]")
            case .between:
                raise(first, text, "[")
                guard let next = successor(encoded(term.values[1])) else { return nil }
                reduce(next, PredicateValue(term.values[1]).format, "]")
            case .beginsWith:
                guard case .string(let prefix) = term.values[0] else { return nil }
                var bytes: [UInt8] = [tag[0]]
                for byte in prefix.precomposedStringWithCanonicalMapping.utf8 {
                    bytes.append(byte)
                    if byte == 0 { bytes.append(0xFF) }
                }
                raise(bytes, text, "[")
                guard let next = successor(bytes) else { return nil }
                reduce(next, text + "…", ")")
            default:
                return nil
            }
        }
        let range = KeyRange(lower: lower.map(KeyRange.Bound.inclusive), upper: upper.map(KeyRange.Bound.exclusive))
        return (range, "\(lowBracket)\(lowText), \(highText)\(highBracket)")
    }
}
