import Foundation
import LMDB
import ObjectGraph

/// The access paths a predicate's terms allow: a range of one index, of a compound index, a union for an OR, joins
/// through relationships, and what a range answers on its own.
extension QueryPlanner {
    /// A range of one index over one attribute: the range, the entity declaring the index, the terms the range was
    /// built from, every term on that attribute, and how many elements the index has.
    typealias SingleRange = (range: QueryPlan.IndexRange, owner: String, chosen: [Term], terms: [Term], elementCount: Int)

    /// The best range of an index whose first element is an attribute with a usable term (equality first, then an
    /// index of the terms' own collation, then the one whose entries store most of the attributes in `reading` —
    /// those the request sorts on or its predicate reads —, then the one with fewest elements, then the one storing
    /// fewest attributes: smaller entries). A set of values (IN, ORed equalities) is used alone; other terms on the
    /// attribute stay in the filter.
    static func singleIndexRange(_ terms: [Term], entity: StoreLayout.EntityLayout, reading: Set<String> = []) -> SingleRange? {
        var best: (owner: String, index: FetchIndexDescription, terms: [Term], equality: Bool, exact: Bool, covers: Int)?
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
            let covers = reading.isEmpty ? 0 : index.storedAttributeNames.filter(reading.contains).count
            if let current = best {
                let better = equality != current.equality ? equality
                    : exact != current.exact ? exact
                    : covers != current.covers ? covers > current.covers
                    : index.elements.count != current.index.elements.count ? index.elements.count < current.index.elements.count
                    : index.storedAttributeNames.count < current.index.storedAttributeNames.count
                guard better else { continue }
            }
            best = (owner, index, matching, equality, exact, covers)
        }
        guard let best else { return nil }
        let chosen = best.terms.first { $0.op == .in }.map { [$0] } ?? best.terms
        guard let range = range(for: chosen) else { return nil }
        var indexRange = QueryPlan.IndexRange(table: StoreLayout.indexDatabase(entity: best.owner, index: best.index.name),
                                              label: "\(best.owner).\(best.index.name)", keyPath: best.terms[0].keyPath,
                                              ranges: range.ranges, bounds: range.text)
        indexRange.isEquality = chosen.contains { $0.op == .equal || $0.op == .in }
        indexRange.holdsOneKey = chosen.count == 1 && chosen[0].op == .equal && best.index.elements.count == 1
            && keysAreNeverCut(entity.fieldIndex[chosen[0].keyPath].flatMap { entity.attributeTypes[$0] })
        indexRange.elements = best.index.elements
        indexRange.stored = storedElements(best.index, entity: entity)
        return (indexRange, best.owner, chosen, best.terms, best.index.elements.count)
    }

    /// A range over a compound index that constrains two or more of its elements: equalities on a prefix of its
    /// elements, then (optionally) a range on the next one — the index with the most constrained elements wins; or
    /// one that yields the sort order after an equality prefix. `equalities` are the terms the prefix answers
    /// exactly — the range holds exactly the rows of the index's entity and its sub-entities for which they are
    /// true — when it has no range element and every prefix element's keys are never cut (numbers, dates, to-ones…);
    /// otherwise empty, and the caller checks the whole predicate on each row.
    static func compoundPlan(_ terms: [Term], entity: StoreLayout.EntityLayout, request: FetchRequest, model: ManagedObjectModel)
        -> (index: QueryPlan.IndexRange, owner: String, streams: Bool, direction: ScanDirection, equalities: [Term])?
    {
        var best: (score: Int, plan: QueryPlan.IndexRange, owner: String, streams: Bool, direction: ScanDirection, equalities: [Term])?
        for (owner, index) in entity.indexes where index.elements.count >= 2 {
            // Keys longer than the limit are cut per element at this share: only shorter values can be matched exactly.
            let share = IndexEntries.maxTupleBytes / index.elements.count
            var prefix: [UInt8] = []
            var texts: [String] = []
            var equalities: [Term] = []
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
                equalities.append(equality)
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
               let sort = request.sortDescriptors.first, sort.keyPath == next.propertyName,
               sort.comparison == .default,
               keysAreNeverCut(model.attribute(named: next.propertyName, in: request.entityName)?.type) {
                streams = true
                direction = next.isAscending == sort.ascending ? .forward : .reverse
            }
            // Worth more than the one-attribute plans only when it constrains two elements or yields the sort order.
            guard constrained >= 2 || streams else { continue }
            let score = constrained * 2 + (constrained > position ? 0 : 1) + (streams ? 1 : 0)
            if best == nil || score > best!.score {
                var indexRange = QueryPlan.IndexRange(table: StoreLayout.indexDatabase(entity: owner, index: index.name),
                                                      label: "\(owner).\(index.name)", keyPath: index.elements[0].propertyName,
                                                      ranges: [range], bounds: "[" + bounds + "]")
                indexRange.isEquality = constrained == position
                indexRange.elements = index.elements
                indexRange.stored = storedElements(index, entity: entity)
                // A to-one element holds its destination's key (an integer); an attribute's keys may be cut.
                let exact = constrained == position && index.elements[..<position].allSatisfy { element in
                    guard let field = entity.fieldIndex[element.propertyName] else { return false }
                    return entity.attributeTypes[field].map { keysAreNeverCut($0) } ?? true
                }
                best = (score, indexRange, owner, streams, direction, exact ? equalities : [])
            }
        }
        return best.map { ($0.plan, $0.owner, $0.streams, $0.direction, $0.equalities) }
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

    /// A comparison of a relationship with objects, answered from the table that keeps the relationship from the
    /// destination's side.
    struct RelationshipLookup {
        /// The range of that table under the objects' keys; its values are the rows that point at them.
        let range: QueryPlan.IndexRange
        /// Each row comes at most once (a to-one points at one object; one object has each owner once).
        let unique: Bool
        /// The range answers the comparison exactly, for the fetched entities: counts and IDs need no row.
        let exact: Bool
        /// `toOne == object` with an object of this store: the to-one and its destination's key, which a compound
        /// fetch index holds as its element (``IndexEntries``), so `section == x` sorted by size can walk
        /// `(section, size)`.
        var toOneEquality: Term?
    }

    /// `toOne == object` and `toOne IN objects` through the to-one's `toone/…` table (keyed by destination); `ANY
    /// toMany == object`, `object IN toMany` and `ANY toMany IN objects` through the inverse's `link/…` table when the
    /// inverse is a to-many (a many-to-many keeps its pairs from both sides). The objects are managed objects or object
    /// IDs; those of another store, of another entity or not saved yet point at no row and are left out (none left:
    /// an empty range, which matches nothing). `nil` for anything else — a key path through the relationship, `nil`,
    /// options, a to-many whose inverse is a to-one or missing — or without the store's identifier.
    static func relationshipLookup(_ node: PredicateNode, request: FetchRequest, layout: StoreLayout, model: ManagedObjectModel,
                                   storeIdentifier: String?) -> RelationshipLookup? {
        guard let storeIdentifier, case .comparison(let comparison) = node, comparison.options.isEmpty else { return nil }
        let name: String, constant: PredicateValue, isIn: Bool, anyForm: Bool
        switch (comparison.lhs, comparison.op, comparison.rhs) {
        case (.keyPath(let path), .equal, .constant(let value)), (.constant(let value), .equal, .keyPath(let path)):
            (name, constant, isIn, anyForm) = (path, value, false, comparison.modifier == .any)
        case (.keyPath(let path), .in, .constant(let value)):
            (name, constant, isIn, anyForm) = (path, value, true, comparison.modifier == .any)
        case (.constant(let value), .in, .keyPath(let path)) where comparison.modifier == .direct:
            // `object IN toMany`: the collection holds the object.
            (name, constant, isIn, anyForm) = (path, value, false, true)
        default:
            return nil
        }
        guard comparison.modifier != .all, comparison.modifier != .none, !name.contains("."),
              let relationship = model.relationship(named: name, in: request.entityName),
              relationship.isToMany == anyForm else { return nil }
        // The objects' row keys, when every constant is an object.
        let ids: [ManagedObjectID]
        switch constant {
        case .array(let elements) where isIn:
            ids = elements.compactMap(objectID)
            guard ids.count == elements.count else { return nil }
        case let single where !isIn:
            guard let id = objectID(single) else { return nil }
            ids = [id]
        default:
            return nil
        }
        let destinations = Set(model.entityAndDescendants(of: relationship.destinationEntityName))
        let keys = Set(ids.compactMap { id -> UInt64? in
            guard id.storeIdentifier == storeIdentifier, destinations.contains(id.entityName),
                  case .integer(let key) = id.referenceObject, key > 0 else { return nil }
            return UInt64(key)
        }).sorted()
        let bounds = isIn ? "IN {\(keys.map { "p\($0)" }.joined(separator: ", "))}" : keys.first.map { "== p\($0)" } ?? "== nothing"
        let label = "\(request.entityName).\(relationship.name)"
        if !relationship.isToMany {
            let owner = layout.declaringEntity(of: relationship.name, in: request.entityName)
            // Under each destination key, one value per row pointing at it.
            let ranges = keys.map { key in
                let bytes = LMDBIncrementalStore.keyBytes(key)
                return KeyRange(lower: .inclusive(bytes), upper: .inclusive(bytes))
            }
            var range = QueryPlan.IndexRange(table: StoreLayout.toOneDatabase(entity: owner, relationship: relationship.name), label: label,
                                             keyPath: relationship.name, ranges: ranges, bounds: bounds, isEquality: true)
            range.holdsOneKey = ranges.count == 1
            // Its entries count rows of the declaring entity and its sub-entities: exact when those are the fetched ones.
            let exact = request.entityName == owner && (request.includesSubentities || model.directSubentities(of: owner).isEmpty)
            var lookup = RelationshipLookup(range: range, unique: true, exact: exact)
            if !isIn, let key = keys.first {
                lookup.toOneEquality = Term(keyPath: relationship.name, op: .equal, values: [.integer(Int64(bitPattern: key))])
            }
            return lookup
        }
        guard let inverse = model.inverse(of: relationship), inverse.isToMany,
              let destination = layout.entity(relationship.destinationEntityName) else { return nil }
        // Under each object's key (then a position, in an ordered `link/…` table) its inverse's members: a key prefix.
        let range = QueryPlan.IndexRange(table: StoreLayout.linkDatabase(entity: layout.declaringEntity(of: inverse.name, in: destination.name),
                                                                            relationship: inverse),
                                         label: label, keyPath: relationship.name, ranges: keys.map { KeyRange.prefix(LMDBIncrementalStore.keyBytes($0)) },
                                         bounds: bounds, isEquality: true)
        // Owners go through a union, which keeps each once and only those of the fetched entities.
        return RelationshipLookup(range: range, unique: false, exact: true)
    }

    /// A join for the first AND-term that compares an indexed attribute of a to-one's destination with a constant
    /// (`department.name == "R&D"`, `team.size > 3`): such a term is false for rows without a destination, so the rows
    /// pointing at the destinations in the range are a superset of the matches.
    static func join(_ conjuncts: [PredicateNode], entity: String, layout: StoreLayout, model: ManagedObjectModel) -> QueryPlan.Join? {
        for conjunct in conjuncts {
            guard let found = destinations(conjunct, modifier: .direct, entity: entity, layout: layout, model: model),
                  !found.relationship.isToMany else { continue }
            let toOne = StoreLayout.toOneDatabase(entity: layout.declaringEntity(of: found.relationship.name, in: entity),
                                                  relationship: found.relationship.name)
            let label = "\(entity).\(found.relationship.name)"
            switch found.destinations {
            case .range(let range):
                return QueryPlan.Join(destinations: .range(range), toOneTable: toOne, label: label)
            case .scan(let predicate):
                let destination = found.destination
                let family = layout.tags(of: Set(model.entityAndDescendants(of: destination.name).compactMap { layout.entity($0)?.tag }))
                let scan = QueryPlan.DestinationScan(entityName: destination.name, root: destination.root,
                                                     rowsTable: StoreLayout.rowsDatabase(root: destination.root),
                                                     predicate: predicate, family: family)
                return QueryPlan.Join(destinations: .scan(scan), toOneTable: toOne, label: label)
            }
        }
        return nil
    }

    /// A join for the first AND-term `ANY toMany.attr op constant` whose destination attribute has an index and
    /// whose relationship has an inverse (its link table, or its to-one field, leads back to the owners): an
    /// owner matches only through a destination in the range, so their owners are a superset of the matches.
    static func toManyJoin(_ conjuncts: [PredicateNode], entity: String, layout: StoreLayout, model: ManagedObjectModel) -> QueryPlan.ToManyJoin? {
        for conjunct in conjuncts {
            guard let found = destinationRange(conjunct, modifier: .any, entity: entity, layout: layout, model: model),
                  found.relationship.isToMany, let inverse = model.inverse(of: found.relationship) else { continue }
            let destination = found.destination
            let owners: QueryPlan.ToManyJoin.Owners = inverse.isToMany
                ? .link(table: StoreLayout.linkDatabase(entity: layout.declaringEntity(of: inverse.name, in: destination.name), relationship: inverse))
                : .toOneField(name: inverse.name, rows: StoreLayout.rowsDatabase(root: destination.root))
            return QueryPlan.ToManyJoin(destination: found.range, owners: owners, label: "\(entity).\(found.relationship.name)")
        }
        return nil
    }

    /// For a comparison `relationship.attribute op constant` with `modifier`: the relationship, its destination, and
    /// the range of the destination's index that the same comparison of the attribute alone gives.
    static func destinationRange(_ conjunct: PredicateNode, modifier: ComparisonModifier, entity: String, layout: StoreLayout,
                                 model: ManagedObjectModel)
        -> (relationship: RelationshipDescription, destination: StoreLayout.EntityLayout, range: QueryPlan.IndexRange)?
    {
        guard let found = destinations(conjunct, modifier: modifier, entity: entity, layout: layout, model: model),
              case .range(let range) = found.destinations else { return nil }
        return (found.relationship, found.destination, range)
    }

    /// Where the destinations that satisfy `relationship.attribute op constant` come from: a range of the destination's
    /// index for the same comparison of the attribute alone, or — with no such index — the comparison itself, to be
    /// checked on each destination row (a scan).
    enum DestinationSource {
        case range(QueryPlan.IndexRange)
        case scan(FetchPredicate)
    }

    static func destinations(_ conjunct: PredicateNode, modifier: ComparisonModifier, entity: String, layout: StoreLayout,
                             model: ManagedObjectModel)
        -> (relationship: RelationshipDescription, destination: StoreLayout.EntityLayout, destinations: DestinationSource)?
    {
        guard case .comparison(var comparison) = conjunct, comparison.modifier == modifier else { return nil }
        let path: String
        switch (comparison.lhs, comparison.rhs) {
        case (.keyPath(let key), .constant): path = key
        case (.constant, .keyPath(let key)): path = key
        default: return nil
        }
        let parts = path.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 2, let relationship = model.relationship(named: parts[0], in: entity),
              let destination = layout.entity(relationship.destinationEntityName) else { return nil }
        comparison.modifier = .direct
        if case .keyPath = comparison.lhs { comparison.lhs = .keyPath(parts[1]) } else { comparison.rhs = .keyPath(parts[1]) }
        guard let term = term(.comparison(comparison), entity: destination.name, model: model) else { return nil }
        guard let choice = singleIndexRange([term], entity: destination) else {
            return (relationship, destination, .scan(FetchPredicate(node: .comparison(comparison))))
        }
        return (relationship, destination, .range(choice.range))
    }

    /// Whether a single-attribute range answers every term on its attribute exactly: no term was left out of the
    /// range, no string (whose long keys are cut) and no index shared with other entities' rows.
    static func isExact(_ single: SingleRange, request: FetchRequest, model: ManagedObjectModel) -> Bool {
        let isString = model.attribute(named: single.terms[0].keyPath, in: request.entityName)?.type == .string
        return !isString && single.chosen.count == single.terms.count && request.entityName == single.owner
            && (request.includesSubentities || model.directSubentities(of: single.owner).isEmpty)
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
        return entryElements(range, reading: names, entity: entity, model: model)
    }

    /// The attributes a covering index's entries store, as they are read back from an entry's value.
    static func storedElements(_ index: FetchIndexDescription, entity: StoreLayout.EntityLayout) -> [QueryPlan.EntryElement] {
        index.storedAttributeNames.compactMap { name in
            entity.fieldIndex[name].flatMap { entity.attributeTypes[$0] }.map { QueryPlan.EntryElement(name: name, type: $0, inverted: false) }
        }
    }

    /// How a range whose index yields the first sort key when it `streams` gives the requested order: streamed
    /// (whole, or run by run when there are more sort keys), or sorted on its entries when they give every sort key
    /// and settle the predicate (`settledOnEntries`) — which beats a stream of the first key only, whose ties need
    /// the rows. (Entries are asked about only when that could matter.)
    static func order(_ range: QueryPlan.IndexRange, streams: Bool, settledOnEntries: Bool, _ request: FetchRequest,
                      model: ManagedObjectModel) -> (streams: Bool, sortsOnEntries: Bool) {
        let severalKeys = request.sortDescriptors.count > 1
        let onEntries = (!streams || severalKeys) && settledOnEntries && sortsOnEntries(range, request, model: model)
        let streamed = streams && !(severalKeys && onEntries)
        return (streamed, !streamed && onEntries)
    }

    /// Whether a fetch from `range` can be sorted on the index entries: every sort key is a plain attribute its
    /// entries hold — stored in their values, or an element of the keys — of a type whose keys are never cut (so
    /// each entry gives its exact value), and no range of it streams the order already.
    static func sortsOnEntries(_ range: QueryPlan.IndexRange, _ request: FetchRequest, model: ManagedObjectModel) -> Bool {
        let names = Set(request.sortDescriptors.map(\.keyPath))
        guard !names.isEmpty, names.allSatisfy({ !$0.contains(".") && keysAreNeverCut(model.attribute(named: $0, in: request.entityName)?.type) })
        else { return false }
        // Decoded up to the last element a sort key is: none before it may be text, which a key may hold cut.
        return entryElements(range, reading: names, entity: request.entityName, model: model)?.allSatisfy { keysAreNeverCut($0.type) } == true
    }

    /// How to read `names` back from an entry of `range`'s index: the attributes its entries store (read from the
    /// value), then its elements up to the last of the other names, each a plain attribute of a type the key decoder
    /// reads, held unfolded; `nil` when one of them is neither.
    static func entryElements(_ range: QueryPlan.IndexRange, reading names: Set<String>, entity: String, model: ManagedObjectModel)
        -> [QueryPlan.EntryElement]?
    {
        var names = names.subtracting(range.stored.map(\.name))
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
}
