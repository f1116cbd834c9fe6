import Foundation
import LMDB
import ObjectGraph

/// Turns a fetch request into a ``QueryPlan``. Comparisons of indexed attributes with constants (`==`, `<`, `<=`,
/// `>`, `>=`, `BETWEEN`, `BEGINSWITH`, `IN`, `[c]`/`[cd]` on folded indexes) become index ranges
/// (`QueryPlanner+Terms.swift`); the candidate access paths (`QueryPlanner+AccessPaths.swift`) — a compound index
/// range, a range per indexed attribute, the intersection of the two smallest, a join through a to-one, a join
/// through a to-many for `ANY`, a union for an OR of indexed terms, a scan — are costed with ``PlanStatistics``
/// (bounded probes of each range, LMDB's table sizes) and the cheapest is chosen; on equal cost, the first in that
/// order.
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
        var source: any PlanSource
        var rank: Int
        /// Estimated entries the access path yields.
        var entries: Double = 0
        /// The estimate was counted, not guessed.
        var counted = true
        var streams = false
        var direction: ScanDirection = .forward
        var covered = false
        /// An index range's matches are sorted on its entries (``QueryPlan/IndexRange/sortsOnEntries``).
        var sortsOnEntries = false
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
            /// The range's entries give the sort keys, and the predicate is settled on them (``sortsOnEntries``).
            var sortsOnEntries = false
        }
        /// `SELF == x` / `SELF IN xs`: the rows to read by key, and whether that answers the whole predicate.
        var keys: (ids: [ManagedObjectID], answersAll: Bool)?
        /// What is left to check on the rows a key lookup reads: the predicate's other AND-operands (`nil`: the whole
        /// predicate), so twelve thousand objects are not compared with every row read.
        var keysResidual: FetchPredicate?
        var compound: (index: QueryPlan.IndexRange, streams: Bool, direction: ScanDirection, checkedOnEntries: Bool, covered: Bool, sortsOnEntries: Bool)?
        var singles: [Single] = []
        var join: QueryPlan.Join?
        var toMany: QueryPlan.ToManyJoin?
        var unions: [(ranges: [QueryPlan.IndexRange], exact: Bool)] = []
        var terms: [Term] = []
        var conjunctCount = 0
        /// The predicate is false for every row.
        var matchesNothing = false
        /// What checking the predicate on a row reads besides the row: a row per to-one it names, and the entries of
        /// each to-many's table (``relationshipReads(_:entity:layout:model:)``).
        var relationshipReads: (toOnes: Int, toManyTables: [String]) = (0, [])
    }

    /// The candidate access paths for `request`'s shape (`nil` without a predicate or for an unknown entity).
    ///
    /// `storeIdentifier` (the store's UUID) lets comparisons of relationships with objects use the relationship's
    /// tables (``relationshipLookup(_:request:layout:model:storeIdentifier:)``); without it they are scanned.
    static func analyze(_ request: FetchRequest, layout: StoreLayout, model: ManagedObjectModel, storeIdentifier: String? = nil) -> Analysis? {
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
                analysis.keys = (keyOrdered(ids), conjuncts.count == 1)
                // The rows read are those objects' rows: the operand that named them needs no second check — that
                // very operand, and only where the predicate itself has it as an AND-operand (normalizing may have
                // lifted it out of a nested one, whose other operands must still be checked).
                if case .and(let operands) = predicate.node, let answered = operands.firstIndex(of: conjunct) {
                    var rest = operands
                    rest.remove(at: answered)
                    analysis.keysResidual = FetchPredicate(node: rest.count == 1 ? rest[0] : .and(rest))
                }
                return analysis
            }
        }
        // Each AND-operand's term and relationship lookup (either may be missing), worked out once.
        let conjunctTerms = conjuncts.map { term($0, entity: request.entityName, model: model) }
        analysis.terms = conjunctTerms.compactMap { $0 }
        let allUsable = analysis.terms.count == conjuncts.count
        let terms = analysis.terms
        func checkedOnEntries(_ range: QueryPlan.IndexRange) -> Bool {
            entryElements(range, predicate: predicate.node, entity: request.entityName, model: model) != nil
        }
        // `department == object`, `ANY tags == object`: the relationship's table from the objects' side.
        let conjunctLookups = conjuncts.map {
            relationshipLookup($0, request: request, layout: layout, model: model, storeIdentifier: storeIdentifier)
        }
        let lookups = conjunctLookups.compactMap { $0 }
        // A compound fetch index may start with a to-one: its equality with an object constrains that element.
        if let compound = compoundPlan(terms + lookups.compactMap(\.toOneEquality), entity: entity, request: request, model: model) {
            // It answers the predicate when every AND-operand is one of the equalities its prefix answers exactly (an
            // attribute's term, or a to-one's equality with an object) and the fetched entities are the index's.
            func answered(_ term: Term?) -> Bool {
                guard let term, term.op == .equal, term.collation == .binary else { return false }
                return compound.equalities.contains { $0.keyPath == term.keyPath && $0.values == term.values }
            }
            let covered = !compound.equalities.isEmpty
                && request.entityName == compound.owner
                && (request.includesSubentities || model.directSubentities(of: compound.owner).isEmpty)
                && zip(conjunctTerms, conjunctLookups).allSatisfy { term, lookup in answered(term) || answered(lookup?.toOneEquality) }
            let checked = !covered && checkedOnEntries(compound.index)
            let order = order(compound.index, streams: compound.streams, settledOnEntries: covered || checked, request, model: model)
            analysis.compound = (compound.index, order.streams, compound.direction, checked, covered, order.sortsOnEntries)
        }
        // What the request reads — its sort keys and the attributes its predicate names —, which an index whose
        // entries store them answers without the rows.
        var reads = Set(request.sortDescriptors.map(\.keyPath))
        forEachExpression(in: predicate.node) { if case .keyPath(let path) = $0 { reads.insert(path) } }
        // One range per indexed attribute (and collation) the terms compare.
        var attributes: [(String, FetchIndexElementDescription.Collation)] = []
        for term in terms where !attributes.contains(where: { $0 == (term.keyPath, term.collation) }) {
            attributes.append((term.keyPath, term.collation))
        }
        for (keyPath, collation) in attributes {
            let own = terms.filter { $0.keyPath == keyPath && $0.collation == collation }
            guard let single = singleIndexRange(own, entity: entity, reading: reads) else { continue }
            let exact = isExact(single, request: request, model: model)
            let covered = exact && allUsable && terms.allSatisfy { $0.keyPath == keyPath && $0.collation == collation }
            // Index order is the value order only for values whose keys are never cut (a string, URI or data value
            // over the key limit is stored as a prefix and a digest), and ties are in row-key order (as a sorted
            // scan gives them) only in an index of that one attribute.
            // Text streams too (bytes of NFC UTF-8 order as Swift orders strings), its cut values re-sorted by run.
            var streams = false
            var direction = ScanDirection.forward
            let type = model.attribute(named: keyPath, in: request.entityName)?.type
            if let sort = request.sortDescriptors.first, sort.keyPath == keyPath,
               sort.comparison == .default, single.elementCount == 1, collation == .binary,
               keysAreNeverCut(type) || type == .string {
                streams = true
                direction = sort.ascending ? .forward : .reverse
            }
            let checked = !covered && checkedOnEntries(single.range)
            let order = order(single.range, streams: streams, settledOnEntries: covered || checked, request, model: model)
            analysis.singles.append(Analysis.Single(range: single.range, streams: order.streams, direction: direction, covered: covered,
                                                    exactPath: exact && allUsable ? keyPath : "", checkedOnEntries: checked,
                                                    sortsOnEntries: order.sortsOnEntries))
        }
        analysis.join = join(conjuncts, entity: request.entityName, layout: layout, model: model)
        analysis.unions = conjuncts.compactMap { union($0, entity: entity, request: request, model: model) }
        for lookup in lookups {
            let covered = lookup.exact && conjuncts.count == 1
            if lookup.unique {
                analysis.singles.append(Analysis.Single(range: lookup.range, streams: false, direction: .forward, covered: covered,
                                                        exactPath: "", checkedOnEntries: false))
            } else {
                analysis.unions.append(([lookup.range], covered))
            }
        }
        analysis.toMany = toManyJoin(conjuncts, entity: request.entityName, layout: layout, model: model)
        analysis.relationshipReads = relationshipReads(predicate.node, entity: entity, layout: layout, model: model)
        return analysis
    }

    /// The plan for `request`: its shape's candidate paths (`analysis`, or analysed now), costed with `statistics`,
    /// the cheapest chosen.
    static func plan(_ request: FetchRequest, layout: StoreLayout, model: ManagedObjectModel,
                     statistics: PlanStatistics = .unknown, analysis given: Analysis? = nil) -> QueryPlan {
        var plan = QueryPlan(source: QueryPlan.Scan(entityName: request.entityName), for: request)
        guard let predicate = request.predicate, let entity = layout.entity(request.entityName),
              let analysis = given ?? analyze(request, layout: layout, model: model) else { return plan }
        plan.filter.readsRelationships = analysis.relationshipReads.toOnes > 0 || !analysis.relationshipReads.toManyTables.isEmpty
        if analysis.matchesNothing {
            plan.source = QueryPlan.Empty(entityName: request.entityName)
            plan.filter.predicate = nil
            return plan
        }
        if let keys = analysis.keys {
            plan.source = QueryPlan.KeyLookup(entityName: request.entityName, objectIDs: keys.ids)
            // The lookup alone answers `SELF == x` / `SELF IN xs`: nothing is left to check on the rows.
            if keys.answersAll { plan.filter.predicate = nil } else if let residual = analysis.keysResidual { plan.filter.predicate = residual }
            return plan
        }
        var estimator = CostEstimator(request: request, statistics: statistics, rows: statistics.entries(StoreLayout.rowsDatabase(root: entity.root)))
        estimator.residual = estimator.relationshipReads(toOnes: analysis.relationshipReads.toOnes, toManyTables: analysis.relationshipReads.toManyTables)
        func chosen(_ best: Candidate) -> QueryPlan {
            plan.source = best.source
            plan.sort.isStreamed = best.streams
            // Ranges that answer the predicate exactly leave nothing to check.
            if best.covered { plan.filter.predicate = nil }
            if var range = best.source.indexRange {
                range.direction = best.direction
                if best.streams, let element = range.elements.first,
                   model.attribute(named: element.propertyName, in: request.entityName)?.type == .string {
                    range.resortsLongKeys = true
                }
                // Streaming the first of several sort keys: the rows tied on it are sorted by the rest, run by run.
                if best.streams, request.sortDescriptors.count > 1 { range.resortsRuns = true }
                if !best.covered {
                    range.entryElements = entryElements(range, predicate: predicate.node, entity: request.entityName, model: model)
                }
                range.sortsOnEntries = best.sortsOnEntries
                plan.source = range
            }
            return plan
        }
        // A lone range that answers the request from its entries beats a scan whatever its size: nothing to probe.
        if analysis.compound == nil, analysis.join == nil, analysis.unions.isEmpty, analysis.toMany == nil, analysis.singles.count == 1,
           let only = analysis.singles.first,
           estimator.answeredByEntries(covered: only.covered, streams: estimator.streamsWholeOrder(only.streams) || only.sortsOnEntries) {
            return chosen(Candidate(source: only.range, rank: 1, counted: false, streams: only.streams, direction: only.direction, covered: true,
                                    sortsOnEntries: only.sortsOnEntries))
        }
        // So does a lone union that answers it from its entries — the members of a relationship (`ANY tags == %@`,
        // `department IN %@`): each of its rows is read at most once either way, a scan reads them all.
        if analysis.compound == nil, analysis.join == nil, analysis.singles.isEmpty, analysis.toMany == nil, analysis.unions.count == 1,
           let only = analysis.unions.first, only.exact, analysis.conjunctCount == 1, estimator.answeredByEntries(covered: true, streams: false) {
            return chosen(Candidate(source: QueryPlan.Union(ranges: only.ranges), rank: 6, counted: false, streams: request.sortDescriptors.isEmpty, covered: true))
        }
        // A path that answers the predicate exactly while streaming the whole requested order stops after offset +
        // limit entries (and rows): every other path reads each match at least, so under a limit it wins whatever
        // the sizes — nothing to probe.
        if request.fetchLimit > 0, request.resultType == .managedObject || request.resultType == .managedObjectID {
            if let compound = analysis.compound, compound.covered, estimator.streamsWholeOrder(compound.streams) {
                return chosen(Candidate(source: compound.index, rank: 0, counted: false, streams: true, direction: compound.direction, covered: true))
            }
            if let single = analysis.singles.first(where: { $0.covered && estimator.streamsWholeOrder($0.streams) }) {
                return chosen(Candidate(source: single.range, rank: 1, counted: false, streams: true, direction: single.direction, covered: true))
            }
        }
        var candidates: [Candidate] = []
        if let compound = analysis.compound {
            candidates.append(estimator.index(compound.index, rank: 0, streams: compound.streams, direction: compound.direction,
                                              covered: compound.covered, entryChecked: compound.checkedOnEntries, sortsOnEntries: compound.sortsOnEntries))
        }
        let sized = analysis.singles.map { single in
            (candidate: estimator.index(single.range, rank: single.range.isEquality ? 1 : 2, streams: single.streams,
                                        direction: single.direction, covered: single.covered, entryChecked: single.checkedOnEntries,
                                        sortsOnEntries: single.sortsOnEntries),
             exactPath: single.exactPath)
        }
        candidates += sized.map(\.candidate)
        // The two smallest ranges on different attributes, intersected by row key — when both were counted (past a
        // probe's cap, a range's size is a guess, and so would be the intersection's).
        let bySize = sized.sorted { $0.candidate.entries < $1.candidate.entries }
        if bySize.count >= 2, bySize[0].candidate.counted, bySize[1].candidate.counted,
           let first = bySize[0].candidate.source.indexRange, let second = bySize[1].candidate.source.indexRange {
            // It answers the predicate when each range answers every term on its attribute and there are no others.
            let exactPaths = [bySize[0].exactPath, bySize[1].exactPath]
            let covered = !exactPaths.contains("") && analysis.terms.allSatisfy { exactPaths.contains($0.keyPath) }
            candidates.append(estimator.intersection([first, second], sizes: (bySize[0].candidate, bySize[1].candidate), rank: 3, covered: covered))
        }
        if let joined = analysis.join {
            // A join whose destinations are checked row by row with the comparison itself answers it exactly: when it
            // is the whole predicate, nothing is left for the fetched rows.
            var exact = false
            if case .scan = joined.destinations { exact = analysis.conjunctCount == 1 }
            candidates.append(estimator.join(joined, rank: 4, covered: exact))
        }
        if let toMany = analysis.toMany { candidates.append(estimator.toManyJoin(toMany, rank: 5)) }
        for union in analysis.unions {
            candidates.append(estimator.union(union.ranges, rank: 6, covered: union.exact && analysis.conjunctCount == 1))
        }
        candidates.append(estimator.scan(rank: 7))
        return chosen(candidates.min { ($0.cost, $0.rank) < ($1.cost, $1.rank) }!)
    }

    /// `predicate` with each managed object that a comparison compares with (alone or in a collection) replaced by its
    /// object ID — what keys a plan-shape cache entry for it, so that `department == %@` is analysed once per
    /// department and the cache keeps no object alive (an analysis depends only on the objects' IDs). `nil` when it
    /// holds more than `limit` objects (hashing `SELF IN` 50 000 objects costs more than analysing it) or an object
    /// anywhere else.
    static func keyingObjectsByID(_ predicate: FetchPredicate, limit: Int = 16) -> FetchPredicate? {
        var count = 0
        func keyed(_ value: PredicateValue) -> PredicateValue? {
            switch value {
            case .object(let object) where object.wrappedObjectID == nil:
                count += 1
                guard count <= limit, let managed = object.base as? ManagedObject else { return nil }
                return .object(PredicateObject(managed.objectID))
            case .array(let items):
                var mapped: [PredicateValue] = []
                mapped.reserveCapacity(items.count)
                for item in items {
                    guard let item = keyed(item) else { return nil }
                    mapped.append(item)
                }
                return .array(mapped)
            case .dictionary:
                return holdsObjects(value) ? nil : value
            default:
                return value
            }
        }
        func keyed(_ expression: ExpressionNode) -> ExpressionNode? {
            if case .constant(let value) = expression { return keyed(value).map(ExpressionNode.constant) }
            // Anywhere else (inside a function, an aggregate, a subquery) an object is not looked for: not keyed.
            var holds = false
            forEachExpression(in: expression, intoSubqueries: true) { if case .constant(let value) = $0, holdsObjects(value) { holds = true } }
            return holds ? nil : expression
        }
        func keyed(_ node: PredicateNode) -> PredicateNode? {
            switch node {
            case .constant: return node
            case .comparison(var comparison):
                guard let lhs = keyed(comparison.lhs), let rhs = keyed(comparison.rhs) else { return nil }
                (comparison.lhs, comparison.rhs) = (lhs, rhs)
                return .comparison(comparison)
            case .and(let operands), .or(let operands):
                var mapped: [PredicateNode] = []
                for operand in operands {
                    guard let operand = keyed(operand) else { return nil }
                    mapped.append(operand)
                }
                if case .and = node { return .and(mapped) } else { return .or(mapped) }
            case .not(let operand):
                return keyed(operand).map(PredicateNode.not)
            }
        }
        return keyed(predicate.node).map { FetchPredicate(node: $0) }
    }

    /// Calls `body` with every expression of `node`, nested ones included (a subquery's collection, and its own
    /// predicate — whose key paths start at its variable — only `intoSubqueries`).
    static func forEachExpression(in node: PredicateNode, intoSubqueries: Bool = false, _ body: (ExpressionNode) -> Void) {
        func visit(_ node: PredicateNode) {
            switch node {
            case .comparison(let comparison):
                forEachExpression(in: comparison.lhs, intoSubqueries: intoSubqueries, body)
                forEachExpression(in: comparison.rhs, intoSubqueries: intoSubqueries, body)
            case .and(let operands), .or(let operands): operands.forEach(visit)
            case .not(let operand): visit(operand)
            case .constant: break
            }
        }
        visit(node)
    }

    /// Calls `body` with `expression` and every expression nested in it (a subquery's collection, and its own
    /// predicate only `intoSubqueries`).
    static func forEachExpression(in expression: ExpressionNode, intoSubqueries: Bool = false, _ body: (ExpressionNode) -> Void) {
        func visit(_ expression: ExpressionNode) {
            body(expression)
            switch expression {
            case .subquery(let base, _, let condition):
                visit(base)
                if intoSubqueries { forEachExpression(in: condition, intoSubqueries: true, body) }
            case .member(let base, _), .negate(let base), .index(let base, _), .assignment(_, let base): visit(base)
            case .aggregate(let items), .function(_, let items): items.forEach(visit)
            case .method(let base, _, let arguments): visit(base); arguments.forEach(visit)
            case .arithmetic(_, let left, let right): visit(left); visit(right)
            case .ternary(let condition, let yes, let no):
                forEachExpression(in: condition, intoSubqueries: intoSubqueries, body)
                visit(yes)
                visit(no)
            case .constant, .evaluatedObject, .variable, .keyPath: break
            }
        }
        visit(expression)
    }

    /// Whether a request's analysis may be kept: not when its predicate holds objects other than object IDs (a cache
    /// must not keep managed objects, and their contexts, alive).
    static func isCacheable(_ predicate: FetchPredicate?) -> Bool {
        guard let predicate else { return true }
        var cacheable = true
        forEachExpression(in: predicate.node, intoSubqueries: true) { expression in
            if case .constant(let value) = expression, holdsObjects(value) { cacheable = false }
        }
        return cacheable
    }

    /// Whether `value` holds an object other than an object ID (alone or in a collection).
    static func holdsObjects(_ value: PredicateValue) -> Bool {
        switch value {
        case .object(let object): object.wrappedObjectID == nil
        case .array(let items): items.contains(where: holdsObjects)
        case .dictionary(let items): items.values.contains(where: holdsObjects)
        default: false
        }
    }

    /// What evaluating `node` on a row reads besides the row, from its shape alone: the to-ones it follows (a row
    /// each) and the tables of the to-manys it follows (whose entries per row give the relationship's average size,
    /// ``CostEstimator/relationshipReads(toOnes:toManyTables:)``).
    static func relationshipReads(_ node: PredicateNode, entity: StoreLayout.EntityLayout, layout: StoreLayout,
                                  model: ManagedObjectModel) -> (toOnes: Int, toManyTables: [String]) {
        var names = Set<String>()
        forEachExpression(in: node) { expression in
            if case .keyPath(let path) = expression { names.insert(String(path.prefix { $0 != "." })) }
        }
        var toOnes = 0
        var tables: [String] = []
        for name in names.sorted() {
            guard let relationship = model.relationship(named: name, in: entity.name) else { continue }
            guard relationship.isToMany else { toOnes += 1; continue }
            if StoreLayout.needsLinkTable(relationship, model) {
                tables.append(StoreLayout.linkDatabase(entity: layout.declaringEntity(of: name, in: entity.name), relationship: relationship))
            } else if let inverse = model.inverse(of: relationship) {
                tables.append(StoreLayout.toOneDatabase(entity: layout.declaringEntity(of: inverse.name, in: relationship.destinationEntityName),
                                                        relationship: inverse.name))
            }
        }
        return (toOnes, tables)
    }
}
