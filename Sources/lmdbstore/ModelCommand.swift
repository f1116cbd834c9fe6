import ArgumentParser
import Foundation
import LMDBStore
import ObjectGraph

/// `lmdbstore model PATH`: a store's model, or a model file's.
struct Model: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the model a store keeps, or a model file's (.xcdatamodeld, .xcdatamodel or JSON).",
        discussion: "json is the form of Docs/MODEL-JSON.md, which a store keeps and ManagedObjectModel(json:) reads.")

    @Argument(help: "A store file, a Core Data model (.xcdatamodeld or .xcdatamodel) or a JSON model.")
    var path: String

    @Option(help: "outline or json (default: outline on a terminal, json otherwise).")
    var format: ModelFormat?

    enum ModelFormat: String, ExpressibleByArgument, CaseIterable { case outline, json }

    func run() throws {
        let url = try existingFile(path, "store or model")
        let model: ManagedObjectModel
        switch url.pathExtension {
        case "xcdatamodeld", "xcdatamodel", "json":
            model = try modelFile(path)
        default:
            guard let kept = try LMDBIncrementalStore.storedModel(at: url) else {
                throw ToolError("\(path) keeps no model (it was written before format 3): run `lmdbstore upgrade \(path) --model MODEL` with the model it was written with")
            }
            model = kept
        }
        if (format ?? (outputIsTerminal ? .outline : .json)) == .json {
            emit(String(decoding: model.jsonData(), as: UTF8.self))
        } else {
            emit(outline(model))
        }
    }

    /// Each entity with its parent, properties, indexes and constraints, a line each.
    func outline(_ model: ManagedObjectModel) -> String {
        var lines: [String] = []
        for entity in model.entities.sorted(by: { $0.name < $1.name }) {
            let traits = [entity.parentName.map { "parent \($0)" }, entity.isAbstract ? "abstract" : nil].compactMap { $0 }
            lines.append(entity.name + (traits.isEmpty ? "" : " (" + traits.joined(separator: ", ") + ")"))
            for property in entity.properties {
                switch property {
                case .attribute(let attribute):
                    let traits = [attribute.isOptional ? "optional" : nil, attribute.isTransient ? "transient" : nil,
                                  attribute.isIndexed ? "indexed" : nil, attribute.defaultValue.map { "default \($0)" }].compactMap { $0 }
                    lines.append("  \(attribute.name): \(attribute.type.coreDataName)" + (traits.isEmpty ? "" : ", " + traits.joined(separator: ", ")))
                case .relationship(let relationship):
                    let traits = [relationship.inverseName.map { "inverse \($0)" }, relationship.isOrdered ? "ordered" : nil,
                                  relationship.isOptional ? "optional" : nil, "delete rule \(relationship.deleteRule)"].compactMap { $0 }
                    lines.append("  \(relationship.name) \(relationship.isToMany ? "->>" : "->") \(relationship.destinationEntityName), " + traits.joined(separator: ", "))
                case .fetchedProperty(let fetched):
                    lines.append("  \(fetched.name): fetched")
                }
            }
            for index in entity.fetchIndexes {
                lines.append("  index \(index.name) (" + index.elements.map { ($0.isAscending ? "" : "-") + $0.propertyName }.joined(separator: ", ") + ")"
                             + (index.storedAttributeNames.isEmpty ? "" : " storing " + index.storedAttributeNames.joined(separator: ", ")))
            }
            for constraint in entity.uniquenessConstraints {
                lines.append("  unique (" + constraint.propertyNames.joined(separator: ", ") + ")")
            }
        }
        return lines.joined(separator: "\n")
    }
}
