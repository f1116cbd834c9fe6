import Foundation

extension ManagedObjectModel {
    /// Names a property may not have, because `ManagedObject` answers to them itself.
    public static let reservedPropertyNames: Set<String> = [
        "entity", "objectID", "managedObjectContext", "isFault", "isInserted", "isUpdated", "isDeleted", "hasChanges",
        "hasPersistentChangedValues", "changedValues", "changedValuesForCurrentEvent", "faultingState", "description",
        "debugDescription", "hash", "hashValue", "self", "class", "className", "observationInfo", "awakeFromInsert",
        "awakeFromFetch", "validateForInsert", "validateForUpdate", "validateForDelete", "willSave", "didSave",
        "willTurnIntoFault", "didTurnIntoFault", "prepareForDeletion",
    ]

    /// Every problem in a would-be model, in a stable order.
    static func problems(
        entities: [EntityDescription], configurations: [ModelConfiguration], templates: [FetchRequestTemplate]
    ) -> [ModelProblem] {
        var problems: [ModelProblem] = []
        var byName: [String: EntityDescription] = [:]
        for entity in entities {
            if entity.name.isEmpty {
                problems.append(ModelProblem(.emptyName, message: "an entity has an empty name"))
            }
            if byName[entity.name] != nil {
                problems.append(ModelProblem(.duplicateEntity, entity: entity.name, message: "two entities are named \"\(entity.name)\""))
            } else {
                byName[entity.name] = entity
            }
        }

        // Inheritance: parents exist, no cycles.
        var acyclic: Set<String> = []
        for entity in entities {
            guard let parent = entity.parentName else { acyclic.insert(entity.name); continue }
            guard byName[parent] != nil else {
                problems.append(ModelProblem(.unknownParent, entity: entity.name,
                                             message: "the parent entity \"\(parent)\" does not exist"))
                continue
            }
            var seen: [String] = [entity.name]
            var current: String? = parent
            while let name = current, let ancestor = byName[name] {
                if seen.contains(name) {
                    problems.append(ModelProblem(.inheritanceCycle, entity: entity.name,
                                                 message: "inherits from itself: \((seen + [name]).joined(separator: " → "))"))
                    break
                }
                seen.append(name)
                current = ancestor.parentName
            }
            if current == nil || byName[current!] == nil { acyclic.insert(entity.name) }
        }

        func lineage(_ entity: EntityDescription) -> [EntityDescription] {
            guard acyclic.contains(entity.name) else { return [entity] }
            var chain = [entity]
            // `acyclic` is by name: with two entities of one name (a problem reported above), the other one's chain
            // may still loop (found by fuzzing the model loader), so a name seen twice ends it.
            var seen: Set<String> = [entity.name]
            while let parent = chain[0].parentName, let ancestor = byName[parent], seen.insert(parent).inserted {
                chain.insert(ancestor, at: 0)
            }
            return chain
        }
        func allProperties(_ entityName: String) -> [String: PropertyDescription] {
            guard let entity = byName[entityName] else { return [:] }
            var properties: [String: PropertyDescription] = [:]
            for owner in lineage(entity) { for property in owner.properties where properties[property.name] == nil { properties[property.name] = property } }
            return properties
        }

        for entity in entities {
            var owners: [String: String] = [:]
            for owner in lineage(entity) {
                for property in owner.properties {
                    if let first = owners[property.name] {
                        // Report a clash once, on the entity that introduces the second declaration.
                        if owner.name == entity.name {
                            let place = first == entity.name ? "twice" : "again (\"\(first)\" already has it)"
                            problems.append(ModelProblem(.duplicateProperty, entity: entity.name, property: property.name,
                                                         message: "the property \"\(property.name)\" is declared \(place)"))
                        }
                    } else {
                        owners[property.name] = owner.name
                    }
                }
            }
            for property in entity.properties {
                problems += Self.propertyProblems(property, in: entity, entities: byName, allProperties: allProperties)
            }
            let properties = allProperties(entity.name)
            for index in entity.fetchIndexes {
                if index.elements.isEmpty {
                    problems.append(ModelProblem(.invalidIndex, entity: entity.name, index: index.name,
                                                 message: "the fetch index \"\(index.name)\" has no elements"))
                }
                for element in index.elements {
                    if let message = Self.keyPropertyProblem(element.propertyName, properties) {
                        problems.append(ModelProblem(.invalidIndex, entity: entity.name, property: element.propertyName, index: index.name,
                                                     message: "the fetch index \"\(index.name)\" \(message)"))
                    }
                }
                problems += Self.storedAttributeProblems(index, in: entity.name, properties)
            }
            for constraint in entity.uniquenessConstraints {
                let label = constraint.propertyNames.joined(separator: ", ")
                if constraint.propertyNames.isEmpty {
                    problems.append(ModelProblem(.invalidConstraint, entity: entity.name, message: "a uniqueness constraint names no property"))
                }
                for name in constraint.propertyNames {
                    if let message = Self.keyPropertyProblem(name, properties) {
                        problems.append(ModelProblem(.invalidConstraint, entity: entity.name, property: label,
                                                     message: "the uniqueness constraint (\(label)) \(message)"))
                    }
                }
            }
        }

        for configuration in configurations {
            for name in configuration.entityNames where byName[name] == nil {
                problems.append(ModelProblem(.unknownEntity, property: configuration.name,
                                             message: "the configuration \"\(configuration.name)\" names the unknown entity \"\(name)\""))
            }
        }
        for template in templates {
            if byName[template.entityName] == nil {
                problems.append(ModelProblem(.unknownEntity, property: template.name,
                                             message: "the fetch request template \"\(template.name)\" names the unknown entity \"\(template.entityName)\""))
            }
            if let format = template.predicateFormat, let problem = predicateProblem(format) {
                problems.append(ModelProblem(.invalidPredicate, entity: template.entityName, property: template.name,
                                             message: "the fetch request template \"\(template.name)\" has a predicate that \(problem)"))
            }
        }
        for entity in entities {
            for fetched in entity.fetchedProperties {
                if let format = fetched.predicateFormat, let problem = predicateProblem(format) {
                    problems.append(ModelProblem(.invalidPredicate, entity: entity.name, property: fetched.name,
                                                 message: "the fetched property's predicate \(problem)"))
                }
            }
        }
        return problems
    }

    /// Why predicate text does not parse, or `nil` when it does.
    private static func predicateProblem(_ format: String) -> String? {
        do {
            _ = try FetchPredicate(format: format)
            return nil
        } catch {
            return "does not parse: \(error)"
        }
    }

    /// Why a property cannot be part of an index or constraint key, or `nil` when it can.
    /// What is wrong with the attributes a covering index stores (``FetchIndexDescription/storedAttributeNames``).
    private static func storedAttributeProblems(_ index: FetchIndexDescription, in entity: String,
                                                _ properties: [String: PropertyDescription]) -> [ModelProblem] {
        var problems: [ModelProblem] = []
        func problem(_ name: String?, _ message: String) {
            problems.append(ModelProblem(.invalidIndex, entity: entity, property: name, index: index.name,
                                         message: "the fetch index \"\(index.name)\" \(message)"))
        }
        if index.storedAttributeNames.count > FetchIndexDescription.maximumStoredAttributes {
            problem(nil, "stores \(index.storedAttributeNames.count) attributes; an index stores at most \(FetchIndexDescription.maximumStoredAttributes)")
        }
        var seen: Set<String> = []
        for name in index.storedAttributeNames {
            guard seen.insert(name).inserted else { problem(name, "stores \"\(name)\" twice"); continue }
            if index.elements.contains(where: { $0.propertyName == name }) {
                problem(name, "stores \"\(name)\", which is already one of its elements")
                continue
            }
            switch properties[name] {
            case nil: problem(name, "stores the unknown attribute \"\(name)\"")
            case .attribute(let attribute) where attribute.isTransient: problem(name, "stores the transient attribute \"\(name)\"")
            case .attribute(let attribute) where !attribute.type.hasFixedSize:
                problem(name, "stores \"\(name)\", a \(attribute.type.rawValue) attribute; an index stores only attributes of fixed size (integers, floating point, Booleans, dates, UUIDs)")
            case .attribute: break
            case .relationship, .fetchedProperty: problem(name, "stores \"\(name)\", which is not an attribute")
            }
        }
        return problems
    }

    private static func keyPropertyProblem(_ name: String, _ properties: [String: PropertyDescription]) -> String? {
        switch properties[name] {
        case nil: "names the unknown property \"\(name)\""
        case .relationship(let relationship) where relationship.isToMany: "names the to-many relationship \"\(name)\""
        case .fetchedProperty: "names the fetched property \"\(name)\""
        case .attribute(let attribute) where attribute.isTransient: "names the transient attribute \"\(name)\""
        case .relationship(let relationship) where relationship.isTransient: "names the transient relationship \"\(name)\""
        default: nil
        }
    }

    private static func propertyProblems(
        _ property: PropertyDescription, in entity: EntityDescription, entities: [String: EntityDescription],
        allProperties: (String) -> [String: PropertyDescription]
    ) -> [ModelProblem] {
        var problems: [ModelProblem] = []
        func problem(_ code: ModelProblem.Code, _ message: String) {
            problems.append(ModelProblem(code, entity: entity.name, property: property.name, message: message))
        }
        if property.name.isEmpty { problem(.emptyName, "a property has an empty name") }
        if reservedPropertyNames.contains(property.name) {
            problem(.reservedPropertyName, "\"\(property.name)\" is a name ManagedObject uses itself; rename the property")
        }
        switch property {
        case .attribute(let attribute):
            if attribute.type == .undefined && !attribute.isTransient {
                problem(.missingType, "the attribute has no type; only transient attributes may be undefined")
            }
            if let value = attribute.defaultValue, !value.fits(attribute.type) {
                problem(.defaultValueType, "the default value \(value) (\(value.kindName)) is not a valid \(attribute.type.coreDataName)")
            }
            problems += validationProblems(attribute, entity: entity.name)
        case .relationship(let relationship):
            guard let destination = entities[relationship.destinationEntityName] else {
                problem(.unknownDestination, "the destination entity \"\(relationship.destinationEntityName)\" does not exist")
                return problems
            }
            if relationship.minimumCount < 0 || relationship.maximumCount < 0
                || (relationship.maximumCount > 0 && relationship.minimumCount > relationship.maximumCount) {
                problem(.invalidCount, "the count range \(relationship.minimumCount)…\(relationship.maximumCount) is impossible")
            }
            guard let inverseName = relationship.inverseName else { return problems }
            guard case .relationship(let inverse) = allProperties(destination.name)[inverseName] else {
                problem(.unknownInverse, "the inverse \"\(inverseName)\" is not a relationship of \"\(destination.name)\"")
                return problems
            }
            let pointsBack = inverse.inverseName == relationship.name
                && (inverse.destinationEntityName == entity.name || isAncestor(inverse.destinationEntityName, of: entity.name, entities))
            if !pointsBack {
                problem(.inverseMismatch,
                        "the inverse \"\(destination.name).\(inverseName)\" points at \"\(inverse.destinationEntityName).\(inverse.inverseName ?? "<none>")\", not back at \"\(entity.name).\(relationship.name)\"")
            }
        case .fetchedProperty(let fetched):
            if entities[fetched.entityName] == nil {
                problem(.unknownDestination, "the fetched property's entity \"\(fetched.entityName)\" does not exist")
            }
        }
        return problems
    }

    private static func isAncestor(_ candidate: String, of entityName: String, _ entities: [String: EntityDescription]) -> Bool {
        var current = entities[entityName]?.parentName
        var steps = 0
        while let name = current, steps < entities.count {
            if name == candidate { return true }
            current = entities[name]?.parentName
            steps += 1
        }
        return false
    }

    private static func validationProblems(_ attribute: AttributeDescription, entity: String) -> [ModelProblem] {
        var problems: [ModelProblem] = []
        let rules = attribute.validation
        func problem(_ message: String) {
            problems.append(ModelProblem(.invalidValidationRule, entity: entity, property: attribute.name, message: message))
        }
        for (label, bound) in [("minimum", rules.minimumValue), ("maximum", rules.maximumValue)] {
            guard let bound else { continue }
            let fits = bound.fits(attribute.type) || (attribute.type.isNumeric && bound.numericValue != nil && bound.kindName != "date")
            if !fits { problem("the \(label) value \(bound) does not fit a \(attribute.type.coreDataName) attribute") }
        }
        if let low = rules.minimumValue?.numericValue, let high = rules.maximumValue?.numericValue, low > high {
            problem("the minimum value is above the maximum value")
        }
        if (rules.minimumLength != nil || rules.maximumLength != nil) && attribute.type != .string && attribute.type != .binaryData {
            problem("length rules apply to strings and binary data, not \(attribute.type.coreDataName)")
        }
        if let low = rules.minimumLength, let high = rules.maximumLength, low > high {
            problem("the minimum length \(low) is above the maximum length \(high)")
        }
        if let low = rules.minimumLength, low < 0 { problem("the minimum length \(low) is negative") }
        if let pattern = rules.pattern {
            if attribute.type != .string { problem("a regular expression applies to strings, not \(attribute.type.coreDataName)") }
            if (try? NSRegularExpression(pattern: pattern)) == nil { problem("the regular expression \"\(pattern)\" does not compile") }
        }
        return problems
    }
}
