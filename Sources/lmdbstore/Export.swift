import ArgumentParser
import Foundation
import LMDBStore
import ObjectGraph

/// `lmdbstore export STORE ENTITY [PREDICATE]`: one entity's objects as JSON Lines or CSV, in the shape
/// `lmdbstore import` reads back.
struct Export: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Export one entity's objects as JSON Lines or CSV, in the form import reads back.",
        discussion: """
            Each row has the entity's stored attributes, each to-one as the value of its destination's uniqueness \
            constraint on one attribute (as import matches it), and in JSON Lines each to-many without an inverse or \
            on the written side of a many-to-many (the ordered side, else the `Entity.relationship` that sorts \
            first) as an array of such values; export and import the other entity first. A relationship whose \
            destination has no such constraint is left out, and named on standard error: `lmdbstore dump` keeps every \
            relationship. Objects are read a chunk at a time, so an export of any size holds one chunk.
            """)

    @Argument(help: "The store file.")
    var store: String

    @Argument(help: "The entity to export (its subentities' objects included).")
    var entity: String

    @Argument(help: "Only the objects matching this predicate (NSPredicate's format language).")
    var predicate: String?

    @Option(help: "jsonl or csv (default: from --output's extension, else jsonl).")
    var format: OutputFormat?

    @Option(help: "The file to write (default: standard output).")
    var output: String?

    func validate() throws {
        try OutputFormat.check(format, command: "export", .jsonl, .csv)
    }

    func run() throws {
        let kind = format ?? output.flatMap { OutputFormat(rawValue: URL(fileURLWithPath: $0).pathExtension.lowercased()) } ?? .jsonl
        guard kind == .jsonl || kind == .csv else { throw ToolError("cannot tell the format from \(output ?? ""): give --format jsonl or --format csv") }
        let (_, context) = try openStore(store)
        let model = context.model
        let request = try fetchRequest(for: entity, predicate, in: model)
        let (columns, leftOut) = exportColumns(of: entity, in: model, listsToMany: kind == .jsonl)
        for note in leftOut { FileHandle.standardError.write(Data("left out: \(note)\n".utf8)) }
        let sink = try OutputSink(path: output)
        if kind == .csv { sink.write(columns.map { csvField($0.name) }.joined(separator: ",")) }
        let objectIDs = try context.fetchObjectIDs(request)
        let bar = ProgressLine()
        let chunkSize = 5_000
        for start in stride(from: 0, to: objectIDs.count, by: chunkSize) {
            let chunk = Array(objectIDs[start..<min(start + chunkSize, objectIDs.count)])
            var fetch = FetchRequest(entityName: entity, predicate: try FetchPredicate(format: "SELF IN %@", chunk))
            fetch.returnsObjectsAsFaults = false
            let objects = Dictionary(uniqueKeysWithValues: try context.fetch(fetch).map { ($0.objectID, $0) })
            for objectID in chunk {
                guard let object = objects[objectID] else { continue }  // deleted by another process meanwhile
                let values = columns.map { $0.value(of: object) }
                sink.write(kind == .csv ? values.map { csvField(cellText($0) ?? "") }.joined(separator: ",")
                                        : "{" + zip(columns, values).map { jsonString($0.name) + ":" + jsonText($1) }.joined(separator: ",") + "}")
            }
            context.reset()
            bar.show("exporting: \(min(start + chunkSize, objectIDs.count)) of \(objectIDs.count) rows")
        }
        bar.finish()
        try sink.close()
        if output != nil { emit("exported \(objectIDs.count) \(entity) row\(objectIDs.count == 1 ? "" : "s") to \(output ?? "")") }
    }
}

/// One column of an export: a stored attribute, or a relationship given by its destinations' unique values.
struct ExportColumn {
    enum Kind {
        case attribute
        /// A to-one or to-many, and the destination attribute that names its objects.
        case toOne(key: String)
        case toMany(key: String)
    }

    let name: String
    let kind: Kind

    func value(of object: ManagedObject) -> PredicateValue {
        switch kind {
        case .attribute:
            return object.predicateValue(forKey: name)
        case .toOne(let key):
            return (object.value(forKey: name) as? ManagedObject)?.predicateValue(forKey: key) ?? .null
        case .toMany(let key):
            return .array(object.relatedObjects(forKey: name).map { $0.predicateValue(forKey: key) })
        }
    }
}

/// The columns an export of `entityName` writes, and why each relationship it leaves out is left out.
func exportColumns(of entityName: String, in model: ManagedObjectModel, listsToMany: Bool) -> (columns: [ExportColumn], leftOut: [String]) {
    var columns: [ExportColumn] = [], leftOut: [String] = []
    let handle = model.handle(forEntityNamed: entityName)
    for property in model.allProperties(of: entityName) {
        switch property {
        case .attribute(let attribute) where !attribute.isTransient:
            columns.append(ExportColumn(name: attribute.name, kind: .attribute))
        case .relationship(let relationship):
            // A to-many is listed from one side of a many-to-many (or when it has no inverse); a to-one inverse gives
            // a one-to-many, so rows can be imported destination first.
            if relationship.isToMany, let inverse = model.inverse(of: relationship),
               !inverse.isToMany || !isWrittenSide(relationship, of: entityName, in: model) { continue }
            guard let slot = handle.slot(named: relationship.name), let key = try? model.batchUniqueKey(of: slot, from: entityName).key.name else {
                leftOut.append("\(relationship.name) (\(relationship.destinationEntityName) has no single uniqueness constraint on one attribute to name its objects by)")
                continue
            }
            if relationship.isToMany && !listsToMany {
                leftOut.append("\(relationship.name) (a CSV field cannot list a to-many's objects; export JSON Lines)")
                continue
            }
            columns.append(ExportColumn(name: relationship.name, kind: relationship.isToMany ? .toMany(key: key) : .toOne(key: key)))
        default:
            continue
        }
    }
    return (columns, leftOut)
}

/// Whether `relationship` of `entityName` is the side of it a copy writes (the JSON store's rule,
/// `Docs/ATOMIC-STORES.md`): one without an inverse; an ordered one, since its order lives nowhere else; of a
/// to-one and a to-many, the to-one; of two alike, the one whose `Entity.relationship` sorts first.
func isWrittenSide(_ relationship: RelationshipDescription, of entityName: String, in model: ManagedObjectModel) -> Bool {
    guard let inverse = model.inverse(of: relationship) else { return true }
    if relationship.isOrdered != inverse.isOrdered { return relationship.isOrdered }
    if relationship.isToMany != inverse.isToMany { return !relationship.isToMany }
    let declaring = model.ancestry(of: entityName).first { model.entity(named: $0)?.relationships.contains { $0.name == relationship.name } == true } ?? entityName
    let inverseDeclaring = model.ancestry(of: relationship.destinationEntityName)
        .first { model.entity(named: $0)?.relationships.contains { $0.name == inverse.name } == true } ?? relationship.destinationEntityName
    return declaring + "." + relationship.name <= inverseDeclaring + "." + inverse.name
}

/// Where an export's lines go: a file, written through a buffer, or standard output.
final class OutputSink {
    private let handle: FileHandle
    private let path: String?
    private var buffer: [UInt8] = []

    init(path: String?) throws {
        self.path = path
        guard let path else {
            handle = .standardOutput
            return
        }
        guard !FileManager.default.fileExists(atPath: path) else { throw ToolError("\(path) already exists: give a new file") }
        guard FileManager.default.createFile(atPath: path, contents: nil), let file = FileHandle(forWritingAtPath: path) else {
            throw ToolError("cannot create \(path)")
        }
        handle = file
    }

    func write(_ line: String) {
        buffer.append(contentsOf: line.utf8)
        buffer.append(0x0A)
        if buffer.count >= 1 << 16 { flush() }
    }

    private func flush() {
        handle.write(Data(buffer))
        buffer.removeAll(keepingCapacity: true)
    }

    func close() throws {
        flush()
        if path != nil { try handle.close() }
    }
}
